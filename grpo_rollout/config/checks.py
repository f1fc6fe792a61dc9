"""The checks of a config on its own (values and ranges, algorithm settings, the micro-batch split), each appending
:class:`Problem` objects; :func:`grpo_rollout.preflight.validate` runs them with those that need more than the config
(processes, packages, the launcher's flags, paths, the dataset, the named functions) before a model loads."""

from __future__ import annotations

from typing import Callable, List

from .algorithm_checks import check_algorithm, check_importance_level
from .batch_checks import _WINDOW, check_batch
from .problems import Problem, flagged
from .ranges import _RANGES, check_values, range_bounds
from .schema import Config

Check = Callable[[Config, List[Problem]], None]

#: the checks of ``(config, problems)`` that read nothing but the config, in the order they report
CONFIG_CHECKS: List[Check] = [check_values, check_importance_level, check_algorithm, check_batch]

__all__ = ["CONFIG_CHECKS", "Check", "_RANGES", "_WINDOW", "check_algorithm",
           "check_batch", "check_importance_level", "check_values",
           "flagged", "range_bounds"]
