"""Load the training dataset a config names and check the prompt of every row."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

from ..user_code.resolve import resolve_callable
from ..config.problems import Problem, add_error as _err
from ..config.schema import Config
from .prompt_lengths import check_prompt_lengths
from .task_source import check_task_source
from .taskset_source import TASKSET_FIX, check_taskset_source
from ..data.verifiers_tasks import PREFIX as TASKSET_PREFIX


def check_dataset(config: Config, problems: List[Problem], base_dir: Path) -> Optional[List[str]]:
    """Load the dataset and check the prompt of every row (well-formed, one format throughout); returns the column
    names (``None`` if it failed)."""
    from ..data import CHAT_ROLES, SOURCE_FIX, DatasetError, load_section, prompt_problems

    if not config.data.train:
        _err(problems, "data.train", "", "no training data given",
             "set a .jsonl/.csv/.parquet file, a hub dataset, or `module:function` returning a datasets.Dataset")
        return None
    if not check_task_source(config, problems, "data.train") or not check_taskset_source(config, problems, base_dir):
        return None
    try:
        ds = load_section(config.data, base_dir)
    except DatasetError as exc:
        taskset = config.data.train.strip().startswith(TASKSET_PREFIX)
        _err(problems, "data.train", config.data.train, str(exc), TASKSET_FIX if taskset else SOURCE_FIX)
        return None
    columns = list(ds.column_names)
    _check_environment_column(config, ds, problems)
    col = config.data.prompt_column
    if col not in columns:
        if not _rollout_uses_prompts(config, base_dir):
            return columns  # e.g. an environment: reset(row) makes the first prompt
        _err(problems, "data.prompt_column", col, f"the dataset has no column `{col}` (columns: {', '.join(columns)})",
             "set data.prompt_column to the column holding the prompts")
        return columns
    prompts = ds[col]
    if not _rollout_uses_prompts(config, base_dir) and all(p is None for p in prompts):
        return columns
    row_keys = lambda i: [k for k, v in ds[i].items() if v is not None]  # noqa: E731
    malformed = list(prompt_problems(prompts, column=col, row_keys=row_keys))
    for message in malformed:
        _err(problems, "data.prompt_column", col, message,
             "make every prompt a non-empty string, or every prompt a list of {role, content} messages with roles "
             f"{', '.join(CHAT_ROLES)} (or point data.prompt_column at another column)")
    if not malformed:
        check_prompt_lengths(config, prompts, problems, base_dir)
    return columns


def _rollout_uses_prompts(config: Config, base_dir: Path) -> bool:
    """False when the rollout declares ``uses_prompts = False`` (the built-in environment rollout: ``reset(row)``
    returns the first prompt), so ``data.prompt_column`` is optional. A rollout that does not import counts as
    using them (its import error is reported by :func:`check_functions`)."""
    from ..rollouts import builtin_rollout

    try:
        fn = resolve_callable(config.rollout.function, base_dir) if config.rollout.function else builtin_rollout()
    except Exception:  # noqa: BLE001 - an import error is reported by check_functions
        return True
    return getattr(fn, "uses_prompts", True) is not False


def _check_environment_column(config: Config, ds: object, problems: List[Problem]) -> None:
    """With several TRL environments (``rollout.kwargs.environment_factory`` a mapping) every row's ``environment``
    column names one of them."""
    from ..integrations.trl.environment_factory import ENVIRONMENT_COLUMN

    factories = config.rollout.kwargs.get("environment_factory")
    if not isinstance(factories, dict) or not factories:
        return
    key = "rollout.kwargs.environment_factory"
    names = ", ".join(map(str, factories))
    if ENVIRONMENT_COLUMN not in ds.column_names:
        _err(problems, key, names, f"names several environments, but the dataset has no `{ENVIRONMENT_COLUMN}` "
             "column saying which one each row plays", f"add a column `{ENVIRONMENT_COLUMN}` with one of: {names}")
        return
    bad = [(i, v) for i, v in enumerate(ds[ENVIRONMENT_COLUMN]) if v not in factories]
    if bad:
        i, value = bad[0]
        _err(problems, key, names, f"dataset row {i} has {ENVIRONMENT_COLUMN}={value!r}, which it does not name"
             + (f" ({len(bad)} rows in all)" if len(bad) > 1 else ""), f"use one of: {names}")
