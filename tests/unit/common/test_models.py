"""rg_verl.common.models: a model path resolves to a folder, the local Hugging Face cache or the hub, or is refused
before anything starts; a model's context length comes from its config."""

import json
import logging
import socket

import httpx
import pytest
from huggingface_hub import HfApi, constants
from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError

from rg_verl.common.models import ContextLength, check_model_path, context_length, model_folder
from rg_verl.common.schema import ConfigError
from tests.hub_cache import write_cached_model

TYPO = "Qwen/Qwen2.5-3B-Instrct"


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    """An empty Hugging Face cache, where huggingface_hub reads one (its constants were read at import)."""
    cache = tmp_path / "hf" / "hub"
    cache.mkdir(parents=True)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    return cache


@pytest.fixture
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)


@pytest.fixture
def online(monkeypatch):
    """An online machine whose hub answers with ``answer`` (a value, or an exception to raise); records the calls."""
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    calls = []

    def answer_with(answer):
        def model_info(self, repo_id, **kwargs):
            calls.append((repo_id, kwargs))
            if isinstance(answer, BaseException):
                raise answer
            return answer

        monkeypatch.setattr(HfApi, "model_info", model_info)
        return calls

    return answer_with


def http_error(cls, status: int):
    request = httpx.Request("GET", f"https://huggingface.co/api/models/{TYPO}")
    return cls(f"{status} Client Error", response=httpx.Response(status, request=request))


def test_a_local_folder_passes(tmp_path, empty_cache, offline):
    check_model_path("model.path", str(tmp_path))
    assert model_folder(str(tmp_path)) == str(tmp_path)


def test_a_cached_hub_id_passes_offline(empty_cache, offline):
    snapshot = write_cached_model(empty_cache, "org/name", {"model_type": "qwen2"})
    check_model_path("model.path", "org/name")
    assert model_folder("org/name") == str(snapshot)


def test_a_mistyped_hub_id_offline_with_an_empty_cache_is_refused_at_once(empty_cache, offline, monkeypatch):
    connects = []
    monkeypatch.setattr(socket.socket, "connect", lambda self, address: connects.append(address))
    monkeypatch.setattr(socket, "getaddrinfo", lambda host, *_, **__: connects.append(host) or [])
    with pytest.raises(ConfigError) as error:
        check_model_path("actor_rollout_ref.model.path", TYPO)
    assert connects == []  # nothing waits on a network
    assert str(error.value) == (
        f"actor_rollout_ref.model.path: {TYPO!r} is no local folder, this machine is offline (HF_HUB_OFFLINE), and "
        f"the Hugging Face cache at {empty_cache} does not hold it; fix the id, or download it with `hf download "
        f"{TYPO}` on a machine that is online and set HF_HOME (or HF_HUB_CACHE) to the cache that holds it, or give "
        "a local folder"
    )
    assert "\n" not in str(error.value)


def test_the_session_cache_holds_the_shipped_models(offline):
    """tests/conftest.py's cache: the shipped configs' hub ids resolve offline."""
    check_model_path("model.path", "Qwen/Qwen2.5-3B-Instruct")
    with pytest.raises(ConfigError, match="does not hold it"):
        check_model_path("model.path", TYPO)


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("", "is not a model path"),
        (None, "is not a model path"),
        ("/abs/org/name", "is neither a local model directory nor a hub id"),  # absolute: a local path, missing
        ("no-slash", "is neither"),
        ("a/b/c", "is neither"),
    ],
)
def test_what_is_neither_a_folder_nor_a_hub_id_is_refused(path, message, empty_cache, offline):
    with pytest.raises(ConfigError, match=rf"^model\.path: .*{message}"):
        check_model_path("model.path", path)


def test_a_relative_org_name_that_is_a_file_here_is_a_local_path(tmp_path, monkeypatch, empty_cache, offline):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "org").mkdir()
    (tmp_path / "org" / "name").write_text("")
    with pytest.raises(ConfigError, match="neither"):
        check_model_path("model.path", "org/name")


def test_online_a_model_the_hub_has_passes_and_is_asked_for_with_a_short_timeout(empty_cache, online):
    calls = online(object())
    check_model_path("model.path", "Qwen/Qwen2.5-3B-Instruct-not-cached")
    assert calls == [("Qwen/Qwen2.5-3B-Instruct-not-cached", {"timeout": 10.0})]


