"""Where step metrics and sampled completions go: ``metrics.jsonl``, ``completions.jsonl``, trackio, wandb."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional

from .names import COMPLETIONS_FILE, FAILURES_FILE, METRICS_FILE, STEP


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None  # JSON has no NaN
    return value


class MetricsLogger:
    """Appends one JSON object per step to ``output_dir/metrics.jsonl`` (when ``jsonl`` is in ``report_to``) and
    forwards the same numbers to trackio / wandb. Sampled completions go to ``output_dir/completions.jsonl``.

    Args:
        output_dir: run folder (created). report_to: subset of ``jsonl``, ``trackio``, ``wandb``.
        project, run_name, config: passed to trackio/wandb ``init``.
        write: False makes the logger do nothing (training ranks other than 0).
    """

    def __init__(self, output_dir: Path, report_to: Iterable[str], project: str = "grpo-rollout",
                 run_name: Optional[str] = None, config: Optional[Dict[str, Any]] = None, write: bool = True):
        self.output_dir = Path(output_dir)
        if write:
            self.output_dir.mkdir(parents=True, exist_ok=True)
        report_to = list(report_to)
        self.metrics_path = self.output_dir / METRICS_FILE if "jsonl" in report_to and write else None
        self.completions_path = self.output_dir / COMPLETIONS_FILE if write else None
        self.failures_path = self.output_dir / FAILURES_FILE if write else None  # the rollout stage writes it
        self._trackers: List[Any] = []
        for name in ("trackio", "wandb"):
            if name in report_to:
                import importlib

                module = importlib.import_module(name)
                module.init(project=project, name=run_name, config=config)
                self._trackers.append(module)

    def log(self, step: int, metrics: Dict[str, Any]) -> None:
        """Record ``metrics`` of ``step`` (1-based)."""
        record = {STEP: step, **{k: _clean(v) for k, v in metrics.items()}}
        if self.metrics_path is not None:
            with self.metrics_path.open("a") as f:
                f.write(json.dumps(record) + "\n")
        for tracker in self._trackers:
            tracker.log(metrics, step=step)

    def log_completions(self, step: int, samples: List[Dict[str, Any]]) -> None:
        """Append one JSON line per sample (prompt, completion, rewards, advantage)."""
        if self.completions_path is None:
            return
        with self.completions_path.open("a") as f:
            for sample in samples:
                f.write(json.dumps({STEP: step, **{k: _clean(v) for k, v in sample.items()}}, default=str) + "\n")

    def truncate_after(self, step: int) -> None:
        """Drop records of steps after ``step`` (used when resuming, so replayed steps are not duplicated)."""
        for path in (self.metrics_path, self.completions_path, self.failures_path):
            if path is None or not path.exists():
                continue
            kept = [line for line in path.read_text().splitlines() if line and json.loads(line).get(STEP, 0) <= step]
            path.write_text("".join(line + "\n" for line in kept))

    def close(self) -> None:
        """Finish trackio/wandb runs."""
        for tracker in self._trackers:
            tracker.finish()
