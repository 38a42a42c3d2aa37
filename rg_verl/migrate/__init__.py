"""``rg-verl migrate-config``: a config of reasoning-gym's own training scripts becomes an rg-verl config.

- ``cli``: the command line;
- ``command``: :func:`rg_verl.migrate.command.migrate`, which drives the mapping, and the writer;
- ``reference``: the reference's own sections (``reasoning_gym``, ``curriculum``, ``reward``) in our schema;
- ``verl_layout``: verl c342069's ``ppo_trainer`` layout in verl 0.9.1's terms;
- ``tree``: the nested mappings flattened, merged and compared, and one migration's record.
"""
