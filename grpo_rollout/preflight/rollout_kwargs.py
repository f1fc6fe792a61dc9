"""What ``rollout.kwargs`` and the rewards' ``kwargs`` say against ``sampling.*``: a sampling setting repeated there
must agree (the rollout receives ``sampling.*`` anyway), and the built-in multi-turn rollouts' ``max_turns ×
max_turn_tokens`` should fit ``sampling.max_completion_length``."""

from __future__ import annotations

import math
from typing import Any, Iterable, List, Tuple

from ..config.problems import Problem, add_error as _err, add_warning
from ..config.schema import Config
from ..rollouts.contract import SAMPLING_ALIASES


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


def check_turn_budget(config: Config, problems: List[Problem]) -> None:
    """A warning when a multi-turn rollout's ``max_turns × max_turn_tokens`` (``rollout.kwargs``, the built-in tool
    and environment rollouts) already exceeds ``sampling.max_completion_length``: the sampled turns alone do not fit,
    so episodes end by the budget before ``max_turns`` (the tool/environment replies take tokens too)."""
    kwargs, budget = config.rollout.kwargs or {}, config.sampling.max_completion_length
    turns, per_turn = kwargs.get("max_turns"), kwargs.get("max_turn_tokens")
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (turns, per_turn, budget)):
        return
    if turns * per_turn > budget:
        add_warning(problems, "sampling.max_completion_length", budget,
                    f"is less than rollout.kwargs.max_turns × max_turn_tokens = {turns} × {per_turn} = "
                    f"{turns * per_turn} sampled tokens, before any tool/environment reply: episodes will be cut by "
                    "the budget before max_turns (see `end_reason` and episodes/cut_by_budget)",
                    f"raise sampling.max_completion_length to at least {turns * per_turn} plus the replies' tokens, "
                    "or lower max_turns / max_turn_tokens (docs/multi_turn.md: how the budget is spent)",
                    depends_on=("sampling.max_completion_length",))
