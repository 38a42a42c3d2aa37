"""Oracle test: for every reasoning-gym dataset, a correct answer scores 1.0 through our pipeline.

Each item comes from ReasoningGymDataset (so its entry has been through the dataset's JSON
round trip) and is scored by rg_verl.reward.compute_score with the item's own data_source,
ground_truth and extra_info, as verl does. A completion wrapping the entry's stored answer
as ``<think>...</think><answer>...</answer>`` must score 1.0 and be well formatted.

Datasets without a stored answer (several answers are valid) get a constructed valid
answer, built from the item's metadata, and a constructed invalid one (see CONSTRUCTED).

``composite`` is skipped: it is reasoning-gym's own mix of datasets, which ReasoningGymDataset
already does. It cannot be built from our config (its ``datasets`` must be DatasetSpec
objects; plain mappings fail with AttributeError) and its scorer cannot be built either
(``get_score_answer_fn("composite")`` builds a CompositeConfig with no datasets, which fails).
"""

from __future__ import annotations

import functools
import json
from collections import deque

import pytest
from omegaconf import OmegaConf
from reasoning_gym.factory import DATASETS

from rg_verl.data.dataset import ReasoningGymDataset
from rg_verl.reward import compute_score

pytestmark = pytest.mark.usefixtures("no_scoring_deadline")

N_ITEMS = 2
SKIPPED = {"composite": "reasoning-gym's own mix; not buildable from our config, no default scorer"}


@functools.cache
def items(name: str) -> list[dict]:
    config = OmegaConf.create(
        {
            "reasoning_gym": {
                "datasets": {name: {"weight": 1.0}},
                "seed": 42,
                "train_size": 3,
                "val_size": 3,
                "eval_size": 3,
            }
        }
    )
    # training items: a held-out item costs about 20 generated candidates (rg_verl.data.holdout), a training item
    # about one, and the split does not change how an answer scores
    ds = ReasoningGymDataset("reasoning_gym://train", None, config)
    return [ds[i] for i in range(N_ITEMS)]


FULL = {"score": 1.0, "accuracy": 1.0, "format_ok": 1.0, "answer_found": 1.0}


def score(item: dict, answer: str, strict: bool = False) -> dict:
    """The reward's values of the keys in FULL for a well-formatted completion with ``answer``."""
    result = compute_score(
        item["data_source"],
        f"<think>reasoning</think><answer>{answer}</answer>",
        item["reward_model"]["ground_truth"],
        item["extra_info"],
        strict=strict,
    )
    return {key: result[key] for key in FULL}


# --- constructed answers for datasets without a stored one ----------------------------------------
# Each function maps an entry's metadata to (valid answer, invalid answer).


def graph_color_answers(meta: dict) -> tuple[str, str]:
    # backtracking search for a proper colouring with the allowed colours
    puzzle = meta["puzzle"]
    neighbours = {v: set() for v in puzzle["vertices"]}
    for u, v in puzzle["edges"]:
        neighbours[u].add(v)
        neighbours[v].add(u)
    vertices = sorted(neighbours, key=lambda v: -len(neighbours[v]))
    colouring: dict = {}

    def assign(k: int) -> bool:
        if k == len(vertices):
            return True
        v = vertices[k]
        for colour in puzzle["color_options"]:
            if all(colouring.get(n) != colour for n in neighbours[v]):
                colouring[v] = colour
                if assign(k + 1):
                    return True
                del colouring[v]
        return False

    assert assign(0), "no colouring found"
    assert puzzle["edges"], "need an edge to build an invalid colouring"
    u, v = puzzle["edges"][0]
    invalid = {**colouring, v: colouring[u]}  # the two ends of an edge share a colour
    return json.dumps(colouring, sort_keys=True), json.dumps(invalid, sort_keys=True)


def propositional_logic_answers(meta: dict) -> tuple[str, str]:
    # The premises entail their own conjunction, and it is not a tautology unless every
    # premise is one; the scorer accepts any entailed, non-tautological conclusion.
    # "(P ∨ ¬P)" is entailed but trivial: the scorer gives it 0.25.
    conjunction = " ∧ ".join(f"({p})" for p in meta["premises"])
    return conjunction, "(P ∨ ¬P)"


def rubiks_cube_answers(meta: dict) -> tuple[str, str]:
    # The inverse of the scramble solves the cube; dropping its last move leaves the cube one
    # quarter turn away from solved. (Unsolved answers score 0.01, not partial credit: the scorer's
    # partial_score reads Cube.faces, which magiccube 0.3.0 lacks, and its bare except returns 0.01.)
    inverse = [m[:-1] if m.endswith("'") else m + "'" for m in reversed(meta["scramble_moves"].split())]
    return " ".join(inverse), " ".join(inverse[:-1])


