"""Console output of a run: a progress bar with ETA over steps, one row of numbers per logged step and a table of a
few of its samples. When stdout is not a terminal (a log file, a pipe, a job scheduler) there is no live bar: every
logged step prints plain lines with the step count, elapsed time and ETA. In a Jupyter notebook all of it is one
display updated in place (:mod:`.notebook_display`)."""

from __future__ import annotations

import math
import time
from contextlib import nullcontext
from typing import Any, Dict, List, Optional

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from ...runs import names as rn
from .notebook_display import NotebookDisplay
from .streaming_view import gap_text, step_text

# (metric key, column header, format)
COLUMNS = [
    (rn.REWARD, "reward", "{:.3f}"), (rn.REWARD_STD, "±std", "{:.3f}"), (rn.KL, "KL", "{:.4f}"),
    (rn.ENTROPY, "entropy", "{:.3f}"), (rn.CLIP_REGION, "clip", "{:.3f}"), (rn.MEAN_LENGTH, "len", "{:.0f}"),
    (rn.MAX_LENGTH, "max", "{:.0f}"),
    (rn.TRUNCATED_FRACTION, "trunc", "{:.2f}"), (rn.GRAD_NORM, "|g|", "{:.3f}"), (rn.LEARNING_RATE, "lr", "{:.1e}"),
    (rn.TIME_GENERATION, "gen s", "{:.1f}"), (rn.TIME_REWARDS, "rew s", "{:.2f}"),
    (rn.TIME_TRAINING, "train s", "{:.1f}"),
]


def _fmt(value: Any, fmt: str) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return fmt.format(value)


def _excerpt(value: Any, width: int) -> str:
    """One line of at most ``width`` characters: a chat prompt's last message, newlines shown as ⏎."""
    if isinstance(value, list) and value and isinstance(value[-1], dict):
        value = value[-1].get("content", "")
    text = " ".join(str(value).replace("\n", " ⏎ ").split())
    return text if len(text) <= width else text[: width - 1] + "…"


def pick_samples(samples: List[Dict[str, Any]], num_generations: int, k: int) -> List[Dict[str, Any]]:
    """Up to ``k`` samples that show the learning signal: the best and the worst completion of the first groups
    (``samples`` are grouped by prompt, ``num_generations`` per group; each has ``reward``)."""
    chosen: List[Dict[str, Any]] = []
    for start in range(0, len(samples), max(num_generations, 1)):
        group = sorted(samples[start:start + num_generations], key=lambda r: r.get("reward") or 0.0, reverse=True)
        for sample in ([group[0], group[-1]] if len(group) > 1 else group):
            if len(chosen) < k:
                chosen.append(sample)
    return chosen


