"""Tests for rg_verl.hf_rollout.server: the ``transformers`` rollout server, driven in-process.

No Ray: ``HFRolloutServer`` is a plain class, so each test builds one and drives its async
methods with ``asyncio.run``. Each test runs its whole scenario inside one event loop, because
the server's ``asyncio.Lock`` binds to the loop that first waits on it (as in a Ray actor).

Expected values come from code independent of the server: a teacher-forced forward pass of the
same weights for log-probs, and a plain cache-free argmax loop for greedy decoding.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM
from verl.plugin.platform import get_platform, set_platform

from rg_verl.cpu.platform import PlatformCPU
from rg_verl.cpu.tiny_model import build_tiny_model
from rg_verl.hf_rollout import server as server_module
from rg_verl.hf_rollout.server import HFRolloutServer

PROMPT_LENGTH = 16
RESPONSE_LENGTH = 12
ATOL = 1e-4
GREEDY = {"temperature": 0.0}


# --- fixtures and helpers --------------------------------------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def cpu_platform():
    """Make verl resolve its device to the CPU (it would say "cuda"), and restore it afterwards."""
    previous = get_platform()
    set_platform(PlatformCPU())
    yield
    set_platform(previous)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny Qwen2, with its matrices re-drawn larger.

    Freshly initialised (std 0.02, tied embeddings), greedy decoding just repeats the prompt's
    last token whatever the context, which would let broken padding or stale weights go unseen.
    With std 0.2 the continuation depends on the whole prompt.
    """
    path = build_tiny_model(tmp_path_factory.mktemp("hf_rollout") / "model", seed=0)
    model = AutoModelForCausalLM.from_pretrained(path)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() >= 2:
                param.copy_(torch.randn(param.shape, generator=gen) * 0.2)
    model.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def eos_id(model_dir: Path) -> int:
    return AutoConfig.from_pretrained(model_dir).eos_token_id


@pytest.fixture
def make_server(model_dir: Path) -> Callable[..., HFRolloutServer]:
    def make(**overrides) -> HFRolloutServer:
        kwargs = dict(
            model_path=str(model_dir),
            prompt_length=PROMPT_LENGTH,
            response_length=RESPONSE_LENGTH,
            max_num_seqs=8,
            seed=0,
        )
        kwargs.update(overrides)
        server = HFRolloutServer(**kwargs)
        assert server.device.type == "cpu"
        return server

    return make


def load_model(model_dir: Path, state_dict: dict[str, torch.Tensor] | None = None):
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    if state_dict is not None:
        model.load_state_dict(state_dict)
    return model.eval()


def prompts(*lengths: int, seed: int = 0) -> list[list[int]]:
    """Random prompts of the given lengths, from ordinary (non-special) tokens."""
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 1000, (n,), generator=gen).tolist() for n in lengths]


def spy_batches(server: HFRolloutServer) -> list[tuple[int, float]]:
    """Record (batch size, temperature) of every ``_generate_batch`` call the server makes."""
    calls: list[tuple[int, float]] = []
    original = server._generate_batch

    def spy(batch, temperature, top_p, top_k):
        calls.append((len(batch), temperature))
        return original(batch, temperature, top_p, top_k)

    server._generate_batch = spy
    return calls


@torch.no_grad()
def teacher_forced_logprobs(model, prompt: list[int], response: list[int], temperature: float = 1.0) -> torch.Tensor:
    """log softmax(logits / T)[token] at each response position, from one unpadded forward pass."""
    logits = model(torch.tensor([prompt + response])).logits[0, len(prompt) - 1 : -1].float()
    logprobs = torch.log_softmax(logits / temperature, dim=-1)
    return logprobs.gather(-1, torch.tensor(response)[:, None]).squeeze(-1)


@torch.no_grad()
def greedy_reference(model, prompt: list[int], max_tokens: int, eos_ids: set[int]) -> list[int]:
    """Greedy decoding without a KV cache, padding or ``generate``: argmax of a full forward each step."""
    ids, response = list(prompt), []
    for _ in range(max_tokens):
        token = int(model(torch.tensor([ids])).logits[0, -1].argmax())
        response.append(token)
        ids.append(token)
        if token in eos_ids:
            break
    return response


