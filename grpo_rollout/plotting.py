"""Plots of a run's ``metrics.jsonl``: one matplotlib Figure with a panel per group of metrics, several runs overlaid.

The figure is drawn on matplotlib's Agg canvas (never a window, and the process-wide backend is left alone), so it
works on headless machines and inside notebooks alike. ``grpo-rollout plot`` is a thin shell over
:func:`plot_runs` and :func:`save_figure`.
"""

from __future__ import annotations

import difflib
import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from .plot_panels import DEFAULT_PANELS, Panel, draw_panel, fixed
from .run_names import METRICS_FILE, STEP
from .run_folder import no_step_finished

__all__ = ["PlotError", "Run", "load_run", "available_metrics", "plot_runs", "default_output_path", "save_figure"]

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


def _distinct_names(paths: Sequence[Path]) -> List[str]:
    """Legend labels: each folder's name, lengthened with parent folders until no two runs share a label."""
    parts = [(p.parent if p.is_file() else p).resolve().parts for p in paths]
    depth = 1
    while True:
        names = ["/".join(pp[-depth:]) for pp in parts]
        if len(set(names)) == len(names) or depth >= max(len(pp) for pp in parts):
            return names
        depth += 1


def available_metrics(runs: Sequence[Run]) -> List[str]:
    """Every metric key logged by any of ``runs``, sorted.

    Args:
        runs: loaded runs (:func:`load_run`).

    Returns:
        The keys, ``step`` excluded.
    """
    return sorted({key for run in runs for key in run.keys()})


def _finite_metrics(runs: Sequence[Run]) -> List[str]:
    return sorted({k for run in runs for record in run.records for k, v in record.items()
                   if k != STEP and math.isfinite(v)})


# the default panels live in plot_panels.py


def _metric_panels(metrics: Sequence[str], available: List[str]) -> List[Panel]:
    unknown = [m for m in metrics if m not in available]
    if unknown:
        hints = []
        for m in unknown:
            close = difflib.get_close_matches(m, available, n=3, cutoff=0.5)
            hints.append(f"'{m}'" + (f" (did you mean {', '.join(close)}?)" if close else ""))
        raise PlotError(f"unknown metric {', '.join(hints)}: no run logged it. Available metrics: "
                        f"{', '.join(available)}.")
    return [Panel(m, m, fixed(m)) for m in metrics]


# -- drawing -----------------------------------------------------------------------------------------------------

def _grid(n: int) -> Tuple[int, int]:
    cols = 1 if n == 1 else 2
    return math.ceil(n / cols), cols