def test_online_a_model_the_hub_lacks_is_refused(empty_cache, online):
    online(http_error(RepositoryNotFoundError, 404))
    with pytest.raises(ConfigError) as error:
        check_model_path("model_path", TYPO)
    assert str(error.value) == (
        f"model_path: {TYPO!r} is no local folder, is not in the Hugging Face cache at {empty_cache}, and the hub has "
        "no model of that id; fix the id (a private model needs a token: hf auth login, or HF_TOKEN), or give a "
        "local folder"
    )


@pytest.mark.parametrize(("error", "said"), [(http_error(GatedRepoError, 403), "is gated"),
                                             (http_error(HfHubHTTPError, 401), "answered 401"),
                                             (http_error(HfHubHTTPError, 403), "answered 403")])  # fmt: skip
def test_online_a_gated_or_forbidden_model_passes_saying_it_needs_a_token(error, said, empty_cache, online, caplog):
    online(error)
    with caplog.at_level(logging.WARNING, logger="rg_verl.common.models"):
        check_model_path("model.path", "meta-llama/Llama-3.2-3B-Instruct-x")
    assert f"meta-llama/Llama-3.2-3B-Instruct-x {said} on the Hugging Face hub: the run needs a token" in caplog.text


@pytest.mark.parametrize(
    ("error", "problem"),
    [(httpx.ConnectError("no route"), "ConnectError"), (httpx.ConnectTimeout("slow"), "ConnectTimeout"),
     (http_error(HfHubHTTPError, 503), "HTTP 503"), (OSError("down"), "OSError")],
)  # fmt: skip
def test_online_a_hub_that_cannot_be_reached_is_named_with_the_cache(error, problem, empty_cache, online):
    online(error)
    with pytest.raises(ConfigError) as raised:
        check_model_path("model.path", TYPO)
    assert str(raised.value) == (
        f"model.path: {TYPO!r} is no local folder and is not in the Hugging Face cache at {empty_cache}, and the hub "
        f"could not be reached to find it ({problem}); download it with `hf download {TYPO}` on a machine that is "
        "online and set HF_HOME (or HF_HUB_CACHE) to the cache that holds it, or give a local folder"
    )


# ---- context lengths


def write_config(folder, **fields):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen2", **fields}))
    return folder


@pytest.mark.parametrize(
    ("fields", "tokens", "source"),
    [
        ({"max_position_embeddings": 4096}, 4096, "max_position_embeddings 4096"),
        ({"max_position_embeddings": 32768,
          "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}},
         131072, "max_position_embeddings 32768 × rope yarn factor 4"),  # Qwen2.5's long-context setting
        ({"max_position_embeddings": 32768, "rope_scaling": {"type": "yarn", "factor": 4.0}},
         131072, "max_position_embeddings 32768 × rope yarn factor 4"),
        ({"max_position_embeddings": 163840,  # DeepSeek-V3's: max_position_embeddings is already stretched
          "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096}},
         163840, "original_max_position_embeddings 4096 × rope yarn factor 40"),
        ({"max_position_embeddings": 2048, "rope_scaling": {"rope_type": "linear", "factor": 2.0}},
         4096, "max_position_embeddings 2048 × rope linear factor 2"),
        ({"max_position_embeddings": 2048, "rope_scaling": {"rope_type": "dynamic", "factor": 3.0}},
         6144, "max_position_embeddings 2048 × rope dynamic factor 3"),
    ],
)  # fmt: skip
def test_the_context_length_is_read_from_the_config_with_its_rope_factor(tmp_path, fields, tokens, source):
    folder = write_config(tmp_path / "model", **fields)
    positions = fields["max_position_embeddings"]
    assert context_length(str(folder)) == ContextLength(tokens, f"{source} in {folder / 'config.json'}", positions)


def test_a_llama3_rope_config_already_gives_its_stretched_length(offline):
    """Llama 3.2's factor of 32 is not applied again: its max_position_embeddings is the stretched length."""
    found = context_length("meta-llama/Llama-3.2-3B-Instruct")  # tests/hub_cache.py's copy of its config
    assert found.tokens == 131072 and found.source.startswith("max_position_embeddings 131072 in ")


def test_no_context_length_where_no_config_can_be_read(tmp_path, empty_cache, offline):
    assert context_length(TYPO) is None  # not cached
    assert context_length(str(tmp_path / "missing")) is None
    assert context_length(str(tmp_path)) is None  # a folder without config.json
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "no-such-model", "max_position_embeddings": 8}))
    assert context_length(str(tmp_path)) is None
