"""rg-verl: reasoning-gym tasks, verifiable rewards and a CPU path for RL training with verl.

rg-verl plugs into verl's public extension points; each row names the folder that serves it:

=====================================================  ===========================================
verl extension point                                   rg-verl
=====================================================  ===========================================
``data.custom_cls``                                    ``rg_verl.data.dataset.ReasoningGymDataset``
``reward.custom_reward_function``                      ``rg_verl.reward.compute_score``
``trainer.v1.trainer_mode`` (``@register_trainer``)    ``rg_verl.grpo.trainer`` (``rg_verl``)
platform registry (``VERL_PLATFORM=cpu``)              ``rg_verl.cpu.platform``
rollout replica registry (``rollout.name=hf``)         ``rg_verl.hf_rollout``
=====================================================  ===========================================

Around them: ``config`` (our sections' schemas, checked before Ray), ``common`` (what every room shares: the
schema, the names, atomic writes), ``grpo.launch`` (``train_grpo.py``), ``evaluation``
(``evaluation/evaluate_model.py``, the demo), ``checkpoint`` (``utils/load_fsdp_to_hf.py``) and ``cpu`` (the CPU
path and its tiny local model).
``train``, ``evaluate`` and ``convert`` (:mod:`rg_verl.api`) run the three commands from Python.
Importing this package imports nothing else: each of them imports what it needs when called.
"""

from rg_verl.api import convert, evaluate, train

__all__ = ["convert", "evaluate", "train"]