async def gather(server: HFRolloutServer, requests: list[tuple[list[int], dict]]):
    """Send the requests concurrently, as verl's agent loops do."""
    return await asyncio.gather(
        *(server.generate(prompt, dict(params), request_id=f"r{i}") for i, (prompt, params) in enumerate(requests))
    )


def assert_well_formed(output, max_tokens: int, eos_ids: set[int]) -> None:
    assert 1 <= len(output.token_ids) <= min(max_tokens, RESPONSE_LENGTH)
    assert not eos_ids & set(output.token_ids[:-1]), f"EOS before the end of {output.token_ids}"
    if output.log_probs is not None:
        assert len(output.log_probs) == len(output.token_ids)
    assert output.stop_reason == "completed"


# --- 1. log-probs ------------------------------------------------------------------------------------


def test_sampled_logprobs_match_teacher_forcing(make_server, model_dir):
    server = make_server()
    calls = spy_batches(server)
    model = load_model(model_dir)
    batch = prompts(3, 9, 5, 14, seed=1)  # different lengths: rows are left-padded differently
    params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": True}
    outputs = asyncio.run(gather(server, [(p, params) for p in batch] + [(batch[0], {"temperature": 1.0})]))

    assert calls == [(len(batch) + 1, 1.0)]
    assert outputs[-1].log_probs is None  # logprobs not asked for
    for prompt, out in zip(batch, outputs, strict=False):
        assert_well_formed(out, RESPONSE_LENGTH, server.eos_ids)
        expected = teacher_forced_logprobs(model, prompt, out.token_ids)
        torch.testing.assert_close(torch.tensor(out.log_probs), expected, atol=ATOL, rtol=0)
    # sampled, not greedy: some token was not the argmax
    assert any(
        (teacher_forced_logprobs(model, p, o.token_ids) < -1e-3).any()
        and o.token_ids != greedy_reference(model, p, len(o.token_ids), server.eos_ids)
        for p, o in zip(batch, outputs, strict=False)
    )


def test_logprobs_are_scaled_by_temperature(make_server, model_dir):
    server = make_server()
    model = load_model(model_dir)
    batch = prompts(4, 11, 7, seed=2)
    params = {"temperature": 0.7, "logprobs": True}
    outputs = asyncio.run(gather(server, [(p, params) for p in batch]))

    for prompt, out in zip(batch, outputs, strict=True):
        assert_well_formed(out, RESPONSE_LENGTH, server.eos_ids)
        got = torch.tensor(out.log_probs)
        torch.testing.assert_close(got, teacher_forced_logprobs(model, prompt, out.token_ids, 0.7), atol=ATOL, rtol=0)
        unscaled = teacher_forced_logprobs(model, prompt, out.token_ids, 1.0)
        assert (got - unscaled).abs().max() > 1e-2  # the check above can tell the two apart


# --- 2. batching ---------------------------------------------------------------------------------------


def test_batching_does_not_change_greedy_results(make_server, model_dir):
    server = make_server()
    calls = spy_batches(server)
    model = load_model(model_dir)
    batch = prompts(2, 13, 6, 9, 1, seed=3)
    sampled = prompts(5, 8, seed=4)

    async def scenario():
        together = await gather(
            server,
            [(p, {**GREEDY, "logprobs": True}) for p in batch] + [(p, {"temperature": 1.0}) for p in sampled],
        )
        alone = [await server.generate(p, dict(GREEDY), request_id=f"alone{i}") for i, p in enumerate(batch)]
        return together[: len(batch)], alone

    together, alone = asyncio.run(scenario())

    # one batch per sampling setting, then one per lone request
    assert sorted(calls[:2], key=lambda c: c[1]) == [(len(batch), 0.0), (len(sampled), 1.0)]
    assert calls[2:] == [(1, 0.0)] * len(batch)
    assert len({tuple(o.token_ids) for o in together}) == len(batch)  # outputs depend on the prompt
    for prompt, batched, lone in zip(batch, together, alone, strict=True):
        assert batched.token_ids == lone.token_ids
        assert batched.token_ids == greedy_reference(model, prompt, RESPONSE_LENGTH, server.eos_ids)
        expected = teacher_forced_logprobs(model, prompt, batched.token_ids)  # greedy: unscaled logits
        torch.testing.assert_close(torch.tensor(batched.log_probs), expected, atol=ATOL, rtol=0)


