"""The streaming batch source (``training.max_staleness`` >= 1): each group its own rollout call on a
:class:`~.stream.GroupStream`, a step taking the groups that finished, at most ``max_staleness`` weight versions
behind. :class:`StreamSource` answers the same ``next_batch(step, version)`` as :class:`~.stage.SyncSource`; it calls
its :class:`~.stage.RolloutStage`'s :meth:`~.stage.RolloutStage.generate_and_score` for each group and checks each
group's version with the stage's :meth:`~.stage.RolloutStage.checked_version`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Dict, Mapping, Optional, Tuple

from .batch import ScoredBatch
from .dynamic_sampling import groups_with_signal
from .stream import GroupStream

if TYPE_CHECKING:
    from .stage import RolloutStage


@dataclass(frozen=True)
class StreamPosition:
    """One rank's place in its prompt sequence, as a checkpoint keeps it (``TrainerState.stream``, one per rank).

    Attributes:
        groups_per_step: this rank's groups a step when it was saved (a resume with another number starts afresh).
        first_unused: every earlier position was trained or left out. used: later positions that were.
        replaced: positions left out so far, each replaced by one past the end of the run.
    """

    groups_per_step: int
    first_unused: int
    used: Tuple[int, ...] = ()
    replaced: int = 0

    def to_json(self) -> Dict[str, Any]:
        """The plain mapping a checkpoint stores."""
        return {"groups_per_step": self.groups_per_step, "first_unused": self.first_unused, "used": list(self.used),
                "replaced": self.replaced}

    @classmethod
    def of(cls, saved: Mapping[str, Any]) -> StreamPosition:
        """A checkpoint's mapping read back (one written before ``replaced`` existed counts none)."""
        return cls(int(saved["groups_per_step"]), int(saved["first_unused"]), tuple(saved["used"]),
                   int(saved.get("replaced", 0)))


class StreamSource:
    """Groups taken from a stream of worker threads (see the module docstring); opened on the first
    :meth:`next_batch`.

    Attributes:
        stage: the rollout stage whose dataset, prompt order, failures and ``generate_and_score`` it uses.
        stream: the groups rolling out (``None`` until the first step).
    """

    def __init__(self, stage: RolloutStage):
        self.stage = stage
        self.stream: Optional[GroupStream] = None
        self.share = stage.cfg.training.prompts_per_step // stage.dist.world_size

    def next_batch(self, step: int, version: int) -> ScoredBatch:
        """This rank's groups of step ``step`` (0-based), taken from the stream (opened on the first call): every one
        at most ``max_staleness`` versions behind ``version``; ``sampler_lag`` is the largest lag, ``stream`` what the
        stream did.

        Raises:
            StaleWeightsError: a group was sampled with newer weights than the trainer's (another trainer).
            RolloutError / RewardError: a group's rollout or reward failed (no group starts after it).
        """
        if self.stream is None:
            self.stream = self.open(step)
        groups, stats = self.stream.take(version)
        allowed = self.stage.cfg.training.staleness()
        batch = ScoredBatch.concat([self.stage.checked_version(step, g, version, allowed) for g in groups])
        return replace(batch, generated_at=time.perf_counter(), stream=stats)

    def open(self, step: int) -> GroupStream:
        """The stream of this rank's groups from step ``step`` on (after a resume: from where the saved run's stream
        stood, when it had as many processes and prompts per step), up to the run's last step (``max_steps``, which
        ``num_epochs`` sets): no group of a later step starts."""
        t, dist, share = self.stage.cfg.training, self.stage.dist, self.share
        mine = StreamPosition(share, step * share)
        saved = [StreamPosition.of(r) for r in self.stage.prompt_order.resumed_stream or ()]  # every rank's state()
        if saved and len(saved) == dist.world_size and all(r.groups_per_step == share for r in saved):
            mine = saved[dist.rank]
        g = self.stage.cfg.sampling.num_generations
        keep = (lambda batch: bool(groups_with_signal(batch.scores.rewards, g))) if t.dynamic_sampling.enabled \
            else None
        return GroupStream(self.roll_group, self.position_row, ready=self.position_ready, groups_per_step=share,
                           max_staleness=t.staleness(), max_inflight=t.max_inflight_groups or 2 * share,
                           start=mine.first_unused, used=mine.used, keep=keep,
                           max_refused=t.dynamic_sampling.max_rounds * share if keep else None,
                           end=t.max_steps * share, replaced=mine.replaced)

    def position_index(self, position: int) -> Tuple[int, int]:
        """Position ``position`` of this rank's prompt sequence: the step it belongs to and its dataset row's index
        (this rank's share of each step's prompts, step after step)."""
        step = position // self.share
        return step, self.stage.prompt_order.indices(step)[self.stage.dist.rank * self.share + position % self.share]

    def position_row(self, position: int) -> Tuple[int, Dict[str, Any]]:
        """Position ``position`` of this rank's prompt sequence: the step it belongs to and its dataset row."""
        step, index = self.position_index(position)
        return step, self.stage.dataset[index]

    def position_ready(self, position: int) -> bool:
        """Whether position ``position``'s step can be drawn now (a curriculum's draw waits for the visits it
        applies)."""
        return self.stage.prompt_order.ready(position // self.share)

    def roll_group(self, position: int, step: int, row: Dict[str, Any], attempt: int) -> Optional[ScoredBatch]:
        """One group: ``row``'s rollout and rewards (``None``: it failed outside the model on every attempt and is
        left out, ``rollout.on_error``). Seeded from step ``step``'s seed, the group's ``position`` in this rank's
        prompt sequence and its ``attempt`` (a group rolled again gets another seed): each group is its own call, so
        two groups of the same prompt text (a repeated dataset row) must not share a seed."""
        stage = self.stage
        index = self.position_index(position)[1]
        ids = [index] if stage.curriculum is not None else None

        def play(retry: int) -> ScoredBatch:
            return stage.generate_and_score(step, [row], stage.group_sampling(step, position, attempt, retry),
                                            row_ids=ids)
        return stage.failures.play_group(play, index, row.get(stage.cfg.data.prompt_column), most_in_a_row=self.share)

    def trained(self) -> None:
        """The step's groups were trained: their prompts now count as used."""
        if self.stream is not None:
            self.stream.commit()

    def state(self) -> Optional[Dict[str, Any]]:
        """This rank's place in its prompt sequence for a checkpoint (:meth:`StreamPosition.to_json`; ``None`` before
        the first step)."""
        if self.stream is None:
            return None
        return StreamPosition.of({"groups_per_step": self.share, **self.stream.state()}).to_json()

    def wake(self) -> None:
        """The curriculum counted a step's visits: a stream waiting to draw a later step goes on."""
        if self.stream is not None:
            self.stream.wake()

    def close(self) -> None:
        """Start no more groups (running ones end on their daemon threads)."""
        if self.stream is not None:
            self.stream.close()
