"""Tests of rg_verl.evaluation.backends: hf on the tiny model, openai against a local server, the registry."""

from __future__ import annotations

import json
import os
import threading

import pytest

from rg_verl.evaluation import BACKENDS, Completion, Sampling, evaluate, parse_config
from rg_verl.evaluation.backends import backend_class
from rg_verl.evaluation.backends.openai import OpenAIBackend, RequestError
from rg_verl.evaluation.cli import main as cli_main
from rg_verl.evaluation.metrics import aggregate
from tests.unit.evaluation.fakes import NUM_ITEMS, FakeOpenAI, small_config


def test_unknown_backend_lists_valid_names():
    with pytest.raises(ValueError, match="valid backends: vllm, hf, openai"):
        backend_class("tgi")
    assert set(BACKENDS) == {"vllm", "hf", "openai"}


# ---------------------------------------------------------------- hf


def test_hf_backend_end_to_end(tiny_model, tmp_path, capsys):
    path = tmp_path / "tiny.yaml"
    config = small_config(model_path=str(tiny_model), output_dir=str(tmp_path / "out"), device="cpu", batch_size=2)
    path.write_text(json.dumps(config))  # JSON is YAML
    assert cli_main(["--config", str(path), "--run-name", "run1"]) == 0
    run_dir = tmp_path / "out" / "run1"
    assert "## arithmetic" in capsys.readouterr().out

    results = json.loads((run_dir / "results.json").read_text())
    assert results["metadata"]["backend"] == "hf" and results["metadata"]["model"] == str(tiny_model)
    assert [c["name"] for c in results["categories"]] == ["arithmetic", "algorithmic"]
    datasets = [d for c in results["categories"] for d in c["datasets"]]
    assert [(d["name"], d["total_examples"]) for d in datasets] == [
        ("chain_sum", 3),
        ("leg_counting", 2),
        ("spell_backward", 2),
    ]
    everything = []
    for category in results["categories"]:
        pooled = []
        for d in category["datasets"]:
            items = [item["completions"] for item in d["results"]]
            assert all(len(c) == 2 for c in items)
            assert all(0 < c["num_tokens"] <= 4 for item in items for c in item)
            assert d["metrics"] == aggregate(items, [1, 2])  # metrics follow from the per-item scores
            assert d["average_score"] == pytest.approx(sum(i["mean_score"] for i in d["results"]) / len(d["results"]))
            pooled += items
        assert category["metrics"] == aggregate(pooled, [1, 2])
        everything += pooled
    assert results["metrics"] == aggregate(everything, [1, 2])

    summary = (run_dir / "summary.md").read_text()
    assert summary.count("| dataset |") == 2 and "| chain_sum |" in summary and "pass@2" in summary
    png = (run_dir / "scores.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 1000


def test_hf_backend_batches_prompts_without_changing_greedy_completions(tiny_model):
    backend = BACKENDS["hf"](parse_config(small_config(model_path=str(tiny_model), device="cpu", batch_size=4)))
    assert backend.eos_ids == [backend.tokenizer.convert_tokens_to_ids("<|im_end|>")]
    prompts = [[{"role": "user", "content": q}] for q in ("a", "what is 2 + 2?", "spell cat backward")]
    outputs = backend.generate(prompts, 3, Sampling(max_tokens=6, temperature=1.0, top_p=1.0))
    assert [len(out) for out in outputs] == [3, 3, 3]
    assert all(1 <= c.num_tokens <= 6 for out in outputs for c in out)
    greedy = backend.generate(prompts, 2, Sampling(max_tokens=6, temperature=0.0, top_p=1.0))
    assert all(out[0] == out[1] for out in greedy)  # temperature 0: copies of one greedy completion
    alone = [backend.generate([p], 1, Sampling(max_tokens=6, temperature=0.0, top_p=1.0))[0][0] for p in prompts]
    assert [out[0] for out in greedy] == alone  # padding a batch changes no greedy completion


def test_hf_backend_token_ids_are_the_response_and_a_seed_repeats_it(tiny_model):
    backend = BACKENDS["hf"](parse_config(small_config(model_path=str(tiny_model), device="cpu", batch_size=2)))
    eos = backend.eos_ids[0]
    prompts = [[{"role": "user", "content": q}] for q in ("a", "what is 2 + 2?", "spell cat backward")]
    sampling = Sampling(max_tokens=12, temperature=1.0, top_p=1.0, seed=11)
    outputs = backend.generate(prompts, 4, sampling)
    completions = [c for out in outputs for c in out]
    for c in completions:
        assert c.token_ids is not None and len(c.token_ids) == c.num_tokens
        assert backend.tokenizer.decode(list(c.token_ids), skip_special_tokens=True) == c.text
        assert eos not in c.token_ids[:-1]  # up to the first end-of-sequence token, no padding after it
        assert c.token_ids[-1] == eos or len(c.token_ids) == 12
    assert any(c.token_ids[-1] == eos for c in completions)  # some stop on it (the id is kept)
    for prompt, out in zip(prompts, outputs, strict=True):  # the ids each completion was conditioned on
        assert all(list(c.prompt_token_ids) == backend.prompt_ids(prompt) for c in out)
    assert backend.generate(prompts, 4, sampling) == outputs  # the same seed, the same completions
    other = backend.generate(prompts, 4, Sampling(max_tokens=12, temperature=1.0, top_p=1.0, seed=12))
    assert other != outputs
    assert Completion("x", 1) == Completion(text="x", num_tokens=1, token_ids=None)  # old call sites keep working


def test_hf_backend_conditions_on_the_chat_template_ids(tiny_model):
    import torch

    from rg_verl.evaluation.backends.hf import prompt_token_ids

    backend = BACKENDS["hf"](parse_config(small_config(model_path=str(tiny_model), device="cpu")))
    messages = [{"role": "system", "content": "think"}, {"role": "user", "content": "what is 2 + 2?"}]
    ids = prompt_token_ids(backend.tokenizer, messages)
    assert ids == backend.prompt_ids(messages)
    assert backend.tokenizer.decode(ids) == backend.tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True
    )
    greedy = backend.generate([messages], 1, Sampling(max_tokens=8, temperature=0.0, top_p=1.0))[0][0]
    with torch.inference_mode():
        direct = backend.model.generate(
            torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long), max_new_tokens=8,
            do_sample=False, eos_token_id=backend.eos_ids, pad_token_id=backend.tokenizer.pad_token_id,
        )  # fmt: skip
    assert list(greedy.token_ids) == direct[0, len(ids) :].tolist()[: len(greedy.token_ids)]


