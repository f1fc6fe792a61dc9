"""One agent episode as the recording endpoint sees it: the chat requests of one session, answered from the run's
generation client and kept as one token sequence (:class:`~grpo_rollout.rollouts.conversation.Conversation`).

A request continues the episode when its messages are the previous request's messages, then the answer the endpoint
gave, then new messages (tool results, a user turn): the new messages are inserted as template tokens (mask 0) and
the next turn is sampled from the whole sequence, so the trainer trains on exactly the sampled tokens. The budget is
the built-in multi-turn rollouts' own (:mod:`grpo_rollout.rollouts.episodes`): ``max_completion_length`` tokens,
sampled and inserted together.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Optional

from ..conversation import Conversation, eos_ids_of
from ..episodes import Sampling, sample_turn
from ..tool_parsing import CALL_OPEN, parse_tool_calls

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from ...generation.base import GenerationClient

#: The model name an agent sends (``model=`` of the OpenAI client); any other is refused.
AGENT_MODEL = "policy"
#: A chat request's body (the OpenAI ``chat.completions`` JSON) and a message in it.
Body = Dict[str, Any]
Message = Dict[str, Any]


class AgentRequestError(ValueError):
    """A request the endpoint cannot answer and record; ``status`` is the HTTP status it answers with."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


def _text(content: Any) -> str:
    if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}]
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def _call_key(call: Any) -> tuple:
    fn = call.get("function") or {}
    try:
        arguments = json.loads(fn.get("arguments") or "{}")
    except (TypeError, ValueError):
        arguments = fn.get("arguments")
    return fn.get("name"), json.dumps(arguments, sort_keys=True)


def same_message(a: Message, b: Message) -> bool:
    """Whether two chat messages say the same (role, text, tool calls and the tool call answered); the fields an
    OpenAI client adds when it sends an answer back (``refusal: null``, call ids) do not count."""
    return (a.get("role") == b.get("role") and _text(a.get("content")).strip() == _text(b.get("content")).strip()
            and [_call_key(c) for c in a.get("tool_calls") or []] == [_call_key(c) for c in b.get("tool_calls") or []])


@dataclass
class AgentSession:
    """One episode: its conversation, what the agent has been told so far and the settings its turns sample with.

    Attributes:
        sample: the episode's index in the step (``prompt * n + j``): its requests' seeds are
            ``sampling.request_seed(sample, turn)``.
        budget: ``max_completion_length``: sampled plus inserted tokens of the whole episode.
        conversation: ``None`` until the first request.
        seen: the messages of the last request and the answer given to it.
        calls: chat requests answered.
        ended: why the episode can take no more requests (the budget), or ``None``.
    """

    client: GenerationClient
    tokenizer: PreTrainedTokenizerBase
    sampling: Sampling
    sample: int
    budget: int
    conversation: Optional[Conversation] = None
    seen: List[Message] = field(default_factory=list)
    tools: Optional[List[Any]] = None
    calls: int = 0
    ended: Optional[str] = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def _check(self, body: Body) -> List[Message]:
        if body.get("model") != AGENT_MODEL:
            raise AgentRequestError(f"model {body.get('model')!r} is not this run's policy: send model={AGENT_MODEL!r} "
                                    "(the `model` argument your agent function was called with)", 404)
        if (body.get("n") or 1) != 1:
            raise AgentRequestError(f"n={body.get('n')}: one completion per request (an episode is one sample; the "
                                    "run samples sampling.num_generations episodes per prompt)")
        if body.get("stream"):
            raise AgentRequestError("stream=true is not supported yet: call without streaming")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            raise AgentRequestError("`messages` must be a non-empty list of chat messages")
        if self.ended:
            raise AgentRequestError(self.ended)
        return messages

    def _continue(self, messages: List[Message], tools: Optional[List[Any]]) -> None:
        """Start the conversation (first request) or insert the messages that are new since the last answer."""
        conv = self.conversation
        if conv is None:
            self.tools = tools
            kwargs = {"tools": tools} if tools else {}
            self.conversation = Conversation.start(self.tokenizer, messages, eos_ids_of(self.client, self.tokenizer),
                                                   self.client.max_prompt_length, **kwargs)
            return
        prefix = len(self.seen)
        edited = next((i for i, (a, b) in enumerate(zip(self.seen, messages)) if not same_message(a, b)), None)
        if edited is not None or len(messages) <= prefix or tools != self.tools:
            where = (f"message {edited} differs from what was sent before" if edited is not None else
                     "the tools changed" if tools != self.tools else "no new message after the last answer")
            raise AgentRequestError("a request must continue the episode: the previous request's messages, the answer "
                                    f"it got, then new messages ({where}); context edits are not supported yet")
        inserted = conv.insertion_ids(messages[prefix:])
        used = len(conv.completion_ids)
        if used + len(inserted) >= self.budget:
            conv.stop_reason, conv.truncated, conv.end_reason = "length", True, "budget_reply"
            conv.end_detail = (f"the messages after turn {conv.turns} need {len(inserted)} tokens but only "
                               f"{self.budget - used} of max_completion_length={self.budget} were left")
            self.ended = f"the episode's token budget is used up: {conv.end_detail}"
            raise AgentRequestError(self.ended)
        conv.add_inserted(inserted, messages[prefix:])

    async def chat(self, body: Body) -> Body:
        """Answer one ``chat/completions`` request (the OpenAI response JSON) and record its tokens.

        Raises:
            AgentRequestError: another model name, ``n > 1``, ``stream``, a request that does not continue the
                episode, or the budget used up.
        """
        async with self.lock:
            messages = self._check(body)
            self._continue(messages, body.get("tools") or None)
            conv = self.conversation
            left = self.budget - len(conv.completion_ids)
            asked = body.get("max_completion_tokens") or body.get("max_tokens")
            limits = [left] + [x for x in (asked, self.sampling.max_turn_tokens) if x]
            ids, logprobs, finish = await sample_turn(self.client, conv, self.sampling, min(limits),
                                                      self.sampling.request_seed(self.sample, conv.turns))
            text = conv.add_sampled(ids, logprobs, finish)
            self.calls += 1
            if finish == "length" and len(conv.completion_ids) >= self.budget:
                conv.stop_reason, conv.truncated, conv.end_reason = "length", True, "budget_turn"
                conv.end_detail = f"turn {conv.turns} used the last of max_completion_length={self.budget} tokens"
                self.ended = f"the episode's token budget is used up: {conv.end_detail}"
            answer = self._answer(text, finish)
            self.seen = list(messages) + [answer]
            return {"id": f"chatcmpl-{self.sample}-{conv.turns}", "object": "chat.completion", "model": AGENT_MODEL,
                    "choices": [{"index": 0, "message": answer, "logprobs": None,
                                 "finish_reason": "tool_calls" if answer.get("tool_calls") and finish == "stop"
                                 else finish}],
                    "usage": {"prompt_tokens": len(conv.input_ids) - len(ids), "completion_tokens": len(ids),
                              "total_tokens": len(conv.input_ids)}}

    def _answer(self, text: str, finish: str) -> Message:
        calls = [c for c in parse_tool_calls(text) if c.well_formed]
        if not calls:
            return {"role": "assistant", "content": text}
        content = text.split(CALL_OPEN, 1)[0].strip()
        return {"role": "assistant", "content": content or None, "tool_calls": [
            {"id": f"call_{self.sample}_{self.conversation.turns}_{k}", "type": "function",
             "function": {"name": c.name, "arguments": json.dumps(c.arguments)}} for k, c in enumerate(calls)]}
