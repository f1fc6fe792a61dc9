"""Config: the YAML schema (pydantic models), loading with overrides, and the checks of a config on its own.

It imports nothing else of grpo-rollout (an import-linter contract keeps it so); the checks that need more than the
config, and ``validate``/``check_config`` running them all, live above it in :mod:`grpo_rollout.preflight`.
"""

from __future__ import annotations

from .loading import LoadedConfig, config_dict, config_from_dict, load_config, to_yaml
from .problems import ConfigError, Problem
from .schema import Config

__all__ = ["Config", "ConfigError", "LoadedConfig", "Problem", "config_dict", "config_from_dict", "load_config",
           "to_yaml"]