def test_batches_are_capped_at_max_num_seqs(make_server):
    server = make_server(max_num_seqs=2)
    calls = spy_batches(server)
    batch = prompts(3, 10, 5, 7, 12, seed=5)
    together = asyncio.run(gather(server, [(p, GREEDY) for p in batch]))
    assert calls == [(2, 0.0), (2, 0.0), (1, 0.0)]

    lone_server = make_server()

    async def alone():
        return [await lone_server.generate(p, dict(GREEDY), request_id=f"a{i}") for i, p in enumerate(batch)]

    assert [o.token_ids for o in together] == [o.token_ids for o in asyncio.run(alone())]


def test_requests_that_trickle_in_join_one_batch(make_server):
    """The later tries of multi-turn episodes arrive one by one, each after its episode judged its answer: while
    they keep coming within a window of each other, the server waits for them (up to MAX_BATCH_WAIT_S)."""
    server = make_server()
    calls = spy_batches(server)
    gap = server_module.BATCH_WINDOW_S / 2

    async def trickle():
        async def late(i, prompt):
            await asyncio.sleep(i * gap)
            return await server.generate(prompt, dict(GREEDY), request_id=f"t{i}")

        return await asyncio.gather(*(late(i, p) for i, p in enumerate(prompts(3, 6, 9, 4, seed=6))))

    asyncio.run(trickle())
    assert calls == [(4, 0.0)]
    slow = int(server_module.MAX_BATCH_WAIT_S / gap) + 4  # a stream that never pauses is still served in time
    calls.clear()

    async def stream():
        async def late(i):
            await asyncio.sleep(i * gap)
            return await server.generate([5, 6, 7], dict(GREEDY), request_id=f"s{i}")

        return await asyncio.gather(*(late(i) for i in range(slow)))

    asyncio.run(stream())
    assert len(calls) >= 2 and sum(size for size, _ in calls) == slow


# --- 3. EOS and max_tokens -----------------------------------------------------------------------------


def eos_trigger_weights(model_dir: Path, eos: int, trigger: int | None, scale: float = 20.0) -> dict[str, torch.Tensor]:
    """Weights under which the model emits EOS right after ``trigger`` and never otherwise.

    Hidden dimension 0 of the residual stream is made to carry only the embedding: no layer
    writes to it, and only ``trigger`` (``scale``) and EOS (``2 * scale``) have it non-zero. The
    embedding is tied to ``lm_head``, so the EOS logit is ``2 * scale * h[0]``: zero wherever the
    last token is not ``trigger``, and far above every other logit (``trigger``'s own being about
    half of it) when it is. With ``trigger=None`` nothing triggers, and greedy decoding is the
    same as with a trigger up to the first time the trigger token is emitted.
    """
    model = load_model(model_dir)
    with torch.no_grad():
        emb = model.get_input_embeddings().weight
        assert emb.data_ptr() == model.get_output_embeddings().weight.data_ptr()
        emb[:, 0] = 0.0
        emb[eos] = 0.0
        if trigger is not None:
            emb[trigger, 0] = scale
            emb[eos, 0] = 2 * scale
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight[0] = 0.0
            layer.mlp.down_proj.weight[0] = 0.0
    return {name: tensor.clone() for name, tensor in model.state_dict().items()}


