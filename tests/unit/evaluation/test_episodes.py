"""The evaluator's "wrong, try again" episodes (rg_verl/evaluation/episodes.py): what each try sees, when an
episode ends, the records and metrics of a run, and its --resume."""

from __future__ import annotations

import json

import pytest

from rg_verl.common.schema import ConfigError
from rg_verl.evaluation import Completion, evaluate, parse_config
from rg_verl.evaluation.backends import Backend, Sampling
from rg_verl.evaluation.episodes import run_episodes
from rg_verl.evaluation.runner import ITEMS_FILE
from rg_verl.retry.episode import RetryConfig
from tests.unit.evaluation.fakes import NUM_ITEMS, answers_by_question, small_config

FEEDBACK = "Wrong, try again."
SAMPLING = Sampling(max_tokens=8, temperature=1.0, top_p=1.0)


class LearnsFromFeedback(Backend):
    """Wrong until it has seen ``wrong_tries`` feedback turns, then right; records every conversation it saw."""

    def __init__(self, answers: dict[str, str], wrong_tries: int = 1, fail_after_calls: int | None = None):
        self.answers, self.wrong_tries, self.fail_after_calls = answers, wrong_tries, fail_after_calls
        self.seen: list[list[list[dict]]] = []

    def generate(self, prompts, n, sampling):
        if self.fail_after_calls is not None and len(self.seen) >= self.fail_after_calls:
            raise KeyboardInterrupt("simulated interruption")
        self.seen.append(prompts)
        outputs = []
        for messages in prompts:
            question = next(m["content"] for m in messages if m["role"] == "user")
            tries = sum(m["role"] == "assistant" for m in messages)
            answer = self.answers[question] if tries >= self.wrong_tries else f"not {self.answers[question]}"
            outputs.append([Completion(f"<think>try {tries}</think><answer>{answer}</answer>", num_tokens=5)] * n)
        return outputs


def judge_of(answers, prompts):
    def judge(i, text):
        question = prompts[i][-1]["content"]
        return float(text.endswith(f"<answer>{answers[question]}</answer>"))

    return judge


def prompts_of(answers):
    return [[{"role": "user", "content": question}] for question in answers]


def test_each_try_sees_the_conversation_so_far_and_only_open_episodes_try_again():
    answers = {"1+1?": "2", "2+2?": "4"}
    backend = LearnsFromFeedback(answers, wrong_tries=1)
    prompts = prompts_of(answers)
    episodes = run_episodes(backend, prompts, 2, SAMPLING, RetryConfig(max_turns=3, feedback=FEEDBACK),
                            judge_of(answers, prompts))  # fmt: skip
    assert [len(call) for call in backend.seen] == [2, 4]  # the prompts, then each of the 4 wrong episodes once
    retry = backend.seen[1][0]
    assert [m["role"] for m in retry] == ["user", "assistant", "user"]
    assert retry[1]["content"] == "<think>try 0</think><answer>not 2</answer>" and retry[2]["content"] == FEEDBACK
    assert [[e.accuracies for e in row] for row in episodes] == [[[0.0, 1.0]] * 2] * 2
    assert episodes[0][0].final.text.endswith("<answer>2</answer>") and episodes[0][0].num_tokens == 10


def test_an_episode_ends_at_max_turns_or_at_a_right_first_answer():
    answers = {"1+1?": "2"}
    prompts = prompts_of(answers)
    stubborn = LearnsFromFeedback(answers, wrong_tries=10)
    [[episode]] = run_episodes(stubborn, prompts, 1, SAMPLING, RetryConfig(max_turns=3), judge_of(answers, prompts))
    assert episode.accuracies == [0.0, 0.0, 0.0] and len(stubborn.seen) == 3
    right = LearnsFromFeedback(answers, wrong_tries=0)
    [[episode]] = run_episodes(right, prompts, 1, SAMPLING, RetryConfig(max_turns=3), judge_of(answers, prompts))
    assert episode.accuracies == [1.0] and len(right.seen) == 1


def retry_config(tmp_path, **overrides):
    fields = {"output_dir": str(tmp_path), "save_every": 2, "retry": {"max_turns": 3, "feedback": FEEDBACK,
                                                                      "discount": 0.5}}  # fmt: skip
    return parse_config(small_config(**{**fields, **overrides}))


def test_a_run_records_every_try_and_reports_success_at_each_turn_and_resumes(tmp_path):
    config = retry_config(tmp_path)
    answers = answers_by_question(config)
    with pytest.raises(KeyboardInterrupt):  # stopped after the first chunk's two rounds of tries
        evaluate(config, backend=LearnsFromFeedback(answers, fail_after_calls=2))
    (items_file,) = tmp_path.glob(f"*/{ITEMS_FILE}")
    assert len(items_file.read_text().splitlines()) == 2
    backend = LearnsFromFeedback(answers)
    evaluate(config, resume=True, backend=backend)
    records = [json.loads(line) for line in items_file.read_text().splitlines()]
    assert len({r["key"] for r in records}) == len(records) == NUM_ITEMS  # nothing lost or done twice
    assert sum(len(call) for call in backend.seen[::2]) == NUM_ITEMS - 2  # only the unfinished items ran
    for completion in (c for r in records for c in r["completions"]):
        assert len(completion["tries"]) == 2 and completion["tries"][-1] == completion["full_model_response"]
        assert completion["turns"] == 2.0 and completion["accuracy"] == 1.0
        assert (completion["solved_by_turn_1"], completion["solved_by_turn_2"], completion["solved_by_turn_3"]) == (
            0.0, 1.0, 1.0)  # fmt: skip
        assert completion["score"] == 0.5  # right on the second try: discounted once
    metrics = json.loads((items_file.parent / "results.json").read_text())["metrics"]
    assert metrics["mean_turns"] == 2.0 and metrics["accuracy"] == 1.0 and metrics["mean_score"] == 0.5
    assert (metrics["success@turn1"], metrics["success@turn2"], metrics["success@turn3"]) == (0.0, 1.0, 1.0)
    header, _, *rows = (
        (items_file.parent / "summary.md").read_text().split("## Overall")[1].split("\n\n")[1].splitlines()
    )
    assert header.endswith("| turns | @turn1 | @turn2 | @turn3 |")
    assert rows[-1].endswith("| 2.0 | 0.0 | 100.0 | 100.0 |")  # the **all** row


def test_retry_settings_are_checked_and_are_part_of_a_runs_fingerprint(tmp_path):
    with pytest.raises(ConfigError, match=r"retry.max_turns"):
        retry_config(tmp_path, retry={"max_turns": 0})
    with pytest.raises(ConfigError, match=r"retry.discount"):
        retry_config(tmp_path, retry={"discount": 1.5})
    config = retry_config(tmp_path)
    answers = answers_by_question(config)
    evaluate(config, backend=LearnsFromFeedback(answers))
    with pytest.raises(ConfigError, match="retry"):  # a resumed run keeps its episodes' settings
        evaluate(retry_config(tmp_path, retry={"max_turns": 2}), resume=True, backend=LearnsFromFeedback(answers))
