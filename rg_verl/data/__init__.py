"""The items: reasoning-gym datasets generated on the fly, file datasets (GSM8K, MATH), curricula.

- ``dataset``: :class:`~rg_verl.data.dataset.ReasoningGymDataset`, verl's ``data.custom_cls``;
- ``holdout``: the split every question belongs to, by a salted hash of its text;
- ``candidates``: a generator's candidate sets, the raw material of each split's search;
- ``spaces``: how many distinct questions a split can reach, warned about before a run;
- ``search_cache``: held-out searches kept on disk (and shipped for the shipped configs), checked on use;
- ``reference_questions``: reasoning-gym's own evaluation items, and the list that keeps them out of training;
- ``export``: a split written as verl's RLHF parquet; ``cli``: its command, ``rg-verl export``;
- ``files``: datasets read from files in the public GSM8K and MATH layouts, checked before Ray starts;
- ``formats``: those column layouts, and the shape a ``source`` may take (no file is read);
- ``curriculum``: difficulty levels (reasoning-gym's curricula, file levels) and adaptive weights.
"""
