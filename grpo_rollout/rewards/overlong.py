"""DAPO's soft overlong punishment (Yu et al. 2025, arXiv:2503.14476, §3.4, eq. 13), as a reward function the trainer
adds when ``training.overlong_buffer > 0``: a completion of ``L`` tokens, with ``L_max = max_completion_length`` and a
buffer of ``B`` tokens before it, gets

    0                              if L <= L_max - B
    ((L_max - B) - L) / B          if L_max - B < L <= L_max     (falls linearly from 0 to -1)
    -1                             if L > L_max

times ``training.overlong_penalty`` (its weight in the reward sum), logged as ``rewards/overlong_penalty`` apart from
the user's rewards. ``L`` counts every completion token (a multi-turn episode's environment tokens too: they spend the
same budget).
"""

from __future__ import annotations

from typing import Any, List, Sequence

from .calling import RewardFunction

OVERLONG_REWARD = "overlong_penalty"


def overlong_scores(lengths: Sequence[int], max_completion_length: int, buffer: int) -> List[float]:
    """DAPO's length penalty (module docstring) of each length in tokens, each in ``[-1, 0]``."""
    start = max_completion_length - buffer
    return [0.0 if n <= start else -1.0 if n > max_completion_length else (start - n) / buffer for n in lengths]


def overlong_reward(config: Any) -> List[RewardFunction]:
    """The reward function the config's ``training.overlong_buffer`` asks for (none when 0), weighted by
    ``training.overlong_penalty``."""
    t, limit = config.training, config.sampling.max_completion_length
    if not t.overlong_buffer:
        return []

    def overlong_penalty(completion_ids: Sequence[Sequence[int]], **_: Any) -> List[float]:
        return overlong_scores([len(ids) for ids in completion_ids], limit, t.overlong_buffer)

    return [RewardFunction(OVERLONG_REWARD, overlong_penalty, t.overlong_penalty)]