def rush_hour_answers(meta: dict) -> tuple[str, str]:
    # Breadth-first search over board strings, one-cell moves. The metadata has no solution
    # (only min_moves). Pieces are named in the answer as the question shows them: the board's
    # labels in sorted order become A, B, C, ... ("A" is the red car). Dropping the last move of a
    # shortest solution leaves the puzzle unsolved.
    size = 6
    start = meta["board_config"]
    labels = sorted(set(start) - {"o", "x"})
    shown = {label: chr(ord("A") + i) for i, label in enumerate(labels)}

    def successors(board: str):
        for label in labels:
            cells = [i for i, c in enumerate(board) if c == label]
            stride = cells[1] - cells[0]
            for sign, head, tail in (("-", cells[0] - stride, cells[-1]), ("+", cells[-1] + stride, cells[0])):
                in_line = head // size == cells[0] // size if stride == 1 else 0 <= head < size * size
                if in_line and 0 <= head and board[head] == "o":
                    nxt = list(board)
                    nxt[head], nxt[tail] = label, "o"
                    yield f"{shown[label]}{sign}1", "".join(nxt)

    goal = 2 * size + size - 2  # the red car's left cell when it is at the exit
    parents: dict[str, tuple[str, str] | None] = {start: None}
    queue = deque([start])
    while queue:
        board = queue.popleft()
        if board[goal] == board[goal + 1] == "A":
            moves = []
            while parents[board] is not None:
                board, move = parents[board]
                moves.append(move)
            moves.reverse()
            return " ".join(moves), " ".join(moves[:-1])
        for move, nxt in successors(board):
            if nxt not in parents:
                parents[nxt] = (board, move)
                queue.append(nxt)
    raise AssertionError("rush_hour puzzle has no solution")


def boxnet_answers(meta: dict) -> tuple[str, str]:
    # Move each box one square at a time (rows, then columns) to the square holding its target,
    # one agent action per step, then match it. Dropping the last step leaves one box unmatched.
    state = meta["initial_state"]
    where = {}
    for square, things in state.items():
        for thing in things:
            where.setdefault(thing, []).append(tuple(float(x) for x in square.split("_")))
    steps = []
    for thing, boxes in sorted(where.items()):
        if not thing.startswith("box_"):
            continue
        colour = thing[len("box_") :]
        for (r, c), (tr, tc) in zip(boxes, where[f"target_{colour}"], strict=False):
            while (r, c) != (tr, tc):
                nr, nc = (r + (1 if tr > r else -1), c) if r != tr else (r, c + (1 if tc > c else -1))
                steps.append({f"Agent[{r}, {c}]": f"move(box_{colour}, square[{nr}, {nc}])"})
                r, c = nr, nc
            steps.append({f"Agent[{r}, {c}]": f"move(box_{colour}, target_{colour})"})
    return json.dumps(steps), json.dumps(steps[:-1])


CONSTRUCTED = {
    "boxnet": boxnet_answers,
    "graph_color": graph_color_answers,
    "propositional_logic": propositional_logic_answers,
    "rubiks_cube": rubiks_cube_answers,
    "rush_hour": rush_hour_answers,
}


def test_special_names_are_registered():
    assert set(CONSTRUCTED) | set(SKIPPED) <= set(DATASETS)


def _params():
    for name in sorted(DATASETS):
        if name in SKIPPED:
            yield pytest.param(name, marks=pytest.mark.skip(reason=SKIPPED[name]))
        elif name not in CONSTRUCTED:
            yield name


@pytest.mark.parametrize("name", list(_params()))
def test_stored_answer_scores_full(name):
    for item in items(name):
        assert item["data_source"] == f"reasoning_gym/{name}"
        entry = item["extra_info"]["entry"]
        assert entry["answer"] is not None
        result = score(item, entry["answer"])
        assert result == FULL, (
            item["extra_info"]["index"],
            entry["answer"],
        )
        assert score(item, entry["answer"], strict=True)["score"] == 1.0


@pytest.mark.parametrize("name", sorted(CONSTRUCTED))
def test_constructed_answers(name):
    for item in items(name):
        entry = item["extra_info"]["entry"]
        assert entry["answer"] is None  # why this dataset needs a constructed answer
        valid, invalid = CONSTRUCTED[name](entry["metadata"])
        result = score(item, valid)
        assert result == FULL, valid
        assert score(item, valid, strict=True)["score"] == 1.0
        bad = score(item, invalid)
        assert bad["score"] < 1.0 and bad["accuracy"] == 0.0, invalid


def test_rubiks_cube_example_solution_scores_full():
    # the dataset's own solver output (metadata["example_correct_answer"]) is accepted as well
    for item in items("rubiks_cube"):
        assert score(item, item["extra_info"]["entry"]["metadata"]["example_correct_answer"])["score"] == 1.0


def test_graph_color_possible_answer_scores_full():
    # metadata["possible_answer"] (JSON keys are strings after the round trip) is accepted as well
    for item in items("graph_color"):
        assert score(item, json.dumps(item["extra_info"]["entry"]["metadata"]["possible_answer"]))["score"] == 1.0
