"""Batches for the GRPO objective tests: the clip range, a hand-computed batch, a random one, and batch totals."""

from __future__ import annotations

import torch

from grpo_rollout.trainer.update.objective import BatchTotals


EPS, EPS_HIGH = 0.2, 0.28  # clip range [0.8, 1.28]


def _totals(mask: torch.Tensor, max_completion_length: int, num_micro_batches: int = 1) -> BatchTotals:
    return BatchTotals(num_sequences=mask.shape[0], num_tokens=int(mask.sum()), num_micro_batches=num_micro_batches,
                       max_completion_length=max_completion_length)


def _hand_batch():
    """Three sequences of 3, 2 and 4 trained tokens (C = 4), ratios chosen per token, float64.

    seq 0, A = +1.0, ratios [1.0, 1.5, 0.5, 9.0 (masked)]
    seq 1, A = -2.0, ratios [0.5, 1.5, 1.0 (masked), 1.0 (masked)]
    seq 2, A = +0.5, ratios [1.0, 1.2, 0.9, 1.1]
    """
    ratios = torch.tensor([[1.0, 1.5, 0.5, 9.0],
                           [0.5, 1.5, 1.0, 1.0],
                           [1.0, 1.2, 0.9, 1.1]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 0],
                         [1, 1, 0, 0],
                         [1, 1, 1, 1]])
    old_logps = torch.tensor([[-1.0, -2.0, -0.5, -3.0],
                              [-0.7, -1.2, -2.5, -0.1],
                              [-0.3, -0.9, -1.4, -2.0]], dtype=torch.float64)
    logps = old_logps + ratios.log()
    advantages = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    return logps, old_logps, advantages, mask


def _random_batch(seed: int = 0, s: int = 8, c: int = 6):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([1, 6, 3, 2, 5, 4, 6, 2])[:s]
    mask = (torch.arange(c).unsqueeze(0) < lengths.unsqueeze(1)).long()
    old_logps = -torch.rand(s, c, generator=g, dtype=torch.float64) * 3
    logps = old_logps + (torch.rand(s, c, generator=g, dtype=torch.float64) - 0.5)  # ratios in [0.61, 1.65]
    ref_logps = old_logps + (torch.rand(s, c, generator=g, dtype=torch.float64) - 0.5)
    adv = torch.randn(s, generator=g, dtype=torch.float64)
    return logps, old_logps, ref_logps, adv, mask
