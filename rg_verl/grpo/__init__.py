"""GRPO through verl's own loop: the launch, the registered trainer and replay buffer, metrics, and a run's stop.

Nothing is imported here: verl imports ``rg_verl.grpo.trainer`` in every Ray process, which should load only that.
"""
