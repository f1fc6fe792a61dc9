"""Advantages: how much better each completion did than its baseline.

**Advantages.** GRPO (Shao et al. 2024, *DeepSeekMath*, arXiv:2402.03300, eq. 3 / §4.1.2) replaces a learned value
baseline with the mean reward of the other completions of the same prompt:
``A_i = (r_i - mean(r_group)) / std(r_group)``.
Dr. GRPO (Liu et al. 2025, *Understanding R1-Zero-Like Training*, arXiv:2503.20783) drops the division by the std,
which biases updates toward prompts that are too easy or too hard (``scale_rewards: none``). Scaling by the std of the
whole batch (``scale_rewards: batch``) is the middle ground used by e.g. Hu et al. 2025 (REINFORCE++).
"""

from __future__ import annotations

import torch

EPS = 1e-4


def group_advantages(rewards: torch.Tensor, num_generations: int, scale_rewards: str = "group") -> torch.Tensor:
    """Advantages of ``N = P × G`` completions grouped by prompt.

    Args:
        rewards: ``(N,)`` float rewards, completion ``i`` belonging to group ``i // num_generations``.
        num_generations: ``G``, the group size.
        scale_rewards: ``"group"`` (divide by each group's std), ``"batch"`` (by the std of all ``N`` rewards) or
            ``"none"`` (only subtract the group mean). Stds are unbiased (Bessel's correction), ``+ 1e-4``.

    Returns:
        ``(N,)`` advantages; a group whose rewards are all equal gets exactly zero.

    Raises:
        ValueError: ``N`` is not a multiple of ``G`` or ``scale_rewards`` is unknown.
    """
    if num_generations < 1:
        raise ValueError(f"num_generations must be >= 1, got {num_generations}")
    if rewards.ndim != 1 or rewards.numel() % num_generations:
        raise ValueError(f"rewards must be 1-D with a multiple of {num_generations} entries, got {tuple(rewards.shape)}")
    grouped = rewards.view(-1, num_generations)
    centered = grouped - grouped.mean(dim=1, keepdim=True)
    # the float mean of equal values can be off by an ulp (8 × 0.1 in float32); an all-equal group must give exactly 0
    equal = grouped.max(dim=1, keepdim=True).values == grouped.min(dim=1, keepdim=True).values
    centered = centered.masked_fill(equal, 0.0).view(-1)
    if scale_rewards == "group":
        std = grouped.std(dim=1, keepdim=True).expand_as(grouped).reshape(-1)
    elif scale_rewards == "batch":
        std = rewards.std().expand_as(rewards)
    elif scale_rewards == "none":
        return centered
    else:
        raise ValueError(f"scale_rewards must be group, batch or none, got {scale_rewards!r}")
    return centered / (std + EPS)


def zero_std_fraction(rewards: torch.Tensor, num_generations: int) -> float:
    """Fraction of groups whose rewards are all equal (they contribute no policy gradient)."""
    grouped = rewards.view(-1, num_generations)
    return (grouped.max(dim=1).values == grouped.min(dim=1).values).double().mean().item()
