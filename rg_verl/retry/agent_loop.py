"""The "wrong, try again" rollout: a verl agent loop, registered as ``rg_verl_retry``."""

from __future__ import annotations

import logging
from typing import Any
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register
from verl.utils.profiler import simple_timer

from rg_verl.common.schema import plain
from rg_verl.retry.episode import AGENT_LOOP, RetryConfig, episode_record
from rg_verl.reward.episode import EPISODE_KEY
from rg_verl.reward.score import reward_config, score_with

__all__ = ["RetryAgentLoop"]

logger = logging.getLogger(__name__)


class _Conversation:
    """The episode so far: the runtime token ids (prompt, then every turn), the response mask and log-probs."""

    def __init__(self, prompt_ids: list[int]):
        self.token_ids = list(prompt_ids)
        self.mask: list[int] = []
        self.logprobs: list[float] = []  # empty when the server returns none

    def update(self, merge_result: Any, mask: list[int], logprobs: list[float] | None) -> None:
        self.token_ids, self.mask = list(merge_result.token_ids), list(mask)
        if logprobs is not None:
            self.logprobs = list(logprobs)

    def split(self, response_length: int) -> tuple[list[int], list[int], list[int]]:
        """(prompt ids, response ids, response mask), the response capped at ``response_length``."""
        prompt = self.token_ids[: len(self.token_ids) - len(self.mask)]
        response = self.token_ids[len(prompt) :]
        return prompt, response[:response_length], self.mask[:response_length]


@register(AGENT_LOOP)
class RetryAgentLoop(AgentLoopBase):
    """Up to ``retry.max_turns`` answers to one prompt, with ``retry.feedback`` after each wrong one."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.settings = RetryConfig.from_section(self.config.get("retry"))
        self.reward = reward_config(**(plain(self.config.reward.custom_reward_function.get("reward_kwargs")) or {}))
        self.response_length = self.rollout_config.response_length

    async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
        messages = list(kwargs["raw_prompt"])
        talk = _Conversation(await self.ct_build_initial_tokens(messages))
        accuracies: list[float] = []
        metrics: dict[str, Any] = {}
        extra_fields: dict[str, Any] = {}
        text = ""
        while True:
            budget = self.response_length - len(talk.mask)
            budget = min(budget, int(sampling_params.get("max_tokens", budget)))  # a caller's cap on one try
            with simple_timer("generate_sequences", metrics):
                output = await self.server_manager.generate(
                    request_id=uuid4().hex, prompt_ids=talk.token_ids,
                    sampling_params={**sampling_params, "max_tokens": budget},
                )  # fmt: skip
            extra_fields = extra_fields or dict(output.extra_fields or {})
            talk.update(*await self.ct_merge_assistant_token(
                talk.token_ids, output.token_ids, talk.mask, talk.logprobs if output.log_probs else None,
                assistant_logprobs=output.log_probs or None,
            ))  # fmt: skip
            text = self.tokenizer.decode(output.token_ids, skip_special_tokens=True)
            accuracies.append(await self.loop.run_in_executor(None, self._judge, text, kwargs))
            if accuracies[-1] >= 1.0 or len(accuracies) == self.settings.max_turns:
                break
            if not await self._add_feedback(messages, text, talk):
                break  # no budget left for another try
        prompt_ids, response_ids, response_mask = talk.split(self.response_length)
        extra_fields[EPISODE_KEY] = episode_record(accuracies, text, self.settings)
        extra_fields.update(turn_scores=accuracies, tool_rewards=[])
        return AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=response_ids,
            response_mask=response_mask,
            response_logprobs=talk.logprobs[: self.response_length] if talk.logprobs else None,
            num_turns=2 * len(accuracies),  # the prompt, each answer and each feedback turn
            metrics={"num_preempted": -1, **metrics},
            extra_fields=extra_fields,
        )

    def _judge(self, text: str, item: dict[str, Any]) -> float:
        """1.0 when ``text`` answers the item correctly under the run's reward settings, else 0.0."""
        ground_truth = (item.get("reward_model") or {}).get("ground_truth")
        return score_with(self.reward, item["data_source"], text, ground_truth, item.get("extra_info"))["accuracy"]

    async def _add_feedback(self, messages: list[dict], answer: str, talk: _Conversation) -> bool:
        """Append the answer and the feedback turn; False (nothing appended) when no budget is left for a try."""
        messages.append({"role": "assistant", "content": answer})
        before = list(messages)
        messages.append({"role": "user", "content": self.settings.feedback})
        merged, mask, logprobs = await self.ct_merge_context_msg(before, messages, talk.token_ids, talk.mask,
                                                                 talk.logprobs or None)  # fmt: skip
        if len(mask) >= self.response_length:
            return False
        talk.update(merged, mask, logprobs)
        return True
