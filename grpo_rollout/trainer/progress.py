"""Console output of a run: a progress bar with ETA over steps and one table row per logged step."""

from __future__ import annotations

import math
from typing import Any, Dict, Optional

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

# (metric key, column header, format)
COLUMNS = [
    ("reward", "reward", "{:.3f}"),
    ("reward_std", "±std", "{:.3f}"),
    ("kl", "KL", "{:.4f}"),
    ("clip_ratio/region", "clip", "{:.3f}"),
    ("completions/mean_length", "len", "{:.0f}"),
    ("completions/max_length", "max", "{:.0f}"),
    ("completions/truncated_fraction", "trunc", "{:.2f}"),
    ("grad_norm", "|g|", "{:.3f}"),
    ("learning_rate", "lr", "{:.1e}"),
    ("time/generation", "gen s", "{:.1f}"),
    ("time/rewards", "rew s", "{:.2f}"),
    ("time/training", "train s", "{:.1f}"),
]


def _fmt(value: Any, fmt: str) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return fmt.format(value)


class RichReporter:
    """Prints run progress with rich. Pass ``console=None`` for a default console; ``quiet=True`` prints nothing."""

    def __init__(self, console: Optional[Console] = None, quiet: bool = False):
        self.console = console or Console()
        self.quiet = quiet
        self.progress: Optional[Progress] = None
        self.task = None
        self._header_done = False

    def message(self, text: str) -> None:
        """A status line (model conversion, loading, saving)."""
        if not self.quiet:
            # soft_wrap: a path or command in the message stays on one line, so it can be copied
            (self.progress.console if self.progress else self.console).print(f"[dim]•[/] {escape(text)}",
                                                                             soft_wrap=True)

    def status(self, text: str):
        """A spinner shown while ``with reporter.status(text): ...`` runs."""
        from contextlib import nullcontext

        return nullcontext() if self.quiet else self.console.status(escape(text))

    def start(self, total_steps: int, first_step: int) -> None:
        """Show the bar; ``first_step`` > 0 when resuming."""
        if self.quiet:
            return
        self.progress = Progress(TextColumn("[bold]GRPO"), BarColumn(), MofNCompleteColumn(), TextColumn("steps"),
                                 TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                                 TextColumn("{task.description}"), console=self.console, transient=False)
        self.progress.start()
        self.task = self.progress.add_task("", total=total_steps, completed=first_step)

    def step(self, step: int, metrics: Dict[str, Any], log: bool, sample: Optional[str] = None) -> None:
        """Advance the bar after step ``step`` (1-based); with ``log`` print a row of ``metrics`` (and a sample)."""
        if self.quiet or self.progress is None:
            return
        reward = metrics.get("reward")
        self.progress.update(self.task, completed=step, description=f"reward {_fmt(reward, '{:.3f}')}")
        if not log:
            return
        out = self.progress.console
        if not self._header_done:
            out.print("[bold]" + " ".join(f"{h:>8}" for h in ["step"] + [c[1] for c in COLUMNS]))
            self._header_done = True
        row = [f"{step:>8}"] + [f"{_fmt(metrics.get(k), f):>8}" for k, _, f in COLUMNS]
        out.print(" ".join(row))
        per_fn = "  ".join(f"{k[len('rewards/'):-len('/mean')]}={_fmt(v, '{:.3f}')}" for k, v in metrics.items()
                           if k.startswith("rewards/") and k.endswith("/mean"))
        extra = []
        if "extras/num_turns" in metrics:
            extra.append(f"turns={_fmt(metrics['extras/num_turns'], '{:.2f}')}")
        if "tools/calls" in metrics:
            extra.append(f"tool calls={_fmt(metrics['tools/calls'], '{:.0f}')} "
                         f"ok={_fmt(metrics.get('tools/success_rate'), '{:.0%}')}")
        if "sampler/logprob_abs_diff" in metrics:
            extra.append(f"|Δlogp| sampler-trainer={_fmt(metrics['sampler/logprob_abs_diff'], '{:.2e}')}")
        if per_fn or extra:
            out.print(f"[dim]{' ' * 9}{escape(per_fn)}  {'  '.join(extra)}[/]")
        if sample:
            out.print(f"[dim]{' ' * 9}sample: {escape(sample)}[/]")

    def stop(self) -> None:
        """Remove the live bar (before a final summary)."""
        if self.progress is not None:
            self.progress.stop()
            self.progress = None
