"""The built-in rollout (empty ``rollout.function``): sample ``n`` completions per prompt in one turn."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence

from ..generation.version_stamps import result_versions
from .contract import SAMPLING_DEFAULTS as D

if TYPE_CHECKING:
    from ..generation.base import GenerationClient


def single_turn(prompts: Sequence[Any], *, client: GenerationClient, n: int,
                temperature: float = D.temperature, top_p: float = D.top_p, top_k: int = D.top_k,
                min_p: float = D.min_p, repetition_penalty: float = D.repetition_penalty,
                max_completion_length: int = D.max_completion_length, seed: Optional[int] = D.seed,
                **_: Any) -> Dict[str, List]:
    """Apply the chat template to chat prompts (strings are tokenized as they are) and sample ``n`` completions each.

    Returns the rollout contract's dict: ``prompt_ids`` (P lists), ``completion_ids`` and ``logprobs`` (P × n lists,
    grouped by prompt) and ``weight_versions`` (the answer's). See :mod:`grpo_rollout.rollouts.contract`.
    """
    result = client.generate(client.encode_prompts(prompts), n=n, temperature=temperature, top_p=top_p, top_k=top_k,
                             min_p=min_p, repetition_penalty=repetition_penalty, max_tokens=max_completion_length,
                             seed=seed)
    return {"prompt_ids": result.prompt_ids, "completion_ids": result.completion_ids, "logprobs": result.logprobs,
            "weight_versions": [result_versions(result)] * len(result.completion_ids)}


single_turn.extras = ()  # extras it returns, so validate-config can check reward parameters statically
