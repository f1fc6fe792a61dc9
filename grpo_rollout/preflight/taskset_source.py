"""A ``verifiers:<taskset>`` source against verifiers, before its rows are made: verifiers installed, the taskset
found and exporting one ``vf.Taskset``, ``data.task_kwargs`` holding fields of its config with values it accepts
(each problem at its key, with a did-you-mean), and the rollout that plays its rows named. verifiers' own errors would
name neither the key nor the fields."""

from __future__ import annotations

import importlib.util
import pkgutil
from pathlib import Path
from typing import Any, Dict, List, Optional

from ..config.key_suggestions import did_you_mean
from ..config.problems import Problem, add_error as _err, add_warning
from ..config.schema import Config
from ..data.verifiers_tasks import PREFIX, TasksetNotFound, importable, locate, module_name

#: The rollout that plays a verifiers source's rows.
ROLLOUT = "grpo_rollout.integrations.verifiers.verifiers:verifiers_rollout"
EXPORT_FIX = "export your vf.Taskset subclass in the module's __all__ (e.g. __all__ = ['MyTaskset'])"
#: The fix for a taskset whose tasks could not be listed (its load() raised, or never ends).
TASKSET_FIX = "fix the taskset's load() (the message says what it raised), or its settings in data.task_kwargs"


def check_taskset_source(config: Config, problems: List[Problem], base_dir: Optional[Path]) -> bool:
    """Record the problems of a ``data.train: verifiers:<taskset>`` source; returns whether its rows can be made
    (``True`` for any other source). Also: such rows need :data:`ROLLOUT`, and that rollout needs such rows."""
    spec = config.data.train.strip()
    plays_tasksets = config.rollout.function.strip() == ROLLOUT
    if not spec.startswith(PREFIX):
        if plays_tasksets:
            _err(problems, "rollout.function", config.rollout.function, "plays verifiers tasksets, and data.train "
                 "names none", "data.train: verifiers:<taskset id or file.py> (data.task_kwargs: its settings)")
        return True
    if not config.rollout.function.strip():
        _err(problems, "rollout.function", "(the built-in single-turn rollout)",
             "does not play the verifiers taskset data.train names", f"rollout.function: {ROLLOUT}")
    elif not plays_tasksets:  # a rollout of the user's own may call verifiers_rollout itself
        add_warning(problems, "rollout.function", config.rollout.function, "the rows of data.train are verifiers "
                    f"tasks, which only {ROLLOUT.split(':')[1]} plays", f"rollout.function: {ROLLOUT} (unless yours "
                    "calls it)")
    config_type = _config_type(problems, spec, spec[len(PREFIX):].strip(), base_dir)
    return config_type is not None and _check_settings(problems, config_type, dict(config.data.task_kwargs))


def _config_type(problems: List[Problem], spec: str, target: str, base_dir: Optional[Path]) -> Optional[type]:
    """The taskset's config class (its ``TasksetConfig`` subclass), or ``None`` with the problem recorded."""
    try:
        from verifiers.v1.utils.loaders import taskset_class, taskset_config_type
    except ImportError:
        _err(problems, "data.train", spec, "needs verifiers 0.4, which is not installed",
             "pip install 'grpo-rollout[environments]' (make install installs it)")
        return None
    try:
        taskset_id, folder = locate(target, base_dir)
    except TasksetNotFound as exc:
        _err(problems, "data.train", spec, str(exc), "e.g. verifiers:my_taskset.py or verifiers:my-env")
        return None
    importable(folder)
    module = module_name(taskset_id)
    if not folder and importlib.util.find_spec(f"verifiers.v1.tasksets.{module}") is None \
            and importlib.util.find_spec(module) is None:
        installed = [m.name for m in pkgutil.iter_modules()]
        hint = did_you_mean(module, installed, quote=lambda k: f"`{PREFIX}{k.replace('_', '-')}`")
        _err(problems, "data.train", spec, f"no taskset `{taskset_id}` is installed (no module `{module}`)",
             f"{hint + ' ' if hint else ''}install it (prime env install {taskset_id}), or name its .py file")
        return None
    try:
        taskset_class(taskset_id)
        return taskset_config_type(taskset_id)
    except Exception as exc:  # noqa: BLE001 - verifiers raises several types for a module that exports no taskset
        _err(problems, "data.train", spec, f"{type(exc).__name__}: {exc}", EXPORT_FIX)
        return None


def _check_settings(problems: List[Problem], config_type: type, settings: Dict[str, Any]) -> bool:
    """Each ``data.task_kwargs`` key against the config's fields, then the values as the config validates them."""
    from pydantic import ValidationError

    fields = [f for f in config_type.model_fields if f != "id"]
    unknown = [k for k in settings if k not in fields]
    for k in unknown:
        hint = did_you_mean(k, fields)
        _err(problems, f"data.task_kwargs.{k}", settings[k], f"is not a field of {config_type.__name__}",
             f"{hint + ' ' if hint else ''}Its fields: {', '.join(fields)}")
    if unknown:
        return False
    try:
        config_type.model_validate(settings)
    except ValidationError as exc:
        for error in exc.errors():
            key = ".".join(str(part) for part in error["loc"])
            _err(problems, f"data.task_kwargs.{key}", settings.get(str(error["loc"][0])) if error["loc"] else settings,
                 f"{config_type.__name__} refuses it: {error['msg']}", "change it to a value of the field's type")
        return False
    return True
