"""reasoning-gym's lm-eval tasks in evaluation/lmeh (gsm8k_cot_rg, llama_math_algebra) against reasoning-gym's files,
and rg_verl.evaluation.lmeh, the MATH rule llama_math_algebra scores with.

The tasks are loaded with lm-eval's TaskManager from our folder, on local items (the hub is out of reach), and
checked value by value against reasoning-gym's YAML, written out below: prompt and system prompt, shots, filters,
metric and generation settings. The prompts lm-eval builds and the scores its filters and metric give are checked too.
"""

from __future__ import annotations

import hashlib
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rg_verl.common.final_answer import last_boxed
from rg_verl.evaluation import lmeh
from tests.helpers import REPO, within

LMEH = REPO / "evaluation" / "lmeh"

# --- reasoning-gym 49b0713, training/evaluations/lmeh/{gsm8k_cot_rg,llama_math_algebra}.yaml ---------------------
REFERENCE_COMMIT = "49b0713"

# the system prompt both tasks write into their prompt
REFERENCE_SYSTEM_PROMPT = (
    "You are a helpful AI Assistant that provides well-reasoned and detailed responses.\n"
    "You first think about the reasoning process as an internal monologue and then provide the user with the answer.\n"
    "Respond in the following format:\n"
    "<think>\n...\n</think>\n<answer>\n...\n</answer>"
)

GSM8K_REFERENCE = {
    "task": "gsm8k_cot_rg",
    "dataset_path": "gsm8k",
    "dataset_name": "main",
    "output_type": "generate_until",
    "test_split": "test",
    "num_fewshot": 8,
    "repeats": 1,
    "version": 3.0,
    "doc_to_text": (
        "<|im_start|>system\n" + REFERENCE_SYSTEM_PROMPT + "<|im_end|>\n"
        "<|im_start|>user\n"
        "Given the following problem, reason and give a final answer to the problem.\n"
        "Problem: {{question}}\n"
        'Your response should end with "The final answer is [answer]" where [answer] is the response to the problem.'
        "<|im_end|>\n"
        "<|im_start|>assistant\n"
    ),
    "doc_to_target": "{{answer.split('####')[-1].strip() if answer is defined else target}}",
    "fewshot_sampler": "first_n",
    # sha256 of json.dumps([[question, target], ...]) over the eight shots, in order
    "fewshot_sha256": "69a29d23af0b1f11229d99eebfba7a482839d38c03a544c81469d8e9f86c6d84",
    "filter_list": [
        {
            "name": "strict-match",
            "filter": [
                {
                    "function": "regex",
                    "regex_pattern": "The final answer is ((-?[$0-9.,]{2,})|(-?[0-9]+))",
                    "group_select": -1,
                },
                {"function": "take_first"},
            ],
        },
        {
            "name": "flexible-extract",
            "filter": [
                {"function": "regex", "regex_pattern": "(-?[$0-9.,]{2,})|(-?[0-9]+)", "group_select": -1},
                {"function": "take_first"},
            ],
        },
    ],
    "metric_list": [
        {
            "metric": "exact_match",
            "aggregation": "mean",
            "higher_is_better": True,
            "ignore_case": True,
            "ignore_punctuation": False,
            "regexes_to_ignore": [",", "\\$", "(?s).*#### ", "\\.$"],
        }
    ],
    "generation_kwargs": {
        "until": ["<|eot_id|>", "<|start_header_id|>user<|end_header_id|>", "Q:", "</s>", "<|im_end|>", "</answer>"],
        "do_sample": True,
        "temperature": 0.6,
        "top_p": 0.95,
        "max_gen_toks": 4096,
    },
}

LLAMA_MATH_REFERENCE = {
    "task": "llama_math_algebra",
    "dataset_path": "EleutherAI/hendrycks_math",
    "dataset_name": "algebra",
    "dataset_kwargs": {"trust_remote_code": True},
    "output_type": "generate_until",
    "training_split": "train",
    "test_split": "test",
    "num_fewshot": 0,
    "version": 1.0,
    "doc_to_text": (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
        + REFERENCE_SYSTEM_PROMPT
        + "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
        "Solve the following math problem efficiently and clearly:\n\n"
        "- For simple problems (2 steps or fewer):\n"
        "Provide a concise solution with minimal explanation.\n\n"
        "- For complex problems (3 steps or more):\n"
        "Use this step-by-step format:\n\n"
        "## Step 1: [Concise description]\n"
        "[Brief explanation and calculations]\n\n"
        "## Step 2: [Concise description]\n"
        "[Brief explanation and calculations]\n\n"
        "...\n\n"
        "Regardless of the approach, always conclude with:\n\n"
        "Therefore, the final answer is: $\\\\boxed{answer}$. I hope it is correct.\n\n"
        "Where [answer] is just the final number or expression that solves the problem.\n\n"
        "Problem: {{ problem }}<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
    ),
    "doc_to_target": "{{answer if few_shot is undefined else solution}}",
    "metric_list": [{"metric": "exact_match", "aggregation": "mean", "higher_is_better": True}],
    "generation_kwargs": {
        "until": ["Problem:", "</answer>"],
        "max_gen_toks": 4096,
        "do_sample": False,
        "temperature": 0,
    },
}

