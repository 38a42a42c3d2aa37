"""Running verl on a CPU, loaded only when the config says ``trainer.device=cpu``.

- ``platform``: the verl platform plugin (gloo collectives, three small documented patches); every Ray
  process of a CPU run imports it through ``VERL_USE_EXTERNAL_MODULES``;
- ``device``: the ``torch.cuda`` stand-in the platform hands verl;
- ``value_model``: verl's value-model loader without flash-attention (installed by ``platform``);
- ``settings``: the config values and environment a CPU run needs (read by ``rg_verl.grpo.launch``).
- ``tiny_model``, ``warm_start``: the tiny local Qwen2 model and tokenizer the demo and the tests train, and its
  optional supervised warm start.

Importing this package imports neither ``platform`` nor torch: only ``rg_verl.cpu.platform`` patches torch.
"""
