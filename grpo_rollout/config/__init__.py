"""Config: the YAML schema, loading with overrides, imports of named functions, and every static check."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from .checks import batch_arithmetic, validate
from .imports import ImportSpecError, resolve_callable, resolve_object
from .loading import LoadedConfig, config_dict, config_from_dict, load_config, to_yaml
from .problems import ConfigError, Problem
from .schema import Config


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


__all__ = ["Config", "ConfigError", "ImportSpecError", "LoadedConfig", "Problem", "batch_arithmetic", "check_config",
           "config_dict", "config_from_dict", "load_config", "resolve_callable", "resolve_object", "to_yaml", "validate"]