def plot_runs(run_dirs: Sequence[PathLike], metrics: Optional[Sequence[str]] = None) -> Figure:
    """Draw the metrics of one or more runs into one Figure.

    Without ``metrics`` the panels are: reward (mean with a ± std band, and each ``rewards/<fn>/mean``), completion
    length (mean, max), truncated fraction, KL, clip ratio (``clip_ratio/region``), sampler/trainer mean |Δlogp| (log
    scale), tool success rate, multi-turn episodes (turns; how they ended: ``episodes/ended/*``; how many the token
    budget cut), and the time of each phase of a step (generation, rewards, training, sync). A panel
    whose metrics no run logged (or logged only as ``null``) is left out. Every Axes has a title, a y-label naming its metric(s) and the x-label ``step``.

    One run: each metric of a panel has its own colour. Several runs: each run has one colour throughout (a legend
    at the top names the run folders) and a panel's metrics are told apart by line style.

    Args:
        run_dirs: run folders (``training.output_dir``), each holding ``metrics.jsonl``.
        metrics: exact metric keys to plot instead, one panel each (e.g. ``["reward", "grad_norm"]``).

    Returns:
        A matplotlib Figure on an Agg canvas; save it with :func:`save_figure` (or ``fig.savefig``).

    Raises:
        PlotError: no run folder was given, a folder or its ``metrics.jsonl`` is missing or empty (see
            :func:`load_run`), a key in ``metrics`` was logged by no run (the message lists the available ones),
            or there is nothing to plot.
    """
    paths = [Path(p) for p in run_dirs]
    if not paths:
        raise PlotError("no run folder given: name at least one training.output_dir.")
    names = _distinct_names(paths)
    runs = [load_run(p, name) for p, name in zip(paths, names)]
    available = available_metrics(runs)
    if metrics is not None:
        metrics = list(dict.fromkeys(m.strip() for m in metrics if m.strip()))
        if not metrics:
            raise PlotError(f"--metrics names no metric. Available metrics: {', '.join(available)}.")
        panels = _metric_panels(metrics, available)
    else:
        panels = DEFAULT_PANELS
    # a default panel needs a metric with at least one number; --metrics keys are drawn even if all null
    drawable = available if metrics is not None else _finite_metrics(runs)
    chosen = [(panel, panel.choose(drawable)) for panel in panels]
    chosen = [(panel, keys) for panel, keys in chosen if keys]
    if not chosen:
        raise PlotError(f"nothing to plot: the runs logged none of the usual metrics. Pick some with --metrics; "
                        f"available: {', '.join(available) or '(none)'}.")

    rows, cols = _grid(len(chosen))
    fig = Figure(figsize=(6.4 * cols, 3.1 * rows + (0.4 if len(runs) > 1 else 0)), layout="constrained")
    FigureCanvasAgg(fig)
    grid = fig.add_gridspec(rows, cols)
    # panels fill the grid row by row; an odd last panel takes the whole last row rather than leave a hole
    axes = [fig.add_subplot(grid[i // cols, i % cols] if i < len(chosen) - 1 or len(chosen) % cols == 0
                            else grid[i // cols, :]) for i in range(len(chosen))]
    several = len(runs) > 1
    for ax, (panel, keys) in zip(axes, chosen):
        draw_panel(ax, panel, keys, runs, several)
    if several:
        handles = [Line2D([], [], color=f"C{i}", lw=2) for i in range(len(runs))]
        fig.legend(handles, [run.name for run in runs], loc="outside upper center", ncols=min(len(runs), 4),
                   frameon=False, title="run")
    return fig


def default_output_path(run_dirs: Sequence[PathLike]) -> Path:
    """Where ``grpo-rollout plot`` writes when no ``-o`` is given.

    Args:
        run_dirs: the run folders being plotted.

    Returns:
        ``RUN_DIR/plot.png`` for one run (next to its ``metrics.jsonl``), ``./runs.png`` for several.
    """
    if len(run_dirs) == 1:
        run_dir = Path(run_dirs[0])
        return (run_dir.parent if run_dir.is_file() else run_dir) / "plot.png"
    return Path("runs.png")


def save_figure(fig: Figure, path: PathLike, dpi: int = 100, palette: bool = True) -> Path:
    """Write ``fig`` to ``path`` (format from the suffix: png, pdf, svg, ...), creating parent folders.

    Args:
        fig: a Figure from :func:`plot_runs`.
        path: the file to write.
        dpi: resolution of raster formats.
        palette: write a PNG with a 256-colour palette (about a third of the bytes of a full-colour one and looks the
            same for line plots); False keeps full colour.

    Returns:
        ``path`` as a Path.

    Raises:
        PlotError: the suffix is not a format matplotlib writes, or the file cannot be written.
    """
    path = Path(path)
    canvas = fig.canvas if isinstance(fig.canvas, FigureCanvasAgg) else FigureCanvasAgg(fig)
    formats = canvas.get_supported_filetypes()
    fmt = path.suffix.lstrip(".").lower()
    if fmt not in formats:
        raise PlotError(f"{path}: cannot write '{path.suffix or '(no suffix)'}' files; end the name with one of "
                        f"{', '.join('.' + f for f in sorted(formats))} (e.g. {path.with_suffix('.png').name}).")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if fmt == "png" and palette:
            from PIL import Image  # matplotlib's own dependency

            buffer = io.BytesIO()
            fig.savefig(buffer, format="png", dpi=dpi)
            buffer.seek(0)
            with Image.open(buffer) as image:
                image.convert("RGB").quantize(colors=256).save(path, format="PNG", optimize=True, dpi=(dpi, dpi))
        else:
            fig.savefig(path, dpi=dpi)
    except OSError as e:
        raise PlotError(f"{path}: cannot write the plot ({e.strerror or e}). Pick another place with -o.") from None
    return path
