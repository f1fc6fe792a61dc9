"""The streaming half of the rollout stage (``training.max_staleness`` >= 1): each group its own rollout call on a
:class:`~.stream.GroupStream`, a step taking the groups that finished, at most ``max_staleness`` weight versions
behind. A mixin of :class:`~.stage.RolloutStage`, whose attributes it reads (``cfg``, ``dist``, ``dataset``,
``prompt_order``, ``curriculum``, ``failures``, ``stream``) and whose :meth:`generate_and_score` it
calls for each group.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any, Dict, Optional, Tuple

from .batch import ScoredBatch
from .dynamic_sampling import groups_with_signal
from .stream import GroupStream
from .versions import StaleWeightsError, version_lag_problem


class StreamedGroups:
    """Streaming rollouts for :class:`~.stage.RolloutStage` (see the module docstring)."""

    def from_stream(self, step: int, version: int) -> ScoredBatch:
        """This rank's groups of step ``step`` (0-based), taken from the stream (opened on the first call): every one
        at most ``max_staleness`` versions behind ``version``; ``sampler_lag`` is the largest lag, ``stream`` what the
        stream did.

        Raises:
            StaleWeightsError: a group was sampled with newer weights than the trainer's (another trainer).
            RolloutError / RewardError: a group's rollout or reward failed (no group starts after it).
        """
        if self.stream is None:
            self.stream = self.open_stream(step)
        groups, stats = self.stream.take(version)
        for group in groups:
            problem = version_lag_problem(step, group.rollout.weight_version, version, self.cfg.training.staleness())
            if problem:
                raise StaleWeightsError(problem)
        batch = ScoredBatch.concat(groups)
        return replace(batch, generated_at=time.perf_counter(), sampler_lag=max(stats.staleness, default=0),
                       stream=stats)

    def open_stream(self, step: int) -> GroupStream:
        """The stream of this rank's groups from step ``step`` on (after a resume: from where the saved run's stream
        stood, when it had as many processes and prompts per step), up to the run's last step (``max_steps``, which
        ``num_epochs`` sets): no group of a later step starts."""
        t = self.cfg.training
        share = t.prompts_per_step // self.dist.world_size
        start, used, replaced = step * share, (), 0
        saved = self.prompt_order.resumed_stream  # every rank's stream_state() at the checkpoint
        if saved and len(saved) == self.dist.world_size and all(r["groups_per_step"] == share for r in saved):
            mine = saved[self.dist.rank]
            start, used, replaced = mine["first_unused"], mine["used"], mine.get("replaced", 0)
        g = self.cfg.sampling.num_generations
        keep = (lambda batch: bool(groups_with_signal(batch.scores.rewards, g))) if t.dynamic_sampling.enabled \
            else None
        return GroupStream(self.roll_group, self.position_row, ready=self.position_ready, groups_per_step=share,
                           max_staleness=t.staleness(), max_inflight=t.max_inflight_groups or 2 * share,
                           start=start, used=tuple(used), keep=keep,
                           max_refused=t.dynamic_sampling.max_rounds * share if keep else None,
                           end=t.max_steps * share, replaced=replaced)

    def position_index(self, position: int) -> Tuple[int, int]:
        """Position ``position`` of this rank's prompt sequence: the step it belongs to and its dataset row's index
        (this rank's share of each step's prompts, step after step)."""
        share = self.cfg.training.prompts_per_step // self.dist.world_size
        step = position // share
        return step, self.prompt_order.indices(step)[self.dist.rank * share + position % share]

    def position_row(self, position: int) -> Tuple[int, Dict[str, Any]]:
        """Position ``position`` of this rank's prompt sequence: the step it belongs to and its dataset row."""
        step, index = self.position_index(position)
        return step, self.dataset[index]

    def position_ready(self, position: int) -> bool:
        """Whether position ``position``'s step can be drawn now (a curriculum's draw waits for the visits it
        applies)."""
        return self.prompt_order.ready(position // (self.cfg.training.prompts_per_step // self.dist.world_size))

    def roll_group(self, position: int, step: int, row: Dict[str, Any], attempt: int) -> Optional[ScoredBatch]:
        """One group: ``row``'s rollout and rewards (``None``: it failed outside the model on every attempt and is
        left out, ``rollout.on_error``). Seeded from step ``step``'s seed, the group's ``position`` in this rank's
        prompt sequence and its ``attempt`` (a group rolled again gets another seed): each group is its own call, so
        two groups of the same prompt text (a repeated dataset row) must not share a seed."""
        index = self.position_index(position)[1]
        ids = [index] if self.curriculum is not None else None
        share = self.cfg.training.prompts_per_step // self.dist.world_size
        return self.failures.play_group(lambda retry: self.generate_and_score(
            step, [row], self.group_sampling(step, position, attempt, retry), row_ids=ids),
            index, row.get(self.cfg.data.prompt_column), most_in_a_row=share)

    def trained(self) -> None:
        """The step's groups were trained (streaming: their prompts now count as used)."""
        if self.stream is not None:
            self.stream.commit()

    def stream_state(self) -> Optional[Dict[str, Any]]:
        """This rank's place in its prompt sequence for a checkpoint (``None`` without a stream)."""
        if self.stream is None:
            return None
        share = self.cfg.training.prompts_per_step // self.dist.world_size
        return {"groups_per_step": share, **self.stream.state()}
