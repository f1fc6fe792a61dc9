"""The checks of token-valued keys a rollout returns (token ids, per-token log-probs and masks), shared by the
rollout contract (:mod:`.contract`) and an episode's earlier sequences (:mod:`.segments`): each raises
:class:`RolloutError` naming the key, the sample and the sizes."""

from __future__ import annotations

import math
import numbers
from typing import Any, List, Optional, Sequence


class RolloutError(ValueError):
    """A rollout function returned something that breaks the contract (the message names key, sample and sizes)."""


def as_list(value: Any) -> Any:
    """``value`` as Python lists when it is an array or tensor (``tolist()``), else unchanged."""
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        return value.tolist()
    return value


def int_lists(key: str, value: Any, expected: Sequence[int], vocab_size: Optional[int],
              allow_empty: bool) -> List[List[int]]:
    """``value`` checked as token-id lists: ``len(value)`` one of ``expected``, ints in ``[0, vocab_size)``, each list
    non-empty unless ``allow_empty``. Raises :class:`RolloutError` naming ``key[i][j]``."""
    value = as_list(value)
    if not isinstance(value, (list, tuple)):
        raise RolloutError(f"`{key}` must be a list of token-id lists, got {type(value).__name__}")
    if len(value) not in expected:
        sizes = " or ".join(str(e) for e in expected)
        raise RolloutError(f"`{key}` has {len(value)} entries; expected {sizes}")
    out = []
    for i, ids in enumerate(value):
        ids = as_list(ids)
        if not isinstance(ids, (list, tuple)):
            raise RolloutError(f"`{key}[{i}]` must be a list of token ids, got {type(ids).__name__}")
        if not ids and not allow_empty:
            raise RolloutError(f"`{key}[{i}]` is empty")
        for j, t in enumerate(ids):
            if isinstance(t, bool) or not isinstance(t, numbers.Integral):
                raise RolloutError(f"`{key}[{i}][{j}]` is {t!r}; token ids must be ints")
            if t < 0 or (vocab_size is not None and t >= vocab_size):
                raise RolloutError(f"`{key}[{i}][{j}]` = {t} is outside the vocabulary [0, {vocab_size})")
        out.append([int(t) for t in ids])
    return out


def per_token(key: str, value: Any, completion_ids: List[List[int]], kind: type) -> List[List[Any]]:
    """``value`` checked as one list per completion with one entry per token: log-probs (``kind`` float, nats,
    ``<= 0``) or a 0/1 mask (``kind`` int). Raises :class:`RolloutError` naming ``key[i][j]``."""
    value = as_list(value)
    if not isinstance(value, (list, tuple)) or len(value) != len(completion_ids):
        got = len(value) if isinstance(value, (list, tuple)) else type(value).__name__
        raise RolloutError(f"`{key}` must have one list per completion ({len(completion_ids)}), got {got}")
    out = []
    for i, (row, ids) in enumerate(zip(value, completion_ids)):
        row = as_list(row)
        if not isinstance(row, (list, tuple)) or len(row) != len(ids):
            got = len(row) if isinstance(row, (list, tuple)) else type(row).__name__
            raise RolloutError(f"`{key}[{i}]` has {got} values but completion_ids[{i}] has {len(ids)} tokens")
        if kind is float:
            for j, x in enumerate(row):
                if not isinstance(x, numbers.Real) or math.isnan(x) or x > 1e-4:
                    raise RolloutError(f"`{key}[{i}][{j}]` = {x!r}; log-probabilities are floats <= 0")
            out.append([float(x) for x in row])
        else:
            for j, x in enumerate(row):
                if x not in (0, 1, True, False):
                    raise RolloutError(f"`{key}[{i}][{j}]` = {x!r}; the mask holds 0 (tool/env token) or 1 (trained)")
            out.append([int(x) for x in row])
    return out


def check_trained_logprobs(key: str, logprobs: List[List[float]], mask: List[List[int]]) -> None:
    """Raise :class:`RolloutError` where a trained token (``mask`` 1) has log-prob ``-inf``: the sampler gave it
    probability 0, so it cannot have sampled it."""
    for i, (row, row_mask) in enumerate(zip(logprobs, mask)):
        for j, (x, trained) in enumerate(zip(row, row_mask)):
            if trained and math.isinf(x):
                raise RolloutError(f"`{key}[{i}][{j}]` = -inf on a trained token (completion_mask 1): the sampler "
                                   "gave it probability 0, so it cannot have sampled it. Return the sampler's log-prob, "
                                   "or mask the token (completion_mask 0) if a tool or environment inserted it")
