"""Running verl on a CPU: a platform plugin (gloo collectives, a ``torch.cuda`` stand-in).

Loaded in every Ray process only when the config says ``trainer.device=cpu``
(``rg_verl.launch`` arranges it). Nothing else in rg_verl imports it.
"""

from rg_verl.cpu.platform import PlatformCPU

__all__ = ["PlatformCPU"]
