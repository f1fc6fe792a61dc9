"""Config: the YAML schema, loading with overrides, imports of named functions, and the checks of a config on its
own. The checks that need the environment, and :func:`validate`/:func:`check_config` running all, live in
:mod:`grpo_rollout.preflight`; they are importable from here too (loaded on first use: preflight sits above config)."""

from __future__ import annotations

from typing import Any

from .batch_checks import batch_arithmetic
from .imports import ImportSpecError, resolve_callable, resolve_object
from .loading import LoadedConfig, config_dict, config_from_dict, load_config, to_yaml
from .problems import ConfigError, Problem
from .schema import Config

_FROM_PREFLIGHT = ("check_config", "validate")


def __getattr__(name: str) -> Any:
    """``validate`` and ``check_config`` from :mod:`grpo_rollout.preflight`, imported when first asked for."""
    if name in _FROM_PREFLIGHT:
        from .. import preflight

        return getattr(preflight, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Config", "ConfigError", "ImportSpecError", "LoadedConfig", "Problem", "batch_arithmetic", "check_config",
           "config_dict", "config_from_dict", "load_config", "resolve_callable", "resolve_object", "to_yaml", "validate"]
