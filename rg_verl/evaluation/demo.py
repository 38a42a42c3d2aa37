"""``rg-verl demo <model_dir>``: ask a model questions, and see its reasoning, its answer and its score.

:func:`run_demo` takes any ``generate(messages) -> text``; model output is only printed, control characters escaped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TextIO

from rg_verl.common.names import THINK_CLOSE, THINK_OPEN, Messages, chat_messages, system_prompt
from rg_verl.evaluation.backends.base import Sampling
from rg_verl.evaluation.backends.hf import HFBackend
from rg_verl.evaluation.items import eval_split
from rg_verl.reward import compute_score, extract_answer

Generate = Callable[[Messages], str]

# items per dataset the demo can draw; nothing is generated ahead
ITEMS_PER_DATASET = 100_000
DEFAULT_SEED = 42  # the evaluation configs' default item seed
HELP = """\
commands:
  <question>                 ask the model anything
  :item <dataset> [index]    an evaluation item of a reasoning-gym dataset (default: the next one), scored
  :datasets                  list the reasoning-gym datasets
  :help                      this help
  :quit                      stop (end of input stops too)"""


def _printable(text: str) -> str:
    """``text`` with control characters other than newline and tab escaped, so output cannot drive a terminal."""
    return "".join(c if c in "\n\t" or c.isprintable() else repr(c)[1:-1] for c in text)


def split_response(text: str) -> tuple[str | None, str | None]:
    """The think part (inside ``<think>…</think>``, or before a lone ``</think>``) and the answer of a response."""

    think = None
    close = text.find(THINK_CLOSE)
    if close >= 0:
        open_ = text.rfind(THINK_OPEN, 0, close)
        think = text[open_ + len(THINK_OPEN) if open_ >= 0 else 0 : close].strip()
    return think, extract_answer(text)


class Demo:
    """The state of one session: the system prompt, the item seed, the datasets drawn from and their next items."""

    def __init__(
        self,
        out: TextIO,
        generate: Generate,
        prompt: str | None = "default",
        seed: int = DEFAULT_SEED,
        response_prefix: str = "",
    ):
        self.out = out
        self.generate = generate
        self.response_prefix = response_prefix  # what the chat template opens the turn with (a <think>)
        self.system_prompt = system_prompt(prompt)
        self.seed = seed
        self.datasets: dict = {}
        self.next_index: dict[str, int] = {}

    def say(self, text: str = "") -> None:
        print(text, file=self.out, flush=True)

    def dataset(self, name: str):
        """The evaluation split of one reasoning-gym dataset, as ``rg_verl.evaluation.items`` builds it."""
        if name not in self.datasets:

            self.datasets[name] = eval_split({name: {"weight": 1}}, self.seed, ITEMS_PER_DATASET)
        return self.datasets[name]

    def ask(self, question: str, label: str, item: dict | None = None) -> None:
        """Generates a response to ``question`` and shows it; scores it when it answers a dataset ``item``."""
        messages = chat_messages(self.system_prompt, question)
        self.say(f"=== {label}\n{_printable(question)}")
        try:
            response = self.generate(messages)
        except Exception as error:  # a failed generation ends this question, not the session
            self.say(f"generation failed: {error!r}\n")
            return
        think, answer = split_response(self.response_prefix + response)
        if think is not None:
            self.say(f"--- think\n{_printable(think)}")
        shown = "(no <answer>...</answer> in the response)" if answer is None else _printable(answer)
        self.say(f"--- answer\n{shown}")
        if think is None and answer is None:
            self.say(f"--- response\n{_printable(response) if response.strip() else '(blank)'}")
        if item is not None:

            result = compute_score(
                item["data_source"], response, item["reward_model"]["ground_truth"], extra_info=item["extra_info"],
                response_prefix=self.response_prefix,
            )  # fmt: skip
            self.say(f"--- reference\n{_printable(item['reward_model']['ground_truth'])}")
            self.say(f"score: {result['score']:.2f} (strict format: {'yes' if result['format_ok'] else 'no'})")
        self.say()

    def item(self, args: list[str]) -> None:
        """``:item <dataset> [index]``."""
        if not 1 <= len(args) <= 2 or (len(args) == 2 and not args[1].isdigit()):
            self.say("usage: :item <dataset> [index]   (index: a whole number)\n")
            return
        name = args[0]
        try:
            dataset = self.dataset(name)
        except Exception as error:  # unknown name or a dataset reasoning-gym cannot build
            self.say(f"cannot use dataset {name!r}: {error}\n(:datasets lists the names)\n")
            return
        index = int(args[1]) if len(args) == 2 else self.next_index.get(name, 0)
        try:
            item = dataset[index]
        except IndexError:
            self.say(f"index {index} is out of range: 0 to {len(dataset) - 1}\n")
            return
        except Exception as error:
            self.say(f"reasoning-gym could not generate {name} item {index}: {error!r}\n")
            return
        self.next_index[name] = index + 1
        question = item["raw_prompt"][-1]["content"]
        self.ask(question, f"{name} #{index} (evaluation split, seed {self.seed})", item)

    def handle(self, line: str) -> bool:
        """Acts on one input line. Returns False when the session should end."""
        line = line.strip()
        if not line:
            return True
        if not line.startswith(":"):
            self.ask(line, "question")
            return True
        command, *args = line[1:].split() or [""]
        if command in ("quit", "q", "exit"):
            return False
        if command == "help":
            self.say(HELP + "\n")
        elif command == "datasets":
            from reasoning_gym.factory import DATASETS

            self.say(" ".join(sorted(DATASETS)) + "\n")
        elif command == "item":
            self.item(args)
        else:
            self.say(f"unknown command {line.split()[0]!r}; :help lists the commands\n")
        return True


def run_demo(
    lines: Iterable[str],
    out: TextIO,
    generate: Generate,
    system_prompt: str | None = "default",
    seed: int = DEFAULT_SEED,
    response_prefix: str = "",
) -> int:
    """Answers every line of ``lines`` until ``:quit`` or their end, writing to ``out``. Returns 0."""
    demo = Demo(out, generate, prompt=system_prompt, seed=seed, response_prefix=response_prefix)
    for line in lines:
        if not demo.handle(line):
            break
    return 0


def read_lines(stream: TextIO, prompt: TextIO | None = None) -> Iterator[str]:
    """The lines of ``stream``, one at a time; ``prompt`` (a terminal's stderr) gets a ``> `` before each."""
    while True:
        if prompt is not None:
            prompt.write("> ")
            prompt.flush()
        line = stream.readline()
        if not line:
            if prompt is not None:
                prompt.write("\n")
            return
        yield line


def hf_generate(
    model_dir: str, max_tokens: int, temperature: float, device: str, chat_template_kwargs: dict | None = None
) -> Generate:
    """A ``generate`` that runs the evaluation's ``hf`` backend on ``model_dir``: one prompt, one completion."""
    from types import SimpleNamespace

    config = SimpleNamespace(model_path=model_dir, batch_size=1, device=device, dtype="auto", engine_kwargs={},
                             chat_template_kwargs=chat_template_kwargs or {})  # fmt: skip
    backend = HFBackend(config)
    sampling = Sampling(max_tokens=max_tokens, temperature=temperature, top_p=1.0)
    return lambda messages: backend.generate([messages], 1, sampling)[0][0].text
