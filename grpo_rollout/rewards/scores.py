"""What a reward function may return besides a plain list: :class:`RewardScores`, its scores plus the completions it
could not score in time. And the one definition of the statistics every ``*_std`` metric reports."""

from __future__ import annotations

import statistics
from typing import Iterable, List, Optional, Sequence, Tuple


class RewardScores(list):
    """A reward function's scores (a ``list``: one float or ``None`` per completion) that also says which
    completions it gave up on because scoring them ran out of time (their score is what the function put there,
    usually 0.0). The trainer counts them (``rewards/<name>/timeouts``) and names them on the console.

    Args:
        scores: one score per completion. timed_out: indices of the completions that ran out of time.
        limit_s: the time limit, in seconds, that they ran out of (for the message).

    Example (a reward of your own)::

        return RewardScores(scores, timed_out=[i for i, s in enumerate(raw) if s is TIMEOUT], limit_s=5.0)
    """

    def __init__(self, scores: Iterable[Optional[float]], timed_out: Sequence[int] = (),
                 limit_s: Optional[float] = None):
        super().__init__(scores)
        self.timed_out: List[int] = sorted(set(int(i) for i in timed_out))
        self.limit_s = limit_s


def mean_std(values: Sequence[float]) -> Tuple[float, float]:
    """The mean and the sample standard deviation (``n − 1`` in the denominator, Bessel's correction, as the
    advantages' group std) of ``values``, in float64; the std of one value is 0.0, of none ``nan`` (mean too). Equal
    values give exactly that value and 0.0 (the float mean of six 0.7's is 0.6999999999999998)."""
    if not values:
        return float("nan"), float("nan")
    if min(values) == max(values):
        return float(values[0]), 0.0
    mean = statistics.fmean(values)
    return mean, statistics.stdev(values, mean) if len(values) > 1 else 0.0
