"""Remote generation from any OpenAI-compatible server with the standard library: a request per completion, retried."""

from __future__ import annotations

import json
import logging
import os
import random
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor, as_completed

from tqdm.auto import tqdm

from rg_verl.evaluation.backends.base import Backend, Completion, Messages, Sampling

logger = logging.getLogger(__name__)

RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
MAX_BACKOFF_S = 60.0
MODELS_TIMEOUT_S = 10.0


class RequestError(RuntimeError):
    """A request failed for good: a non-retryable answer, or retries used up."""


def request_headers(config) -> dict[str, str]:
    """The headers of every request: JSON, and the API key (``api_key_env``, else OPENAI_API_KEY) where one is set."""
    headers = {"Content-Type": "application/json"}
    key = os.environ.get(config.api_key_env or "OPENAI_API_KEY")
    if key:
        headers["Authorization"] = f"Bearer {key}"
    return headers


def served_max_model_len(config) -> int | None:
    """The ``max_model_len`` that ``GET {base_url}/models`` reports for the served model; None (logged) without one."""
    url, name = config.base_url.rstrip("/") + "/models", config.served_model_name or config.model_path
    request = urllib.request.Request(url, headers=request_headers(config), method="GET")
    try:
        with urllib.request.urlopen(request, timeout=min(config.request_timeout, MODELS_TIMEOUT_S)) as response:
            listing = json.loads(response.read())
    except (urllib.error.URLError, TimeoutError, ConnectionError, ValueError) as error:
        logger.warning("%s: cannot list the served models (%s); prompt lengths are not checked against the context",
                       url, error)  # fmt: skip
        return None
    entries = listing.get("data") if isinstance(listing, dict) else None
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict) and entry.get("id") == name:
            length = entry.get("max_model_len")
            if isinstance(length, int) and not isinstance(length, bool) and length > 0:
                return length
    logger.info("%s reports no max_model_len for %r; prompt lengths are not checked against its context", url, name)
    return None


class OpenAIBackend(Backend):
    """Chat completions over HTTP, one completion per request, so each has its own token count."""

    def __init__(self, config) -> None:
        self.url = config.base_url.rstrip("/") + "/chat/completions"
        self.model = config.served_model_name or config.model_path
        self.headers = request_headers(config)
        self.concurrency, self.max_retries = config.concurrency, config.max_retries
        self.retry_backoff, self.timeout = config.retry_backoff, config.request_timeout
        # vLLM's server passes these to the chat template (e.g. enable_thinking); sent only when set
        self.chat_template_kwargs = dict(getattr(config, "chat_template_kwargs", None) or {})

    @classmethod
    def default_save_every(cls, config) -> int:
        return 4 * config.concurrency

    def _post(self, body: dict) -> bytes:
        request = urllib.request.Request(self.url, data=json.dumps(body).encode(), headers=self.headers, method="POST")
        with urllib.request.urlopen(request, timeout=self.timeout) as response:
            return response.read()

    def complete(self, messages: Messages, sampling: Sampling) -> Completion:
        """One completion; connection errors and :data:`RETRY_STATUS` answers retried with jittered backoff."""
        body = {"model": self.model, "messages": messages, "max_tokens": sampling.max_tokens,
                "temperature": sampling.temperature, "top_p": sampling.top_p, "n": 1}  # fmt: skip
        if self.chat_template_kwargs:
            body["chat_template_kwargs"] = self.chat_template_kwargs
        problem = None
        for attempt in range(self.max_retries + 1):
            if attempt:
                wait = min(self.retry_backoff * 2 ** (attempt - 1), MAX_BACKOFF_S) * (0.5 + random.random() / 2)
                logger.warning("request failed (%s); retry %d/%d in %.2fs", problem, attempt, self.max_retries, wait)
                time.sleep(wait)
            try:
                return self._completion(self._post(body))
            except urllib.error.HTTPError as error:
                detail = error.read()[:500].decode(errors="replace")
                if error.code not in RETRY_STATUS:
                    raise RequestError(f"{self.url} answered {error.code}: {detail}") from None
                problem = f"HTTP {error.code}: {detail}"
            except (urllib.error.URLError, TimeoutError, ConnectionError) as error:
                problem = repr(error)
        raise RequestError(f"{self.url}: giving up after {self.max_retries + 1} attempts; last error: {problem}")

    def _completion(self, answer: bytes) -> Completion:
        """The completion in a chat-completions answer (JSON)."""
        try:
            data = json.loads(answer)
            text = data["choices"][0]["message"]["content"] or ""
            tokens = (data.get("usage") or {}).get("completion_tokens")
            return Completion(text=text, num_tokens=int(tokens) if tokens is not None else None)
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as error:
            raise RequestError(f"{self.url} sent a response without choices[0].message.content: {error!r}") from None

    def generate(self, prompts: list[Messages], n: int, sampling: Sampling) -> list[list[Completion]]:
        jobs = [messages for messages in prompts for _ in range(n)]
        with ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="openai") as pool:
            futures = [pool.submit(self.complete, messages, sampling) for messages in jobs]
            try:
                with tqdm(total=len(futures), desc="requests", leave=False, disable=len(futures) < 2) as bar:
                    for future in as_completed(futures):
                        future.result()  # raises the first failure
                        bar.update()
            except BaseException:
                for future in futures:
                    future.cancel()
                raise
        done = [future.result() for future in futures]
        return [done[i * n : (i + 1) * n] for i in range(len(prompts))]
