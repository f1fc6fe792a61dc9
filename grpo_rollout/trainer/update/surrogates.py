"""The policy term of the loss, one small function per ``training.loss_type`` family, and a user's own.

Each takes the importance ratio ``r_it`` of every completion token (``(B, C)``, per token or per sequence: see
:mod:`.objective`) and the advantages ``A_i`` and returns the token's policy loss and where it was clipped; the
sampler-correction weights, the KL term and the entropy bonus are added by :func:`~.objective.per_token_loss`.

- **clip** (``grpo``, ``dr_grpo``, ``dapo``, ``bnpo``): PPO's clipped surrogate, ``-min(r·A, clip(r, 1-ε, 1+ε_high)·A)``
  (Schulman et al. 2017; GRPO: Shao et al. 2024, arXiv:2402.03300).
- **cispo**: CISPO (MiniMax-M1, arXiv:2506.13585, eq. 4-5) clips the importance *weight* and stops its gradient, so no
  token's gradient is dropped: ``-sg(clip(r, 1-ε_low, 1+ε_high)) · A · log π``. Written as
  ``-sg(ŵ) · A · exp(log π - sg(log π))``, whose value is ``-ŵ·A`` and whose gradient is the paper's. MiniMax set no
  lower bound (``cispo_epsilon_low: 1``, a weight >= 0) and tuned the upper one (``cispo_epsilon_high``; 5 in
  SkyRL's CISPO example).
- **sapo**: SAPO (Gao et al. 2025, *Soft Adaptive Policy Optimization*, arXiv:2511.20347) replaces the hard clip by a
  soft gate, ``-f_τ(r)·A`` with ``f_τ(r) = (4/τ) · σ(τ (r - 1))``, ``τ = sapo_tau_positive`` where ``A > 0`` and
  ``sapo_tau_negative`` where ``A < 0``: its gradient ``4 σ(1 - σ)`` is 1 on-policy (``r = 1``) and fades smoothly
  away from it, faster for negative advantages (τ 1.05 against 1.0 by default, the paper's setting as SkyRL ships it).
- **a function of yours** (``training.loss_function: path:function``) gets a :class:`LossInputs` and returns the
  ``(B, C)`` policy loss; :func:`user_surrogate` checks it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, NamedTuple, Optional

import torch

from ...user_code.signatures import defined_at, describe, raised_at


def per_token(advantages: torch.Tensor) -> torch.Tensor:
    """Advantages as ``(B, C)``-broadcastable: ``(B,)`` (one per sequence) becomes ``(B, 1)``; ``(B, C)`` (one per
    token, ``training.credit: turn``) stays."""
    return advantages if advantages.ndim == 2 else advantages.unsqueeze(1)


class Surrogate(NamedTuple):
    """A policy term: ``loss`` ``(B, C)``; ``clipped_low``, ``clipped_high`` bool ``(B, C)``, where a bound was the
    active term (for the ``clip_ratio/*`` metrics)."""

    loss: torch.Tensor
    clipped_low: torch.Tensor
    clipped_high: torch.Tensor


@dataclass(frozen=True)
class LossInputs:
    """What a user's loss function gets (``training.loss_function``), for ``B`` sequences of ``C`` completion tokens.

    Attributes:
        logps: ``(B, C)`` the policy's log-probs of the completion tokens (nats, with gradient).
        old_logps: ``(B, C)`` the log-probs of the policy that sampled the batch (no gradient).
        ratio: ``(B, C)`` the importance ratio ``exp(logps - old_logps)`` (per sequence with
            ``importance_level: sequence``), with gradient.
        advantages: ``(B, C)``: each token's (its sequence's, or its turn's with ``training.credit: turn``).
        mask: ``(B, C)`` 1.0 on trained tokens; other positions are ignored (they may hold placeholders).
    """

    logps: torch.Tensor
    old_logps: torch.Tensor
    ratio: torch.Tensor
    advantages: torch.Tensor
    mask: torch.Tensor


def clip_surrogate(ratio: torch.Tensor, advantages: torch.Tensor, epsilon: float,
                   epsilon_high: Optional[float] = None) -> Surrogate:
    """PPO's clipped surrogate (module docstring); ``ratio`` ``(B, C)``, ``advantages`` ``(B,)``."""
    eps_high = epsilon if epsilon_high is None else epsilon_high
    adv = per_token(advantages)
    loss = -torch.min(ratio * adv, torch.clamp(ratio, 1 - epsilon, 1 + eps_high) * adv)
    return Surrogate(loss, (ratio < 1 - epsilon) & (adv < 0), (ratio > 1 + eps_high) & (adv > 0))


def cispo_surrogate(ratio: torch.Tensor, logps: torch.Tensor, advantages: torch.Tensor, epsilon_low: float,
                    epsilon_high: float) -> Surrogate:
    """CISPO's clipped-weight policy gradient (module docstring); ``ratio``, ``logps`` ``(B, C)``, ``advantages``
    ``(B,)``. Every token keeps its gradient; ``clipped_*`` say where the weight was capped."""
    adv = per_token(advantages)
    weight = torch.clamp(ratio.detach(), min=1 - epsilon_low, max=1 + epsilon_high)
    loss = -weight * adv * torch.exp(logps - logps.detach())
    return Surrogate(loss, ratio.detach() < 1 - epsilon_low, ratio.detach() > 1 + epsilon_high)


def sapo_surrogate(ratio: torch.Tensor, advantages: torch.Tensor, tau_positive: float,
                   tau_negative: float) -> Surrogate:
    """SAPO's soft-gated surrogate (module docstring); ``ratio`` ``(B, C)``, ``advantages`` ``(B,)``. Nothing is
    clipped (the ``clipped_*`` masks are all false)."""
    adv = per_token(advantages)
    tau = torch.where(adv > 0, torch.full_like(adv, tau_positive), torch.full_like(adv, tau_negative))
    gate = (4.0 / tau) * torch.sigmoid(tau * (ratio - 1.0))
    none = torch.zeros_like(ratio, dtype=torch.bool)
    return Surrogate(-gate * adv, none, none)


class LossFunctionError(ValueError):
    """``training.loss_function`` raised or returned something other than a finite ``(B, C)`` tensor."""


def user_surrogate(fn: Callable, inputs: LossInputs) -> Surrogate:
    """``fn(inputs)``, the user's ``(B, C)`` policy loss, checked. A NaN or inf is passed on: the step is then
    skipped as for any loss (``training.max_nonfinite_steps``), on every rank alike.

    Raises:
        LossFunctionError: it raised (with its file:line), returned no tensor, one of another shape, or one that does
            not depend on the policy (no gradient).
    """
    try:
        loss = fn(inputs)
    except Exception as exc:
        raise LossFunctionError(f"training.loss_function {describe(fn)} raised {type(exc).__name__}: {exc}"
                                f"{raised_at(exc)}") from exc
    where = f"training.loss_function {describe(fn)}{defined_at(fn)}"
    if not isinstance(loss, torch.Tensor):
        raise LossFunctionError(f"{where} returned {type(loss).__name__}; it must return a (B, C) tensor of "
                                "per-token losses (a tensor computed from inputs.logps or inputs.ratio)")
    if loss.shape != inputs.logps.shape:
        raise LossFunctionError(f"{where} returned a tensor of shape {tuple(loss.shape)}; it must be (B, C) = "
                                f"{tuple(inputs.logps.shape)}, one loss per completion token (the trainer averages "
                                "them by training.loss_type)")
    if not loss.requires_grad:
        raise LossFunctionError(f"{where} returned a loss without a gradient: it must be computed from inputs.logps "
                                "or inputs.ratio (the policy's), not only from advantages or old_logps")
    none = torch.zeros_like(inputs.mask, dtype=torch.bool)
    return Surrogate(loss, none, none)


def policy_term(training: "object", base_dir: Optional[Path] = None) -> Optional[Callable[..., Surrogate]]:
    """The policy term a ``training`` config section asks for, as :func:`~.objective.per_token_loss`'s
    ``surrogate``: ``None`` for PPO's clip (every ``loss_type`` but ``cispo`` and ``sapo``), else a function of
    ``(ratio, logps, old_logps, advantages, mask)``; ``training.loss_function`` (imported here) replaces it.

    Raises:
        ImportSpecError: ``loss_function`` does not import (validate-config reports it first).
    """
    from ...user_code.resolve import resolve_callable

    spec = getattr(training, "loss_function", "")
    loss_function = resolve_callable(spec, base_dir) if spec else None
    if loss_function is not None:
        return lambda ratio, logps, old, advantages, mask: user_surrogate(
            loss_function, LossInputs(logps, old, ratio, per_token(advantages).expand_as(logps), mask))
    if training.loss_type == "cispo":
        return lambda ratio, logps, old, advantages, mask: cispo_surrogate(
            ratio, logps, advantages, training.cispo_epsilon_low, training.cispo_epsilon_high)
    if training.loss_type == "sapo":
        return lambda ratio, logps, old, advantages, mask: sapo_surrogate(
            ratio, advantages, training.sapo_tau_positive, training.sapo_tau_negative)
    return None
