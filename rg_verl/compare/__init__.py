"""GRPO, OREO (one round or several) and rejection-sampling fine-tuning from one starting model and one dataset mix,
with the same number of generated samples, evaluated side by side: ``rg-verl compare`` and ``rg-verl oreo iterate``."""
