"""Running verl on a CPU, loaded only when the config says ``trainer.device=cpu``."""
