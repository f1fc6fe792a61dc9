"""Config: the YAML schema (pydantic models), loading with overrides, and the checks of a config on its own.

This package imports nothing else of grpo-rollout (an import-linter contract in the tests keeps it so). The checks
that need the environment, and :func:`~grpo_rollout.preflight.validate`/:func:`~grpo_rollout.preflight.check_config`
running all of them, live in :mod:`grpo_rollout.preflight`, above it; ``from grpo_rollout import check_config`` too.
"""

from __future__ import annotations

from .loading import LoadedConfig, config_dict, config_from_dict, load_config, to_yaml
from .problems import ConfigError, Problem
from .schema import Config

__all__ = ["Config", "ConfigError", "LoadedConfig", "Problem", "config_dict", "config_from_dict",
           "load_config", "to_yaml"]
