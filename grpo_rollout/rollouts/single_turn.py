"""The built-in rollout (empty ``rollout.function``): sample ``n`` completions per prompt in one turn."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence


def single_turn(prompts: Sequence[Any], *, client: Any, n: int, temperature: float = 1.0, top_p: float = 1.0,
                top_k: int = -1, min_p: float = 0.0, repetition_penalty: float = 1.0,
                max_completion_length: int = 256, seed: Optional[int] = None, **_: Any) -> Dict[str, List]:
    """Apply the chat template to chat prompts (strings are tokenized as they are) and sample ``n`` completions each.

    Returns the rollout contract's dict: ``prompt_ids`` (P lists), ``completion_ids`` and ``logprobs`` (P × n lists,
    grouped by prompt). See :mod:`grpo_rollout.rollouts.contract`.
    """
    result = client.generate(client.encode_prompts(prompts), n=n, temperature=temperature, top_p=top_p, top_k=top_k,
                             min_p=min_p, repetition_penalty=repetition_penalty, max_tokens=max_completion_length,
                             seed=seed)
    return {"prompt_ids": result.prompt_ids, "completion_ids": result.completion_ids, "logprobs": result.logprobs}


single_turn.extras = ()  # extras it returns, so validate-config can check reward parameters statically
