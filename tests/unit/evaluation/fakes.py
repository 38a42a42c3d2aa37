"""What the evaluation tests share: a small config, a scripted backend and a fake OpenAI-compatible server."""

from __future__ import annotations

import json
import random
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from rg_verl.evaluation import Completion
from rg_verl.evaluation.backends import Backend
from rg_verl.evaluation.items import eval_datasets

# seven items: three chain_sum and two leg_counting (arithmetic), two spell_backward (algorithmic)
NUM_ITEMS = 7


def small_config(**overrides) -> dict:
    """A parsed-YAML evaluation config: :data:`NUM_ITEMS` items, two completions each; ``overrides`` replace fields."""
    config = {
        "model_path": "Qwen/Qwen2.5-0.5B-Instruct",
        "backend": "hf",
        "max_tokens": 4,
        "temperature": 0.7,
        "top_p": 1.0,
        "eval_repeats": 2,
        "developer_prompt": "default",
        "categories": [
            {
                "category": "arithmetic",
                "datasets": [
                    {"dataset": "chain_sum", "size": 3, "seed": 1, "params": {"min_terms": 2, "max_terms": 2}},
                    {"dataset": "leg_counting", "size": 2, "seed": 1},
                ],
            },
            {"category": "algorithmic", "datasets": [{"dataset": "spell_backward", "size": 2, "seed": 1}]},
        ],
    }
    config.update(overrides)
    return config


def answers_by_question(config) -> dict[str, str]:
    """question -> reference answer, for every item of the config."""
    answers = {}
    for dataset in eval_datasets(config):
        for i in range(len(dataset)):
            item = dataset[i]
            answers[item["extra_info"]["entry"]["question"]] = item["reward_model"]["ground_truth"]
    return answers


class ScriptedBackend(Backend):
    """Answers each prompt with texts made from its reference answer; counts generate calls."""

    def __init__(self, answers: dict[str, str], script=None, fail_after_calls: int | None = None):
        self.answers = answers
        self.script = script or (lambda answer, j: f"<think>easy</think><answer>{answer}</answer>")
        self.fail_after_calls = fail_after_calls
        self.calls: list[int] = []

    def generate(self, prompts, n, sampling):
        if self.fail_after_calls is not None and len(self.calls) >= self.fail_after_calls:
            raise KeyboardInterrupt("simulated interruption")
        self.calls.append(len(prompts))
        outputs = []
        for messages in prompts:
            answer = self.answers[messages[-1]["content"]]
            outputs.append([Completion(self.script(answer, j), num_tokens=10 + j) for j in range(n)])
        return outputs


class FakeOpenAI:
    """An OpenAI-compatible chat-completions server on 127.0.0.1, for tests only.

    ``respond(messages, body) -> text``; the first ``fail_first`` requests get a 500. It records every
    request body and header and the most requests it saw in flight at once. With ``hold_until_in_flight``
    the first requests are held (up to ``HOLD_DEADLINE_S``) until that many are in flight together, so a
    client that overlaps its requests is seen doing so whatever the timing. A flaky server (``errors``,
    ``drops``: shares of the requests, drawn with ``seed``) answers some requests with a 503 and closes the
    connection on others without answering; ``delay`` seconds pass before each answer. ``GET /v1/models`` lists
    ``models`` (entries such as vLLM's ``{"id": name, "max_model_len": 4096}``), or answers 404 where it is None.
    """

    HOLD_DEADLINE_S = 30.0

    def __init__(self, respond, fail_first: int = 0, hold_until_in_flight: int = 0, errors: float = 0.0,
                 drops: float = 0.0, delay: float = 0.0, seed: int = 0, models: list[dict] | None = None):  # fmt: skip
        self.respond, self.fail_first, self.hold, self.models = respond, fail_first, hold_until_in_flight, models
        self.errors, self.drops, self.delay, self.random = errors, drops, delay, random.Random(seed)
        self.failed = {"errors": 0, "drops": 0}
        self.lock = threading.Condition()
        self.requests: list[dict] = []
        self.authorization: list[str | None] = []
        self.in_flight = self.max_in_flight = 0
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def _arrive(self, body: dict, authorization: str | None) -> int:
        """Records a request and holds it as the class docstring says; its number (from 1)."""
        with self.lock:
            self.requests.append(body)
            self.authorization.append(authorization)
            number = len(self.requests)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            self.lock.notify_all()
            deadline = time.monotonic() + self.HOLD_DEADLINE_S
            while self.max_in_flight < self.hold and time.monotonic() < deadline:
                self.lock.wait(timeout=deadline - time.monotonic())
            return number

    def _fault(self) -> str | None:
        """The failure this request meets, if any: ``errors`` (a 503) or ``drops`` (no answer)."""
        with self.lock:
            draw = self.random.random()
            fault = "errors" if draw < self.errors else "drops" if draw < self.errors + self.drops else None
            if fault:
                self.failed[fault] += 1
            return fault

    def _leave(self) -> None:
        with self.lock:
            self.in_flight -= 1

    def _answer(self, path: str, number: int, body: dict) -> tuple[int, dict]:
        if path != "/v1/chat/completions":
            return 404, {"error": "not found"}
        if number <= self.fail_first:
            return 500, {"error": "overloaded"}
        text = self.respond(body["messages"], body)
        choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
        usage = {"completion_tokens": len(text.split()), "prompt_tokens": 1}
        return 200, {"object": "chat.completion", "choices": [choice], "usage": usage}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                listed = self.path == "/v1/models" and fake.models is not None
                self._send(200 if listed else 404, {"object": "list", "data": fake.models} if listed else {})

            def _send(self, code: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                number = fake._arrive(body, self.headers.get("Authorization"))
                try:
                    time.sleep(fake.delay)
                    fault = fake._fault()
                    if fault == "drops":  # the connection closes without an answer
                        self.close_connection = True
                        return
                    code, payload = (503, {"error": "flaky"}) if fault else fake._answer(self.path, number, body)
                finally:
                    fake._leave()
                self._send(code, payload)

        return Handler

    def __enter__(self):
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
