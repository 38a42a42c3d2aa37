""""Wrong, try again" episodes: the model answers, a verifier judges, and a wrong answer earns another try.

- ``episode``: the ``retry:`` settings and an episode's record (the reward reads it: ``rg_verl.reward.episode``);
- ``agent_loop``: the rollout side, a verl agent loop registered as ``rg_verl_retry`` (loaded in Ray workers
  only, as it imports verl's agent-loop machinery).

The evaluator runs the same episodes through any backend (``rg_verl.evaluation.episodes``).
"""

from rg_verl.retry.episode import AGENT_LOOP, RetryConfig, episode_record

__all__ = ["AGENT_LOOP", "RetryConfig", "episode_record"]
