""""Wrong, try again" episodes: the model answers, a verifier judges, and a wrong answer earns another try."""

from rg_verl.retry.episode import AGENT_LOOP, RetryConfig, episode_record

__all__ = ["AGENT_LOOP", "RetryConfig", "episode_record"]
