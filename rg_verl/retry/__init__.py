""""Wrong, try again" episodes: the model answers, a verifier judges, and a wrong answer earns another try.

- ``episode``: the ``retry:`` settings, an episode's record, its discounted reward and per-turn outcomes;
- ``agent_loop``: the rollout side, a verl agent loop registered as ``rg_verl_retry`` (loaded in Ray workers
  only, as it imports verl's agent-loop machinery).

The evaluator runs the same episodes through any backend (``rg_verl.evaluation.episodes``).
"""

from rg_verl.retry.episode import AGENT_LOOP, EPISODE_KEY, RetryConfig, episode_record, episode_values

__all__ = ["AGENT_LOOP", "EPISODE_KEY", "RetryConfig", "episode_record", "episode_values"]
