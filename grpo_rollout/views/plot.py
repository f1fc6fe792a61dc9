"""Plots of a run's ``metrics.jsonl``: one matplotlib Figure with a panel per group of metrics, several runs overlaid.

The figure is drawn on matplotlib's Agg canvas (never a window, and the process-wide backend is left alone), so it
works on headless machines and inside notebooks alike. ``grpo-rollout plot`` is a thin shell over
:func:`plot_runs` and :func:`save_figure`.
"""

from __future__ import annotations

import difflib
import io
import math
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from .plot_panels import DEFAULT_PANELS, Panel, draw_panel, fixed
from ..runs.metrics_reader import PathLike, PlotError, Run, load_run
from ..runs.names import STEP

__all__ = ["PlotError", "Run", "load_run", "available_metrics", "plot_runs", "default_output_path", "save_figure"]


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
