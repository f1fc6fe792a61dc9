"""A sampling setting repeated in ``rollout.kwargs`` or a reward's ``kwargs`` must agree with ``sampling.*``."""

from __future__ import annotations

import math
from typing import Any, Iterable, List, Tuple

from .problems import Problem, add_error as _err
from .sampling_names import SAMPLING_ALIASES
from .schema import Config


def _sampling_mentions(mapping: Any, prefix: str) -> Iterable[Tuple[str, str, Any]]:
    """Yield ``(dotted_key, sampling_key, value)`` for every sampling alias inside a (nested) mapping."""
    if not isinstance(mapping, dict):
        return
    for key, value in mapping.items():
        dotted = f"{prefix}.{key}"
        if isinstance(value, dict):
            yield from _sampling_mentions(value, dotted)
        elif key in SAMPLING_ALIASES:
            yield dotted, SAMPLING_ALIASES[key], value


def check_sampling_agreement(config: Config, problems: List[Problem]) -> None:
    """A sampling setting repeated in ``rollout.kwargs`` or a reward's ``kwargs`` must equal ``sampling.*``."""
    places = [("rollout.kwargs", config.rollout.kwargs)]
    places += [(f"rewards[{i}].kwargs", r.kwargs) for i, r in enumerate(config.rewards)]
    for prefix, mapping in places:
        for dotted, skey, value in _sampling_mentions(mapping, prefix):
            expected = getattr(config.sampling, skey)
            same = value == expected or (isinstance(value, (int, float)) and isinstance(expected, (int, float))
                                         and math.isclose(value, expected))
            if not same:
                _err(problems, dotted, value, f"disagrees with sampling.{skey} = {expected!r}",
                     f"remove `{dotted}` (the rollout receives sampling.{skey} anyway) or set both to the same value",
                     depends_on=(f"sampling.{skey}",))
