"""What compute_score returns for validation's metrics: ``pred`` (the extracted answer, which verl votes on for
maj@N) and ``truncated`` (the response filled its token budget), logged per dataset."""

import numpy as np
import pytest
import reasoning_gym
from hypothesis import given
from hypothesis import strategies as st
from verl.trainer.ppo.metric_utils import process_validation_metrics

from rg_verl.common.names import TAGS
from rg_verl.reward import compute_score, response_answer

ENTRY = reasoning_gym.create_dataset("chain_sum", seed=1, size=1)[0]
SOURCE = "reasoning_gym/chain_sum"
texts = st.lists(st.one_of(st.sampled_from([*TAGS, "answer is", "7", " "]), st.text(max_size=6))).map("".join)


def _score(text: str, **kwargs) -> dict:
    return compute_score(SOURCE, text, ENTRY["answer"], {"entry": ENTRY}, **kwargs)


@pytest.mark.parametrize("mode", ["strict", "lenient"])
@given(text=texts)
def test_pred_is_the_answer_the_mode_scored_as_text(mode, text):
    result = _score(text, mode=mode)
    assert result["pred"] == (response_answer(text, SOURCE, strict=mode == "strict") or "")
    # every other value stays a number: verl and our metrics average them
    assert all(isinstance(value, float) for key, value in result.items() if key != "pred")


def test_pred_follows_the_mode():
    text = f"<answer>{ENTRY['answer']}</answer>"  # the lenient format only
    assert _score(text, mode="lenient")["pred"] == ENTRY["answer"]
    assert _score(text, mode="strict")["pred"] == ""


def test_verl_votes_on_pred_for_maj_at_n():
    """Four samples of one prompt, three giving the same wrong answer. verl bootstraps maj@4 over subsets of
    the four: the vote mostly picks the wrong answer, so maj@4 falls below mean@4 (0.25)."""
    right, wrong = ENTRY["answer"], str(int(ENTRY["answer"]) + 1)
    results = [_score(f"<think>x</think><answer>{a}</answer>") for a in (right, wrong, wrong, wrong)]
    sources, uids = np.array([SOURCE] * 4), ["uid0"] * 4
    voted = process_validation_metrics(sources, uids, {k: [r[k] for r in results] for k in ("accuracy", "pred")})
    accuracy = voted[SOURCE]["accuracy"]
    assert accuracy["mean@4"] == 0.25
    assert 0.0 <= accuracy["maj@4/mean"] < 0.25
    assert "pred" not in voted[SOURCE]  # text is voted on, not averaged
    # without pred verl logs no vote at all
    unvoted = process_validation_metrics(sources, uids, {"accuracy": [r["accuracy"] for r in results]})
    assert not any(name.startswith("maj@") for name in unvoted[SOURCE]["accuracy"])


def test_truncated_marks_a_response_that_fills_its_budget(tmp_path):
    from rg_verl.cpu.tiny_model import build_tiny_model

    kwargs = {"tokenizer_path": str(build_tiny_model(tmp_path / "model")), "max_response_length": 8}
    assert "truncated" not in _score("<answer>3</answer>")  # no tokenizer: nothing counted
    for tokens, truncated in ((7, 0.0), (8, 1.0), (9, 1.0)):
        assert _score("<answer>3</answer>", response_tokens=tokens, **kwargs)["truncated"] == truncated
    # counted by the reward itself: a short answer stops on its own, a long text is cut
    assert _score("<answer>3</answer>", **kwargs)["truncated"] == 0.0
    assert _score("word " * 40, **kwargs)["truncated"] == 1.0
