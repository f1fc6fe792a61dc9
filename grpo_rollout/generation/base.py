"""The one generation interface rollouts talk to, whatever the backend (transformers in-process or a vLLM server).

Generation is token-in/token-out: prompts go in as token-id lists and completions come back as the sampled token ids
with the sampler's log-probabilities, so what the trainer trains on is exactly what was sampled.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Hashable, List, Mapping, Optional, Sequence, Union

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

#: A prompt a client encodes itself: text, or chat messages. Not the server's ``/generate/`` request prompt
#: (``generation.server``'s ``Prompt``), which may also be token ids.
TextPrompt = Union[str, List[dict]]
#: What :meth:`GenerationClient.update_weights` takes: a model, or its tensors by name.
Weights = Union[Any, Mapping[str, Any]]


@dataclass
class GenerationResult:
    """What :meth:`GenerationClient.generate` returns for ``P`` prompts and ``n`` samples each.

    Attributes:
        prompt_ids: ``P`` token-id lists (as sent, after truncation).
        completion_ids: ``P × n`` token-id lists, grouped by prompt (completion ``i`` belongs to prompt ``i // n``).
        logprobs: ``P × n`` lists, one float per completion token: log-probability of the sampled token under the
            distribution it was sampled from (after temperature/top-k/top-p), in nats.
        finish_reasons: ``P × n`` strings, ``"stop"`` (end-of-sequence token) or ``"length"`` (hit ``max_tokens``).
        weight_version: the weight version the server held when it started this request (the count of weight syncs
            it confirmed; with several servers the oldest of them); ``None`` when the backend does not say (the
            transformers client, which samples from the trainer's own weights).
        weight_version_end: the version it held when the request finished: newer than ``weight_version`` when an
            in-flight weight update (streaming rollouts) landed while it ran; ``None`` when the backend does not say.
    """

    prompt_ids: List[List[int]]
    completion_ids: List[List[int]]
    logprobs: List[List[float]]
    finish_reasons: List[str]
    weight_version: Optional[int] = None
    weight_version_end: Optional[int] = None


class GenerationClient(ABC):
    """A generation backend. The same object is handed to rollout functions that take a ``client`` parameter.

    Attributes:
        tokenizer: the model's Hugging Face tokenizer.
        max_prompt_length: prompts longer than this many tokens are cut from the left (``None``: never).
        shares_weights: True when the client samples from the trainer's own model object (nothing to sync).
    """

    tokenizer: PreTrainedTokenizerBase
    max_prompt_length: Optional[int] = None
    shares_weights: bool = False

    def encode_prompt(self, prompt: TextPrompt) -> List[int]:
        """Token ids of one prompt: chat messages get the chat template with the generation prompt; strings are
        tokenized as they are. Truncated from the left to ``max_prompt_length``."""
        if isinstance(prompt, str):
            ids = self.tokenizer(prompt, add_special_tokens=False)["input_ids"]
        else:
            ids = self.tokenizer.apply_chat_template(list(prompt), tokenize=True, add_generation_prompt=True)
            if isinstance(ids, dict) or hasattr(ids, "keys"):
                ids = ids["input_ids"]
        return self.cut_prompts([ids])[0]

    def cut_prompts(self, prompt_ids: Sequence[Sequence[int]], truncate: bool = True) -> List[List[int]]:
        """``P`` prompts as lists, each cut from the left to ``max_prompt_length`` tokens (kept whole when
        ``truncate`` is False or the limit is ``None``)."""
        limit = self.max_prompt_length if truncate else None
        return [list(p)[-limit:] if limit else list(p) for p in prompt_ids]

    def encode_prompts(self, prompts: Sequence[TextPrompt]) -> List[List[int]]:
        """:meth:`encode_prompt` for each prompt."""
        return [self.encode_prompt(p) for p in prompts]

    @abstractmethod
    def generate(self, prompt_ids: Sequence[Sequence[int]], *, n: int = 1, temperature: float = 1.0,
                 top_p: float = 1.0, top_k: int = -1, min_p: float = 0.0, repetition_penalty: float = 1.0,
                 max_tokens: int = 256, seed: Optional[int] = None, stop: Optional[Sequence[str]] = None,
                 truncate: bool = True, affinity: Optional[Hashable] = None) -> GenerationResult:
        """Sample ``n`` completions for each of the ``P`` token-id prompts. ``stop``: extra stop strings (the text
        up to and including the stop string is returned). ``truncate``: cut prompts to ``max_prompt_length`` (False:
        send them whole, e.g. later turns of a multi-turn rollout). ``affinity``: requests with the same key go to
        the same server when there are several (a multi-turn episode keeps its prefix cache); ignored otherwise.
        Raises ``ValueError`` on invalid settings."""

    async def agenerate(self, prompt_ids: Sequence[Sequence[int]], **kwargs: Any) -> GenerationResult:
        """Async form of :meth:`generate`, for rollouts that run samples concurrently (default: a worker thread)."""
        return await asyncio.to_thread(self.generate, prompt_ids, **kwargs)

    def update_weights(self, weights: Weights) -> None:
        """Make the backend sample from these weights: a model, or its tensors by name (as
        :func:`~grpo_rollout.generation.weight_files.weights_for_sync` prepares them). A no-op when the client
        shares the trainer's model (``shares_weights``)."""

    def sleep(self) -> None:
        """Have the server give its GPU memory back while the trainer computes (``vllm.sleep_during_training``;
        KV cache freed, weights offloaded). Nothing is generated until :meth:`wake_up`. A no-op without a server."""

    def wake_up(self) -> None:
        """Undo :meth:`sleep` (weights and KV cache back on the GPU). A no-op without a server."""

    def close(self) -> None:
        """Release the backend (stop a spawned server)."""

    def __enter__(self) -> "GenerationClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