def test_hf_backend_passes_the_chat_template_arguments(tiny_model):
    config = small_config(model_path=str(tiny_model), device="cpu", chat_template_kwargs={"greeting": "hello there"})
    backend = BACKENDS["hf"](parse_config(config))
    backend.tokenizer.chat_template = "{{ greeting }}: {% for m in messages %}{{ m['content'] }}{% endfor %}"
    messages = [{"role": "user", "content": "what is 2 + 2?"}]
    ids = backend.prompt_ids(messages)
    assert backend.tokenizer.decode(ids) == "hello there: what is 2 + 2?"
    (completion,) = backend.generate([messages], 1, Sampling(max_tokens=2, temperature=0.0, top_p=1.0))[0]
    assert list(completion.prompt_token_ids) == ids  # what it generated from


def test_vllm_backend_gives_token_ids_per_request_seeds_and_template_kwargs(monkeypatch):
    import sys
    import types

    calls = []

    class SamplingParams:
        def __init__(self, **kwargs):
            self.kwargs = kwargs

    class LLM:
        def __init__(self, model, dtype, **kwargs):
            pass

        def chat(self, prompts, params, use_tqdm=True, **kwargs):
            calls.append((prompts, params, kwargs))
            output = types.SimpleNamespace(text="hi", token_ids=[5, 6, 2])
            return [types.SimpleNamespace(outputs=[output] * 2, prompt_token_ids=[1, i]) for i in range(len(prompts))]

    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=LLM, SamplingParams=SamplingParams))
    from rg_verl.evaluation.backends.vllm import VLLMBackend, request_seed

    prompts = [[{"role": "user", "content": str(i)}] for i in range(3)]
    backend = VLLMBackend(types.SimpleNamespace(model_path="m", dtype="auto", engine_kwargs={}, device="cuda"))
    outputs = backend.generate(prompts, 2, Sampling(max_tokens=4, temperature=1.0, top_p=0.9))
    assert outputs == [[Completion("hi", 3, (5, 6, 2), (1, i))] * 2 for i in range(3)]  # vLLM's prompt ids too
    _, params, kwargs = calls[-1]
    assert params.kwargs == {"n": 2, "temperature": 1.0, "top_p": 0.9, "max_tokens": 4, "seed": None} and not kwargs
    config = types.SimpleNamespace(model_path="m", dtype="auto", engine_kwargs={}, chat_template_kwargs={"x": 1},
                                   device="cuda")
    VLLMBackend(config).generate(prompts, 2, Sampling(max_tokens=4, temperature=1.0, top_p=0.9, seed=3))
    _, params, kwargs = calls[-1]
    assert [p.kwargs["seed"] for p in params] == [request_seed(3, i) for i in range(3)]
    assert len(set(request_seed(3, i) for i in range(3))) == 3 and kwargs == {"chat_template_kwargs": {"x": 1}}


