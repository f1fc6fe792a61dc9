"""What streaming rollouts did for one step (:class:`StreamStats`: staleness, drops, waits, idle shares) and the
update's per-sequence sampler/trainer log-prob gap (:class:`SequenceGaps`) that splits the gap into fresh and stale
samples. Built by :mod:`.stream` and the update; merged over ranks and shown by trainer/reporting."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

from ..runs import names as rn


@dataclass
class SequenceGaps:
    """Each trained sequence's sampler/trainer log-prob gap, in batch order (the update's first iteration): ``sums``,
    its ``|Δlogp|`` summed over its trained tokens (nats), and ``tokens``, how many it has."""

    sums: List[float] = field(default_factory=list)
    tokens: List[int] = field(default_factory=list)

    def add(self, trainer: torch.Tensor, sampler: torch.Tensor, mask: torch.Tensor) -> float:
        """Add a micro-batch's ``(B, C)`` log-probs (``mask``: ``(B, C)`` bool, its trained tokens; placeholders off
        it may be ``-inf``); returns the gap summed over all its trained tokens."""
        per_sequence = torch.where(mask, (trainer - sampler).abs(), 0.0).sum(dim=1)
        self.sums += per_sequence.tolist()
        self.tokens += mask.sum(dim=1).tolist()
        return per_sequence.sum().item()

    def split(self, stale: Sequence[bool]) -> Tuple[Tuple[float, int], Tuple[float, int]]:
        """``((gap sum, tokens) of the fresh sequences, (gap sum, tokens) of the stale ones)``; ``stale``: per
        sequence, whether older weights than the trainer's sampled it."""
        parts = [(0.0, 0), (0.0, 0)]
        for total, tokens, old in zip(self.sums, self.tokens, stale):
            parts[old] = (parts[old][0] + total, parts[old][1] + tokens)
        return parts[0], parts[1]


def _summed(pairs: List[Tuple[float, int]]) -> Tuple[float, int]:
    """``(gap sum, tokens)`` pairs added up."""
    return sum(total for total, _ in pairs), sum(tokens for _, tokens in pairs)


@dataclass
class StreamStats:
    """What the stream did for one step.

    Attributes:
        staleness: versions each trained group was behind the trainer (oldest weights first).
        dropped_stale: groups dropped since the last step for being more than ``k`` versions behind (rolled again).
        dropped_no_signal: groups ``keep`` left out since the last step (``None``: no ``keep``). in_flight: groups
        running when the step took its groups. buffered: finished groups left in the buffer after it. waited_s:
        seconds the trainer waited. idle_share: the share of the time since the previous step took its groups during
        which no group was rolling out (the servers idle, as far as this process knows). let_through: groups without
        reward variance this step took anyway, ``max_rounds`` × a step's groups without it having been dropped
        (dynamic sampling).
        skipped_stale: the prompts left out of the epoch, dropped as stale on every attempt.
        gap_fresh, gap_stale: the sampler/trainer log-prob gap summed over the trained tokens of samples drawn by the
        trainer's current weights, and by older ones, and those tokens (:meth:`with_gaps`).
    """

    staleness: List[int]
    dropped_stale: int = 0
    dropped_no_signal: Optional[int] = None
    in_flight: int = 0
    buffered: int = 0
    waited_s: float = 0.0
    idle_share: float = 0.0
    let_through: int = 0
    skipped_stale: List[Any] = field(default_factory=list)
    gap_fresh: Tuple[float, int] = (0.0, 0)
    gap_stale: Tuple[float, int] = (0.0, 0)

    def with_gaps(self, gaps: SequenceGaps, group_size: int,
                  owners: Optional[Sequence[int]] = None) -> "StreamStats":
        """These stats with the update's per-sequence ``gaps`` split into fresh and stale samples (the batch's groups
        are in :attr:`staleness`'s order, ``group_size`` completions each; ``owners``: the completion each trained
        sequence belongs to, when an episode has several: ``TrainingRows.owners``)."""
        stale = [age > 0 for age in self.staleness for _ in range(group_size)]
        stale = stale if owners is None else [stale[i] for i in owners]
        fresh, old = gaps.split(stale)
        return replace(self, gap_fresh=fresh, gap_stale=old)

    @staticmethod
    def merge(parts: List["StreamStats"]) -> "StreamStats":
        """Every rank's, as one: the groups' staleness together, counts summed, the longest wait, the smallest idle
        share (the servers are shared: they idle at most while the least idle process has no group running)."""
        no_signal = [p.dropped_no_signal for p in parts if p.dropped_no_signal is not None]
        return StreamStats([x for p in parts for x in p.staleness], sum(p.dropped_stale for p in parts),
                           sum(no_signal) if no_signal else None, sum(p.in_flight for p in parts),
                           sum(p.buffered for p in parts), max((p.waited_s for p in parts), default=0.0),
                           min((p.idle_share for p in parts), default=0.0), sum(p.let_through for p in parts),
                           [x for p in parts for x in p.skipped_stale], _summed([p.gap_fresh for p in parts]),
                           _summed([p.gap_stale for p in parts]))

    def metrics(self, step_s: Optional[float] = None) -> Dict[str, float]:
        """The step's ``async/*`` metrics, ``time/waiting_for_rollouts``, the trainer's busy share of a step of
        ``step_s`` seconds (when given) and the sampler/trainer gap of fresh and stale samples (those with trained
        tokens)."""
        out = {rn.STALENESS_MEAN: sum(self.staleness) / max(len(self.staleness), 1),
               rn.STALENESS_MAX: max(self.staleness, default=0), rn.GROUPS_DROPPED_STALE: self.dropped_stale,
               rn.GROUPS_IN_FLIGHT: self.in_flight, rn.BUFFER_GROUPS: self.buffered,
               rn.TIME_WAITING_FOR_ROLLOUTS: self.waited_s, rn.ROLLOUTS_IDLE_SHARE: self.idle_share,
               rn.GROUPS_SKIPPED_STALE: len(self.skipped_stale)}
        if step_s:
            out[rn.TRAINER_BUSY_SHARE] = min(1.0, max(0.0, 1.0 - self.waited_s / step_s))
        for key, (total, tokens) in ((rn.SAMPLER_LOGPROB_ABS_DIFF_FRESH, self.gap_fresh),
                                     (rn.SAMPLER_LOGPROB_ABS_DIFF_STALE, self.gap_stale)):
            if tokens:
                out[key] = total / tokens
        if self.dropped_no_signal is None:
            return out
        return {**out, rn.DS_GROUPS_DROPPED: self.dropped_no_signal, rn.DS_FILLED: float(self.let_through == 0)}

    def notes(self, max_staleness: int) -> List[str]:
        """What the console says about this step's stream (empty when nothing unusual happened)."""
        out = []
        if self.let_through:
            out.append(f"dynamic sampling took {self.let_through} group(s) without reward variance, after dropping "
                       "training.dynamic_sampling.max_rounds × a step's groups without it")
        for prompt in self.skipped_stale:
            text = str(prompt if not isinstance(prompt, list) else prompt[-1].get("content", prompt))
            out.append(f"left out of this epoch after every rollout of it finished more than {max_staleness} weight "
                       f"version(s) behind (its episodes take longer than the steps allow; raise "
                       f"training.max_staleness to train it): {text[:80]!r}")
        return out