# --- the tasks, loaded from our folder on local items ----------------------------------------------------------------

GSM8K_ITEM = {
    "question": "A shop sold 1000 pens and then 5 more. How many pens?",
    "answer": "1000 + 5 = 1005\n#### 1005",
}
MATH_ITEM = {
    "problem": "Solve $2x = 1$.",
    "solution": "So $x = \\boxed{\\frac12}$.",
    "level": "Level 1",
    "type": "Algebra",
}


def _local_task(folder, name: str, item: dict, splits: tuple[str, ...]) -> str:
    """A task that includes ours and reads ``item`` from a local file: its name."""
    data = folder / f"{name}.jsonl"
    data.write_text(json.dumps(item) + "\n")
    files = "".join(f"    {split}: {data}\n" for split in splits)
    (folder / f"{name}_local.yaml").write_text(
        f"include: {LMEH / (name + '.yaml')}\ntask: {name}_local\ntag: []\ndataset_path: json\ndataset_name: null\n"
        f"dataset_kwargs:\n  data_files:\n{files}  cache_dir: {folder / 'cache'}\n"
    )
    return f"{name}_local"


@pytest.fixture(scope="module")
def manager(tmp_path_factory):
    lm_eval_tasks = pytest.importorskip("lm_eval.tasks")
    folder = tmp_path_factory.mktemp("lmeh_local")
    _local_task(folder, "gsm8k_cot_rg", GSM8K_ITEM, ("test",))
    _local_task(folder, "llama_math_algebra", MATH_ITEM, ("train", "test"))
    return lm_eval_tasks.TaskManager(include_path=[str(LMEH), str(folder)], include_defaults=False)


@pytest.fixture(scope="module")
def tasks(manager):
    """Both reference tasks on their local item, with their requests built."""
    loaded = manager.load(["gsm8k_cot_rg_local", "llama_math_algebra_local"])["tasks"]
    for task in loaded.values():
        task.build_all_requests(limit=1, rank=0, world_size=1)
    return loaded["gsm8k_cot_rg_local"], loaded["llama_math_algebra_local"]


def test_the_reference_tasks_are_ours_and_read_the_reference_datasets(manager):
    for reference in (GSM8K_REFERENCE, LLAMA_MATH_REFERENCE):
        entry = manager.task_index[reference["task"]]
        assert entry.yaml_path.resolve() == (LMEH / f"{reference['task']}.yaml").resolve()
        for key in ("dataset_path", "dataset_name", "dataset_kwargs", "training_split", "test_split"):
            assert entry.cfg.get(key) == reference.get(key), (reference["task"], key)
    # our own variants keep names of their own
    assert {"gsm8k_rg_verl", "math_algebra_rg_verl"} <= set(manager.all_tasks)


def _common_settings(config, reference: dict) -> None:
    for key in ("output_type", "num_fewshot", "doc_to_text", "doc_to_target", "metric_list", "generation_kwargs"):
        assert getattr(config, key) == reference[key], (reference["task"], key)
    assert config.metadata["version"] == reference["version"]
    assert REFERENCE_SYSTEM_PROMPT in config.doc_to_text


def test_gsm8k_cot_rg_settings_are_the_reference_values(tasks):
    config = tasks[0].config
    _common_settings(config, GSM8K_REFERENCE)
    assert config.repeats == GSM8K_REFERENCE["repeats"]
    assert config.filter_list == GSM8K_REFERENCE["filter_list"]
    assert config.generation_kwargs["temperature"] == 0.6 and config.generation_kwargs["top_p"] == 0.95
    assert config.generation_kwargs["do_sample"] is True and config.generation_kwargs["max_gen_toks"] == 4096
    shots = config.fewshot_config.samples
    assert config.fewshot_config.sampler == GSM8K_REFERENCE["fewshot_sampler"]
    assert len(shots) == GSM8K_REFERENCE["num_fewshot"] == 8
    digest = hashlib.sha256(json.dumps([[s["question"], s["target"]] for s in shots]).encode()).hexdigest()
    assert digest == GSM8K_REFERENCE["fewshot_sha256"], "the shots differ from reasoning-gym's"


