"""grpo-rollout: GRPO fine-tuning where generation is a user-written rollout function.

Use it from Python the way the CLI does::

    from grpo_rollout import load_config, check_config, train
    loaded, problems = check_config("configs/quickstart.yaml", ["training.max_steps=5"])
    result = train(loaded.config, base_dir=loaded.base_dir)

Importing this package is cheap: torch and transformers load only when training starts.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

from .config import Config, ConfigError, Problem, load_config  # noqa: E402
from . import integrations  # noqa: E402,F401 - registers the tool-calling rollout's tool sources (TRL, MCP)
from .jupyter import import_tqdm_quietly, in_jupyter  # noqa: E402
from .preflight import check_config, validate  # noqa: E402

if in_jupyter():  # before transformers or datasets import tqdm.auto and it warns into the user's cell
    import_tqdm_quietly()

_LAZY = {"train": ("grpo_rollout.trainer", "train"), "TrainResult": ("grpo_rollout.trainer", "TrainResult"),
         "EpisodeFailure": ("grpo_rollout.rollouts.contract", "EpisodeFailure")}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'grpo_rollout' has no attribute {name!r}")


__all__ = ["Config", "ConfigError", "Problem", "__version__", "check_config", "load_config", "train", "validate"]
