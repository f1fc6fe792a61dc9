"""Advantages: how much better each completion did than its baseline (``training.advantage``).

**grpo.** GRPO (Shao et al. 2024, *DeepSeekMath*, arXiv:2402.03300, eq. 3 / §4.1.2) replaces a learned value
baseline with the mean reward of the other completions of the same prompt:
``A_i = (r_i - mean(r_group)) / std(r_group)``.
Dr. GRPO (Liu et al. 2025, *Understanding R1-Zero-Like Training*, arXiv:2503.20783) drops the division by the std,
which biases updates toward prompts that are too easy or too hard (``scale_rewards: none``). Scaling by the std of the
whole batch (``scale_rewards: batch``) is the middle ground used by e.g. Hu et al. 2025 (REINFORCE++).

**rloo.** RLOO (Kool et al. 2019, *Buy 4 REINFORCE Samples, Get a Baseline for Free!*; Ahmadian et al. 2024, *Back to
Basics*, arXiv:2402.14740 eq. 5): each completion's baseline is the mean reward of the *other* ``G - 1`` completions
of its prompt, not divided by any std: ``A_i = r_i - (Σ_{j≠i} r_j) / (G - 1) = G / (G - 1) · (r_i - mean(r_group))``.

**reinforce_pp.** REINFORCE++ (Hu et al. 2025, arXiv:2501.03262, §3.2): the baseline is the mean reward of the whole
step's batch, normalised by the batch's std: ``A_i = (r_i - mean(r_batch)) / std(r_batch)``. A group whose rewards are
equal still gets advantages (its reward against the batch). The paper's KL penalty in the reward stays in the loss
here (``training.beta``); its REINFORCE++-baseline (the group mean subtracted first) is ``grpo`` with
``scale_rewards: batch``.

**A function of yours** (``training.advantage_function: path/file.py:function``) gets the step's rewards and the
group size and returns the advantages: ``fn(rewards, num_generations) -> (N,)`` (:func:`user_advantages`).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Callable, Optional

import torch

from ...config.values import ADVANTAGES  # the one list of estimators
from ...user_code.signatures import defined_at, describe, raised_at

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


def rloo_advantages(rewards: torch.Tensor, num_generations: int) -> torch.Tensor:
    """RLOO's leave-one-out advantages (formula: the module docstring).

    Args:
        rewards: ``(N,)`` float rewards, grouped by prompt. num_generations: ``G >= 2``.

    Returns:
        ``(N,)`` advantages; a group whose rewards are all equal gets exactly zero.

    Raises:
        ValueError: ``G < 2`` (no other completion to compare with) or ``N`` is not a multiple of ``G``.
    """
    if num_generations < 2:
        raise ValueError(f"RLOO needs num_generations >= 2, got {num_generations}")
    centered = group_advantages(rewards, num_generations, "none")  # exactly 0 for an all-equal group
    return centered * (num_generations / (num_generations - 1))


def batch_advantages(rewards: torch.Tensor) -> torch.Tensor:
    """REINFORCE++'s batch-baseline advantages ``(r - mean) / (std + 1e-4)`` over all ``N`` rewards, ``(N,)`` (std
    unbiased; all-equal rewards give exactly zero)."""
    if bool(rewards.max() == rewards.min()):
        return torch.zeros_like(rewards)
    return (rewards - rewards.mean()) / (rewards.std() + EPS)


class AdvantageError(ValueError):
    """``training.advantage_function`` raised or returned something other than one finite float per completion."""


def user_advantages(fn: Callable, rewards: torch.Tensor, num_generations: int) -> torch.Tensor:
    """``fn(rewards, num_generations)``'s advantages, checked.

    Args:
        fn: the user's function. rewards: ``(N,)`` float32 rewards, grouped by prompt. num_generations: ``G``.

    Returns:
        ``(N,)`` float32 advantages.

    Raises:
        AdvantageError: it raised (with its file:line), or did not return ``N`` finite numbers.
    """
    try:
        out = fn(rewards.clone(), num_generations)
    except Exception as exc:
        raise AdvantageError(f"training.advantage_function {describe(fn)} raised {type(exc).__name__}: {exc}"
                             f"{raised_at(exc)}") from exc
    try:
        values = torch.as_tensor(out, dtype=torch.float32).reshape(-1)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise AdvantageError(f"training.advantage_function {describe(fn)}{defined_at(fn)} returned "
                             f"{type(out).__name__}; it must return one number per completion ({rewards.numel()}), "
                             "e.g. a (N,) tensor or a list") from exc
    if values.numel() != rewards.numel():
        raise AdvantageError(f"training.advantage_function {describe(fn)}{defined_at(fn)} returned {values.numel()} "
                             f"advantages for {rewards.numel()} completions; return one per completion, in order")
    if not bool(torch.isfinite(values).all()):
        bad = int(torch.nonzero(~torch.isfinite(values))[0])
        raise AdvantageError(f"training.advantage_function {describe(fn)}{defined_at(fn)} returned "
                             f"{values[bad].item()} for completion {bad}; advantages must be finite")
    return values


def compute_advantages(rewards: torch.Tensor, num_generations: int, advantage: str = "grpo",
                       scale_rewards: str = "group", function: Optional[Callable] = None) -> torch.Tensor:
    """The step's advantages, ``(N,)``, by ``training.advantage`` (``function``: the user's, instead).

    Raises:
        ValueError: an unknown estimator; AdvantageError: the user's function failed.
    """
    if function is not None:
        return user_advantages(function, rewards, num_generations)
    if advantage == "grpo":
        return group_advantages(rewards, num_generations, scale_rewards)
    if advantage == "rloo":
        return rloo_advantages(rewards, num_generations)
    if advantage == "reinforce_pp":
        return batch_advantages(rewards)
    raise ValueError(f"advantage must be one of {', '.join(ADVANTAGES)}, got {advantage!r}")


def step_advantages(training: "object", num_generations: int, base_dir: Optional[Path] = None) -> Callable:
    """The function the trainer computes each step's advantages with: ``(N,)`` rewards → ``(N,)`` advantages, by the
    config's ``training`` section (``advantage``, ``scale_rewards``, ``advantage_function`` imported once here).

    Raises:
        ImportSpecError: ``advantage_function`` does not import (validate-config reports it first).
    """
    from ...user_code.resolve import resolve_callable

    spec = getattr(training, "advantage_function", "")
    fn = resolve_callable(spec, base_dir) if spec else None
    return partial(compute_advantages, num_generations=num_generations, advantage=training.advantage,
                   scale_rewards=training.scale_rewards, function=fn)
