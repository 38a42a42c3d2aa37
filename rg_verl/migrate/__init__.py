"""``rg-verl migrate-config``: a config of reasoning-gym's own training scripts becomes an rg-verl config."""