class RichReporter:
    """Prints run progress with rich. Pass ``console=None`` for a default console; ``quiet=True`` prints nothing.
    A console that is not a terminal gets plain lines (no live bar); a console in a Jupyter notebook (rich's
    ``Console.is_jupyter``) gets one display updated in place (:class:`~.notebook_display.NotebookDisplay`)."""

    def __init__(self, console: Optional[Console] = None, quiet: bool = False):
        self.console = console or Console()
        self.quiet = quiet
        self.notebook = NotebookDisplay.open(self.console.width) if self.console.is_jupyter and not quiet else None
        self.plain = not self.console.is_terminal and self.notebook is None
        self.progress: Optional[Progress] = None
        self.task = None
        self._header_done = False
        self._total = self._first = 0
        self._started = 0.0
        self._per_epoch: Optional[float] = None
        #: the shell command that resumes this run (set by ``grpo-rollout train``; printed when a run stops early)
        self.resume_command: Optional[str] = None
        self.stream_bound: Optional[int] = None  # streaming rollouts: training.max_staleness (:meth:`streaming`)

    def _out(self) -> Any:
        """Where printed lines go: the notebook's display, the live bar's console, or the console."""
        return self.notebook or (self.progress.console if self.progress else self.console)

    def message(self, text: str) -> None:
        """A status line (model conversion, loading, saving)."""
        if not self.quiet:
            # soft_wrap: a path or command in the message stays on one line, so it can be copied
            self._out().print(f"[dim]•[/] {escape(text)}", soft_wrap=True)

    def streaming(self, max_staleness: int, lines: List[str]) -> None:
        """Rollouts stream with this bound: say ``lines``; each step then shows its staleness against the bound, and
        the generation column is the trainer's wait for rollouts (``wait s``)."""
        self.stream_bound = max_staleness
        for line in lines:
            self.message(line)

    def status(self, text: str):
        """A spinner shown while ``with reporter.status(text): ...`` runs (in a notebook: a line of the display)."""
        if self.quiet:
            return nullcontext()
        return self.notebook.status(text) if self.notebook else self.console.status(escape(text))

    def summary(self, renderable: Any) -> None:
        """Print the run's final panel (after :meth:`stop`)."""
        if not self.quiet:
            self._out().print(renderable)

    def start(self, total_steps: int, first_step: int, steps_per_epoch: Optional[float] = None) -> None:
        """Show the bar; ``first_step`` > 0 when resuming; with ``steps_per_epoch`` the epoch is shown too."""
        if self.quiet:
            return
        self._total, self._first, self._started = total_steps, first_step, time.monotonic()
        self._per_epoch = steps_per_epoch
        if self.plain:
            self.console.print(f"Training steps {first_step + 1}-{total_steps}")
            return
        self.progress = Progress(TextColumn("[bold]GRPO"), BarColumn(), MofNCompleteColumn(), TextColumn("steps"),
                                 TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                                 TextColumn("{task.description}"), console=self.console, transient=False)
        self.task = self.progress.add_task("", total=total_steps, completed=first_step)
        if self.notebook is not None:  # drawn by the display, below the printed lines
            self.notebook.bar = self.progress
            self.notebook.refresh()
        else:
            self.progress.start()

    def _clock(self, step: int) -> str:
        """``[3/24 0:00:36 ETA 0:04:12]`` for plain output."""
        elapsed = time.monotonic() - self._started
        done = step - self._first
        eta = elapsed / done * (self._total - step) if done > 0 else float("nan")

        def hms(seconds: float) -> str:
            if not math.isfinite(seconds):
                return "-:--:--"
            seconds = int(seconds)
            return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"

        return f"[{self._epoch(step)}{step}/{self._total} {hms(elapsed)} ETA {hms(eta)}]"

    def _epoch(self, step: int) -> str:
        """``epoch 1.50/3.00 · `` (empty without ``steps_per_epoch``)."""
        if not self._per_epoch:
            return ""
        return f"epoch {step / self._per_epoch:.2f}/{self._total / self._per_epoch:.2f} · "

    def step(self, step: int, metrics: Dict[str, Any], log: bool,
             samples: Optional[List[Dict[str, Any]]] = None) -> None:
        """Advance after step ``step`` (1-based); with ``log`` print a row of ``metrics`` and a table of ``samples``
        (records with ``prompt``, ``completion``, ``reward``, ``rewards/<fn>``, ``advantage``, and ``turns`` /
        ``tool_calls`` / ``ended`` (why the episode ended) for multi-turn rollouts)."""
        if self.quiet or (self.progress is None and not self.plain):
            return
        with self.notebook.batch() if self.notebook else nullcontext():
            self._step(step, metrics, log, samples)

    def _step(self, step: int, metrics: Dict[str, Any], log: bool, samples: Optional[List[Dict[str, Any]]]) -> None:
        if self.progress is not None:
            reward = metrics.get(rn.REWARD)
            self.progress.update(self.task, completed=step,
                                 description=f"{self._epoch(step)}reward {_fmt(reward, '{:.3f}')}")
        if not log:
            return
        out = self._out()
        if not self._header_done:
            headers = [("wait s" if k == rn.TIME_GENERATION and self.stream_bound is not None else h)
                       for k, h, _ in COLUMNS]
            out.print("[bold]" + " ".join(f"{h:>8}" for h in ["step"] + headers))
            self._header_done = True
        row = [f"{step:>8}"] + [f"{_fmt(metrics.get(k), f):>8}" for k, _, f in COLUMNS]
        out.print(" ".join(row) + (f"  {escape(self._clock(step))}" if self.plain else ""), soft_wrap=self.plain)
        per_fn = "  ".join(f"{rn.reward_fn_of_mean(k)}={_fmt(v, '{:.3f}')}" for k, v in metrics.items()
                           if rn.reward_fn_of_mean(k) is not None)
        extra = []
        if rn.NUM_TURNS in metrics:
            extra.append(f"turns={_fmt(metrics[rn.NUM_TURNS], '{:.2f}')}")
        if rn.CUT_BY_BUDGET in metrics:
            extra.append(f"cut by budget={_fmt(metrics[rn.CUT_BY_BUDGET], '{:.0f}')}")
        if metrics.get(rn.TURNS_CAPPED):
            extra.append(f"turns cut by max_turn_tokens={_fmt(metrics[rn.TURNS_CAPPED], '{:.0f}')}")
        if rn.TOOL_CALLS in metrics:
            extra.append(f"tool calls={_fmt(metrics[rn.TOOL_CALLS], '{:.0f}')} "
                         f"ok={_fmt(metrics.get(rn.TOOL_SUCCESS_RATE), '{:.0%}')}")
        if rn.STALENESS_MAX in metrics:  # streaming rollouts
            extra.append(step_text(metrics, self.stream_bound))
        extra += [gap] if (gap := gap_text(metrics)) else []
        if per_fn or extra:
            out.print(f"[dim]{' ' * 9}{escape(per_fn)}  {'  '.join(extra)}[/]", soft_wrap=self.plain)
        if samples:
            self._samples(out, samples)

    def _samples(self, out: Any, samples: List[Dict[str, Any]]) -> None:
        """A table of samples (terminal) or one line per sample (plain)."""
        fns = [k for k in samples[0] if k.startswith(rn.REWARDS_PREFIX)]
        multi_turn = [k for k in ("turns", "tool_calls", "ended") if any(s.get(k) is not None for s in samples)]
        if self.plain:
            for s in samples:
                values = "  ".join([f"reward={_fmt(s.get('reward'), '{:.3f}')}"]
                                   + [f"{k[len(rn.REWARDS_PREFIX):]}={_fmt(s.get(k), '{:.3f}')}" for k in fns]
                                   + [f"advantage={_fmt(s.get('advantage'), '{:+.3f}')}"]
                                   + [f"{k}={_fmt(s.get(k), '{}')}" for k in multi_turn])
                out.print(f"{' ' * 9}sample: {escape(values)} | prompt: {escape(_excerpt(s.get('prompt'), 60))} | "
                          f"completion: {escape(_excerpt(s.get('completion'), 100))}", soft_wrap=True,
                          highlight=False)
            return
        table = Table(show_header=True, header_style="dim bold", box=None, padding=(0, 1), pad_edge=False)
        # the text columns give way when the table is too wide (the numbers stay whole); each cell is one line
        table.add_column("prompt", ratio=2)
        table.add_column("completion", ratio=3)
        for column in ["reward"] + [k[len(rn.REWARDS_PREFIX):] for k in fns] + ["adv"] + multi_turn:
            table.add_column(column.replace("_", " "), justify="right", no_wrap=True)
        for s in samples:
            adv = s.get("advantage")
            colour = "green" if adv and adv > 0 else "red" if adv and adv < 0 else "dim"
            table.add_row(*[Text(_excerpt(s.get(k), width), no_wrap=True, overflow="ellipsis")
                            for k, width in (("prompt", 200), ("completion", 300))],
                          _fmt(s.get("reward"), "{:.3f}"), *[_fmt(s.get(k), "{:.3f}") for k in fns],
                          f"[{colour}]{_fmt(adv, '{:+.3f}')}[/]", *[_fmt(s.get(k), "{}") for k in multi_turn])
        out.print(table)

    def stop(self) -> None:
        """Remove the live bar (before a final summary; a notebook's display keeps the bar in its last state)."""
        if self.progress is not None:
            if self.notebook is None:
                self.progress.stop()
            else:  # the bar's last state stays where it is (its clock stopped); what is printed next goes below it
                self.progress.stop_task(self.task)
                self.notebook.bar = None
                self.notebook.print(self.progress)
            self.progress = None
