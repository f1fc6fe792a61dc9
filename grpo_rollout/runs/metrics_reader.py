"""Reading a run's ``metrics.jsonl`` back: one :class:`Run` per folder, with clear errors for a folder that has none.

``grpo-rollout plot`` (:mod:`grpo_rollout.views.plot`) draws what this module reads.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple, Union

from .folder import no_step_finished
from .names import METRICS_FILE, STEP

PathLike = Union[str, Path]


class PlotError(Exception):
    """Bad input for a plot (no such run folder, no or empty ``metrics.jsonl``, unknown metric key). The message
    names the path or key and says what to do; it is meant to be shown to the user as is."""


@dataclass
class Run:
    """The metrics of one training run.

    Attributes:
        path: the run folder (``training.output_dir``).
        name: the label in legends (the folder name, or enough of its path to tell it apart from the other runs).
        records: one dict per logged step, as written to ``metrics.jsonl`` (``null`` read back as ``nan``).
    """

    path: Path
    name: str
    records: List[Dict[str, float]] = field(default_factory=list)

    def keys(self) -> List[str]:
        """Every numeric metric key (not ``step``) in any record, in the order first seen."""
        seen: Dict[str, None] = {}
        for record in self.records:
            for key in record:
                if key != STEP:
                    seen.setdefault(key, None)
        return list(seen)

    def series(self, key: str) -> Tuple[List[float], List[float]]:
        """``(steps, values)`` of the records that have ``key`` (``nan`` where it was logged as ``null``)."""
        xs, ys = [], []
        for record in self.records:
            if key in record:
                xs.append(record[STEP])
                ys.append(record[key])
        return xs, ys


def _number(value: object) -> Optional[float]:
    """A JSON value as a float (``null`` → ``nan``), or None if it is not a number (strings, lists, ...)."""
    if value is None:
        return math.nan
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    return None


def _metrics_file(run_dir: Path) -> Path:
    if not run_dir.exists():
        raise PlotError(f"{run_dir}: no such folder. Give the folder a run wrote to (its training.output_dir, "
                        f"e.g. outputs/quickstart).")
    if run_dir.is_file():
        if run_dir.suffix == ".jsonl":
            return run_dir
        raise PlotError(f"{run_dir} is a file, not a run folder. Give the run's training.output_dir (the folder "
                        f"holding {METRICS_FILE}).")
    path = run_dir / METRICS_FILE
    if not path.is_file() or not path.read_text(errors="replace").strip():
        why = no_step_finished(run_dir, "logging.report_to", lambda v: isinstance(v, list) and "jsonl" in v)
        if why:
            raise PlotError(f"{path} has no step yet: {why}.")
    if not path.is_file():
        raise PlotError(f"{path} not found: this run logged no metrics to a file. Runs write {METRICS_FILE} when "
                        f"logging.report_to includes jsonl (the default); train again with e.g. "
                        f"logging.report_to=[jsonl] (add trackio/wandb to the list to keep those too).")
    return path


def load_run(run_dir: PathLike, name: Optional[str] = None) -> Run:
    """Read ``run_dir/metrics.jsonl``.

    Args:
        run_dir: a run folder (``training.output_dir``), or a ``.jsonl`` metrics file itself.
        name: legend label; default the folder name.

    Returns:
        A :class:`Run` whose records hold ``step`` and every numeric metric of each logged step (values that are not
        numbers are left out). A half-written last line, as a run still training may leave, is ignored.

    Raises:
        PlotError: the folder does not exist, it has no ``metrics.jsonl`` (the run did not log to ``jsonl``), the
            file is empty, or a line other than the last is not a JSON object with a ``step``.
    """
    run_dir = Path(run_dir)
    path = _metrics_file(run_dir)
    folder = path.parent
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise PlotError(f"{path}: cannot read it ({getattr(e, 'strerror', None) or e}).") from None
    lines = [(n, line) for n, line in enumerate(text.splitlines(), start=1) if line.strip()]
    records = []
    for i, (lineno, line) in enumerate(lines):
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as e:
            if i == len(lines) - 1:
                break  # the line being written right now by a live run
            raise PlotError(f"{path} line {lineno} is not JSON ({e.msg}); each line must be one step's JSON "
                            f"object as the trainer writes it.") from None
        step = _number(raw.get(STEP)) if isinstance(raw, dict) else None
        if step is None or not math.isfinite(step):
            raise PlotError(f"{path} line {lineno} is not a step record: expected a JSON object with a numeric "
                            f"\"step\" key, as the trainer writes.")
        record = {k: v for k, v in ((k, _number(v)) for k, v in raw.items()) if v is not None}
        records.append(record)
    if not records:
        raise PlotError(f"{path} is empty: the run has not logged a step yet. Wait for the first logged step "
                        f"(training.logging_steps), or train with logging.report_to including jsonl.")
    return Run(path=folder, name=name or folder.name or str(folder), records=records)
