"""The update stage: ``num_iterations`` policy updates on one rank's share of a step, and what they measured.

For each iteration, each micro-batch: policy log-probs at the completion tokens (:mod:`.logprobs`) → sampler-correction
weights (:mod:`.objective`, first iteration) → the clipped surrogate (+ KL) per token (:func:`~.objective.per_token_loss`)
→ the ``loss_type`` aggregation over the whole step's totals (:func:`~.objective.aggregate`: N processes make one
process's update) → backward; then gradient clipping, AdamW, LR schedule. :class:`UpdateStats` adds up KL, clipping,
the sampler weights and the per-sequence sampler/trainer gap over micro-batches and iterations, reduced over ranks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

from ...config import Config
from ...generation.sampling_filter import FILTER_SETTINGS
from ...runs import names as rn
from ...runs.rollouts import fold_segments, token_record
from ...orchestrator.batch import ScoredBatch, TrainingRows
from ...orchestrator.stream_stats import SequenceGaps
from ..guards import check_sampler_mismatch
from ...distributed import Dist
from ..parallel.precision import Precision
from .logprobs import CompletionLogprobs, MicroBatch, build_micro_batches
from .shared_prefix import pack_shared
from .objective import BatchTotals, TokenLosses, aggregate, importance_weights, per_token_loss


@dataclass
class UpdateStats:
    """Sums over the trained tokens of every micro-batch and iteration (reduced over ranks by :meth:`reduce`).

    ``kl``, ``clip_low``, ``clip_high`` are summed over all iterations; the sampler comparison (``lp_diff`` and the
    importance weights) over the first one, where the policy is still the one that generated the batch. With
    ``training.importance_level: sequence`` a sequence is clipped as a whole and counted once per trained token, so
    ``clip_ratio/*`` is the share of trained tokens in clipped sequences and ``ratio/max`` the largest ``s_i``.
    """

    kl: float = 0.0
    entropy: float = 0.0  # summed over the first iteration's trained tokens
    entropy_seq_min: float = math.inf  # over sequences with trained tokens: each one's mean entropy
    entropy_seq_max: float = -math.inf
    clip_low: float = 0.0
    clip_high: float = 0.0
    ratio_max: float = 0.0
    lp_diff: float = 0.0
    gaps: SequenceGaps = field(default_factory=SequenceGaps)  # lp_diff per sequence (this rank's, in batch order)
    sampler_weight_sum: float = 0.0
    sampler_weight_min: float = math.inf
    sampler_weight_max: float = -math.inf
    losses: List[float] = field(default_factory=list)  # per iteration, over the whole step
    grad_norms: List[float] = field(default_factory=list)  # per iteration, before clipping
    skipped: int = 0
    learning_rate: float = float("nan")  # what the step's (first) optimizer update used
    no_signal: bool = False  # no signal: no forward, backward or update at all (:mod:`.no_signal`)

    def add(self, result: TokenLosses, mb: MicroBatch, old: torch.Tensor, first_iteration: bool,
            entropy: Optional[torch.Tensor] = None) -> None:
        """Add one micro-batch's :func:`~.objective.per_token_loss` result (and its tokens' ``(B, C)`` entropy, first
        iteration). Indexing by the mask (not multiplying): placeholders on untrained tokens may be ``-inf``."""
        m = mb.mask.bool()
        if entropy is not None:
            ent = torch.where(m, entropy.detach(), torch.zeros_like(entropy))
            self.entropy += ent.sum().item()
            counts = m.sum(dim=1)
            per_seq = (ent.sum(dim=1) / counts.clamp(min=1))[counts > 0]
            if per_seq.numel():
                self.entropy_seq_min = min(self.entropy_seq_min, per_seq.min().item())
                self.entropy_seq_max = max(self.entropy_seq_max, per_seq.max().item())
        ratio = result.ratio.detach()[m]
        self.kl += result.kl.detach()[m].sum().item()
        self.clip_low += result.clipped_low[m].sum().item()
        self.clip_high += result.clipped_high[m].sum().item()
        self.ratio_max = max(self.ratio_max, ratio.max().item() if ratio.numel() else 0.0)
        if first_iteration and mb.sampler_logprobs is not None:
            self.lp_diff += self.gaps.add(old, mb.sampler_logprobs, m)
            w = mb.sampler_weights[m]
            if w.numel():
                self.sampler_weight_sum += w.sum().item()
                self.sampler_weight_min = min(self.sampler_weight_min, w.min().item())
                self.sampler_weight_max = max(self.sampler_weight_max, w.max().item())

    def reduce(self, dist: Dist) -> "UpdateStats":
        """The same sums over every rank's micro-batches (``loss``, ``grad_norm``, ``skipped`` are global already)."""
        kl, low, high, lp, weight_sum, entropy = dist.sum([self.kl, self.clip_low, self.clip_high, self.lp_diff,
                                                           self.sampler_weight_sum, self.entropy])
        ratio_max, weight_max, ent_max = dist.max([self.ratio_max, self.sampler_weight_max, self.entropy_seq_max])
        weight_min, ent_min = dist.min([self.sampler_weight_min, self.entropy_seq_min])
        return replace(self, kl=kl, clip_low=low, clip_high=high, ratio_max=ratio_max, lp_diff=lp,
                       sampler_weight_sum=weight_sum, sampler_weight_min=weight_min, sampler_weight_max=weight_max,
                       entropy=entropy, entropy_seq_min=ent_min, entropy_seq_max=ent_max)

    def metrics(self, num_tokens: int, num_iterations: int, has_sampler_logprobs: bool) -> Dict[str, float]:
        """Per-token means under the logged names (``kl``, ``clip_ratio/*``, ``ratio/max``, ``sampler/*``, ...).
        ``loss`` and ``grad_norm`` are means over the ``num_iterations`` updates, each of which is also logged as
        ``loss/iteration_<k>`` and ``grad_norm/iteration_<k>`` (k from 1) when there are several."""
        tokens = max(num_tokens, 1)
        measured = tokens * num_iterations
        out = {rn.LOSS: _mean(self.losses), rn.GRAD_NORM: _mean(self.grad_norms), rn.KL: self.kl / measured,
               rn.CLIP_LOW: self.clip_low / measured, rn.CLIP_HIGH: self.clip_high / measured,
               rn.CLIP_REGION: (self.clip_low + self.clip_high) / measured,
               rn.ENTROPY: self.entropy / tokens, rn.ENTROPY_SEQ_MIN: _finite_or_nan(self.entropy_seq_min),
               rn.ENTROPY_SEQ_MAX: _finite_or_nan(self.entropy_seq_max),
               rn.RATIO_MAX: self.ratio_max, rn.NUM_TOKENS: num_tokens, rn.NONFINITE_SKIPPED: self.skipped,
               rn.NO_SIGNAL_SKIPPED: int(self.no_signal), rn.LEARNING_RATE: self.learning_rate}
        if len(self.losses) > 1:
            for k, (loss, norm) in enumerate(zip(self.losses, self.grad_norms), start=1):
                out[rn.per_iteration(rn.LOSS, k)], out[rn.per_iteration(rn.GRAD_NORM, k)] = loss, norm
        if has_sampler_logprobs:
            out[rn.SAMPLER_LOGPROB_ABS_DIFF] = self.lp_diff / tokens
            out[rn.SAMPLER_IS_WEIGHT_MEAN] = self.sampler_weight_sum / tokens
            out[rn.SAMPLER_IS_WEIGHT_MIN] = _finite_or_nan(self.sampler_weight_min)
            out[rn.SAMPLER_IS_WEIGHT_MAX] = _finite_or_nan(self.sampler_weight_max)
        return out


def _mean(values: List[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def _finite_or_nan(value: float) -> float:
    return value if math.isfinite(value) else float("nan")


@dataclass
class UpdateResult:
    """What one step's update did, over every rank.

    Attributes:
        stats: the reduced :class:`UpdateStats`. num_tokens: trained tokens of the step. has_sampler_logprobs:
        whether the rollout gave sampler log-probs. tokens_forward / tokens_padded: tokens the forward passes
        processed, real and with padding. token_records: with ``keep_tokens``, this rank's per-completion token
        values (:func:`~...runs.rollouts.token_record`) from the first iteration. owners: the completion each
        trained sequence belongs to (``TrainingRows.owners``; ``None``: one sequence per completion).
    """

    stats: UpdateStats
    num_tokens: int
    num_iterations: int
    has_sampler_logprobs: bool
    tokens_forward: int
    tokens_padded: int
    token_records: List[Dict[str, Any]] = field(default_factory=list)
    owners: Optional[List[int]] = None

    @property
    def skipped(self) -> int:
        """Updates skipped for a NaN/inf loss or gradient."""
        return self.stats.skipped

    def metrics(self) -> Dict[str, float]:
        """The update's logged numbers (:meth:`UpdateStats.metrics` plus ``tokens/forward``, ``tokens/padded``)."""
        return {**self.stats.metrics(self.num_tokens, self.num_iterations, self.has_sampler_logprobs),
                # what each forward/backward pass processed: real tokens (prompt + completion) and with padding
                rn.TOKENS_FORWARD: self.tokens_forward, rn.TOKENS_PADDED: self.tokens_padded}


class PolicyUpdate:
    """The policy (and reference), its optimizer and schedule, and how one step's batch updates them.

    Args:
        config: the run's config. policy: the (sharded) policy. ref: the frozen reference (``None``: no KL term, or
        a LoRA policy whose reference is itself with adapters off). optimizer, scheduler: AdamW and its LR schedule.
        precision: compute dtype (:mod:`..parallel.precision`). dist: the process group. pad_id: the tokenizer's
        padding id. padding_free: pack micro-batches without padding. shared_prefix: forward each shared prefix of a
        micro-batch once (:mod:`.shared_prefix`). compare_with_sampler: false with a repetition
        penalty (the trainer cannot reproduce the sampler's distribution: no correction, no stale-weights check).
        surrogate: the loss's policy term (:func:`~.surrogates.policy_term`; ``None``: PPO's clip).
    """

    def __init__(self, config: Config, policy: CompletionLogprobs, ref: Optional[CompletionLogprobs],
                 optimizer: torch.optim.Optimizer, scheduler: Any, *, precision: Precision, dist: Dist, pad_id: int,
                 padding_free: bool, compare_with_sampler: bool, surrogate: Optional[Callable] = None,
                 shared_prefix: bool = False):
        self.cfg, self.policy, self.ref, self.optimizer, self.scheduler = config, policy, ref, optimizer, scheduler
        self.surrogate = surrogate
        self.precision, self.dist, self.pad_id, self.padding_free = precision, dist, pad_id, padding_free
        self.compare_with_sampler, self.shared_prefix = compare_with_sampler, shared_prefix
        s = config.sampling
        # the trainer scores tokens under the same filtering the sampler used, so the two log-probs compare
        self.sampling_filter = {name: getattr(s, name) for name in FILTER_SETTINGS}

    def logprobs(self, model: CompletionLogprobs, mb: MicroBatch, entropy: Optional[str] = None) -> Any:
        """``(B, C)`` log-probs of a micro-batch's completion tokens under ``model`` (sampler's temperature and
        filtering), in the compute dtype; with ``entropy`` (``measure`` or ``train``) also their entropies
        (:meth:`~.logprobs.CompletionLogprobs.forward`)."""
        s, t = self.cfg.sampling, self.cfg.training
        with self.precision.autocast():
            return model(mb.packed, s.temperature, t.logprob_chunk_size, **self.sampling_filter, entropy=entropy)

    def reference_logprobs(self, mb: MicroBatch) -> torch.Tensor:
        """``(B, C)`` log-probs under the reference model (for the KL term): the frozen copy, or, for a LoRA policy,
        the policy itself with its adapters switched off (the base model; ``PeftModel.disable_adapter``)."""
        if self.ref is not None:
            return self.logprobs(self.ref, mb)
        with self.policy.lm.disable_adapter():
            return self.logprobs(self.policy, mb)

    def micro_batches(self, rows: TrainingRows) -> Tuple[List[MicroBatch], BatchTotals, int, int]:
        """This rank's micro-batches of its training rows, with the whole step's totals (a collective) and the step's
        real and padded token counts."""
        t, s, dist = self.cfg.training, self.cfg.sampling, self.dist
        batches = build_micro_batches(rows.prompt_ids, rows.completion_ids, rows.masks, rows.logprobs,
                                      rows.advantages, t.micro_batch_size, self.pad_id, dist.device, self.padding_free,
                                      pack_shared if self.shared_prefix else None)
        sequences, tokens, micro, real, padded = dist.sum([
            len(rows), sum(mb.mask.sum().item() for mb in batches), len(batches),
            sum(mb.packed.num_tokens for mb in batches), sum(mb.packed.input_ids.numel() for mb in batches)])
        with torch.no_grad():
            batches = [replace(mb, old_logprobs=self.logprobs(self.policy, mb) if t.num_iterations > 1 else None,
                               ref_logprobs=self.reference_logprobs(mb) if t.beta > 0 else None) for mb in batches]
        return batches, BatchTotals(int(sequences), int(tokens), int(micro), s.max_completion_length), \
            int(real), int(padded)

    def backward(self, mb: MicroBatch, totals: BatchTotals, stats: UpdateStats,
                 first: bool) -> Tuple[float, torch.Tensor, MicroBatch]:
        """One micro-batch's loss and backward pass; returns the loss, the log-probs the update started from and the
        micro-batch with its sampler-correction weights (computed once, from the first iteration's log-probs)."""
        t, dist = self.cfg.training, self.dist
        ent = "train" if t.entropy_coef > 0 else "measure" if first else None  # how the entropy is wanted (logprobs)
        logps, entropy = self.logprobs(self.policy, mb, ent) if ent else (self.logprobs(self.policy, mb), None)
        old = mb.old_logprobs if mb.old_logprobs is not None else logps.detach()
        if mb.sampler_logprobs is not None and mb.sampler_weights is None:
            mode = t.sampler_correction if self.compare_with_sampler else "none"
            mb = replace(mb, sampler_weights=importance_weights(old, mb.sampler_logprobs, mb.mask, mode,
                                                                t.sampler_correction_cap))
        result = per_token_loss(logps, old, mb.advantages, epsilon=t.epsilon, epsilon_high=t.epsilon_high,
                                beta=t.beta, ref_logps=mb.ref_logprobs, token_weights=mb.sampler_weights,
                                importance_level=t.importance_level, mask=mb.mask, entropy=entropy,
                                entropy_coef=t.entropy_coef, surrogate=self.surrogate)
        loss = aggregate(result.loss, mb.mask, t.loss_type, totals)
        (loss * dist.world_size).backward()  # FSDP averages gradients over ranks: undo it, sums are wanted
        stats.add(result, mb, old, first_iteration=first, entropy=entropy if first else None)
        return loss.item(), old, mb

    def update(self, batch: ScoredBatch, keep_tokens: bool = False) -> UpdateResult:
        """``num_iterations`` optimizer updates on this rank's share of the step (``batch``: its checked rollout and
        its ``(len(batch),)`` advantages); the loss of every ``loss_type`` is normalised by the whole step's totals, so
        N processes make the update one process would make on the same batch (a step without signal is not
        passed here: :mod:`.no_signal`). After the first iteration's backward passes, the step's mean
        |sampler - trainer| log-prob gap goes to the stale-weights guard (:func:`~..guards.check_sampler_mismatch`,
        with the batch's own ``sampler_lag``).

        Raises:
            StaleWeightsError: the gap is over ``vllm.max_logprob_mismatch`` on a batch sampled with current weights.
        """
        t, dist, out = self.cfg.training, self.dist, batch.rollout
        rows = batch.training_rows(t.mask_truncated_completions)
        batches, totals, real, padded = self.micro_batches(rows)
        stats = UpdateStats()
        kept: List[Tuple[List[float], Optional[List[float]]]] = []  # per sequence: trainer log-probs, IS weights
        for iteration in range(t.num_iterations):
            loss_sum = 0.0
            for k, mb in enumerate(batches):
                loss, old, mb = self.backward(mb, totals, stats, first=iteration == 0)
                batches[k] = mb  # with its sampler-correction weights, kept for the later iterations
                loss_sum += loss
                if keep_tokens and iteration == 0:
                    weights = mb.sampler_weights
                    kept += [(old[row, :n].tolist(), None if weights is None else weights[row, :n].tolist())
                             for row, n in enumerate(mb.packed.completion_valid.sum(dim=1).tolist())]
            if iteration == 0 and out.logprobs is not None and self.compare_with_sampler:
                [lp_diff] = dist.sum([stats.lp_diff])
                if math.isfinite(lp_diff):  # non-finite: the trainer's own log-probs; the update is skipped below
                    check_sampler_mismatch(lp_diff / max(totals.num_tokens, 1), self.cfg.vllm.max_logprob_mismatch,
                                           self.cfg.vllm.mode, batch.sampler_lag)
            self.step_optimizer(stats, dist.sum([loss_sum])[0], iteration)
        records = fold_segments([token_record(rows.prompt_ids[i], rows.completion_ids[i], rows.masks[i],
                                              None if rows.logprobs is None else rows.logprobs[i], lp, w)
                                 for i, (lp, w) in enumerate(kept)], rows.owners, len(out))
        return UpdateResult(stats.reduce(dist), num_tokens=totals.num_tokens, num_iterations=t.num_iterations,
                            has_sampler_logprobs=out.logprobs is not None, tokens_forward=real, tokens_padded=padded,
                            token_records=records, owners=rows.owners if len(rows) > len(out) else None)

    def step_optimizer(self, stats: UpdateStats, loss_sum: float, iteration: int) -> None:
        """Clip the gradients, then step AdamW and the schedule, unless the loss or gradient is NaN/inf (that would
        poison the weights and AdamW's moments); record what happened in ``stats``."""
        grad_norm = self.clip_gradients()
        stats.losses.append(loss_sum)
        stats.grad_norms.append(grad_norm)
        if iteration == 0:
            stats.learning_rate = self.optimizer.param_groups[0]["lr"]  # before the schedule moves on
        if math.isfinite(loss_sum) and math.isfinite(grad_norm):
            self.optimizer.step()
            self.scheduler.step()
        else:
            stats.skipped += 1
        self.optimizer.zero_grad(set_to_none=True)

    def clip_gradients(self) -> float:
        """Clip the gradient norm to ``training.max_grad_norm`` (0: no clipping); return the norm before clipping
        (over the whole model, also when it is sharded)."""
        t = self.cfg.training
        params = [p for p in self.policy.parameters() if p.requires_grad]
        norm = torch.nn.utils.clip_grad_norm_(params, t.max_grad_norm if t.max_grad_norm > 0 else math.inf)
        return float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)
