"""``evaluation:`` against what it names: the held-out prompts load and have the prompt column, and the success
reward is one of the run's rewards."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

from ..config.problems import Problem, add_error as _err, add_warning as _warn
from ..config.schema import Config
from .reasoning_gym import check_task_source
from ..signatures import required_params
from ..user_code import resolve_callable


def evaluation_asked(config: Config) -> bool:
    """Whether ``evaluation:`` asks for any evaluation (at_start, at_end or every_steps), with or without
    ``data.eval``."""
    e = config.evaluation
    return e.at_start or e.at_end or e.every_steps > 0


def check_evaluation(config: Config, problems: List[Problem], base_dir: Path, load_data: bool = True,
                     train_columns: Optional[List[str]] = None) -> None:
    """Problems of the evaluation settings (none when no evaluation is asked for); ``train_columns``: the training
    rows' columns, when they loaded (a column a reward needs from them must be in the held-out rows too)."""
    from ..data import DatasetError, load_section
    from ..rewards.calling import unique_names

    e = config.evaluation
    if evaluation_asked(config) and not config.data.eval:
        _warn(problems, "data.eval", "", "is empty, so evaluation.at_start/at_end/every_steps evaluate nothing",
              "set data.eval to held-out prompts (a file, hub dataset, function or reasoning_gym:<task>)")
        return
    if not config.data.eval:
        return
    try:
        functions = [resolve_callable(r.function, base_dir) for r in config.rewards]
    except Exception:  # noqa: BLE001 - an import error is reported by check_functions
        functions = None
    names = unique_names(functions) if functions is not None else None
    if e.success_reward is not None:
        if names is not None and e.success_reward not in names:
            _err(problems, "evaluation.success_reward", e.success_reward, "is not one of the run's rewards "
                 f"({', '.join(names) or 'none'})", "name one of them (as in rewards/<name>), or null for the total")
    if not load_data or not check_task_source(config, problems, "data.eval"):
        return
    try:
        ds = load_section(config.data, base_dir, held_out=True)
    except DatasetError as exc:
        _err(problems, "data.eval", config.data.eval, str(exc), "fix the path/name, or the function named")
        return
    if config.data.prompt_column not in ds.column_names:
        _err(problems, "data.eval", config.data.eval, f"has no column `{config.data.prompt_column}` (columns: "
             f"{', '.join(ds.column_names)})", "give the held-out rows the training rows' prompt column")
    for name, fn, r in zip(names or [], functions or [], config.rewards):  # columns rewards take from the rows
        needed = [p for p in required_params(fn) if p in (train_columns or []) and p not in r.kwargs]
        missing = [p for p in needed if p not in ds.column_names]
        if missing:
            _err(problems, "data.eval", config.data.eval, f"has no column {', '.join(f'`{m}`' for m in missing)}, "
                 f"which the reward `{name}` takes from the training rows (columns: {', '.join(ds.column_names)})",
                 "give the held-out rows the same columns as the training rows")
