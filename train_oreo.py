"""Train a policy and a value model with OREO on trajectories collected by ``rg-verl oreo collect``.

With no arguments it runs the CPU smoke config (the tiny local model, two steps), after its collection:

    rg-verl oreo collect --config-path configs/smoke --config-name learn --out outputs/oreo_smoke/trajectories \\
        --samples 4 --train-items 8 --val-items 4
    python train_oreo.py

On GPUs, one process per GPU through torchrun:

    torchrun --nproc_per_node=8 train_oreo.py --config-path configs/oreo --config-name gsm8k_qwen_1_5b

Any key of the composed config can be overridden as ``key=value``. ``rg-verl oreo train`` runs the same task.
"""

import sys

import hydra
from omegaconf import DictConfig

from rg_verl.oreo.launch import main_hydra_task, refuse_before_hydra


@hydra.main(config_path="configs/oreo", config_name="smoke_cpu", version_base=None)
def main(config: DictConfig) -> None:
    main_hydra_task(config)


if __name__ == "__main__":
    refuse_before_hydra(sys.argv[1:])  # a YAML syntax error in one line, not Hydra's traceback
    main()