def test_batching_benchmark_runs(tiny_model):
    from bench.eval_batching import compare_batching

    result = compare_batching(str(tiny_model), num_prompts=4, batch_size=4, max_tokens=4, device="cpu")
    assert result["one_at_a_time_s"] > 0 and result["batched_s"] > 0
    assert result["speedup"] == pytest.approx(result["one_at_a_time_s"] / result["batched_s"])


# ---------------------------------------------------------------- openai


def test_openai_backend_retries_and_bounds_concurrency(monkeypatch):
    monkeypatch.setenv("RG_EVAL_TEST_KEY", "sekret")
    # the server holds the first requests until three are in flight: a client that overlaps them is seen doing so
    with FakeOpenAI(
        lambda messages, body: f"<answer>{messages[-1]['content']}</answer>", fail_first=1, hold_until_in_flight=3
    ) as server:
        config = parse_config(
            small_config(backend="openai", base_url=server.url, api_key_env="RG_EVAL_TEST_KEY", served_model_name="m",
                         concurrency=3, max_retries=2, retry_backoff=0.01)
        )  # fmt: skip
        prompts = [[{"role": "user", "content": str(i)}] for i in range(6)]
        outputs = OpenAIBackend(config).generate(prompts, 2, Sampling(max_tokens=5, temperature=0.5, top_p=0.9))
    assert [[c.text for c in out] for out in outputs] == [[f"<answer>{i}</answer>"] * 2 for i in range(6)]
    assert outputs[0][0].num_tokens == 1
    assert len(server.requests) == 12 + 1  # one 500, retried
    assert server.max_in_flight == 3  # as many as concurrency, never more
    assert set(server.authorization) == {"Bearer sekret"}
    body = server.requests[-1]
    assert (body["model"], body["max_tokens"], body["temperature"], body["top_p"], body["n"]) == ("m", 5, 0.5, 0.9, 1)


def test_openai_requests_carry_the_chat_template_arguments_only_when_set():
    sampling = Sampling(max_tokens=5, temperature=0.0, top_p=1.0)
    with FakeOpenAI(lambda messages, body: "x") as server:
        for kwargs in ({}, {"enable_thinking": False}):
            config = parse_config(small_config(backend="openai", base_url=server.url, chat_template_kwargs=kwargs))
            OpenAIBackend(config).complete([{"role": "user", "content": "hi"}], sampling)
    assert "chat_template_kwargs" not in server.requests[0]
    assert server.requests[1]["chat_template_kwargs"] == {"enable_thinking": False}


def test_the_prefix_is_read_off_the_models_tokenizer_but_not_off_a_served_name(tmp_path):
    from rg_verl.evaluation.runner import prefix_tokenizer

    assert prefix_tokenizer(parse_config(small_config(backend="hf", model_path="org/model"))) == "org/model"
    served = small_config(backend="openai", base_url="http://localhost:1/v1", model_path="org/model")
    assert prefix_tokenizer(parse_config(served)) is None
    local = small_config(backend="openai", base_url="http://localhost:1/v1", model_path=str(tmp_path))
    assert prefix_tokenizer(parse_config(local)) == str(tmp_path)


def test_openai_backend_gives_up_with_a_clear_error():
    sampling = Sampling(max_tokens=5, temperature=0.0, top_p=1.0)
    with FakeOpenAI(lambda messages, body: "x", fail_first=10) as server:
        config = parse_config(small_config(backend="openai", base_url=server.url, max_retries=2, retry_backoff=0.0))
        with pytest.raises(RequestError, match="after 3 attempts.*500"):
            OpenAIBackend(config).complete([{"role": "user", "content": "hi"}], sampling)
        assert len(server.requests) == 3
    with FakeOpenAI(lambda messages, body: "x") as server:  # 404 is not retried
        config = parse_config(small_config(backend="openai", base_url=server.url + "/wrong", max_retries=3))
        with pytest.raises(RequestError, match="404"):
            OpenAIBackend(config).complete([{"role": "user", "content": "hi"}], sampling)
        assert len(server.requests) == 1


