"""The completions bench/reward_throughput.py scores: regular ones of each kind, and hostile ones."""

import random

REWARD_MIX = (
    "chain_sum",
    "basic_arithmetic",
    "leg_counting",
    "spell_backward",
    "knights_knaves",
    "simple_equations",
    "polynomial_multiplication",
    "intermediate_integration",
    "word_sorting",
    "letter_counting",
)
ONE_MB = 1 << 20
# share of the regular (non-hostile) completions of each kind
KIND_WEIGHTS = {"correct": 0.45, "wrong": 0.30, "no_tags": 0.07, "unclosed": 0.06, "nested": 0.06, "two_answers": 0.06}


def make_config(datasets, size: int, seed: int):
    from omegaconf import OmegaConf

    return OmegaConf.create(
        {"reasoning_gym": {"datasets": {n: {"weight": 1.0} for n in datasets}, "seed": seed, "train_size": size}}
    )


def think_text(rng: random.Random) -> str:
    words = ("so", "the", "answer", "is", "let", "me", "check", "again", "step", "then", "sum", "count", "wait")
    return " ".join(rng.choice(words) for _ in range(rng.randint(20, 400)))


def perturb(name: str, answer: str, entry: dict, rng: random.Random) -> str:
    """A wrong answer close to ``answer``."""
    try:
        return str(int(answer) + rng.choice((-2, -1, 1, 2)))
    except ValueError:
        pass
    try:
        return repr(float(answer) + 1.5)
    except ValueError:
        pass
    if name in ("polynomial_multiplication", "intermediate_integration"):
        var = entry["metadata"].get("variable", "x") if name == "intermediate_integration" else "x"
        return f"{answer} + 3*{var}"  # derivative differs, so also wrong for integration
    if name == "knights_knaves":
        terms = entry["metadata"]["knight_knave_terms"]
        a, b = terms["a_knight"], terms["a_knave"]
        ia, ib = answer.find(a), answer.find(b)
        if ia >= 0 and (ib < 0 or ia < ib):
            return answer[:ia] + b + answer[ia + len(a) :]
        if ib >= 0:
            return answer[:ib] + a + answer[ib + len(b) :]
    if name == "word_sorting":
        words = answer.split(", ")
        if len(words) > 1 and len(set(words)) > 1:
            while True:
                shuffled = rng.sample(words, len(words))
                if shuffled != words:
                    return ", ".join(shuffled)
    # change one letter or digit
    positions = [i for i, c in enumerate(answer) if c.isalnum()]
    if not positions:
        return answer + "x"
    i = rng.choice(positions)
    pool = "0123456789" if answer[i].isdigit() else "abcdefghijklmnopqrstuvwxyz"
    return answer[:i] + rng.choice([c for c in pool if c != answer[i].lower()]) + answer[i + 1 :]


def regular_completion(kind: str, name: str, answer: str, entry: dict, rng: random.Random) -> str:
    think = think_text(rng)
    if kind == "correct":
        return f"<think>{think}</think>\n<answer>{answer}</answer>"
    if kind == "wrong":
        return f"<think>{think}</think>\n<answer>{perturb(name, answer, entry, rng)}</answer>"
    if kind == "no_tags":
        return f"{think}\nThe answer is {answer}."
    if kind == "unclosed":
        return f"<think>{think}</think>\n<answer>{answer}"
    if kind == "nested":
        return f"<think>{think}</think>\n<answer><answer>{answer}</answer></answer>"
    if kind == "two_answers":
        wrong = perturb(name, answer, entry, rng)
        return f"<think>{think} <answer>{wrong}</answer> wait, no.</think>\n<answer>{answer}</answer>"
    raise ValueError(kind)


def hostile_completions(answer_of) -> list[tuple[str, str, str]]:
    """(kind, dataset, completion) for the hostile inputs; ``answer_of(name)`` is a correct answer."""
    power = r"<answer>\boxed{9^{9^{9^{9}}}}</answer>"
    depth = 20000
    return [
        ("hostile:1MB_think+answer", "chain_sum",
         "<think>" + "a" * ONE_MB + f"</think><answer>{answer_of('chain_sum')}</answer>"),
        ("hostile:1MB_no_tags", "spell_backward", "x" * ONE_MB),
        ("hostile:1MB_unclosed_answer_tags", "letter_counting", "<answer>" * (ONE_MB // len("<answer>"))),
        ("hostile:1MB_answer_body", "polynomial_multiplication", "<answer>" + "x + " * (ONE_MB // 4) + "x</answer>"),
        ("hostile:1MB_answer_body", "word_sorting", "<answer>" + "word, " * (ONE_MB // 6) + "word</answer>"),
        ("hostile:boxed_power_tower", "intermediate_integration", power),
        ("hostile:boxed_power_tower", "polynomial_multiplication", power),
        ("hostile:boxed_power_tower", "chain_sum", power),
        ("hostile:boxed_power_tower", "basic_arithmetic", power),
        ("hostile:python_power_tower", "intermediate_integration", "<answer>9**9**9**9</answer>"),
        ("hostile:python_power_tower", "polynomial_multiplication", "<answer>9**9**9**9</answer>"),
        ("hostile:nested_tags_20k", "leg_counting",
         "<think>" * depth + "<answer>" * depth + answer_of("leg_counting") + "</answer>" * depth + "</think>" * depth),
        ("hostile:nested_tags_20k", "knights_knaves",
         "<answer><think>" * depth + answer_of("knights_knaves") + "</think></answer>" * depth),
    ]  # fmt: skip


def build_completions(n: int, seed: int) -> list[dict]:
    """``n`` completions (the hostile ones among them), each a dict of everything both sides need."""
    from rg_verl.data.dataset import ReasoningGymDataset

    rng = random.Random(seed)
    dataset = ReasoningGymDataset("reasoning_gym://train", config=make_config(REWARD_MIX, n, seed))
    items = [dataset[i] for i in range(n)]
    first = {}
    for item in items:
        first.setdefault(item["extra_info"]["dataset"], item)

    def record(kind, item, text):
        return {
            "kind": kind,
            "dataset": item["extra_info"]["dataset"],
            "data_source": item["data_source"],
            "ground_truth": item["reward_model"]["ground_truth"],
            "extra_info": item["extra_info"],
            "entry": item["extra_info"]["entry"],
            "text": text,
        }

    hostile = hostile_completions(lambda name: first[name]["reward_model"]["ground_truth"])
    completions = []
    kinds, weights = list(KIND_WEIGHTS), list(KIND_WEIGHTS.values())
    for item in items[: n - len(hostile)]:
        kind = rng.choices(kinds, weights)[0]
        name, answer = item["extra_info"]["dataset"], item["reward_model"]["ground_truth"]
        completions.append(record(kind, item, regular_completion(kind, name, answer, item["extra_info"]["entry"], rng)))
    for kind, name, text in hostile:
        completions.append(record(kind, first[name], text))
    return completions
