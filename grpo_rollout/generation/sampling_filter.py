"""The distribution a sampler draws from once temperature, min-p, top-k and top-p have cut the vocabulary, in the
order vLLM applies them.

vLLM's v1 sampler (``vllm/v1/sample/sampler.py``, ``Sampler.sample``; vllm 0.32) divides the logits by the
temperature, then applies min-p to the scaled probabilities (it is one of the "argmax-invariant" logits processors,
``vllm/v1/sample/logits_processor/builtin.py``), then top-k, then top-p over what min-p and top-k left
(``vllm/v1/sample/ops/topk_topp_sampler.py``, ``apply_top_k_top_p``). transformers' ``generate`` applies min-p last,
after top-k and top-p. The two orders keep different tokens when min-p meets top-p or top-k: probabilities
``[0.5, 0.3, 0.1, 0.1]`` with ``top_p 0.6, min_p 0.3`` keep token 0 alone in vLLM (its log-prob 0.0) and tokens 0
and 1 in transformers' order (log-prob -0.470). The trainer and the in-process sampler both follow vLLM's order, so
the log-probs of every backend describe the same distribution.
"""

from __future__ import annotations

from typing import Optional

import torch


#: The ``sampling.*`` settings that cut the vocabulary (the arguments of :func:`filter_logits` after the logits),
#: read by the trainer to score tokens under the same filtering as the sampler.
FILTER_SETTINGS = ("top_k", "top_p", "min_p")


def filtering(top_k: int = -1, top_p: float = 1.0, min_p: float = 0.0) -> bool:
    """True when one of the filters cuts anything (``top_k`` > 0, ``top_p`` < 1, ``min_p`` > 0)."""
    return bool(top_k and top_k > 0) or top_p < 1.0 or min_p > 0.0


def filter_logits(logits: torch.Tensor, targets: Optional[torch.Tensor] = None, top_k: int = -1, top_p: float = 1.0,
                  min_p: float = 0.0) -> torch.Tensor:
    """Set to ``-inf`` the logits a vLLM sampler with these settings would never draw, so that a softmax over the
    result is the distribution actually sampled (what vLLM reports with ``--logprobs-mode processed_logprobs``).

    Order (vLLM's): min-p, then top-k, then top-p over the tokens min-p and top-k kept.

    Args:
        logits: ``(M, vocab)`` temperature-scaled logits (float32).
        targets: ``(M,)`` the sampled tokens, always kept (a token on the edge of the kept set must not get
            ``-inf`` through a rounding difference), or ``None``.
        top_k: keep the ``top_k`` largest logits, ties included (``<= 0``: off).
        top_p: keep a token when the probability of the tokens above it is below ``top_p`` (the smallest set holding
            ``top_p``; the most likely token always stays). min_p: keep tokens with probability ``>= min_p`` × the
            largest probability.

    Returns:
        ``(M, vocab)``: ``logits`` with the removed entries ``-inf`` (a new tensor).
    """
    remove = torch.zeros_like(logits, dtype=torch.bool)
    if min_p > 0.0:
        probs = logits.softmax(-1)
        remove |= probs < min_p * probs.amax(dim=-1, keepdim=True)
    if top_k and 0 < top_k < logits.shape[-1]:
        kept = logits.masked_fill(remove, float("-inf"))
        remove |= kept < kept.topk(top_k, dim=-1).values[:, -1:]
    if top_p < 1.0:
        # as vLLM: ascending order, a token goes when the mass up to and including it is <= 1 - top_p
        ascending, order = logits.masked_fill(remove, float("-inf")).sort(dim=-1)
        cut = ascending.softmax(-1).cumsum(-1) <= 1 - top_p
        cut[:, -1] = False  # the most likely token always stays
        remove |= torch.zeros_like(remove).scatter(-1, order, cut)
    if targets is not None:
        remove[torch.arange(len(targets)), targets] = False
    return logits.masked_fill(remove, float("-inf"))
