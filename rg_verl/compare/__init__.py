"""GRPO, OREO and RFT from one start, mix and sample budget, side by side: ``rg-verl compare``, ``oreo iterate``."""
