"""Problems found in a config: collected, never raised one at a time."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, List, Sequence


@dataclass
class Problem:
    """One thing wrong (or suspicious) in a config.

    Attributes:
        key: dotted config key, e.g. ``sampling.temperature`` (``""`` for the file as a whole).
        value: the offending value as the user wrote it (``None`` when missing).
        message: what is wrong, in one sentence.
        fix: what would fix it.
        severity: ``"error"`` stops a run; ``"warning"`` is shown but does not.
    """

    key: str
    value: Any
    message: str
    fix: str = ""
    severity: str = "error"

    @property
    def is_error(self) -> bool:
        return self.severity == "error"


def flagged(problems: Sequence[Problem], keys: Iterable[str]) -> bool:
    """Whether ``problems`` (so far, loading's included) hold an error at one of the dotted ``keys`` or under one
    (``rewards[0]`` covers ``rewards[0].function``; ``sampling`` covers every ``sampling.*`` key)."""
    keys = tuple(keys)
    return any(p.is_error and (p.key in keys or p.key.startswith(tuple(k + sep for k in keys for sep in ".[")))
               for p in problems)


def add_error(problems: List[Problem], key: str, value: Any, message: str, fix: str = "",
              depends_on: Sequence[str] = ()) -> None:
    """Record an error at ``key``, unless it is a follow-on: a cross-key rule whose inputs ``depends_on`` include a key
    that already has an error would point at the wrong cause (``num_generations: 1`` also breaking the micro-batch
    split), so it is dropped; it is checked again once the first error is fixed."""
    if not flagged(problems, depends_on):
        problems.append(Problem(key, value, message, fix))


def add_warning(problems: List[Problem], key: str, value: Any, message: str, fix: str = "",
                depends_on: Sequence[str] = ()) -> None:
    """Record a warning at ``key``, unless a key in ``depends_on`` already has an error (see :func:`add_error`)."""
    if not flagged(problems, depends_on):
        problems.append(Problem(key, value, message, fix, severity="warning"))


class ConfigError(Exception):
    """Raised by :func:`grpo_rollout.config.load_config` (strict mode) and :func:`grpo_rollout.train` when a config has
    errors. ``problems`` holds every :class:`Problem`, warnings included."""

    def __init__(self, problems: List[Problem]):
        self.problems = problems
        errors = [p for p in problems if p.is_error]
        lines = [f"{p.key or '<config>'}: {p.message}" + (f" Fix: {p.fix}" if p.fix else "") for p in errors]
        super().__init__(f"{len(errors)} problem(s) in the config:\n" + "\n".join(lines))
