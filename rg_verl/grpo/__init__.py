"""GRPO through verl's own loop; nothing is imported here, as verl imports ``rg_verl.grpo.trainer`` in every process."""
