"""Token-in/token-out conversations for multi-turn rollouts (tool calling, environments).

One sample is a :class:`Conversation`: the prompt's token ids, then turns of *sampled* tokens (kept exactly as the
sampler returned them, never re-tokenized; ``completion_mask`` 1, the sampler's log-probs) and *inserted* tokens
(tool answers, environment observations and the chat template's glue around them; ``completion_mask`` 0, placeholder
log-prob 0.0).

The inserted text comes from the tokenizer's chat template: the conversation is rendered with the last assistant
message's content followed by a sentinel, then the new messages and the generation prompt; everything after the
sentinel is the text that closes the assistant turn, holds the new messages and opens the next assistant turn. If the
sampled turn already ended with the end-of-turn token (``<|im_end|>`` for ChatML), that token's text is dropped from
the front, so it is not written twice. Only this inserted text is tokenized.

:func:`~.episodes.run_episodes` drives many conversations concurrently (one
``client.agenerate`` request per sample turn, so a vLLM server batches them) and :func:`contract_dict` turns them into
the rollout contract's dict.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Dict, List, Optional, Sequence, Tuple

from .contract import RolloutError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase
    from ..generation.base import GenerationClient

#: Appended to the last assistant message when rendering, to find where its content ends in the template's output.
SENTINEL = "\u2063<<grpo-rollout:end-of-sampled-text>>\u2063"

#: ``on_turn(text) -> messages to append, or None when the episode is over``. A handler may also have a method
#: ``continue_turn(text) -> bool``: True when a turn that a stop string ended is not over yet (the tool-calling
#: rollout: ``</tool_call>`` written inside a JSON string argument), so the model goes on sampling the same turn.
TurnHandler = Callable[[str], Awaitable[Optional[List[Dict[str, Any]]]]]
#: At most this many times one turn is continued after a stop string that did not end it.
MAX_CONTINUATIONS = 8


def is_message(m: Any) -> bool:
    """A chat message: a dict with a string ``role`` and a string ``content``."""
    return isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)


def as_messages(prompt: Any) -> List[Dict[str, Any]]:
    """A prompt as chat messages: a string becomes one user message; a message list is copied.

    Raises:
        RolloutError: neither a string nor a list of ``{role, content}`` dicts with string values.
    """
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    if isinstance(prompt, (list, tuple)) and prompt and all(is_message(m) for m in prompt):
        return [dict(m) for m in prompt]
    raise RolloutError("a multi-turn prompt must be a string or a list of chat messages ({role: str, content: str}), "
                       f"got {str(prompt)[:80]!r}")


def render(tokenizer: PreTrainedTokenizerBase, messages: Sequence[Dict[str, Any]], add_generation_prompt: bool, **template_kwargs: Any) -> str:
    """The chat template's text for ``messages`` (``template_kwargs``: e.g. ``tools=``)."""
    return tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=add_generation_prompt,
                                         **template_kwargs)


