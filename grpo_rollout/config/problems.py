"""Problems found in a config: collected, never raised one at a time."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List


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


class ConfigError(Exception):
    """Raised by :func:`grpo_rollout.config.load_config` (strict mode) and :func:`grpo_rollout.train` when a config has
    errors. ``problems`` holds every :class:`Problem`, warnings included."""

    def __init__(self, problems: List[Problem]):
        self.problems = problems
        errors = [p for p in problems if p.is_error]
        lines = [f"{p.key or '<config>'}: {p.message}" + (f" Fix: {p.fix}" if p.fix else "") for p in errors]
        super().__init__(f"{len(errors)} problem(s) in the config:\n" + "\n".join(lines))
