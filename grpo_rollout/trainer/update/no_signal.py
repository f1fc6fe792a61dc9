"""A step without learning signal: whether a step has one (the same answer on every rank), and what a step without
one reports instead of an update.

A step has no signal when no trained token on any rank has a nonzero advantage (every group's rewards were equal;
with ``training.credit: turn``, every turn's) and no term of the loss has a gradient without one
(:func:`~.objective.gradient_without_advantages`: ``beta > 0``, ``entropy_coef > 0``, a ``loss_function``). Its
gradient would be exactly 0, and AdamW would still move every weight through its momentum and weight decay: so the
step makes no forward or backward pass, no optimizer or learning-rate schedule step (:func:`skipped_update`, chosen by
:meth:`..recipe.GRPORecipe.update` with :func:`step_has_signal`), and the
recipe sends no weights (:meth:`..recipe.GRPORecipe.sync`).
"""

from __future__ import annotations

import math
from typing import List

from ...runs.rollouts import fold_segments, token_record
from ...orchestrator.batch import ScoredBatch, TrainingRows
from ...distributed import Dist
from .objective import gradient_without_advantages
from .policy_update import PolicyUpdate, UpdateResult, UpdateStats


def moving_tokens(rows: TrainingRows) -> int:
    """This rank's trained tokens (its completions' and their episodes' earlier sequences') whose advantage is not 0
    (a NaN counts: the update's non-finite guard deals with it)."""
    if isinstance(rows.advantages, list):
        return sum(1 for row, mask in zip(rows.advantages, rows.masks) for a, m in zip(row, mask) if m and a != 0)
    return sum(sum(mask) for a, mask in zip(rows.advantages.tolist(), rows.masks) if a != 0)


def step_has_signal(batch: ScoredBatch, training: "object", dist: Dist) -> bool:
    """Whether the step's update can change the weights: a loss term has a gradient without advantages, or a
    trained token on any rank has a nonzero advantage. A collective (every rank calls it and gets the same answer:
    one rank with signal means every rank updates)."""
    if gradient_without_advantages(training):
        return True
    [moving] = dist.max([moving_tokens(batch.training_rows(training.mask_truncated_completions))])
    return moving > 0


def skipped_update(updater: PolicyUpdate, batch: ScoredBatch, keep_tokens: bool) -> UpdateResult:
    """What a step without signal reports (a collective), with the metric names of an update: ``loss``,
    ``grad_norm``, ``kl`` and the clip ratios 0 and ``ratio/max`` 1 (what its passes would give),
    ``no_signal_skipped`` 1, ``tokens/forward`` and ``tokens/padded`` 0 (no pass ran), ``entropy`` and the sampler
    comparison ``nan`` (not measured: the stale-weights guard checks the next step that updates); with
    ``keep_tokens``, token records without trainer log-probs or importance weights."""
    t, out = updater.cfg.training, batch.rollout
    rows = batch.training_rows(t.mask_truncated_completions)
    [num_tokens] = updater.dist.sum([sum(map(sum, rows.masks))])
    n = t.num_iterations
    stats = UpdateStats(losses=[0.0] * n, grad_norms=[0.0] * n, no_signal=True, entropy=math.nan, ratio_max=1.0,
                        lp_diff=math.nan, sampler_weight_sum=math.nan,
                        learning_rate=updater.optimizer.param_groups[0]["lr"])  # the rate a step would use
    records = fold_segments([token_record(rows.prompt_ids[i], rows.completion_ids[i], rows.masks[i],
                                          None if rows.logprobs is None else rows.logprobs[i], None, None)
                             for i in range(len(rows))], rows.owners, len(out)) if keep_tokens else []
    return UpdateResult(stats, num_tokens=int(num_tokens), num_iterations=n,
                        has_sampler_logprobs=out.logprobs is not None, tokens_forward=0, tokens_padded=0,
                        token_records=records)
