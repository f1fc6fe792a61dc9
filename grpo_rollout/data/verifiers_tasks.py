"""A verifiers taskset's tasks as a data source: ``data.train: verifiers:<taskset>`` (verifiers 0.4, ``verifiers.v1``).

``<taskset>`` is an installed taskset's id (``my-env`` or the Hub's ``owner/my-env@1.0``, as ``prime env install`` /
``vf-init`` users name it: the package ``my_env`` exporting a ``vf.Taskset`` subclass), or a ``.py`` file or package
folder that exports one (its folder is put on ``sys.path`` and its name is the id). ``data.task_kwargs`` are the taskset's config fields
(``num_tasks: 64`` for a ``TasksetConfig`` subclass with such a field).

Each task is one row: ``prompt`` (its system prompt and prompt as chat messages, what the logs and the prompt length
check see), ``verifiers_env`` (the id), ``verifiers_path`` (the folder put on ``sys.path``, ``""`` for an installed
one), ``verifiers_taskset`` (the taskset's config fields as JSON) and ``verifiers_task`` (the task's data as JSON,
``TaskData.model_dump``): :func:`grpo_rollout.integrations.verifiers.verifiers.verifiers_rollout` plays the task
from these, so the rollout needs no setting of its own to find it.
"""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

PREFIX = "verifiers:"
#: The most tasks a taskset may yield as a dataset: past it, its load() is taken for an endless one.
MAX_TASKS = 1_000_000
#: The row columns that carry a task to the rollout.
ENV_COLUMN, PATH_COLUMN, TASKSET_COLUMN, TASK_COLUMN = ("verifiers_env", "verifiers_path", "verifiers_taskset",
                                                        "verifiers_task")


class TasksetNotFound(ValueError):
    """The taskset a ``verifiers:`` source names neither is a file or folder nor imports as an installed id."""


def locate(spec: str, base_dir: Optional[Path] = None) -> Tuple[str, str]:
    """``(id, folder)`` for a taskset spec: a ``.py`` file or a package folder (relative to the current directory, or
    else to ``base_dir``) gives its name and its parent folder; anything else is an installed id (folder ``""``).

    Raises:
        TasksetNotFound: a path-like spec (ending ``.py`` or holding ``/``) that does not exist.
    """
    spec = spec.strip()
    if spec.endswith(".py") or "/" in spec.rstrip("/"):
        for path in (Path(spec).expanduser(), (base_dir or Path.cwd()) / spec):
            if path.exists():
                path = path.resolve()
                return (path.stem if path.suffix == ".py" else path.name), str(path.parent)
        if not _hub_id(spec):
            raise TasksetNotFound(f"`{spec}` is not a file or folder (looked in {Path.cwd()}"
                                  f"{'' if base_dir is None else f' and {base_dir}'}); name a .py file or package "
                                  "folder exporting a vf.Taskset subclass, or an installed taskset's id")
    return spec, ""


def _hub_id(spec: str) -> bool:
    """Whether ``spec`` reads as an Environments Hub id, ``owner/name`` or ``owner/name@version`` (verifiers imports
    the installed package ``name``)."""
    return spec.count("/") == 1 and not spec.endswith(".py") and not spec.startswith((".", "/", "~"))


def module_name(taskset_id: str) -> str:
    """The module verifiers imports for a taskset id: ``owner/my-env@1.0`` → ``my_env``."""
    return taskset_id.rsplit("/", 1)[-1].split("@", 1)[0].replace("-", "_").lower()


def importable(folder: str) -> None:
    """Put ``folder`` (a taskset's, from :func:`locate`) on ``sys.path``, once, last: so that verifiers imports the
    taskset by its name, and a file beside it never shadows an installed package."""
    if folder and folder not in sys.path:
        sys.path.append(folder)


def load_taskset(taskset_id: str, folder: str, settings: Mapping[str, Any]):
    """The ``vf.Taskset`` of ``taskset_id`` with config fields ``settings``.

    Raises:
        ModuleNotFoundError, TypeError, AttributeError, ValueError: verifiers' own, naming the id (no such package, no
            ``vf.Taskset`` exported in ``__all__``); pydantic's ValidationError for a setting the config refuses.
    """
    from verifiers.v1.utils.loaders import load_taskset as vf_load_taskset, taskset_config_type

    importable(folder)
    config = taskset_config_type(taskset_id).model_validate({**settings, "id": taskset_id})
    return vf_load_taskset(config)


def task_rows(spec: str, settings: Mapping[str, Any], base_dir: Optional[Path] = None) -> List[Dict[str, Any]]:
    """One row per task of the taskset ``spec`` names, made with config fields ``settings`` (``data.task_kwargs``).

    Raises:
        TasksetNotFound, and what :func:`load_taskset` raises. An infinite taskset (``Taskset.INFINITE``, or a
        ``load()`` that yields more than :data:`MAX_TASKS`) is refused with a ValueError.
    """
    taskset_id, folder = locate(spec, base_dir)
    taskset = load_taskset(taskset_id, folder, settings)
    bound = "bound it (e.g. a num_tasks setting in its config that load() stops at)"
    if not taskset.bounded:
        raise ValueError(f"taskset `{taskset_id}` is infinite (INFINITE = True); a training dataset needs its tasks "
                         f"listed: {bound}")
    tasks = list(itertools.islice(taskset, MAX_TASKS + 1))
    if len(tasks) > MAX_TASKS:
        raise ValueError(f"taskset `{taskset_id}` yielded more than {MAX_TASKS:,} tasks: is its load() endless? {bound}")
    common = {ENV_COLUMN: taskset_id, PATH_COLUMN: folder, TASKSET_COLUMN: json.dumps(dict(settings), default=str)}
    return [dict(common, prompt=_messages(task.data), **{TASK_COLUMN: task.data.model_dump_json()}) for task in tasks]


def _messages(data: Any) -> List[Dict[str, Any]]:
    """A task's system prompt and prompt as chat messages (text content)."""
    from verifiers.v1.types import content_text

    system = [{"role": "system", "content": data.system_prompt}] if data.system_prompt else []
    if data.prompt is None:
        return system
    if isinstance(data.prompt, str):
        return system + [{"role": "user", "content": data.prompt}]
    return system + [{"role": m.role, "content": content_text(m.content) or ""} for m in data.prompt]
