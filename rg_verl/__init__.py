"""rg-verl: reasoning-gym tasks, verifiable rewards and a CPU path for RL training with verl."""

from rg_verl.api import convert, evaluate, train

__all__ = ["convert", "evaluate", "train"]