def test_openai_backend_refuses_an_answer_without_content():
    backend = OpenAIBackend(parse_config(small_config(backend="openai", base_url="http://127.0.0.1:1/v1")))
    for answer in (b"not json", b"{}", b'{"choices": []}', b'{"choices": [{"message": {}}]}'):
        with pytest.raises(RequestError, match="without choices"):
            backend._completion(answer)
    answer = b'{"choices": [{"message": {"content": null}}], "usage": {"completion_tokens": 0}}'
    assert backend._completion(answer).text == "" and backend._completion(answer).num_tokens == 0


def test_openai_backend_end_to_end_against_a_served_tiny_model(tiny_model, tmp_path):
    """A local OpenAI-compatible server wrapping the hf backend: the "remote model" case."""
    hf_backend = BACKENDS["hf"](parse_config(small_config(model_path=str(tiny_model), device="cpu")))
    lock = threading.Lock()

    def respond(messages, body):
        with lock:  # one generate at a time on the shared model
            sampling = Sampling(max_tokens=body["max_tokens"], temperature=body["temperature"], top_p=body["top_p"])
            return hf_backend.generate([messages], 1, sampling)[0][0].text

    with FakeOpenAI(respond) as server:
        config = parse_config(
            small_config(
                model_path="tiny", backend="openai", base_url=server.url, output_dir=str(tmp_path), concurrency=4
            )
        )
        run_dir = evaluate(config)
    results = json.loads((run_dir / "results.json").read_text())
    assert results["metadata"]["backend"] == "openai" and results["metrics"]["num_completions"] == NUM_ITEMS * 2
    assert len(server.requests) == NUM_ITEMS * 2 and all(r["model"] == "tiny" for r in server.requests)
    assert server.requests[0]["messages"][0]["role"] == "system"  # the developer prompt travels
    assert (run_dir / "summary.md").exists() and (run_dir / "scores.png").exists()


def test_greedy_with_repeats_on_vllm_is_one_answer_repeated(tiny_model, monkeypatch):
    """vLLM refuses ``n > 1`` at temperature 0 (the stand-in enforces its checks); the backend asks for one
    greedy answer per item and repeats it, as the hf backend does."""
    import sys

    from rg_verl.evaluation.backends.vllm import VLLMBackend
    from tests import fake_vllm

    monkeypatch.setitem(sys.modules, "vllm", fake_vllm.module())
    with pytest.raises(ValueError, match="n must be 1 when using greedy sampling"):
        fake_vllm.SamplingParams(n=3, temperature=0.0)
    backend = VLLMBackend(parse_config(small_config(model_path=str(tiny_model), device="cpu")))
    prompts = [[{"role": "user", "content": q}] for q in ("a", "what is 2 + 2?")]
    outputs = backend.generate(prompts, 3, Sampling(max_tokens=6, temperature=0.0, top_p=1.0, seed=5))
    assert [len(out) for out in outputs] == [3, 3] and all(out[0] == out[1] == out[2] for out in outputs)
    (llm,) = fake_vllm.LLM.instances
    (_, params), = llm.calls
    assert all(p.n == 1 and p.temperature == 0.0 for p in params)
    sampled = backend.generate(prompts, 3, Sampling(max_tokens=6, temperature=1.0, top_p=1.0, seed=5))
    assert [len(out) for out in sampled] == [3, 3] and llm.calls[-1][1][0].n == 3