def test_stops_at_eos_and_respects_max_tokens(make_server, model_dir, eos_id):
    server = make_server()
    calls = spy_batches(server)
    eos_ids = server.eos_ids
    assert eos_ids == {eos_id}

    # Pick a trigger the untriggered model emits greedily a few tokens into a response.
    stopper = prompts(6, seed=6)[0]
    untriggered_model = load_model(model_dir, eos_trigger_weights(model_dir, eos_id, None))
    untriggered = greedy_reference(untriggered_model, stopper, RESPONSE_LENGTH, eos_ids)
    k = next(i for i in range(1, len(untriggered)) if untriggered[i] not in {*stopper, *untriggered[:i]})
    trigger = untriggered[k]
    weights = eos_trigger_weights(model_dir, eos_id, trigger)
    model = load_model(model_dir, weights)

    others = [p for p in prompts(5, 9, 3, 7, 2, 4, seed=7) if trigger not in p]
    at_once = [p + [trigger] for p in others[:2]]  # the prompt ends in the trigger: EOS comes first
    requests = [
        (stopper, {**GREEDY, "logprobs": True}),
        *((p, dict(GREEDY)) for p in at_once),
        (others[2], {**GREEDY, "max_tokens": 3}),
        (others[3], {**GREEDY, "max_tokens": 100}),  # capped at response_length
        (others[4], dict(GREEDY)),
    ]
    sampled = [(p, {"temperature": 1.0, "logprobs": True}) for p in at_once]
    sampled += [(p, {"temperature": 1.0, "max_tokens": 5}) for p in others]

    async def scenario():
        await server.update_weights(weights, global_steps=1)
        return await gather(server, requests + sampled)

    outputs = asyncio.run(scenario())
    greedy_out, sampled_out = outputs[: len(requests)], outputs[len(requests) :]

    assert sorted(calls, key=lambda c: c[1]) == [(len(requests), 0.0), (len(sampled), 1.0)]
    # The stopper's row finishes mid-batch, while other rows go on to the full length.
    assert greedy_out[0].token_ids == untriggered[: k + 1] + [eos_id]
    stopper_logprobs = torch.tensor(greedy_out[0].log_probs)
    expected = teacher_forced_logprobs(model, stopper, greedy_out[0].token_ids)
    torch.testing.assert_close(stopper_logprobs, expected, atol=ATOL, rtol=0)
    assert stopper_logprobs[-1] > -1e-3  # EOS was certain
    for out in greedy_out[1:3]:
        assert out.token_ids == [eos_id]
    assert any(len(o.token_ids) == RESPONSE_LENGTH and eos_id not in o.token_ids for o in greedy_out)
    for (prompt, params), out in zip(requests, greedy_out, strict=True):
        max_tokens = params.get("max_tokens", RESPONSE_LENGTH)
        assert_well_formed(out, max_tokens, eos_ids)
        assert out.token_ids == greedy_reference(model, prompt, min(max_tokens, RESPONSE_LENGTH), eos_ids)
    assert len(greedy_out[3].token_ids) == 3 or greedy_out[3].token_ids[-1] == eos_id

    for out in sampled_out[: len(at_once)]:
        assert out.token_ids == [eos_id]
    for (_prompt, params), out in zip(sampled, sampled_out, strict=True):
        assert_well_formed(out, params.get("max_tokens", RESPONSE_LENGTH), eos_ids)
        tokens = out.token_ids
        assert all(tokens[i + 1] == eos_id for i in range(len(tokens) - 1) if tokens[i] == trigger)
        if eos_id not in tokens:
            assert len(tokens) == params.get("max_tokens", RESPONSE_LENGTH)


def test_default_model_config_eos_is_used(make_server, eos_id):
    """The stop set comes from the model's generation config, and pad is not mistaken for EOS."""
    server = make_server()
    assert server.eos_ids == {eos_id}
    assert server.pad_id not in server.eos_ids


# --- 4. update_weights ---------------------------------------------------------------------------------


