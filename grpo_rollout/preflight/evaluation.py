"""``evaluation:`` against what it names: the held-out prompts load and have the prompt column, and the success
reward is one of the run's rewards."""

from __future__ import annotations

import math
from pathlib import Path
from typing import List, Optional, Tuple

from ..config.problems import Problem, add_error as _err, add_warning as _warn
from ..config.schema import Config
from .task_source import check_task_source
from ..user_code.signatures import required_params
from ..user_code.resolve import resolve_callable


#: Fewer held-out prompts than this get a warning: pass@1's standard error over prompts can then exceed 0.09
#: (0.5 / √30), so a change of 0.2 between two evaluations may be noise.
MIN_HELD_OUT_PROMPTS = 30


def held_out_size_warning(available: int, max_prompts: Optional[int]) -> Optional[Tuple[str, str, str]]:
    """``(key, problem, fix)`` when the evaluation will see fewer held-out prompts than ``evaluation.max_prompts``
    asks for, or fewer than :data:`MIN_HELD_OUT_PROMPTS`; ``None`` otherwise. ``available``: rows ``data.eval``
    gives (a reasoning-gym task's after its training questions are taken out)."""
    used = min(available, max_prompts) if max_prompts else available
    if max_prompts and available < max_prompts:
        return ("evaluation.max_prompts", f"asks for {max_prompts} held-out prompts but data.eval has only "
                f"{available}, so pass@k is measured on {available}" + (f" (its standard error is up to "
                f"{0.5 / math.sqrt(available):.2f})" if available else ""),
                "add held-out rows (a reasoning-gym task: a larger data.task_kwargs.size or a wider task, so that "
                "fewer questions repeat the training ones), or lower evaluation.max_prompts")
    if 0 < used < MIN_HELD_OUT_PROMPTS:
        noise = (f"pass@k's standard error over prompts is up to {0.5 / math.sqrt(used):.2f}, so a change smaller "
                 "than about twice that is noise")
        if used < available:  # evaluation.max_prompts cuts a larger set
            return ("evaluation.max_prompts", f"evaluates {used} of data.eval's {available} held-out prompts: {noise}",
                    f"raise evaluation.max_prompts to {min(available, MIN_HELD_OUT_PROMPTS)} or more (null: all)")
        return ("data.eval", f"gives {used} held-out prompts: {noise}",
                f"use at least {MIN_HELD_OUT_PROMPTS} held-out prompts")
    return None


def evaluation_asked(config: Config) -> bool:
    """Whether ``evaluation:`` asks for any evaluation (at_start, at_end or every_steps), with or without
    ``data.eval``."""
    e = config.evaluation
    return e.at_start or e.at_end or e.every_steps > 0


def check_evaluation(config: Config, problems: List[Problem], base_dir: Path, load_data: bool = True,
                     train_columns: Optional[List[str]] = None) -> None:
    """Problems of the evaluation settings (none when no evaluation is asked for); ``train_columns``: the training
    rows' columns, when they loaded (a column a reward needs from them must be in the held-out rows too)."""
    from ..data import SOURCE_FIX, DatasetError, load_section
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
        _err(problems, "data.eval", config.data.eval, str(exc), SOURCE_FIX)
        return
    small = held_out_size_warning(len(ds), e.max_prompts)
    if small:
        _warn(problems, small[0], e.max_prompts if small[0] == "evaluation.max_prompts" else config.data.eval,
              small[1], small[2])
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
