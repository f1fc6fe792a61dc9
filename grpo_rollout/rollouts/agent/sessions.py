"""One agent episode as the recording endpoint sees it: the chat requests of one session, answered from the run's
generation client and kept as token sequences (:class:`~grpo_rollout.rollouts.conversation.Conversation`).

A request continues the sequence when its messages are the previous request's messages, then the answer the endpoint
gave, then new messages (tool results, a user turn): the new messages are inserted as template tokens (mask 0) and
the next turn is sampled from the whole sequence, so the trainer trains on exactly the sampled tokens. A request that
does not (a context edit: history dropped or summarised, a sub-agent's own conversation, other tools) starts a new
sequence from its own messages; the ones before become the episode's ``segments``
(:mod:`~grpo_rollout.rollouts.segments`), trained with the episode's advantage. The budget is the built-in
multi-turn rollouts' own (:mod:`grpo_rollout.rollouts.episodes`): ``max_completion_length`` tokens, sampled and
inserted together, over all the episode's sequences.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, List, Optional, Tuple

from ..conversation import Conversation, encode_text, eos_ids_of
from ..episodes import Sampling, sample_turn
from ..tool_parsing import CALL_OPEN, parse_tool_calls
from ..tool_prompt import choose_tool_prompt, system_prompt_text, with_system_prompt
from .requests import (AGENT_MODEL, AgentRequestError, Body, Message, check_body, for_template, same_message,
                       stop_strings, without_stop)

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from ...generation.base import GenerationClient

def _rendered(make: Callable[[], Any]) -> Any:
    """``make()`` (rendering messages with the chat template), its failure a 400 naming the template's complaint."""
    try:
        return make()
    except Exception as exc:
        raise AgentRequestError(f"the chat template cannot render these messages ({type(exc).__name__}: {exc}): "
                                "send string contents and tool calls as OpenAI's chat format has them") from exc


