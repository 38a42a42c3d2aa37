"""GRPO through verl's own loop.

- ``launch``: ``train_grpo.py`` and ``rg-verl train``: config lookup, checks, plugins, ``run_ppo``;
- ``cluster``: a run on a Ray cluster started elsewhere: what its processes must be given;
- ``watchdog``, ``workers``, ``stopping``: a dead engine or worker, Ctrl-C or SIGTERM ends the run in seconds, by name;
- ``trainer``: the registered V1 trainer (per-dataset metrics, curriculum updates, reward curve);
- ``metrics``: per-dataset and per-category means, self-correction rates;
- ``reward_curve``: the training reward curve as PNG and JSON;
- ``guards``: config checks for what verl 0.9.1 accepts and then gets wrong (legacy keys, batch shapes,
  group filtering), before Ray starts.

Nothing is imported here: verl imports ``rg_verl.grpo.trainer`` in every Ray process, and that
should load only what the trainer needs.
"""
