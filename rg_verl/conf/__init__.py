"""Hydra configs shipped inside the package, found through ``pkg://rg_verl.conf``."""
