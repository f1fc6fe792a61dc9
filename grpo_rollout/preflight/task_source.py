"""A ``reasoning_gym:<task>`` source against reasoning-gym: the task exists and ``data.task_kwargs`` holds its
settings with values it accepts, each problem at its key with a did-you-mean, before the rows are made (reasoning-gym's
own errors would name neither the key nor the valid names)."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from ..config.key_suggestions import did_you_mean
from ..config.problems import Problem, add_error as _err, flagged
from ..config.schema import Config
from ..data.reasoning_gym import PREFIX


def source_task(spec: str) -> Optional[str]:
    """The task a ``reasoning_gym:<task>`` source names (``""`` when it names none), ``None`` for another source."""
    spec = spec.strip()
    return spec[len(PREFIX):].strip() if spec.startswith(PREFIX) else None


def check_task_source(config: Config, problems: List[Problem], key: str) -> bool:
    """Record the problems of ``key``'s source (``data.train`` or ``data.eval``) when it is ``reasoning_gym:<task>``:
    reasoning-gym not installed, no such task, a ``data.task_kwargs`` key that is not one of the task's settings, or
    values the task refuses. Returns whether its rows can be made (``True`` for any other source); ``data.eval``
    naming ``data.train``'s task leaves the settings to ``data.train``'s check."""
    spec = getattr(config.data, key.split(".", 1)[1])
    task = source_task(spec)
    if task is None:
        return True
    names = _task_names(problems, key, spec)
    if names is None:
        return False
    if task not in names:
        hint = did_you_mean(task, names, quote=lambda k: f"`{PREFIX}{k}`")
        _err(problems, key, spec, f"reasoning-gym has no task `{task}`" if task else "names no reasoning-gym task",
             f"{hint or 'pick one:'} `grpo-rollout tasks` lists all {len(names)}".strip())
        return False
    if key == "data.eval" and source_task(config.data.train) == task:
        return not flagged(problems, ["data.task_kwargs"])
    return _check_settings(problems, task, dict(config.data.task_kwargs))


def _task_names(problems: List[Problem], key: str, spec: str) -> Optional[List[str]]:
    from ..data.reasoning_gym import task_names

    try:
        return task_names()
    except ImportError:
        _err(problems, key, spec, "needs reasoning-gym, which is not installed",
             "pip install 'grpo-rollout[tasks]' (make install installs it)")
        return None


def _check_settings(problems: List[Problem], task: str, task_kwargs: Dict[str, Any]) -> bool:
    """Each ``data.task_kwargs`` key against ``task``'s settings, then the values by making the task once."""
    from ..data.reasoning_gym import create, task_settings

    settings = list(task_settings(task))
    shown = f"`grpo-rollout tasks {task}` shows their defaults"
    unknown = [k for k in task_kwargs if k not in settings]
    for k in unknown:
        hint = did_you_mean(k, settings)
        _err(problems, f"data.task_kwargs.{k}", task_kwargs[k], f"is not a setting of reasoning-gym's `{task}`",
             f"{hint + ' ' if hint else ''}Its settings: {', '.join(settings)} ({shown})")
    if unknown or not _counts_ok(problems, task_kwargs):
        return False
    try:
        create(task, {"size": 1, **task_kwargs})
    except Exception as exc:  # noqa: BLE001 - reasoning-gym refuses settings with assertions, TypeError, ValueError
        named = [k for k in task_kwargs if k in str(exc)]  # the one setting its message names, if one
        one = len(named) == 1
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        reason = reason if isinstance(exc, AssertionError) and reason else f"{type(exc).__name__}: {reason}"
        _err(problems, f"data.task_kwargs.{named[0]}" if one else "data.task_kwargs",
             task_kwargs[named[0]] if one else task_kwargs,
             f"reasoning-gym's `{task}` refuses {'this setting' if one else 'these settings'}: {reason}",
             f"change {'it' if one else 'them'} (`grpo-rollout tasks {task}` shows each setting's default)")
        return False
    return True


def _counts_ok(problems: List[Problem], task_kwargs: Dict[str, Any]) -> bool:
    """``size`` (rows) a whole number >= 1 and ``seed`` a whole number, when given: reasoning-gym takes ``size: -5``
    and makes no rows, and the held-out rows' seed (``seed + size``) fails on a text seed, both said as the source's
    fault."""
    ok = True
    for name, least, what, example in (("size", 1, "the number of rows", 500), ("seed", None, "the rows' seed", 0)):
        value = task_kwargs.get(name, example)
        if isinstance(value, bool) or not isinstance(value, int) or (least is not None and value < least):
            _err(problems, f"data.task_kwargs.{name}", value, f"must be a whole number{' >= 1' if least else ''} "
                 f"({what}), got {value!r}", f"e.g. {name}: {example}")
            ok = False
    return ok
