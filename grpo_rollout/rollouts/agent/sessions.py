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
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Awaitable, Callable, List, Optional, Tuple

from ..conversation import Conversation, encode_text, eos_ids_of
from ..episodes import Sampling, sample_turn
from ..tool_prompt import choose_tool_prompt, system_prompt_text, with_system_prompt
from .answers import answer_message
from .requests import (AGENT_MODEL, MAX_REQUEST_BYTES, AgentRequestError, Body, Message, check_body, for_template,
                       rendered, same_message, stop_strings, text_prompt, tool_choice, without_stop)

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from ...generation.base import GenerationClient

#: ``await gone()``: whether the client that sent a request has left (its answer would reach no one).
Gone = Callable[[], Awaitable[bool]]


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
        max_request_bytes: the longest body a request may have (longer: 413).
        text_mode: whether the current sequence came from ``completions`` requests (text prompts) rather than chat.
        calls: requests answered.
        ended: why the episode can take no more requests (the budget), or ``None``.
        earlier: the sequences before ``conversation``, one per request that did not continue the one before it
            (a context edit): the episode's ``segments`` (:mod:`~grpo_rollout.rollouts.segments`).
        call_versions: per answered request, the oldest and newest weight version that sampled it (``None``: not
            known, e.g. transformers generation).
        lost: answers that never reached the agent (its client had gone when the answer was ready: a timeout, a
            dropped connection), each undone, so the client's retry is recorded as the call.
        refused: the ``(end_reason, detail)`` of the last request refused for its length (a prompt longer than
            ``sampling.max_prompt_length`` or the server's context), ``None`` once a later one is answered: the
            episode ends that way when the agent stops there.
        refused_calls: tool calls in answers that were not handed to the agent (malformed, unknown tool, bad
            arguments: :mod:`.answers`).
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
    max_request_bytes: int = MAX_REQUEST_BYTES
    text_mode: bool = False
    calls: int = 0
    ended: Optional[str] = None
    earlier: List[Conversation] = field(default_factory=list)
    call_versions: List[Optional[Tuple[int, int]]] = field(default_factory=list)
    lost: int = 0
    refused: Optional[Tuple[str, str]] = None
    refused_calls: int = 0
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
            started = rendered(lambda: Conversation.start(self.tokenizer, shown, eos_ids_of(self.client,
                                                                                               self.tokenizer),
                                                           **kwargs))
            self._new_sequence(started)
            self.tools = tools
            return
        new = for_template(messages[len(self.seen):])
        self._insert(rendered(lambda: conv.insertion_ids(new)), new)

    def _new_sequence(self, conv: Conversation) -> None:
        """Make ``conv`` the current sequence, the one before joining ``earlier``.

        Raises:
            AgentRequestError: its prompt is longer than ``sampling.max_prompt_length`` (never cut: the agent would
                be answered from a prompt it did not send).
        """
        limit = self.client.max_prompt_length
        if limit and len(conv.prompt_ids) > limit:
            detail = (f"the request's prompt has {len(conv.prompt_ids)} tokens, more than sampling.max_prompt_length="
                      f"{limit} (tools and template included)")
            self.refused = ("prompt_too_long", detail)
            raise AgentRequestError(f"{detail}: send a shorter conversation, or raise sampling.max_prompt_length")
        if self.conversation is not None:
            self.earlier.append(self.conversation)
        self.conversation, self.text_mode = conv, False

    def snapshot(self) -> tuple:
        """What a request may change, to put back when it fails (:meth:`restore`)."""
        conv = self.conversation
        sizes = None if conv is None else (len(conv.completion_ids), len(conv.messages), conv.turns,
                                           len(conv.turn_starts), conv.weight_versions, conv.stop_reason,
                                           conv.truncated, conv.end_reason, conv.end_detail)
        return (conv, sizes, len(self.earlier), self.tools, self.text_mode, list(self.seen), len(self.call_versions),
                self.ended)

    def restore(self, state: tuple) -> None:
        """Undo a failed request: the session as :meth:`snapshot` saw it (a retried request is then played once)."""
        conv, sizes, earlier, self.tools, self.text_mode, self.seen, calls, self.ended = state
        self.conversation, self.earlier, self.call_versions = conv, self.earlier[:earlier], self.call_versions[:calls]
        if conv is not None:
            (tokens, messages, conv.turns, starts, conv.weight_versions, conv.stop_reason, conv.truncated,
             conv.end_reason, conv.end_detail) = sizes
            del conv.completion_ids[tokens:], conv.logprobs[tokens:], conv.completion_mask[tokens:]
            del conv.messages[messages:], conv.turn_starts[starts:]

    def _insert(self, inserted: List[int], messages: List[Message]) -> None:
        """Append tokens the agent sent (mask 0), or end the episode when they do not fit its budget."""
        conv = self.conversation
        if self.used + len(inserted) >= self.budget:
            self._out_of_budget(f"the messages after turn {conv.turns} need {len(inserted)} tokens but only "
                                f"{self.budget - self.used} of max_completion_length={self.budget} were left")
        conv.add_inserted(inserted, messages)

    def _out_of_budget(self, detail: str) -> None:
        """End the episode on its budget (``budget_reply``: what the agent sent next did not fit) and refuse the
        request with the documented 400."""
        conv = self.conversation
        conv.stop_reason, conv.truncated, conv.end_reason, conv.end_detail = "length", True, "budget_reply", detail
        self.ended = f"the episode's token budget is used up: {detail}"
        raise AgentRequestError(self.ended)

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
        """The request's ``max_tokens``, after its checks; an episode whose budget is used up (to the last token: a
        turn that ended exactly there) ends on it, whatever the request (a new sequence has no room either)."""
        asked = check_body(body, chat)
        if self.ended:
            raise AgentRequestError(self.ended)
        if self.conversation is not None and self.used >= self.budget:
            self._out_of_budget(f"turn {self.conversation.turns} used the last of max_completion_length="
                                f"{self.budget} tokens and the agent asked for more")
        return asked

    def _undo(self, state: tuple) -> None:
        if not self.ended:  # the budget's refusal ends the episode where it is
            self.restore(state)

    def _usage(self, ids: List[int]) -> Body:
        total = len(self.conversation.input_ids)
        return {"prompt_tokens": total - len(ids), "completion_tokens": len(ids), "total_tokens": total}

    async def complete(self, body: Body, gone: Optional[Gone] = None) -> Body:
        """Answer one ``completions`` request (a text prompt or token ids; the OpenAI ``text_completion`` JSON) and
        record its tokens. ``gone``: whether the agent's client has left (then the answer is not recorded).

        Raises:
            AgentRequestError: another model name, ``n > 1``, a bad ``max_tokens``, no prompt, the budget used up or
                a prompt too long. Whatever fails leaves the session as it was.
        """
        async with self.lock:
            asked, stop = self._checked(body, chat=False), stop_strings(body)
            prompt = text_prompt(body)
            ids, text, finish = await self._call(asked, stop, lambda: self._continue_text(
                encode_text(self.tokenizer, prompt) if isinstance(prompt, str) else prompt), gone)
            text = without_stop(text, stop) if finish == "stop" else text
            return {"id": f"cmpl-{self.sample}-{self.calls}", "object": "text_completion", "model": AGENT_MODEL,
                    "created": int(time.time()),
                    "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish}],
                    "usage": self._usage(ids)}

    async def chat(self, body: Body, gone: Optional[Gone] = None) -> Body:
        """Answer one ``chat/completions`` request (the OpenAI response JSON) and record its tokens. ``gone``: whether
        the agent's client has left (then the answer is not recorded: a client's retry is the call).

        Raises:
            AgentRequestError: another model name, ``n > 1``, a bad ``max_tokens``, malformed messages or tools, a
                forcing ``tool_choice`` or ``response_format``, messages the chat template cannot render, a prompt
                too long, or the budget used up. Whatever fails leaves the session as it was.
        """
        async with self.lock:
            asked, messages, tools = self._checked(body, chat=True), body["messages"], body.get("tools") or None
            stop = stop_strings(body)
            ids, text, finish = await self._call(asked, stop, lambda: self._continue(messages, tools), gone)
            answer, problems = answer_message(without_stop(text, stop) if finish == "stop" else text, tools,
                                              tool_choice(body), f"call_{self.sample}_{self.calls}")
            self.seen, self.refused_calls = list(messages) + [answer], self.refused_calls + len(problems)
            finish = "tool_calls" if answer.get("tool_calls") and finish == "stop" else finish
            return {"id": f"chatcmpl-{self.sample}-{self.calls}", "object": "chat.completion", "model": AGENT_MODEL,
                    "created": int(time.time()),
                    "choices": [{"index": 0, "message": answer, "logprobs": None, "finish_reason": finish}],
                    "usage": self._usage(ids)}

    async def _call(self, asked: Optional[int], stop: Tuple[str, ...], apply: Callable[[], None],
                    gone: Optional[Gone]) -> tuple:
        """Play one request: ``apply()`` (continue the sequence or start one: rendering and tokenizing, on a worker
        thread so a huge request does not stall the other episodes' calls), then sample. Whatever fails leaves the
        session as it was; so does an answer whose client has ``gone`` by the time it is ready (``lost``).

        Raises:
            AgentRequestError: what ``apply`` refuses; the generation server's 400 (a prompt longer than its
                context: the episode ends there if the agent stops, ``refused``); 499 when the client has gone.
        """
        if gone is not None and await gone():  # a request whose client left while it waited for the session
            raise AgentRequestError("the client left before the answer was ready", 499)
        state = self.snapshot()
        try:
            await asyncio.to_thread(apply)
            result = await self._sample(asked, stop)
        except BaseException as exc:
            self._undo(state)
            if getattr(exc, "status", None) == 400 and not isinstance(exc, AgentRequestError):  # the server's 400
                said = f"the generation server refused the request: {exc}"
                too_long = "max_model_len" in str(exc)  # a prompt longer than its context (generate_route.py)
                self.refused = ("prompt_too_long", said) if too_long else None
                raise AgentRequestError(said + (" (the conversation is longer than the server's context: send a "
                                                "shorter one, or raise vllm.max_model_len)" if too_long else "")) from exc
            raise
        if gone is not None and await gone():
            self.restore(state)
            self.calls, self.lost = self.calls - 1, self.lost + 1
            raise AgentRequestError("the client left before the answer was ready: not recorded", 499)
        self.refused = None
        return result

    def sequences(self) -> List[Conversation]:
        """The episode's token sequences in the order it made them (the current one last)."""
        return self.earlier + ([self.conversation] if self.conversation is not None else [])

    def weight_versions(self) -> Optional[Tuple[int, int]]:
        """The oldest and newest weight version that sampled any of the episode's calls (``None``: not known)."""
        known = [c.weight_versions for c in self.sequences() if c.weight_versions is not None]
        return (min(v[0] for v in known), max(v[1] for v in known)) if known else None