def test_gsm8k_cot_rg_prompt_is_eight_shots_then_the_question(tasks):
    task = tasks[0]
    (instance,) = task.instances
    context, gen_kwargs = instance.args

    def text(question: str) -> str:
        return GSM8K_REFERENCE["doc_to_text"].replace("{{question}}", question)

    shots = [text(s["question"]) + " " + s["target"] for s in task.config.fewshot_config.samples]
    assert context == "\n\n".join([*shots, text(GSM8K_ITEM["question"])])
    assert gen_kwargs == GSM8K_REFERENCE["generation_kwargs"]


def _gsm8k_scores(task, response: str, answer: str) -> dict[str, float]:
    """exact_match under each of the task's filters, for ``response`` to an item whose answer is ``answer``."""
    (instance,) = task.instances
    instance.resps = [response]
    task.apply_filters()
    doc = {"question": "q", "answer": f"#### {answer}"}
    return {
        name: float(task.process_results(doc, [kept])["exact_match"]) for name, kept in instance.filtered_resps.items()
    }


@pytest.mark.parametrize(
    ("response", "strict", "flexible"),
    [
        ("1000 + 5 = 1005. The final answer is 1005", 1.0, 1.0),
        ("The final answer is $1,005.", 1.0, 1.0),  # ",", "$" and a final "." are ignored
        ("The final answer is 1005 pens, not 7", 1.0, 0.0),  # flexible: the last number
        ("It is 1005.", 0.0, 1.0),  # strict: only after "The final answer is"
        ("The final answer is 1005. No: The final answer is 9", 0.0, 0.0),  # the last one counts
        ("I cannot tell", 0.0, 0.0),
    ],
)
def test_gsm8k_cot_rg_filters_and_metric(tasks, response, strict, flexible):
    assert _gsm8k_scores(tasks[0], response, "1005") == {"strict-match": strict, "flexible-extract": flexible}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(number=st.integers(-(10**7), 10**7), commas=st.booleans(), prose=st.sampled_from(["", "So it is done. "]))
def test_gsm8k_cot_rg_scores_a_stated_final_answer(tasks, number, commas, prose):
    response = f"{prose}The final answer is {number:,}" if commas else f"{prose}The final answer is {number}"
    assert _gsm8k_scores(tasks[0], response, str(number)) == {"strict-match": 1.0, "flexible-extract": 1.0}
    assert _gsm8k_scores(tasks[0], response, str(number + 1))["strict-match"] == 0.0


def test_llama_math_algebra_settings_are_the_reference_values(tasks):
    config = tasks[1].config
    _common_settings(config, LLAMA_MATH_REFERENCE)
    assert not config.filter_list or config.filter_list == [{"name": "none", "filter": [{"function": "take_first"}]}]
    assert config.generation_kwargs["do_sample"] is False and config.generation_kwargs["temperature"] == 0
    assert config.generation_kwargs["max_gen_toks"] == 4096
    assert config.process_docs is lmeh.process_docs and config.process_results is lmeh.process_results


def test_llama_math_algebra_prompt_and_reference_answer(tasks):
    (instance,) = tasks[1].instances
    context, gen_kwargs = instance.args
    assert context == LLAMA_MATH_REFERENCE["doc_to_text"].replace("{{ problem }}", MATH_ITEM["problem"])
    assert gen_kwargs == LLAMA_MATH_REFERENCE["generation_kwargs"]
    assert instance.doc["answer"] == "\\frac{1}{2}"  # process_docs: the solution's boxed answer, normalized


# --- rg_verl.evaluation.lmeh: the Llama 3 MATH rule ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "normalized"),
    [
        ("x = 10,000", "10000"),  # the text after the last "=", thousands commas dropped
        ("\\frac12", "\\frac{1}{2}"),
        ("\\sqrt3", "\\sqrt{3}"),
        ("5 \\text{ inches}", "5"),
        ("\\$18.50", "18.50"),
        ("90^\\circ", "90"),
        ("\\text{(A)}", "(A)"),
        ("\\boxed{7}", "7"),
        ("$\\frac{3}{4}$ of it", "\\frac{3}{4}"),  # the first $...$
        ("\\dfrac{1}{2}", "\\dfrac{1}{2}"),
        ("1,2,3", "123"),  # the rule's own: a bare tuple of digits is read as one number
        ("", ""),
        (None, ""),
    ],
)
def test_normalize_final_answer(answer, normalized):
    assert lmeh.normalize_final_answer(answer) == normalized


@given(st.text())
def test_normalize_final_answer_never_raises(text):
    assert isinstance(lmeh.normalize_final_answer(text), str)