def test_update_weights_takes_effect(make_server, model_dir):
    server = make_server()
    batch = prompts(4, 10, 7, seed=8)

    # The trainer's next weights: every tensor moved. Tied entries stay one tensor.
    new_model = load_model(model_dir)
    gen = torch.Generator().manual_seed(9)
    with torch.no_grad():
        for param in new_model.parameters():
            param.add_(torch.randn(param.shape, generator=gen) * 0.1)
    new_weights = {name: tensor.clone() for name, tensor in new_model.state_dict().items()}
    fresh = load_model(model_dir, new_weights)

    async def scenario():
        params = {**GREEDY, "logprobs": True}
        before = await gather(server, [(p, params) for p in batch])
        version_before = await server.get_weight_version()
        loaded = await server.update_weights(new_weights, global_steps=7)
        after = await gather(server, [(p, params) for p in batch])
        return before, version_before, loaded, await server.get_weight_version(), after

    before, version_before, loaded, version_after, after = asyncio.run(scenario())

    assert loaded == len(new_weights)
    assert (version_before, version_after) == (0, 1)
    for out in before:
        assert out.extra_fields == {"global_steps": None, "weight_version": 0}
    for out in after:
        assert out.extra_fields == {"global_steps": 7, "weight_version": 1}
    assert [o.token_ids for o in before] != [o.token_ids for o in after]
    for prompt, out in zip(batch, after, strict=True):
        assert out.token_ids == greedy_reference(fresh, prompt, RESPONSE_LENGTH, server.eos_ids)
        expected = teacher_forced_logprobs(fresh, prompt, out.token_ids)
        torch.testing.assert_close(torch.tensor(out.log_probs), expected, atol=ATOL, rtol=0)
    for name, tensor in server.model.state_dict().items():
        torch.testing.assert_close(tensor, new_weights[name], atol=0, rtol=0)


def test_update_weights_partial_and_repeated(make_server):
    server = make_server()
    norm = server.model.model.norm.weight

    async def scenario():
        first = await server.update_weights({"model.norm.weight": torch.full_like(norm, 2.0)}, global_steps=3)
        second = await server.update_weights({"model.norm.weight": torch.full_like(norm, 3.0, dtype=torch.float64)})
        out = await server.generate([1, 2, 3], dict(GREEDY), request_id="x")
        return first, second, out

    first, second, out = asyncio.run(scenario())
    assert (first, second) == (1, 1)
    assert server.weight_version == 2
    assert torch.equal(norm, torch.full_like(norm, 3.0))  # converted to the model's dtype
    assert out.extra_fields == {"global_steps": None, "weight_version": 2}


def test_update_weights_rejects_unknown_names(make_server):
    server = make_server()
    snapshot = {name: tensor.clone() for name, tensor in server.model.state_dict().items()}
    bad = {
        "model.norm.weight": torch.zeros_like(snapshot["model.norm.weight"]),
        "model.layers.9.mlp.up_proj.weight": torch.zeros(2, 2),
        "value_head.weight": torch.zeros(1),
    }

    async def scenario():
        with pytest.raises(KeyError) as info:
            await server.update_weights(bad, global_steps=5)
        return info

    info = asyncio.run(scenario())
    message = str(info.value)
    assert "model.layers.9.mlp.up_proj.weight" in message and "value_head.weight" in message
    assert "'model.norm.weight'" not in message
    # Rejected as a whole: nothing was copied, the version did not move.
    assert server.weight_version == 0 and server.global_steps is None
    for name, tensor in server.model.state_dict().items():
        assert torch.equal(tensor, snapshot[name]), name


def lora_actor(model_dir: Path):
    """A LoRA actor as verl builds one, with a moved base and a non-zero adapter, and its PEFT config."""
    from peft import LoraConfig, get_peft_model

    model = load_model(model_dir)
    gen = torch.Generator().manual_seed(11)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn(param.shape, generator=gen) * 0.05)
    config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"], task_type="CAUSAL_LM")
    actor = get_peft_model(model, config)
    with torch.no_grad():
        for name, param in actor.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=gen) * 0.5)
    return actor.eval(), actor.peft_config["default"]


