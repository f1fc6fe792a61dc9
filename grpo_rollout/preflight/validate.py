"""Every check that can run without model weights: the config's own (:data:`CONFIG_CHECKS`) and those
that need the environment (paths, the dataset, the named functions). Each check appends :class:`Problem` objects;
nothing raises.

Run them all with :func:`validate` (the ``validate-config`` command and ``train`` both do, before loading a model),
or load a file and run them with :func:`check_config`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, List, Optional, Sequence, Tuple

from ..config.algorithm_checks import (check_algorithm, check_importance_level, check_precision,
                                       check_unused_settings)
from ..config.batch_checks import check_batch
from ..config.loading import LoadedConfig, load_config
from ..config.problems import Problem
from ..config.ranges import check_values
from ..config.schema import Config
from ..generation.server.exposure import check_server_exposure
from ..generation.server.managed_flags import check_server_args
from .dataset import check_dataset
from .evaluation import check_evaluation
from .functions import check_failure_errors, check_functions, check_training_functions
from .adapter import check_lora
from .paths import check_paths
from .processes import check_processes, check_sleep
from .rollout_kwargs import check_sampling_agreement, check_turn_budget

#: the config's own checks, then the rollout kwargs', the server launcher's flags and exposure, paths and packages
Check = Callable[[Config, List[Problem]], None]

#: the checks of a config on its own (grpo_rollout.config: values and ranges, algorithm, the micro-batch split), in the
#: order they report
CONFIG_CHECKS: List[Check] = [check_values, check_precision, check_importance_level, check_algorithm,
                              check_unused_settings, check_batch]
ALL_STATIC_CHECKS: List[Check] = [*CONFIG_CHECKS, check_turn_budget, check_sampling_agreement, check_server_args,
                                  check_server_exposure, check_sleep, check_paths]


def validate(config: Config, base_dir: Optional[Path] = None, load_data: bool = True,
             processes: Optional[int] = None, known: Sequence[Problem] = ()) -> List[Problem]:
    """Run every check that needs no model weights; return all problems (errors and warnings), in config order.

    Args:
        config: the loaded config.
        base_dir: folder that relative paths in the config are looked up in (default: the current folder).
        load_data: load the dataset (to check prompts and the columns rewards need).
        processes: how many training processes the run will have (default: torchrun's ``WORLD_SIZE``, else 1).
        known: problems already found (``load_config``'s): a cross-key check whose input key has an error among them
            is skipped, since a key rejected while loading holds its default, and a rule on that default would
            point at the wrong cause. They are not returned again.

    Returns:
        The new problems; nothing is raised for a bad config.
    """
    base_dir = base_dir or Path.cwd()
    problems: List[Problem] = list(known)
    for check in ALL_STATIC_CHECKS:
        check(config, problems)
    check_processes(config, problems, processes)
    check_lora(config, problems, processes)
    columns = check_dataset(config, problems, base_dir) if load_data else None  # None: columns unknown
    check_functions(config, problems, base_dir, columns)
    check_training_functions(config, problems, base_dir)
    check_failure_errors(config, problems, base_dir)
    check_evaluation(config, problems, base_dir, load_data, columns)
    return problems[len(known):]


def check_config(path: str | Path, overrides: Sequence[str] = (), load_data: bool = True,
                 processes: Optional[int] = None) -> Tuple[LoadedConfig, List[Problem]]:
    """Load ``path`` with ``overrides`` and run every check that needs no model weights (``processes``: the number of
    training processes to check for; default torchrun's ``WORLD_SIZE``, else 1).

    Returns the loaded config and all problems (loading problems first). ``loaded.config`` is ``None`` only when the
    file could not be read. Nothing is raised for a bad config.
    """
    loaded = load_config(path, overrides)
    problems = list(loaded.problems)
    if loaded.config is not None:
        problems += validate(loaded.config, loaded.base_dir, load_data=load_data, processes=processes,
                             known=loaded.problems)
    return loaded, problems
