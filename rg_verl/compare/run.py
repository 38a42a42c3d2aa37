"""Runs a comparison: each method's stages from one starting model, then every model through the evaluator."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from rg_verl.common.atomic import write_atomic
from rg_verl.common.compose import compose, repo_root
from rg_verl.compare.config import CompareConfig, Plan, plan
from rg_verl.compare.report import Row, write_report
from rg_verl.compare.stages import StageError, Stages, latest_step
from rg_verl.grpo.launch import ensure_model
from rg_verl.grpo.reward_curve import RewardCurve

__all__ = ["Comparison"]

logger = logging.getLogger(__name__)


def _absolute(path: str) -> str:
    return str(Path(path).expanduser().resolve())


def _model(path: str) -> str:
    """A local model folder made absolute (child processes run elsewhere); a hub id (org/name) as it is."""
    local = Path(path).expanduser()
    return str(local.resolve()) if local.exists() or local.is_absolute() else path


@dataclass
class Model:
    """A row of the table: a trained (or the starting) policy, its critic where it has one."""

    label: str
    path: str
    samples: int
    critic: str | None = None
    round: int | None = None


class Comparison:
    """One comparison config, run stage by stage (see the module's docstring)."""

    def __init__(self, config: CompareConfig):
        self.config = config
        self.out = Path(config.out).resolve()
        self.train_dir = _absolute(config.train.config_path)
        train = compose(self.train_dir, config.train.config_name, config.train.overrides)
        self.plan: Plan = plan(config, train)
        self.val_size = int(train.reasoning_gym.get("val_size") or 0)
        ensure_model(train)  # the training config's tiny model, where it builds one
        self.start = _model(self.plan.start_model)
        self.stages = Stages(self.out, config.device, config.gpus)
        self.reward_curve = self.out / "grpo" / "train" / RewardCurve.PNG  # the GRPO run draws it

    def _done(self, name: str) -> bool:
        return (self.stages.logs / f"{name}.done").is_file()

    def _mark(self, name: str) -> None:
        write_atomic(self.stages.logs / f"{name}.done", "")

    def _stage(self, name: str, command: list[str], env: dict[str, str] | None = None) -> None:
        for path in (env or {}).values():  # verl's file logger opens its file, not the folder
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        if not self._done(name):
            self.stages.run(name, command, env)
            self._mark(name)

    def _checkpoint(self, stage: str, folder: Path, step: int | None) -> Path:
        """``folder/global_step_<step>``; a training stage that left no checkpoint is an error naming its log."""
        if step is None or not (folder / f"global_step_{step}").is_dir():
            raise StageError(
                f"stage {stage} left no checkpoint in {folder}; see {self.stages.logs / stage}.log, then delete "
                f"{self.stages.logs / stage}.done and run again"
            )
        return folder / f"global_step_{step}"

    def oreo_round(self, r: int, policy: Model) -> Model:
        config, folder = self.config, self.out / "oreo" / f"round_{r}"
        train_options = ["--config-path", self.train_dir, "--config-name", config.train.config_name,
                         *config.train.overrides]  # fmt: skip
        if config.val_items > self.val_size:  # the held-out trajectories need that many validation items
            train_options.append(f"reasoning_gym.val_size={config.val_items}")
        options = ["--model-path", policy.path, "--samples", str(config.samples), "--train-items",
                   str(self.plan.items_per_round), "--val-items", str(config.val_items), "--max-tokens",
                   str(config.max_tokens), "--seed", str(config.seed + r - 1), "--backend", config.backend]  # fmt: skip
        trajectories = self.stages.collect(f"oreo_{r}_collect", folder / "trajectories", train_options, options)
        first = r == 1
        reference = "actor_init" if first or config.oreo.reference == "previous" else self.start
        overrides = [
            f"actor.model.path={policy.path}", f"critic.model.path={policy.critic or policy.path}",
            f"oreo.zero_value_head={str(first).lower()}", f"oreo.reference={reference}",
            f"data.train_files=[{trajectories / 'train'}]",
            f"data.val_files=[{trajectories / 'val'}]" if config.val_items else "data.val_files=[]",
            f"trainer.default_local_dir={folder / 'train'}", f"trainer.device={config.device}",
            "trainer.logger=[console,file]", *config.oreo.overrides,
        ]  # fmt: skip
        command = [*self.stages.launcher(), "-m", "rg_verl.cli", "oreo", "train", "--config-path",
                   _absolute(config.oreo.config_path), "--config-name", config.oreo.config_name,
                   *overrides]  # fmt: skip
        self._stage(f"oreo_{r}_train", command, {"VERL_FILE_LOGGER_PATH": str(folder / "metrics.jsonl")})
        step = self._checkpoint(f"oreo_{r}_train", folder / "train", latest_step(folder / "train"))
        actor = self.stages.convert(f"oreo_{r}_convert_actor", step / "actor", folder / "actor_hf")
        critic = self.stages.convert(f"oreo_{r}_convert_critic", step / "critic", folder / "critic_hf")
        samples = policy.samples + config.samples * self.plan.items_per_round
        return Model(f"oreo round {r}" if config.oreo.rounds > 1 else "oreo", str(actor), samples, str(critic), r)

    def rft(self) -> Model:
        config, folder = self.config, self.out / "rft"
        trajectories = self.out / "oreo" / "round_1" / "trajectories" / "train"
        command = [*self.stages.launcher(), "-m", "rg_verl.cli", "oreo", "rft", "--trajectories", str(trajectories),
                   "--model-path", self.start, "--out", str(folder / "train"), "--device", config.device,
                   "--reward-key", config.rft.reward_key, "--min-reward", str(config.rft.min_reward),
                   *(["--per-item", str(config.rft.per_item)] if config.rft.per_item else []),
                   *config.rft.overrides]  # fmt: skip
        self._stage("rft_train", command)
        steps = sorted(int(p.name.split("_")[-1]) for p in (folder / "train").glob("global_step_*"))
        checkpoint = self._checkpoint("rft_train", folder / "train", steps[-1] if steps else None)
        model = self.stages.convert("rft_convert", checkpoint, folder / "model_hf")
        return Model("rft", str(model), config.samples * self.plan.items_per_round)

    def grpo(self) -> Model:
        config, folder, steps = self.config, self.out / "grpo", self.plan.grpo_steps
        command = [
            self.stages.python, str(repo_root() / "train_grpo.py"), "--config-path", self.train_dir, "--config-name",
            config.train.config_name, *config.train.overrides, f"actor_rollout_ref.model.path={self.start}",
            f"trainer.total_training_steps={steps}", f"trainer.save_freq={steps}", f"trainer.device={config.device}",
            f"trainer.default_local_dir={folder / 'train'}", "trainer.logger=[console,file]",
        ]  # fmt: skip
        if config.device == "cuda":
            command.append(f"trainer.n_gpus_per_node={config.gpus}")
        self._stage("grpo_train", command, {"VERL_FILE_LOGGER_PATH": str(folder / "metrics.jsonl")})
        actor = folder / "train" / f"global_step_{steps}" / "actor"
        return Model("grpo", str(self.stages.convert("grpo_convert", actor, folder / "model_hf")), config.budget)

    def evaluate(self, model: Model) -> list[Row]:
        rows = []
        for decoding in self.config.evaluation.decodings:
            value_mode = decoding.startswith("value_")
            if value_mode and model.critic is None:
                continue
            name = f"{model.label.replace(' ', '_')}_{decoding}"
            run_dir = self.out / "eval" / name
            command = [self.stages.python, "-m", "rg_verl.cli", "evaluate", "--config",
                       _absolute(self.config.evaluation.config), "--model-path", model.path, "--output-dir",
                       str(self.out / "eval"), "--run-name", name]  # fmt: skip
            if decoding == "greedy":
                command += ["--temperature", "0"]
            if value_mode:  # the evaluation config's backend (hf or vllm) runs the policy, the critic beside it
                command += ["--decoding", decoding, "--value-model", model.critic]
            if self.config.device == "cpu" or value_mode:
                command += ["--device", self.config.device]
            if run_dir.exists():
                command.append("--resume")
            self._stage(f"eval_{name}", command)
            rows.append(Row.read(model.label, decoding, model.samples, model.round, run_dir / "results.json"))
        return rows

    def run(self) -> Path:
        """Every stage not yet done, then the report; returns the table's path."""
        config = self.config
        models = [Model("start", self.start, 0)]
        if "grpo" in config.methods:
            models.append(self.grpo())
        if "oreo" in config.methods:
            policy = Model("start", self.start, 0)
            rounds = []
            for r in range(1, config.oreo.rounds + 1):
                policy = self.oreo_round(r, policy)
                rounds.append(policy)
            if "rft" in config.methods:
                models.append(self.rft())
            models += rounds
        rows = [row for model in models for row in self.evaluate(model)]
        return write_report(self.out, rows, config, "rounds" if config.methods == ["oreo"] else "comparison")
