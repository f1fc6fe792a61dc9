"""The distribution a sampler draws from once top-k, top-p and min-p have cut the vocabulary: shared by the trainer
(its log-probs must describe the distribution sampled) and the samplers."""

from __future__ import annotations

import torch


def filter_logits(logits: torch.Tensor, targets: torch.Tensor, top_k: int = -1, top_p: float = 1.0,
                  min_p: float = 0.0) -> torch.Tensor:
    """Set to ``-inf`` the logits a top-k / top-p (nucleus) / min-p sampler would never draw, so that a log-softmax
    over the result is the distribution actually sampled (what vLLM reports as ``processed_logprobs``).

    Args:
        logits: ``(M, vocab)`` temperature-scaled logits. targets: ``(M,)`` the sampled tokens, always kept (a token
            on the boundary of the kept set must not get ``-inf`` through a rounding difference).
        top_k: keep the ``top_k`` largest (``<= 0``: off). top_p: keep the smallest set with probability mass
            ``>= top_p``. min_p: keep tokens with probability ``>= min_p × max probability``.
    """
    remove = torch.zeros_like(logits, dtype=torch.bool)
    if top_k and 0 < top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[:, -1:]
        remove |= logits < kth
    if top_p < 1.0:
        sorted_logits, order = logits.masked_fill(remove, float("-inf")).sort(dim=-1, descending=True)
        probs = sorted_logits.softmax(-1)
        beyond = probs.cumsum(-1) - probs >= top_p  # mass before this token already reaches top_p
        remove |= torch.zeros_like(remove).scatter(-1, order, beyond)
    if min_p > 0.0:
        probs = logits.masked_fill(remove, float("-inf")).softmax(-1)
        remove |= probs < min_p * probs.max(dim=-1, keepdim=True).values
    remove[torch.arange(len(targets)), targets] = False
    return logits.masked_fill(remove, float("-inf"))
