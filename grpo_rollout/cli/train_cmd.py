"""``grpo-rollout train``: validate, train, and print a final summary; user mistakes end in a message, not a traceback."""

from __future__ import annotations

import math
import signal
from pathlib import Path
from typing import TYPE_CHECKING, List, Optional

from rich.console import Console
from rich.markup import escape
from rich.panel import Panel

from .. import run_names as rn
from ..preflight import check_config
from .render import print_problems

if TYPE_CHECKING:
    from ..config import LoadedConfig
    from ..trainer.run import TrainResult


def run_train(console: Console, config_path: Path, overrides: List[str], resume: Optional[str]) -> int:
    """Run the ``train`` command; returns the exit code. Under torchrun only rank 0 prints."""
    import os

    if os.environ.get("RANK", "0") != "0":
        console = Console(quiet=True)
    with console.status("Checking config…"):
        loaded, problems = check_config(config_path, overrides)
    print_problems(console, problems)
    if any(p.is_error for p in problems):
        console.print("[red]Not starting: fix the errors above[/] (grpo-rollout validate-config shows them too).")
        return 1
    return _train_and_summarise(console, loaded, config_path, overrides, resume)


def _train_and_summarise(console: Console, loaded: LoadedConfig, config_path: Path, overrides: List[str],
                         resume: Optional[str]) -> int:
    """Train a checked config (Ctrl-C/SIGTERM and the run's own errors end in a message) and print the summary."""
    import os

    from ..data import DatasetError
    from ..generation.backend import BackendError
    from ..generation.spawn import ServerStartError
    from ..generation.vllm_client import ServerError
    from ..rewards.calling import RewardError
    from ..rollouts.contract import RolloutError
    from ..trainer import train
    from ..trainer.distributed import RankError
    from ..trainer.guards import NonFiniteError, StaleWeightsError
    from ..trainer.progress import RichReporter

    def _terminate(signum, frame):  # `kill` / a job scheduler: stop like Ctrl-C (save finished steps, stop vLLM)
        raise KeyboardInterrupt

    from ..trainer.resume_hint import resume_command

    signal.signal(signal.SIGTERM, _terminate)
    reporter = RichReporter(console)
    reporter.resume_command = resume_command(config_path, overrides, int(os.environ.get("WORLD_SIZE", "1")))
    try:
        result = train(loaded.config, base_dir=loaded.base_dir, resume=resume, reporter=reporter, check=False)
    except KeyboardInterrupt:
        console.print("[yellow]Interrupted.[/]")
        return 130
    except (RolloutError, RewardError, DatasetError, FileNotFoundError, ValueError, BackendError, ServerStartError,
            ServerError, StaleWeightsError, NonFiniteError, RankError) as exc:
        console.print(Panel(escape(str(exc)), title=f"[red]{type(exc).__name__}", border_style="red"))
        if exc.__cause__ is not None:
            console.print(f"[dim]caused by {type(exc.__cause__).__name__}: {escape(str(exc.__cause__))}[/]")
        return 1
    return _print_summary(console, result)


def _print_summary(console: Console, result: TrainResult) -> int:
    """The final panel: steps, how the mean reward moved, time per step, where the model and metrics are."""
    if not result.history:  # --resume on a run that had already reached max_steps: the reporter said why
        console.print(Panel(f"nothing trained; the model stays at [bold]{escape(str(result.checkpoint))}[/]",
                            title="[bold yellow]Nothing to do", expand=False))
        return 0
    k = max(1, min(5, len(result.history) // 3))
    start, end = result.mean_reward(True, k), result.mean_reward(False, k)
    lines = [f"steps: {result.steps}"]
    if result.history:
        delta = end - start
        arrow = "[green]▲[/]" if delta > 0 else "[red]▼[/]" if delta < 0 else "="
        steps = "step" if k == 1 else f"{k} steps"
        first = result.steps - len(result.history) + 1  # a resumed run's history starts there
        where = "" if first == 1 else f" of this session, from step {first}"
        lines.append(f"reward (mean of first {steps}{where}): {start:.3f}")
        lines.append(f"reward (mean of last {steps}):  {end:.3f}  {arrow} {delta:+.3f}" if math.isfinite(delta)
                     else f"reward (mean of last {steps}):  {end:.3f}")
    lines += _held_out_lines(result, end - start)
    times = {k: [m.get(key) or 0.0 for m in result.history]
             for k, key in (("step", rn.TIME_STEP), ("generation", rn.TIME_GENERATION), ("training", rn.TIME_TRAINING),
                            ("sync", rn.TIME_SYNC))}
    n = len(result.history)
    lines.append(f"time: {sum(times['step']):.0f} s, {sum(times['step']) / n:.1f} s/step (generation "
                 f"{sum(times['generation']) / n:.1f}, training {sum(times['training']) / n:.1f}, sync "
                 f"{sum(times['sync']) / n:.1f})")
    last = result.history[-1]
    if last.get(rn.TOOL_SUCCESS_RATE) is not None:
        lines.append(f"tool calls in the last step: {last.get(rn.TOOL_CALLS, 0):.0f}, "
                     f"{last[rn.TOOL_SUCCESS_RATE]:.0%} succeeded")
    lines.append(f"model saved to: [bold]{escape(str(result.checkpoint))}[/]")
    out = escape(str(result.output_dir))
    lines.append(f"metrics: {escape(str(result.output_dir / rn.METRICS_FILE))}  (plot: [cyan]grpo-rollout plot {out}[/])")
    if (result.output_dir / rn.ROLLOUTS_DIR).is_dir():
        lines.append(f"token-level rollouts: {out}/{rn.ROLLOUTS_DIR}  ([cyan]grpo-rollout inspect {out}[/])")
    console.print(Panel("\n".join(lines), title="[bold green]Training finished", expand=False))
    return 0


def _held_out_lines(result: TrainResult, train_delta: float) -> List[str]:
    """The held-out evaluation's pass@1 from the first to the last evaluation of the session, beside the training
    reward's change, and a warning when the training reward rose while held-out success fell (reward hacking)."""
    key = rn.pass_at(1)
    evals = [(step, m[key]) for step, m in result.evaluations if key in m]
    if not evals:
        return []
    (s0, v0), (s1, v1) = evals[0], evals[-1]
    if len(evals) == 1:
        return [f"held-out pass@1 after step {s0}: {v0:.3f}"]
    delta = v1 - v0
    arrow = "[green]▲[/]" if delta > 0 else "[red]▼[/]" if delta < 0 else "="
    lines = [f"held-out pass@1 (step {s0} → {s1}): {v0:.3f} → {v1:.3f}  {arrow} {delta:+.3f}"]
    if math.isfinite(train_delta) and train_delta > 0 and delta < 0:
        lines.append("[yellow]the training reward rose while held-out success fell: the policy may be gaming the "
                     "reward (reward hacking); read the held-out answers in eval/step_<k>.jsonl[/]")
    return lines

