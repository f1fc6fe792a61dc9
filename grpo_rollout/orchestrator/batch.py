"""The typed batch that travels from the rollout to the loss, and the step's timings.

One step of one rank, as data (:mod:`grpo_rollout.trainer.recipe` passes these between its stages)::

    rollout stage ─▶ ScoredBatch(rollout, scores, generated_at,      groups of completions, rewards per function,
                                 sampler_lag)                      how far behind the sampler's weights were
    recipe        ─▶ ScoredBatch.with_advantages(...)                group-relative, over the whole step
    update stage  ─▶ UpdateResult (trainer/update/policy_update.py)  loss parts, grad norm, clip/KL/IS statistics

A :class:`ScoredBatch` keeps the checked rollout (token ids, masks, sampler log-probs, extras, the weight version
that sampled it: :class:`~grpo_rollout.rollouts.contract.RolloutOutput`) and, aligned with it completion by
completion, what scoring added (:class:`CompletionScores`); selecting groups selects both at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

from ..runs import names as rn
from ..runs.completion import CompletionRecord
from ..rewards.calling import RewardResult
from ..rollouts.contract import RolloutOutput
from .stream_stats import StreamStats


@dataclass(kw_only=True)
class CompletionScores(RewardResult):
    """What scoring knows of each completion of a batch, in rollout order (gathered on every rank for metrics and
    logs): the reward stage's scores (:class:`~grpo_rollout.rewards.calling.RewardResult`: ``rewards``,
    ``per_function``, ``timed_out``, ``time_limits``) and what else the trainer knows of each completion.

    Attributes:
        prompts: the prompt each completion answered, as the model saw it (an environment's: what ``reset`` gave).
        texts: the decoded completions. lengths: completion tokens. truncated: cut by the budget. extras: the
        rollout's extras (name → one value per completion). weight_versions: per completion, the oldest and newest
        weight version that sampled it (its rollout call's answers; one call is one group when streaming); empty or
        ``None`` where unknown (shared weights). trained_tokens: per completion, its tokens the update trains on
        (``completion_mask`` 1); empty or ``None`` where unknown.
    """

    prompts: List[Any]
    texts: List[str]
    lengths: List[int]
    truncated: List[bool]
    extras: Dict[str, List[Any]]
    weight_versions: List[Optional[Tuple[int, int]]] = field(default_factory=list)
    trained_tokens: List[Optional[int]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.rewards)

    def select(self, rows: Sequence[int]) -> "CompletionScores":
        """The given completions, in that order."""
        rows = list(rows)
        def pick(values: List[Any]) -> List[Any]:
            return [values[i] for i in rows]

        return CompletionScores(rewards=pick(self.rewards),
                                per_function={k: pick(v) for k, v in self.per_function.items()},
                                timed_out={k: pick(v) for k, v in self.timed_out.items()},
                                time_limits=dict(self.time_limits), prompts=pick(self.prompts),
                                texts=pick(self.texts), lengths=pick(self.lengths), truncated=pick(self.truncated),
                                extras={k: pick(v) for k, v in self.extras.items()},
                                weight_versions=pick(self.weight_versions) if self.weight_versions else [],
                                trained_tokens=pick(self.trained_tokens) if self.trained_tokens else [])

    @staticmethod
    def merge(parts: List["CompletionScores"]) -> "CompletionScores":
        """One after another (rank order, refill rounds); an extra missing in a part is ``None`` for its
        completions."""
        def cat(name: str) -> List[Any]:
            return [x for part in parts for x in getattr(part, name)]

        def by_key(name: str) -> Dict[str, List[Any]]:
            keys = list(dict.fromkeys(k for part in parts for k in getattr(part, name)))
            return {k: [x for part in parts for x in getattr(part, name).get(k, [None] * len(part))] for k in keys}

        timed_out = {k: [bool(f) for f in flags] for k, flags in by_key("timed_out").items()}  # None: not reported
        versions = [v for part in parts for v in part.weight_versions or [None] * len(part)]
        trained = [t for part in parts for t in part.trained_tokens or [None] * len(part)]
        return CompletionScores(rewards=cat("rewards"), per_function=by_key("per_function"), timed_out=timed_out,
                                time_limits={k: v for part in parts for k, v in part.time_limits.items()},
                                prompts=cat("prompts"), texts=cat("texts"), lengths=cat("lengths"),
                                truncated=cat("truncated"), extras=by_key("extras"),
                                weight_versions=versions, trained_tokens=trained)

    def records(self, advantages: Optional[Sequence[float]] = None) -> List[CompletionRecord]:
        """One :class:`~grpo_rollout.runs.completion.CompletionRecord` per completion, in order (``advantages``:
        one per completion, or ``None`` where none were computed)."""
        return [CompletionRecord(prompt=self.prompts[i], completion=self.texts[i], reward=self.rewards[i],
                                 rewards={k: v[i] for k, v in self.per_function.items()},
                                 advantage=None if advantages is None else float(advantages[i]),
                                 truncated=self.truncated[i], extras={k: v[i] for k, v in self.extras.items()},
                                 weight_versions=self.weight_versions[i] if self.weight_versions else None)
                for i in range(len(self))]

    def timeout_notes(self, num_generations: int, width: int = 60) -> List[str]:
        """One line per completion a reward gave up on for lack of time, naming the reward, the completion (index,
        group, sample) and its start; empty when none did."""
        notes = []
        for name, flags in self.timed_out.items():
            limit = self.time_limits.get(name)
            within = f" within its {limit:g} s" if limit else " in time"
            for i in (i for i, f in enumerate(flags) if f):
                text = self.texts[i] if len(self.texts[i]) <= width else self.texts[i][:width] + "…"
                notes.append(f"reward `{name}` could not score completion {i} (group {i // num_generations}, sample "
                             f"{i % num_generations}){within} and gave it {self.per_function[name][i]:g}: {text!r}")
        return notes

    def untrained(self) -> List[int]:
        """The completions (indices) with no token to train on: ``completion_mask`` 0 on every token, or none."""
        return [i for i, t in enumerate(self.trained_tokens) if t == 0]

    def untrained_notes(self, num_generations: int) -> List[str]:
        """At most one line: how many completions have no trained token, naming the first (index, group, sample);
        empty when every completion has one (or the counts are unknown)."""
        found = self.untrained()
        if not found:
            return []
        i, more = found[0], (f" (and {len(found) - 1} more this step)" if len(found) > 1 else "")
        return [f"completion {i} (group {i // num_generations}, sample {i % num_generations}) has no token to train "
                f"on{more}: its completion_mask is 0 on all its {self.lengths[i]} tokens, so it adds nothing to the "
                "update while its reward still counts in its group's baseline; the rollout masked it whole (e.g. a "
                "re-tokenized turn, or inserted tokens that used up sampling.max_completion_length): see "
                "completions/untrained and the rollout's completion_mask"]


@dataclass
class ScoredBatch:
    """One rank's completions of a step, grouped by prompt (``num_generations`` in a row), scored.

    Attributes:
        rollout: the checked rollout (ids, masks, sampler log-probs, extras, ``weight_version``).
        scores: what scoring added, aligned with ``rollout``.
        generated_at: when generation ended (``time.perf_counter()``, seconds).
        sampler_lag: weight versions the oldest sampled completion was behind the trainer when the batch was
            collected (0 synchronously; streaming, 0 to ``training.max_staleness``; checked by
            :meth:`.stage.RolloutStage.checked_version`, read by the stale-weights guard).
        advantages: ``(len,)`` float32, this batch's, added by :meth:`with_advantages` once the whole step's rewards
            are known (``GRPORecipe.collect``). step_advantages: ``(every rank's len,)`` the whole step's,
            in rank order (what metrics and records report).
        stream: with streaming rollouts, what the stream did for this step
            (:class:`~.stream_stats.StreamStats`: each group's staleness, drops, groups in flight, waiting).
        token_advantages: with ``training.credit: turn``, each completion's per-token advantages (``len`` lists;
            trainer/update/turn_credit.py); ``advantages`` then hold each completion's mean over its trained tokens.
    """

    rollout: RolloutOutput
    scores: CompletionScores
    generated_at: float
    sampler_lag: int = 0
    advantages: Optional[torch.Tensor] = None
    step_advantages: Optional[torch.Tensor] = None
    stream: Optional[StreamStats] = None
    token_advantages: Optional[List[List[float]]] = None

    def __len__(self) -> int:
        return len(self.rollout)

    @property
    def num_groups(self) -> int:
        return self.rollout.num_prompts

    def select_groups(self, groups: Sequence[int]) -> "ScoredBatch":
        """The given groups (prompt indices), rollout and scores together."""
        g = self.rollout.num_generations
        groups = list(groups)
        return ScoredBatch(self.rollout.select_groups(groups), self.scores.select([i * g + j for i in groups
                                                                                  for j in range(g)]),
                           self.generated_at, self.sampler_lag)

    @staticmethod
    def concat(batches: List["ScoredBatch"]) -> "ScoredBatch":
        """The groups of several batches, in order (generation time and sampler lag: the largest)."""
        return ScoredBatch(RolloutOutput.concat([b.rollout for b in batches]),
                           CompletionScores.merge([b.scores for b in batches]),
                           max(b.generated_at for b in batches), max(b.sampler_lag for b in batches))

    def trained_masks(self, mask_truncated: bool) -> List[List[int]]:
        """Each completion's mask of trained tokens (0/1 per completion token); with ``mask_truncated``
        (``training.mask_truncated_completions``) a truncated completion's is all 0."""
        return [[0] * len(m) if (mask_truncated and cut) else m
                for m, cut in zip(self.rollout.completion_mask, self.scores.truncated)]

    def training_rows(self, mask_truncated: bool) -> "TrainingRows":
        """The sequences the update trains on: each completion's (in order), then each episode's earlier sequences
        (``rollout.segments``, a context edit) with their episode's advantage (per token with ``training.credit:
        turn``: the episode's mean, ``advantages``) and its truncation (``mask_truncated``: all 0 when cut)."""
        out, masks = self.rollout, self.trained_masks(mask_truncated)
        advantages = self.token_advantages or self.advantages
        rows = TrainingRows(list(out.prompt_ids), list(out.completion_ids), masks,
                            None if out.logprobs is None else list(out.logprobs),
                            list(advantages) if isinstance(advantages, list) else advantages, list(range(len(out))))
        extra = [(i, seg) for i, segs in enumerate(out.segments or []) for seg in segs]
        for i, seg in extra:
            cut = mask_truncated and self.scores.truncated[i]
            rows.prompt_ids.append(seg.prompt_ids)
            rows.completion_ids.append(seg.completion_ids)
            rows.masks.append([0] * len(seg.completion_mask) if cut else seg.completion_mask)
            if rows.logprobs is not None:
                rows.logprobs.append(seg.logprobs)
            if isinstance(rows.advantages, list):
                rows.advantages.append([float(self.advantages[i])] * len(seg.completion_ids))
            rows.owners.append(i)
        if extra and isinstance(rows.advantages, torch.Tensor):
            rows.advantages = rows.advantages[torch.tensor(rows.owners)]
        return rows

    def with_advantages(self, advantages: torch.Tensor, step_advantages: torch.Tensor) -> "ScoredBatch":
        """This batch with its advantages ``(len,)`` and the whole step's ``(every rank's len,)``."""
        return replace(self, advantages=advantages, step_advantages=step_advantages)


@dataclass
class TrainingRows:
    """The ``R`` sequences one rank's update trains on (:meth:`ScoredBatch.training_rows`): its ``N`` completions,
    then the episodes' earlier sequences (``R >= N``).

    Attributes:
        prompt_ids, completion_ids, masks: ``R`` lists (masks: 0/1 per completion token, 1 = trained).
        logprobs: ``R`` lists of sampler log-probs (nats), or ``None``.
        advantages: ``(R,)`` float32, or ``R`` lists of per-token advantages (``training.credit: turn``).
        owners: ``R`` completion indices: the episode each row belongs to (row ``i < N`` is completion ``i``).
    """

    prompt_ids: List[List[int]]
    completion_ids: List[List[int]]
    masks: List[List[int]]
    logprobs: Optional[List[List[float]]]
    advantages: Any
    owners: List[int]

    def __len__(self) -> int:
        return len(self.completion_ids)


@dataclass
class StepTimes:
    """``time.perf_counter()`` marks of one step (seconds): start, generation done, rewards and advantages done,
    update done, weight sync done; and ``sleep_wake``, the seconds spent putting the servers to sleep (within
    training) and waking them (within the sync), ``None`` without ``vllm.sleep_during_training``."""

    start: float
    generated: float = 0.0
    scored: float = 0.0
    trained: float = 0.0
    synced: float = 0.0
    sleep_wake: Optional[float] = None

    def metrics(self) -> Dict[str, float]:
        """The ``time/*`` metrics (seconds)."""
        out = {rn.TIME_GENERATION: self.generated - self.start, rn.TIME_REWARDS: self.scored - self.generated,
               rn.TIME_TRAINING: self.trained - self.scored, rn.TIME_SYNC: self.synced - self.trained,
               rn.TIME_STEP: self.synced - self.start}
        return out if self.sleep_wake is None else {**out, rn.TIME_SLEEP_WAKE: self.sleep_wake}