def encode_text(tokenizer: PreTrainedTokenizerBase, text: str) -> List[int]:
    """Token ids of template text (special tokens written in it, like ``<|im_start|>``, become their ids)."""
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def encode_plain(tokenizer: PreTrainedTokenizerBase, text: str) -> List[int]:
    """Token ids of untrusted text (a tool answer, an observation): special-token strings in it, like
    ``<|im_end|>``, are tokenized as ordinary text, so the text cannot end a turn or open a new one."""
    return list(tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"])


def special_strings(tokenizer: PreTrainedTokenizerBase) -> List[str]:
    """The strings the tokenizer turns into added/special tokens (``<|im_start|>``, ``<|im_end|>``, ...)."""
    decoder = getattr(tokenizer, "added_tokens_decoder", None) or {}
    found = [getattr(t, "content", str(t)) for t in decoder.values()]
    return [t for t in found + list(getattr(tokenizer, "all_special_tokens", [])) if t]


def eos_ids_of(client: GenerationClient, tokenizer: PreTrainedTokenizerBase) -> set:
    """Token ids that end a turn: the client's ``eos_ids`` when it has them, else the tokenizer's EOS."""
    ids = getattr(client, "eos_ids", None)
    return set(ids) if ids else {tokenizer.eos_token_id}


@dataclass
class Conversation:
    """One sample of a multi-turn rollout, kept as tokens.

    Attributes:
        messages: the chat history (assistant turns hold the decoded sampled text); used only to render inserted text.
        prompt_ids: token ids of the first prompt (with the generation prompt).
        completion_ids, logprobs, completion_mask: one entry per completion token (sampled: the sampler's log-prob
            and mask 1; inserted: 0.0 and mask 0).
        turns: sampled turns so far. turn_starts: the completion-token index where each of them starts.
        stop_reason: why the episode ended (``"done"``, ``"max_turns"``, ``"length"``).
        end_reason, end_detail: the same, finer and in words (:data:`.episodes.END_REASONS`): ``"budget_reply"``
            when the next inserted text did not fit, ``"budget_turn"`` when a sampled turn used the budget up.
        truncated: the ``max_completion_length`` budget cut the episode: its last sampled turn was cut by it, or the
            next inserted text did not fit (a turn cut by ``max_turn_tokens`` alone does not count).
        last_text: the last sampled turn's text (special tokens skipped). last_finish: its finish reason.
        weight_versions: the oldest and newest weight version that sampled its turns (``None``: the answers carried
            none, transformers generation).
        call_versions: per model call (a sampled turn; its continuations widen its entry), the oldest and newest
            weight version that sampled it (``None`` where the answer carried none).
    """

    tokenizer: PreTrainedTokenizerBase
    messages: List[Dict[str, Any]]
    prompt_ids: List[int]
    eos_ids: set
    template_kwargs: Dict[str, Any] = field(default_factory=dict)
    completion_ids: List[int] = field(default_factory=list)
    logprobs: List[float] = field(default_factory=list)
    completion_mask: List[int] = field(default_factory=list)
    turns: int = 0
    turn_starts: List[int] = field(default_factory=list)
    stop_reason: Optional[str] = None
    last_text: str = ""
    last_finish: str = ""
    truncated: bool = False
    end_reason: Optional[str] = None
    end_detail: str = ""
    capped_turns: int = 0  # sampled turns cut by max_turn_tokens (they end unfinished; the episode goes on)
    weight_versions: Optional[Tuple[int, int]] = None
    call_versions: List[Optional[Tuple[int, int]]] = field(default_factory=list)
    _ended_with_eos: bool = False
    _turn_start: int = 0

    @classmethod
    def start(cls, tokenizer: PreTrainedTokenizerBase, messages: List[Dict[str, Any]], eos_ids: set,
              max_prompt_length: Optional[int] = None, **template_kwargs: Any) -> "Conversation":
        """Render ``messages`` with the generation prompt and tokenize it (cut from the left to ``max_prompt_length``)."""
        ids = encode_text(tokenizer, render(tokenizer, messages, True, **template_kwargs))
        if max_prompt_length and len(ids) > max_prompt_length:
            warnings.warn(f"a multi-turn prompt of {len(ids)} tokens was cut to sampling.max_prompt_length="
                          f"{max_prompt_length} from the left, losing its start (system prompt, tool descriptions); "
                          "raise sampling.max_prompt_length", stacklevel=2)
            ids = ids[-max_prompt_length:]
        return cls(tokenizer, list(messages), ids, set(eos_ids), dict(template_kwargs))

    @property
    def input_ids(self) -> List[int]:
        """Prompt plus completion so far: what the next turn is generated from."""
        return self.prompt_ids + self.completion_ids

    def add_sampled(self, ids: Sequence[int], logprobs: Sequence[float], finish_reason: str,
                    continuation: bool = False) -> str:
        """Append one sampled turn as it was sampled (or, with ``continuation``, more of the current turn: the model
        was stopped too early and goes on from where it stopped); return the turn's whole text (special tokens
        skipped).

        Raises:
            RolloutError: ``logprobs`` does not have one value per token.
        """
        ids, logprobs = list(ids), list(logprobs)
        if len(ids) != len(logprobs):
            raise RolloutError(f"the client returned {len(ids)} tokens but {len(logprobs)} log-probs")
        if not continuation or not self.turns:
            self.turns += 1
            self._turn_start = len(self.completion_ids)
            self.turn_starts.append(self._turn_start)
            self.messages.append({"role": "assistant", "content": ""})
        self.completion_ids += ids
        self.logprobs += [float(x) for x in logprobs]
        self.completion_mask += [1] * len(ids)
        turn = self.completion_ids[self._turn_start:]
        self._ended_with_eos = bool(turn) and turn[-1] in self.eos_ids
        body = turn[:-1] if self._ended_with_eos else turn
        content = self.tokenizer.decode(body, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        self.messages[-1] = {"role": "assistant", "content": content}
        self.last_text = self.tokenizer.decode(turn, skip_special_tokens=True, clean_up_tokenization_spaces=False)
        self.last_finish = finish_reason
        return self.last_text

    @property
    def turn_tokens(self) -> int:
        """Tokens sampled in the current turn so far."""
        return len(self.completion_ids) - self._turn_start

    def inserted_text(self, new_messages: Sequence[Dict[str, Any]]) -> str:
        """The template text that follows the sampled tokens when ``new_messages`` are added and the next assistant
        turn opens.

        Raises:
            RolloutError: the last message is not an assistant turn, or the template dropped its content.
        """
        if not self.messages or self.messages[-1].get("role") != "assistant":
            raise RolloutError("inserted text can only follow a sampled assistant turn")
        last = dict(self.messages[-1], content=self.messages[-1]["content"] + SENTINEL)
        text = render(self.tokenizer, self.messages[:-1] + [last] + list(new_messages), True, **self.template_kwargs)
        if text.count(SENTINEL) != 1:
            raise RolloutError("the chat template does not render the last assistant message's content as given, so "
                               "the text between turns cannot be found; use a template that keeps assistant content")
        tail = text.split(SENTINEL, 1)[1]
        if self._ended_with_eos:
            eos_text = self.tokenizer.decode(self.completion_ids[-1:], skip_special_tokens=False)
            if tail.startswith(eos_text):
                tail = tail[len(eos_text):]
        return tail

    def insertion_ids(self, new_messages: Sequence[Dict[str, Any]]) -> List[int]:
        """Token ids of :meth:`inserted_text` (not appended yet). The template's own text is tokenized with its
        special tokens; a new message's content that contains special-token strings is tokenized as plain text
        (:func:`encode_plain`), so a tool or environment cannot fake a chat turn. The ids decode to exactly
        :meth:`inserted_text` either way.

        Raises:
            RolloutError: such a content cannot be found in the rendered text (a template that rewrites content).
        """
        tail = self.inserted_text(new_messages)
        specials = special_strings(self.tokenizer)
        risky = [m["content"] for m in new_messages
                 if isinstance(m.get("content"), str) and any(t in m["content"] for t in specials)]
        ids, pos = [], 0
        for content in risky:
            needle = content if content in tail[pos:] else content.strip()
            at = tail.find(needle, pos)
            if at < 0:
                raise RolloutError("the chat template changed a tool/environment message that contains special-token "
                                   "text, so it cannot be tokenized safely; remove such strings from the message")
            ids += encode_text(self.tokenizer, tail[pos:at]) + encode_plain(self.tokenizer, needle)
            pos = at + len(needle)
        return ids + encode_text(self.tokenizer, tail[pos:])

    def add_inserted(self, ids: Sequence[int], new_messages: Sequence[Dict[str, Any]]) -> None:
        """Append inserted tokens (mask 0, log-prob 0.0) and record ``new_messages`` in the history."""
        self.completion_ids += list(ids)
        self.logprobs += [0.0] * len(ids)
        self.completion_mask += [0] * len(ids)
        self.messages += [dict(m) for m in new_messages]
