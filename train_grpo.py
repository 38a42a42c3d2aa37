"""Train a model with GRPO on reasoning-gym tasks, through verl.

With no arguments it runs the CPU smoke config (a tiny local model, a few steps):

    python train_grpo.py

An experiment on one node with 4 GPUs and vLLM:

    python train_grpo.py --config-path configs/inter_generalisation --config-name algorithmic_qwen_3b \
        trainer.n_gpus_per_node=4 actor_rollout_ref.rollout.tensor_model_parallel_size=2 \
        trainer.project_name=rg-verl trainer.experiment_name=algorithmic

Any verl key can be overridden as ``key=value``, exactly as with ``verl.trainer.main_ppo``.
``rg-verl train`` (installed with the package) runs the same command.
"""

import sys

from rg_verl.grpo.cli import main

if __name__ == "__main__":
    sys.exit(main(prog="train_grpo.py"))