def test_update_weights_serves_an_unmerged_lora_adapter(make_server, model_dir):
    """verl's LoRA sync, built by verl's own functions: base weights once, then the adapter."""
    from verl.utils.fsdp_utils import collect_lora_params, replace_lora_wrapper

    actor, config = lora_actor(model_dir)
    base = collect_lora_params(actor, layered_summon=False, base_sync_done=False)
    base = {replace_lora_wrapper(name, config): tensor for name, tensor in base.items()}
    adapter = dict(collect_lora_params(actor, layered_summon=False, base_sync_done=True))
    assert any(".base_layer." in name for name in base) and all(".lora_" in name for name in adapter)
    server = make_server()
    batch = prompts(4, 10, 7, seed=12)

    async def scenario():
        await server.update_weights(base, global_steps=0, peft_config=config.to_dict())
        incomplete = dict(list(adapter.items())[1:])
        with pytest.raises(KeyError, match="incomplete LoRA adapter"):
            await server.update_weights(incomplete, global_steps=1, peft_config=config.to_dict(), adapter_only=True)
        await server.update_weights(adapter, global_steps=1, peft_config=config.to_dict(), adapter_only=True)
        return await gather(server, [(p, {**GREEDY, "logprobs": True}) for p in batch])

    outputs = asyncio.run(scenario())
    for prompt, out in zip(batch, outputs, strict=True):
        assert out.token_ids == greedy_reference(actor, prompt, RESPONSE_LENGTH, server.eos_ids)
        expected = teacher_forced_logprobs(actor, prompt, out.token_ids)
        torch.testing.assert_close(torch.tensor(out.log_probs), expected, atol=ATOL, rtol=0)
    # the adapter matters: the base model alone decodes differently
    with actor.disable_adapter():
        without = [greedy_reference(actor, p, RESPONSE_LENGTH, server.eos_ids) for p in batch]
    assert without != [out.token_ids for out in outputs]


# --- 5. over-long prompts ------------------------------------------------------------------------------


def test_prompt_without_room_to_generate_is_rejected(make_server):
    server = make_server()
    limit = PROMPT_LENGTH + RESPONSE_LENGTH - 1
    too_long, longest = prompts(limit + 1, limit, seed=10)

    async def scenario():
        with pytest.raises(ValueError) as info:
            await server.generate(too_long, dict(GREEDY), request_id="too_long")
        # the server still serves, and the longest allowed prompt gets its one token
        return info, await server.generate(longest, {**GREEDY, "max_tokens": 5}, request_id="longest")

    info, out = asyncio.run(scenario())
    message = str(info.value)
    assert str(limit + 1) in message
    assert f"prompt_length={PROMPT_LENGTH}" in message and f"response_length={RESPONSE_LENGTH}" in message
    assert len(out.token_ids) == 1
    assert not server._pending


def test_long_prompt_gets_only_the_remaining_budget(make_server, model_dir):
    """A prompt past prompt_length is served, but prompt + response never exceeds the total."""
    server = make_server()
    model = load_model(model_dir)
    (long_prompt,) = prompts(PROMPT_LENGTH + 4, seed=11)
    out = asyncio.run(server.generate(long_prompt, dict(GREEDY), request_id="long"))
    assert len(long_prompt) + len(out.token_ids) <= PROMPT_LENGTH + RESPONSE_LENGTH
    assert out.token_ids == greedy_reference(model, long_prompt, RESPONSE_LENGTH - 4, server.eos_ids)


def test_cancelled_request_does_not_strand_its_batch(make_server):
    """Cancel a caller while its batch is generating: the other caller still gets its answer."""
    import threading

    server = make_server()
    first, second = prompts(5, 7)
    started, release = threading.Event(), threading.Event()
    generate_batch = server._generate_batch

    def slow_generate_batch(*args):
        started.set()
        release.wait(timeout=30)
        return generate_batch(*args)

    server._generate_batch = slow_generate_batch

    async def scenario():
        cancelled = asyncio.create_task(server.generate(first, dict(GREEDY), "a"))
        survivor = asyncio.create_task(server.generate(second, dict(GREEDY), "b"))
        await asyncio.to_thread(started.wait, 30)  # the batch holding both requests is running
        cancelled.cancel()
        release.set()
        return await asyncio.wait_for(survivor, timeout=30)

    output = asyncio.run(scenario())
    assert 1 <= len(output.token_ids) <= RESPONSE_LENGTH


# --- 6. prefix caching: the next turn of a conversation prefills only its new tokens ----------------------


