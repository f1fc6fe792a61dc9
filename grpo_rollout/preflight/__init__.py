"""Preflight: the checks of a config that need the environment (the named functions imported and their signatures
bound, the dataset read, paths and packages looked up), and :func:`validate`/:func:`check_config`, which run those
and the config's own checks (:data:`~.validate.CONFIG_CHECKS`) before any model is loaded."""

from .validate import ALL_STATIC_CHECKS, check_config, validate

__all__ = ["ALL_STATIC_CHECKS", "check_config", "validate"]
