"""Which exceptions make an episode a failure outside the model (``rollout.on_error``, ``rollout.failure_errors``),
and the count of a step's failed, retried and dropped episodes (:mod:`.failures` plays the groups again)."""

from __future__ import annotations

import builtins
from dataclasses import dataclass, fields
from typing import Dict, Optional, Tuple, Type

from ..rewards.calling import RewardError
from ..rollouts.contract import EpisodeFailure, RolloutError
from ..runs import names as rn

#: grpo-rollout's own wrappers of what user code raised (the rollout function or an environment's method, a reward
#: function), exactly these types: what counts is the exception they wrap (their ``__cause__``)
WRAPPERS = (RolloutError, RewardError)


def failure_cause(exc: BaseException, types: Tuple[Type[BaseException], ...]) -> Optional[BaseException]:
    """What makes ``exc`` a failed episode: ``exc`` itself when it is an :class:`EpisodeFailure` or one of ``types``
    (an exception group: when every exception in it is), looking through grpo-rollout's own :data:`WRAPPERS` to the
    user code's exception; ``None`` when it is none of them (a bug: the run stops)."""
    while type(exc) in WRAPPERS:
        exc = exc.__cause__
    if exc is None:
        return None
    if isinstance(exc, (EpisodeFailure, *types)):
        return exc
    group = getattr(builtins, "BaseExceptionGroup", ())
    if isinstance(exc, group) and all(failure_cause(e, types) is not None for e in exc.exceptions):
        return exc
    return None


@dataclass
class FailureCounts:
    """Episodes of a step (``num_generations`` per failed group): ``failed`` (every failed attempt), ``retried``
    (attempts played again), ``dropped`` (left out of the step)."""

    failed: int = 0
    retried: int = 0
    dropped: int = 0

    def add(self, other: "FailureCounts") -> None:
        """Add ``other``'s counts to these."""
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def metrics(self) -> Dict[str, float]:
        """The ``episodes/*`` metrics (episodes, not groups)."""
        return {rn.EPISODES_FAILED: self.failed, rn.EPISODES_RETRIED: self.retried, rn.EPISODES_DROPPED: self.dropped}