def prefill_widths(server: HFRolloutServer) -> list[int]:
    """The number of tokens of every forward pass that reads more than one (the prefills)."""
    widths: list[int] = []

    def hook(_module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is not None and ids.shape[1] > 1:
            widths.append(ids.shape[1])

    server.model.register_forward_pre_hook(hook, with_kwargs=True)
    return widths


def next_turn(prompt: list[int], output, feedback: list[int]) -> list[int]:
    """The conversation so far, as an agent loop sends it: the prompt, the answer as generated, the feedback."""
    return prompt + output.token_ids + feedback


def test_a_continued_conversation_reuses_its_cache_and_matches_a_cache_free_pass(make_server, model_dir):
    server = make_server()
    widths = prefill_widths(server)
    model = load_model(model_dir)
    first = prompts(3, 9, 5, seed=11)
    feedback = [7, 8, 9]
    params = {**GREEDY, "max_tokens": 4, "logprobs": True}

    async def scenario():
        turn1 = await gather(server, [(p, params) for p in first])
        second = [next_turn(p, o, feedback) for p, o in zip(first, turn1, strict=True)]
        stranger = prompts(6, seed=12)[0]  # a new conversation in the same batch: it is prefilled whole
        turn2 = await gather(server, [(p, params) for p in [*second, stranger]])
        return second, stranger, turn2

    second, stranger, turn2 = asyncio.run(scenario())

    assert len(widths) == 2 and widths[0] == max(map(len, first))
    # every row keeps at least as many new tokens as the stranger's whole prompt; the rest came from the cache
    assert widths[1] == len(stranger) < max(map(len, second))
    for prompt, out in zip([*second, stranger], turn2, strict=True):
        assert out.token_ids == greedy_reference(model, prompt, 4, server.eos_ids)
        torch.testing.assert_close(torch.tensor(out.log_probs), teacher_forced_logprobs(model, prompt, out.token_ids),
                                   atol=ATOL, rtol=0)  # fmt: skip


def test_new_weights_empty_the_cache(make_server, model_dir):
    server = make_server()
    widths = prefill_widths(server)
    new_model = load_model(model_dir)
    with torch.no_grad():
        new_model.model.norm.weight.mul_(3.0)
    new_weights = {name: tensor.clone() for name, tensor in new_model.state_dict().items()}
    params = {**GREEDY, "max_tokens": 4, "logprobs": True}
    prompt = prompts(8, seed=13)[0]

    async def scenario():
        (turn1,) = await gather(server, [(prompt, params)])
        await server.update_weights(new_weights)
        follow = next_turn(prompt, turn1, [5])
        (turn2,) = await gather(server, [(follow, params)])
        return follow, turn2

    follow, turn2 = asyncio.run(scenario())
    assert widths == [len(prompt), len(follow)]  # the second turn was read whole, under the new weights
    expected = teacher_forced_logprobs(new_model, follow, turn2.token_ids)
    torch.testing.assert_close(torch.tensor(turn2.log_probs), expected, atol=ATOL, rtol=0)


def test_without_prefix_caching_every_turn_is_read_whole(make_server):
    server = make_server(prefix_caching=False)
    widths = prefill_widths(server)
    prompt = prompts(8, seed=14)[0]

    async def scenario():
        (turn1,) = await gather(server, [(prompt, {**GREEDY, "max_tokens": 4})])
        follow = next_turn(prompt, turn1, [5])
        await gather(server, [(follow, {**GREEDY, "max_tokens": 4})])
        return follow

    follow = asyncio.run(scenario())
    assert widths == [len(prompt), len(follow)]
    assert server.prefix_cache is None


def test_clear_kv_cache_empties_the_cache(make_server):
    server = make_server()
    widths = prefill_widths(server)
    prompt = prompts(8, seed=15)[0]

    async def scenario():
        (turn1,) = await gather(server, [(prompt, {**GREEDY, "max_tokens": 4})])
        await server.clear_kv_cache()  # verl's call, e.g. before a validation pass
        follow = next_turn(prompt, turn1, [5])
        await gather(server, [(follow, {**GREEDY, "max_tokens": 4})])
        return follow

    follow = asyncio.run(scenario())
    assert widths == [len(prompt), len(follow)]
