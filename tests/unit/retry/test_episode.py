"""An episode's record, discounted reward and per-turn outcomes (rg_verl/retry/episode.py), and the reward's use of
them (rg_verl.reward.compute_score with extra_info["retry"])."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rg_verl.common.schema import ConfigError
from rg_verl.retry.episode import RetryConfig, episode_record
from rg_verl.reward import compute_score
from rg_verl.reward.episode import EPISODE_KEY, episode_values

# an episode ends at its first right answer: wrong tries, then at most one right one
episodes = st.integers(1, 6).flatmap(
    lambda max_turns: st.tuples(
        st.just(max_turns),
        st.integers(0, max_turns - 1).flatmap(
            lambda wrong: st.sampled_from([[0.0] * wrong + [1.0], [0.0] * (wrong + 1)])
        ),
    )
).filter(lambda case: len(case[1]) <= case[0])


@given(episodes, st.floats(0.0, 1.0))
def test_solved_by_turn_rises_once_to_the_outcome_and_the_discount_counts_extra_tries(case, discount):
    max_turns, accuracies = case
    values = episode_values(episode_record(accuracies, "x", RetryConfig(max_turns=max_turns, discount=discount)))
    solved = [values[f"solved_by_turn_{j}"] for j in range(1, max_turns + 1)]
    assert solved == sorted(solved)  # never falls
    assert solved[-1] == accuracies[-1]  # solved by the last turn iff the episode ended right
    assert solved.count(0.0) == (len(accuracies) - 1 if accuracies[-1] else max_turns)
    assert values["turns"] == len(accuracies)
    assert values["discount"] == pytest.approx(discount ** (len(accuracies) - 1))


def test_a_record_of_no_tries_or_too_many_is_refused():
    with pytest.raises(ValueError, match="1 to 2 tries"):
        episode_record([], "", RetryConfig(max_turns=2))
    with pytest.raises(ValueError, match="1 to 2 tries"):
        episode_record([0.0, 0.0, 1.0], "", RetryConfig(max_turns=2))


@pytest.mark.parametrize(
    ("section", "message"),
    [({"max_turns": 0}, "retry.max_turns"), ({"discount": -0.1}, "retry.discount"), ({"feedback": ""}, "feedback"),
     ({"turns": 2}, "retry")],
)  # fmt: skip
def test_bad_settings_are_config_errors_naming_the_field(section, message):
    with pytest.raises(ConfigError, match=message):
        RetryConfig.from_section(section)


def test_the_reward_scores_the_last_try_not_the_whole_conversation():
    entry = {"question": "What is 2+2?", "answer": "4", "metadata": {}}
    record = episode_record([0.0, 1.0], "<answer>4</answer>", RetryConfig(max_turns=2, discount=0.25))
    # the decoded conversation holds the wrong first answer and the feedback; only the last try counts
    conversation = "<answer>5</answer>user\nWrong.\nassistant\n<answer>4</answer>"
    result = compute_score("reasoning_gym/basic_arithmetic", conversation, "4", {"entry": entry, EPISODE_KEY: record})
    assert (result["score"], result["accuracy"], result["turns"], result["revised"]) == (0.25, 1.0, 2.0, 0.0)
    single = compute_score("reasoning_gym/basic_arithmetic", "<answer>4</answer>", "4", {"entry": entry})
    assert "turns" not in single and single["score"] == 1.0