@dataclass
class AgentSession:
    """One episode: its conversation, what the agent has been told so far and the settings its turns sample with.

    Attributes:
        sample: the episode's index in the step (``prompt * n + j``): its requests' seeds are
            ``sampling.request_seed(sample, turn)``.
        budget: ``max_completion_length``: sampled plus inserted tokens of the whole episode.
        conversation: ``None`` until the first request.
        seen: the messages of the last request and the answer given to it.
        tool_prompt: how a request's ``tools`` are shown to the model (:mod:`~grpo_rollout.rollouts.tool_prompt`:
            ``auto`` uses the chat template when it renders them, else a system prompt; ``template``; ``system``).
        text_mode: whether the current sequence came from ``completions`` requests (text prompts) rather than chat.
        calls: requests answered.
        ended: why the episode can take no more requests (the budget), or ``None``.
        earlier: the sequences before ``conversation``, one per request that did not continue the one before it
            (a context edit): the episode's ``segments`` (:mod:`~grpo_rollout.rollouts.segments`).
        call_versions: per answered request, the oldest and newest weight version that sampled it (``None``: not
            known, e.g. transformers generation).
        retried: requests identical to the one answered just before (a client's retry of an answer it never got),
            each of which replaced that call. last_key, before_last: the last answered request and the session
            before it (what such a retry undoes).
    """

    client: GenerationClient
    tokenizer: PreTrainedTokenizerBase
    sampling: Sampling
    sample: int
    budget: int
    conversation: Optional[Conversation] = None
    seen: List[Message] = field(default_factory=list)
    tools: Optional[List[Any]] = None
    tool_prompt: str = "auto"
    text_mode: bool = False
    calls: int = 0
    ended: Optional[str] = None
    earlier: List[Conversation] = field(default_factory=list)
    call_versions: List[Optional[Tuple[int, int]]] = field(default_factory=list)
    retried: int = 0
    last_key: Optional[str] = None
    before_last: Optional[tuple] = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def used(self) -> int:
        """Tokens of the episode's budget used: every sequence's completion tokens, sampled and inserted."""
        return sum(len(c.completion_ids) for c in self.earlier + [self.conversation] if c is not None)

    def continues(self, messages: List[Message], tools: Optional[List[Any]]) -> bool:
        """Whether a request continues the current sequence: the same tools, the last request's messages and the
        answer it got (:func:`same_message`), then at least one new message."""
        return (self.conversation is not None and not self.text_mode and tools == self.tools
                and len(messages) > len(self.seen)
                and all(same_message(a, b) for a, b in zip(self.seen, messages)))

    def _continue(self, messages: List[Message], tools: Optional[List[Any]]) -> None:
        """Insert the messages that are new since the last answer; or, for the first request or one that does not
        continue (a context edit), start a new sequence from its messages (the one before is kept in ``earlier``)."""
        conv = self.conversation
        if not self.continues(messages, tools):
            kwargs, shown = {}, for_template(messages)
            if tools and choose_tool_prompt(self.tokenizer, tools, self.tool_prompt) == "system":
                shown = with_system_prompt(shown, system_prompt_text(tools))
            elif tools:
                kwargs["tools"] = tools
            started = _rendered(lambda: Conversation.start(self.tokenizer, shown, eos_ids_of(self.client,
                                                                                               self.tokenizer),
                                                           self.client.max_prompt_length, **kwargs))
            self._new_sequence(started)
            self.tools = tools
            return
        new = for_template(messages[len(self.seen):])
        self._insert(_rendered(lambda: conv.insertion_ids(new)), new)

    def _new_sequence(self, conv: Conversation) -> None:
        """Make ``conv`` the current sequence, the one before joining ``earlier``."""
        if self.conversation is not None:
            self.earlier.append(self.conversation)
        self.conversation, self.text_mode = conv, False

    def snapshot(self) -> tuple:
        """What a request may change, to put back when it fails (:meth:`restore`)."""
        conv = self.conversation
        sizes = None if conv is None else (len(conv.completion_ids), len(conv.messages), conv.turns,
                                           len(conv.turn_starts), conv.weight_versions)
        return conv, sizes, len(self.earlier), self.tools, self.text_mode, list(self.seen), len(self.call_versions)

    def restore(self, state: tuple) -> None:
        """Undo a failed request: the session as :meth:`snapshot` saw it (a retried request is then played once)."""
        conv, sizes, earlier, self.tools, self.text_mode, self.seen, calls = state
        self.conversation, self.earlier, self.call_versions = conv, self.earlier[:earlier], self.call_versions[:calls]
        if conv is not None:
            tokens, messages, conv.turns, starts, conv.weight_versions = sizes
            del conv.completion_ids[tokens:], conv.logprobs[tokens:], conv.completion_mask[tokens:]
            del conv.messages[messages:], conv.turn_starts[starts:]

    def _insert(self, inserted: List[int], messages: List[Message]) -> None:
        """Append tokens the agent sent (mask 0), or end the episode when they do not fit its budget."""
        conv = self.conversation
        if self.used + len(inserted) >= self.budget:
            conv.stop_reason, conv.truncated, conv.end_reason = "length", True, "budget_reply"
            conv.end_detail = (f"the messages after turn {conv.turns} need {len(inserted)} tokens but only "
                               f"{self.budget - self.used} of max_completion_length={self.budget} were left")
            self.ended = f"the episode's token budget is used up: {conv.end_detail}"
            raise AgentRequestError(self.ended)
        conv.add_inserted(inserted, messages)

    def _prompt_ids(self, body: Body) -> List[int]:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]  # a batch of one
        if isinstance(prompt, str) and prompt:
            return encode_text(self.tokenizer, prompt)
        if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) and t >= 0
                                                       for t in prompt):
            return list(prompt)
        raise AgentRequestError("`prompt` must be one non-empty string or one list of token ids")

    def _continue_text(self, ids: List[int]) -> None:
        """A ``completions`` prompt: when it extends the current sequence's tokens (a text-completion sequence), the
        extension is inserted (mask 0); else it starts a new sequence."""
        conv = self.conversation
        if conv is not None and self.text_mode and len(ids) > len(conv.input_ids) \
                and ids[:len(conv.input_ids)] == conv.input_ids:
            self._insert(ids[len(conv.input_ids):], [])
            return
        self._new_sequence(Conversation(self.tokenizer, [], ids, eos_ids_of(self.client, self.tokenizer)))
        self.text_mode, self.tools, self.seen = True, None, []

    async def _sample(self, asked: Optional[int], stop: Tuple[str, ...] = ()) -> tuple:
        """Sample the current sequence's next turn within the budget and the request's ``max_tokens`` (``asked``),
        ending at a ``stop`` string (kept in the tokens, as sampled); returns its token ids, text and finish reason."""
        conv = self.conversation
        limits = [self.budget - self.used] + [x for x in (asked, self.sampling.max_turn_tokens) if x]
        before, conv.weight_versions = conv.weight_versions, None
        sampling = replace(self.sampling, stop=stop) if stop else self.sampling
        ids, logprobs, finish = await sample_turn(self.client, conv, sampling, min(limits),
                                                  self.sampling.request_seed(self.sample, self.calls))
        call, self.call_versions = conv.weight_versions, self.call_versions + [conv.weight_versions]
        conv.weight_versions = before if call is None else call if before is None else (
            min(before[0], call[0]), max(before[1], call[1]))
        text = conv.add_sampled(ids, logprobs, finish)
        self.calls += 1
        if finish == "length" and self.used >= self.budget:
            conv.stop_reason, conv.truncated, conv.end_reason = "length", True, "budget_turn"
            conv.end_detail = f"turn {conv.turns} used the last of max_completion_length={self.budget} tokens"
            self.ended = f"the episode's token budget is used up: {conv.end_detail}"
        return ids, text, finish

    def _checked(self, body: Body, chat: bool) -> Optional[int]:
        asked = check_body(body, chat)
        if self.ended:
            raise AgentRequestError(self.ended)
        return asked

    def _undo(self, state: tuple) -> None:
        if not self.ended:  # the budget's refusal ends the episode where it is
            self.restore(state)

    def _usage(self, ids: List[int]) -> Body:
        total = len(self.conversation.input_ids)
        return {"prompt_tokens": total - len(ids), "completion_tokens": len(ids), "total_tokens": total}

    async def complete(self, body: Body) -> Body:
        """Answer one ``completions`` request (a text prompt or token ids; the OpenAI ``text_completion`` JSON) and
        record its tokens.

        Raises:
            AgentRequestError: another model name, ``n > 1``, a bad ``max_tokens``, no prompt, or the budget used
                up. Whatever fails leaves the session as it was.
        """
        async with self.lock:
            asked, stop = self._checked(body, chat=False), stop_strings(body)
            ids, text, finish = await self._call(json.dumps([body.get("prompt"), stop]), asked, stop,
                                                 lambda: self._continue_text(self._prompt_ids(body)))
            text = without_stop(text, stop) if finish == "stop" else text
            return {"id": f"cmpl-{self.sample}-{self.calls}", "object": "text_completion", "model": AGENT_MODEL,
                    "created": int(time.time()),
                    "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish}],
                    "usage": self._usage(ids)}

    async def chat(self, body: Body) -> Body:
        """Answer one ``chat/completions`` request (the OpenAI response JSON) and record its tokens.

        Raises:
            AgentRequestError: another model name, ``n > 1``, a bad ``max_tokens``, malformed messages or tools,
                messages the chat template cannot render, or the budget used up. Whatever fails leaves the session as
                it was (a retried request is played once).
        """
        async with self.lock:
            asked, messages, tools = self._checked(body, chat=True), body["messages"], body.get("tools") or None
            stop = stop_strings(body)
            key = json.dumps([messages, tools, stop], sort_keys=True, default=str)
            ids, text, finish = await self._call(key, asked, stop, lambda: self._continue(messages, tools))
            answer = self._answer(without_stop(text, stop) if finish == "stop" else text, finish)
            self.seen = list(messages) + [answer]
            finish = "tool_calls" if answer.get("tool_calls") and finish == "stop" else finish
            return {"id": f"chatcmpl-{self.sample}-{self.calls}", "object": "chat.completion", "model": AGENT_MODEL,
                    "created": int(time.time()),
                    "choices": [{"index": 0, "message": answer, "logprobs": None, "finish_reason": finish}],
                    "usage": self._usage(ids)}

    async def _call(self, key: str, asked: Optional[int], stop: Tuple[str, ...], apply: Callable[[], None]) -> tuple:
        """Play one request: ``apply()`` (continue the sequence or start one), then sample. A request identical to
        the last one answered (``key``) is a retry whose answer never reached the agent (its client lost the
        connection): that call is undone first, so only the answer the agent gets is recorded (``retried``). Whatever
        fails leaves the session as it was."""
        if key == self.last_key and self.before_last is not None:
            self.restore(self.before_last)
            self.calls, self.retried, self.last_key, self.before_last = self.calls - 1, self.retried + 1, None, None
        state = self.snapshot()
        try:
            apply()
            result = await self._sample(asked, stop)
        except BaseException:
            self._undo(state)
            raise
        self.last_key, self.before_last = key, state
        return result

    def sequences(self) -> List[Conversation]:
        """The episode's token sequences in the order it made them (the current one last)."""
        return self.earlier + ([self.conversation] if self.conversation is not None else [])

    def weight_versions(self) -> Optional[Tuple[int, int]]:
        """The oldest and newest weight version that sampled any of the episode's calls (``None``: not known)."""
        known = [c.weight_versions for c in self.sequences() if c.weight_versions is not None]
        return (min(v[0] for v in known), max(v[1] for v in known)) if known else None

    def _answer(self, text: str, finish: str) -> Message:
        calls = [c for c in parse_tool_calls(text) if c.well_formed]
        if not calls:
            return {"role": "assistant", "content": text}
        content = text.split(CALL_OPEN, 1)[0].strip()
        return {"role": "assistant", "content": content or None, "tool_calls": [
            {"id": f"call_{self.sample}_{self.calls}_{k}", "type": "function",
             "function": {"name": c.name, "arguments": json.dumps(c.arguments)}} for k, c in enumerate(calls)]}
