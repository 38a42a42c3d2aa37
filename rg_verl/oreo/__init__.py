"""OREO (Wang et al. 2024): offline RL with a policy and a value model trained on the soft Bellman equation.

- ``collect``: sample and score K completions per item of a training config (the trajectory files);
- ``trajectories``: the trajectory files' schema, checks, loading and OREO's balancing rule;
- ``losses``: the value loss (Eq. 8) and the policy losses (Eq. 9, step level, Eq. 10) for verl's engines;
- ``batches``: trajectories as verl engine batches; ``value_init``: the value model's starting folder;
- ``config``, ``launch``, ``trainer``, ``checkpoints``: ``train_oreo.py`` on two verl ``TrainingWorker``s;
- ``metrics``: the value model's AUC at predicting success; ``cli``: ``rg-verl oreo collect|train|rft``;
- ``sampler``: a collection's batches, scored while the next samples; ``rft``: the rejection-sampling baseline;

The value-guided search that uses the trained value model at test time is its own room, ``rg_verl.search``.
"""