@pytest.mark.parametrize(
    ("text", "boxed", "content"),
    [
        ("so \\boxed{1} or rather \\boxed{\\frac{1}{2}}.", "\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("$\\boxed 7$ and \\boxed{8}", "\\boxed 7", "7"),  # a "\boxed " with a space wins, up to "$"
        ("\\boxed{\\{1,2\\}}", "\\boxed{\\{1,2\\}}", "\\{1,2\\}"),  # braces counted as written
        ("\\fbox{3}", "\\fbox{3}", ""),  # found, but only \boxed is unboxed
        ("\\boxed{12", None, ""),  # never closed
        ("no box", None, ""),
    ],
)
def test_last_boxed_only_and_remove_boxed(text, boxed, content):
    assert lmeh.last_boxed_only(text) == boxed
    assert lmeh.remove_boxed(boxed) == content


_PLAIN = st.text(alphabet="abc123+-=$ ,.^", max_size=20)


@given(prefix=_PLAIN, inner=_PLAIN, suffix=_PLAIN)
def test_the_last_box_is_unboxed(prefix, inner, suffix):
    text = f"{prefix}\\boxed{{{inner}}}{suffix}"
    assert lmeh.remove_boxed(lmeh.last_boxed_only(text)) == inner


@pytest.mark.parametrize(
    ("response", "score"),
    [
        ("Therefore, the final answer is: $\\boxed{\\frac{1}{2}}$. I hope it is correct.", 1),
        ("\\boxed{0.5}", 1),
        ("\\boxed{\\frac12}", 1),
        ("\\boxed{x = \\dfrac{1}{2}}", 1),
        ("\\boxed{2}", 0),
        ("the answer is 1/2", 0),  # no box
        ("\\fbox{\\frac{1}{2}}", 0),  # a box the rule cannot open
        ("\\boxed{\\frac{1}{2}", 0),  # never closed
    ],
)
def test_process_results(response, score):
    doc = {"problem": "p", "solution": "s", "answer": lmeh.normalize_final_answer("\\frac{1}{2}")}
    assert within(120, lmeh.process_results, doc, [response]) == {"exact_match": score}


@settings(max_examples=25, deadline=None)
@given(number=st.integers(0, 10**9))
def test_process_results_matches_a_boxed_integer_with_or_without_commas(number):
    doc = {"answer": lmeh.normalize_final_answer(str(number))}
    assert within(120, lmeh.process_results, doc, [f"\\boxed{{{number:,}}}"]) == {"exact_match": 1}
    assert within(120, lmeh.process_results, doc, [f"\\boxed{{{number + 1}}}"]) == {"exact_match": 0}


def test_process_docs_adds_the_normalized_boxed_answer():
    datasets = pytest.importorskip("datasets")
    rows = datasets.Dataset.from_list([MATH_ITEM, {**MATH_ITEM, "solution": "It is $\\boxed{10,000 \\text{ cm}}$."}])
    assert [row["answer"] for row in lmeh.process_docs(rows)] == ["\\frac{1}{2}", "10000"]


def test_is_equiv_needs_two_answers_that_parse():
    assert lmeh.is_equiv("\\frac{1}{2}", "0.5") and lmeh.is_equiv("x^2+1", "1+x^2")
    assert not lmeh.is_equiv("[2,5)", "[2,5)")  # no string comparison: intervals do not subtract to zero
    assert not lmeh.is_equiv("", "") and not lmeh.is_equiv("1", "2")


def test_is_equiv_gives_up_on_a_hostile_answer():
    """A power tower does not stall the run: the check is cut off and scores False."""
    assert within(120, lmeh.is_equiv, "9^{9^{9^{9}}}", "1", timeout=1.0) is False
    assert within(120, lmeh.is_equiv, "2", "2.0")  # the pool recovers


# --- the rule's box finder beside training's (docs/math.md, "Two box finders, on purpose") ---------------------

BRACED_PIECES = ["\\boxed{", "{", "}", "\\{", "\\}", "1", "x", "\\frac", " ", "$", "=", "\n"]


def rule_boxed(text: str) -> str | None:
    """The rule's answer (lm-eval's box finder, then lmeh.remove_boxed); None where it finds no box."""
    boxed = lmeh.last_boxed_only(text)
    return None if boxed is None else lmeh.remove_boxed(boxed)


@given(st.lists(st.sampled_from(BRACED_PIECES), max_size=30).map("".join))
def test_braced_boxes_are_read_as_trainings_last_boxed_reads_them(text):
    assert rule_boxed(text) == last_boxed(text)


@pytest.mark.parametrize(
    "text, training, rule",
    [
        ("\\boxed{\\{1,2\\}}", "\\{1,2\\}", "\\{1,2\\}"),
        ("\\boxed 5", "5", "5"),
        ("\\boxed{12", None, None),
        ("\\boxed5", "5", None),
        ("x \\boxed{3} \\boxedfoo", "3", None),
        ("\\fbox{7}", "7", ""),  # lm-eval's remove_boxed raises on it; the rule scores it as an empty answer
    ],
)
def test_where_the_two_box_finders_differ(text, training, rule):
    assert (last_boxed(text), rule_boxed(text)) == (training, rule)