def test_the_backends_sample_alike_whatever_the_folders_generation_config(tiny_model, tmp_path, monkeypatch):
    """A folder whose ``generation_config.json`` sets sampling defaults (a strong repetition penalty, top_k 1):
    transformers' ``generate`` would merge them in, vLLM given explicit ``SamplingParams`` applies none. The hf
    backend applies none either, so both backends give the same greedy tokens, and those of plain argmax."""
    import shutil
    import sys

    from rg_verl.evaluation.backends.vllm import VLLMBackend
    from tests import fake_vllm

    folder = tmp_path / "penalised"
    shutil.copytree(tiny_model, folder)
    generation = json.loads((folder / "generation_config.json").read_text())
    generation.update(repetition_penalty=50.0, top_k=1, top_p=0.5, do_sample=True, temperature=0.1)
    (folder / "generation_config.json").write_text(json.dumps(generation))

    config = parse_config(small_config(model_path=str(folder), device="cpu"))
    prompts = [[{"role": "user", "content": q}] for q in ("a", "what is 2 + 2?", "spell cat backward")]
    sampling = Sampling(max_tokens=12, temperature=0.0, top_p=1.0)
    hf = BACKENDS["hf"](config)
    assert hf.model.generation_config.repetition_penalty in (None, 1.0)  # the folder's default is not applied
    assert hf.model.generation_config.eos_token_id == generation["eos_token_id"]  # its token ids are kept
    monkeypatch.setitem(sys.modules, "vllm", fake_vllm.module())
    on_vllm = VLLMBackend(config).generate(prompts, 1, sampling)
    on_hf = hf.generate(prompts, 1, sampling)
    assert [c[0].token_ids for c in on_hf] == [c[0].token_ids for c in on_vllm]
    import torch

    prompt = torch.tensor([list(on_hf[1][0].prompt_token_ids)])
    penalised = hf.model.generate(  # what the folder's penalty does to the same greedy search: another answer
        prompt, max_new_tokens=12, do_sample=False, repetition_penalty=50.0, pad_token_id=hf.tokenizer.pad_token_id
    )[0, prompt.shape[1] :].tolist()
    assert penalised[: len(on_hf[1][0].token_ids)] != list(on_hf[1][0].token_ids)


def test_sampling_limits_mirror_vllms_and_fail_before_a_model_loads(tiny_model):
    from rg_verl.common.schema import ConfigError

    for key, value in (("temperature", 2.5), ("top_p", 0.0), ("top_p", 1.5), ("max_tokens", 0), ("eval_repeats", 0)):
        with pytest.raises(ConfigError, match=key):
            parse_config(small_config(model_path=str(tiny_model), **{key: value}))
    assert parse_config(small_config(model_path=str(tiny_model), temperature=2.0)).temperature == 2.0


def test_vllm_on_the_cpu_gets_the_cpu_engine_settings_and_a_gpu_none(tiny_model, monkeypatch):
    """Where vLLM runs on the CPU (its CPU build, or no CUDA): vLLM's CPU settings under the config's own
    engine_kwargs, and the environment vLLM's CPU build reads; on a GPU: the config's engine_kwargs alone,
    whatever ``device`` says (it places the hf backend and the value model)."""
    import sys

    import torch

    from rg_verl.common import vllm_engine
    from rg_verl.common.vllm_engine import ENGINE_KWARGS
    from rg_verl.evaluation.backends.vllm import VLLMBackend
    from tests import fake_vllm

    monkeypatch.setitem(sys.modules, "vllm", fake_vllm.module())
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    config = parse_config(small_config(model_path=str(tiny_model), device="cuda", engine_kwargs={"max_model_len": 256}))
    VLLMBackend(config)
    assert fake_vllm.LLM.instances[-1].kwargs == {**ENGINE_KWARGS, "max_model_len": 256}
    assert os.environ["VLLM_TARGET_DEVICE"] == "cpu" and os.environ["VLLM_CPU_KVCACHE_SPACE"] == "1"
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "3")  # the user's own value is kept
    VLLMBackend(config)
    assert os.environ["VLLM_CPU_KVCACHE_SPACE"] == "3"
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE")
    config.engine_kwargs = {"kv_cache_memory_bytes": 2**28}  # the config's cache size: not replaced by the variable
    VLLMBackend(config)
    assert "VLLM_CPU_KVCACHE_SPACE" not in os.environ
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert VLLMBackend.engine_kwargs(None, config) == {"kv_cache_memory_bytes": 2**28}  # a GPU, device cuda
    config.device = "cpu"
    assert VLLMBackend.engine_kwargs(None, config) == {"kv_cache_memory_bytes": 2**28}  # a GPU, device cpu
    monkeypatch.setattr(vllm_engine, "cpu_build_installed", lambda: True)
    assert VLLMBackend.engine_kwargs(None, config) == {**ENGINE_KWARGS, "kv_cache_memory_bytes": 2**28}
