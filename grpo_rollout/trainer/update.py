"""The pieces of one GRPO update: micro-batches laid out for the forward pass, and the statistics gathered on the way.

:func:`build_micro_batches` turns a checked rollout (its sequences, masks, sampler log-probs) and the advantages into
:class:`MicroBatch` objects on the training device; :class:`UpdateStats` adds up KL, clipping, importance weights and
the sampler/trainer mismatch over every micro-batch and iteration, reduces them over ranks, and names them as metrics.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

import torch

from .distributed import Dist
from .logprobs import PackedBatch, pack


@dataclass
class MicroBatch:
    """One forward/backward pass worth of sequences (``B`` rows, ``C`` = longest completion).

    Attributes:
        packed: token layout (:class:`~.logprobs.PackedBatch`).
        mask: ``(B, C)`` float, 1 on trained tokens.
        advantages: ``(B,)``.
        sampler_logprobs: ``(B, C)`` the sampler's log-probs (nats; placeholders where ``mask`` is 0), or ``None``.
        old_logprobs: ``(B, C)`` the policy's before the first update (only with ``num_iterations > 1``).
        ref_logprobs: ``(B, C)`` the reference model's (only with ``beta > 0``).
        is_weights: ``(B, C)`` sampler-correction weights, set on the first iteration.
    """

    packed: PackedBatch
    mask: torch.Tensor
    advantages: torch.Tensor
    sampler_logprobs: Optional[torch.Tensor] = None
    old_logprobs: Optional[torch.Tensor] = None
    ref_logprobs: Optional[torch.Tensor] = None
    is_weights: Optional[torch.Tensor] = None


def build_micro_batches(prompt_ids: Sequence[Sequence[int]], completion_ids: Sequence[Sequence[int]],
                        masks: Sequence[Sequence[int]], logprobs: Optional[Sequence[Sequence[float]]],
                        advantages: torch.Tensor, size: int, pad_id: int, device: torch.device,
                        padding_free: bool = False) -> List[MicroBatch]:
    """Split ``N`` sequences into micro-batches of ``size`` (in order) on ``device``, right-padded or padding-free
    (see :func:`~.logprobs.pack`).

    Args:
        prompt_ids, completion_ids, masks: ``N`` lists each (masks: 0/1 per completion token).
        logprobs: ``N`` lists of sampler log-probs, or ``None``. advantages: ``(N,)``.
    """
    batches = []
    for start in range(0, len(completion_ids), size):
        idx = range(start, min(start + size, len(completion_ids)))
        packed = pack([prompt_ids[i] for i in idx], [completion_ids[i] for i in idx], pad_id, padding_free)
        mask = torch.zeros_like(packed.completion_valid, dtype=torch.float32)
        sampler = torch.zeros_like(mask) if logprobs is not None else None
        for row, i in enumerate(idx):
            mask[row, : len(masks[i])] = torch.tensor(masks[i], dtype=torch.float32)
            if sampler is not None:
                sampler[row, : len(logprobs[i])] = torch.tensor(logprobs[i], dtype=torch.float32)
        batches.append(MicroBatch(packed, mask.to(device), advantages[list(idx)].to(device),
                                  None if sampler is None else sampler.to(device)))
    return batches


@dataclass
class UpdateStats:
    """Sums over the trained tokens of every micro-batch and iteration (reduced over ranks by :meth:`reduce`).

    ``kl``, ``clip_low``, ``clip_high`` are summed over all iterations; the sampler comparison (``lp_diff`` and the
    importance weights) over the first one, where the policy is still the one that generated the batch. With
    ``training.importance_level: sequence`` a sequence is clipped as a whole and counted once per trained token, so
    ``clip_ratio/*`` is the share of trained tokens in clipped sequences and ``ratio/max`` the largest ``s_i``.
    """

    kl: float = 0.0
    clip_low: float = 0.0
    clip_high: float = 0.0
    ratio_max: float = 0.0
    lp_diff: float = 0.0
    is_sum: float = 0.0
    is_min: float = math.inf
    is_max: float = -math.inf
    losses: List[float] = field(default_factory=list)  # per iteration, over the whole step
    grad_norms: List[float] = field(default_factory=list)  # per iteration, before clipping
    skipped: int = 0
    learning_rate: float = float("nan")  # what the step's (first) optimizer update used
    no_signal: bool = False  # every advantage 0 and no KL term: no optimizer update at all

    def add(self, result: Dict[str, torch.Tensor], mb: MicroBatch, old: torch.Tensor, first_iteration: bool) -> None:
        """Add one micro-batch's :func:`~.losses.per_token_loss` result. Indexing by the mask (not multiplying):
        placeholders on untrained tokens may be ``-inf``."""
        m = mb.mask.bool()
        ratio = result["ratio"].detach()[m]
        self.kl += result["kl"].detach()[m].sum().item()
        self.clip_low += result["clipped_low"][m].sum().item()
        self.clip_high += result["clipped_high"][m].sum().item()
        self.ratio_max = max(self.ratio_max, ratio.max().item() if ratio.numel() else 0.0)
        if first_iteration and mb.sampler_logprobs is not None:
            self.lp_diff += (old - mb.sampler_logprobs)[m].abs().sum().item()
            w = mb.is_weights[m]
            if w.numel():
                self.is_sum += w.sum().item()
                self.is_min = min(self.is_min, w.min().item())
                self.is_max = max(self.is_max, w.max().item())

    def reduce(self, dist: Dist) -> "UpdateStats":
        """The same sums over every rank's micro-batches (``loss``, ``grad_norm``, ``skipped`` are global already)."""
        kl, low, high, lp, is_sum = dist.sum([self.kl, self.clip_low, self.clip_high, self.lp_diff, self.is_sum])
        ratio_max, is_max = dist.max([self.ratio_max, self.is_max])
        [is_min] = dist.min([self.is_min])
        return UpdateStats(kl, low, high, ratio_max, lp, is_sum, is_min, is_max, self.losses, self.grad_norms,
                           self.skipped, self.learning_rate, self.no_signal)

    def metrics(self, num_tokens: int, num_iterations: int, sampler: bool) -> Dict[str, float]:
        """Per-token means under the logged names (``kl``, ``clip_ratio/*``, ``ratio/max``, ``sampler/*``, ...).
        ``loss`` and ``grad_norm`` are means over the ``num_iterations`` updates, each of which is also logged as
        ``loss/iteration_<k>`` and ``grad_norm/iteration_<k>`` (k from 1) when there are several."""
        tokens = max(num_tokens, 1)
        measured = tokens * num_iterations
        out = {"loss": _mean(self.losses), "grad_norm": _mean(self.grad_norms), "kl": self.kl / measured,
               "clip_ratio/low": self.clip_low / measured, "clip_ratio/high": self.clip_high / measured,
               "clip_ratio/region": (self.clip_low + self.clip_high) / measured,
               "ratio/max": self.ratio_max, "num_tokens": num_tokens, "nonfinite_skipped": self.skipped,
               "no_signal_skipped": int(self.no_signal), "learning_rate": self.learning_rate}
        if len(self.losses) > 1:
            for k, (loss, norm) in enumerate(zip(self.losses, self.grad_norms), start=1):
                out[f"loss/iteration_{k}"], out[f"grad_norm/iteration_{k}"] = loss, norm
        if sampler:
            out["sampler/logprob_abs_diff"] = self.lp_diff / tokens
            out["sampler/is_weight_mean"] = self.is_sum / tokens
            out["sampler/is_weight_min"] = self.is_min if math.isfinite(self.is_min) else float("nan")
            out["sampler/is_weight_max"] = self.is_max if math.isfinite(self.is_max) else float("nan")
        return out


def _mean(values: List[float]) -> float:
    return sum(values) / len(values) if values else float("nan")
