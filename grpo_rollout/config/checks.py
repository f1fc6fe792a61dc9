"""The checks of a config on its own: values and ranges, algorithm settings, batch arithmetic, sampling agreement,
server arguments and exposure. Each check appends :class:`Problem` objects; nothing raises.

:func:`grpo_rollout.preflight.validate` runs these and the checks that need the environment (paths, the dataset,
the named functions); the ``validate-config`` command and ``train`` both do, before loading a model.
"""

from __future__ import annotations

from typing import Callable, List

from .algorithm_checks import check_algorithm, check_importance_level, check_turn_budget
from .batch_checks import _WINDOW, batch_arithmetic, check_batch, check_processes, world_size
from .exposure_checks import check_server_exposure
from .lora_checks import check_lora
from .problems import Problem, flagged
from .ranges import _RANGES, Bound, check_values, range_bounds
from .sampling_checks import check_sampling_agreement
from .schema import Config
from .server_checks import check_server_args

Check = Callable[[Config, List[Problem]], None]

#: the checks of ``(config, problems)`` that read nothing but the config, in the order they report
CONFIG_CHECKS: List[Check] = [check_values, check_importance_level, check_algorithm, check_turn_budget, check_batch,
                              check_sampling_agreement, check_server_args, check_server_exposure]

__all__ = ["Bound", "CONFIG_CHECKS", "Check", "_RANGES", "_WINDOW", "batch_arithmetic", "check_algorithm",
           "check_batch", "check_importance_level", "check_lora", "check_processes", "check_sampling_agreement",
           "check_server_args", "check_server_exposure", "check_turn_budget", "check_values", "flagged",
           "range_bounds", "world_size"]
