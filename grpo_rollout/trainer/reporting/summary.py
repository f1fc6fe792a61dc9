"""The final summary of a run: steps, how the mean reward moved, the held-out evaluation, time per step by phase, how
many steps changed the weights, and where the model, metrics and rollouts are. :func:`grpo_rollout.train` prints it
as a panel at the end (the CLI's "Training finished") and returns it as plain text in ``TrainResult.summary``."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, List, Tuple

from rich.markup import escape
from rich.panel import Panel
from rich.text import Text

from ...runs import names as rn
from ..evaluation.held_out import plus_minus
from ..update.no_signal import updated_weights
from .streaming_view import summary_lines

if TYPE_CHECKING:
    from ..run import TrainResult


def summary_panel(result: TrainResult) -> Panel:
    """The final panel (rich markup): see the module docstring."""
    title, lines = _title_and_lines(result)
    colour = "green" if result.history else "yellow"
    return Panel("\n".join(lines), title=f"[bold {colour}]{title}", expand=False)


def summary_text(result: TrainResult) -> str:
    """The final panel's title and lines as plain text (what ``TrainResult.summary`` holds)."""
    title, lines = _title_and_lines(result)
    return "\n".join([title] + [Text.from_markup(line).plain for line in lines])


def _title_and_lines(result: TrainResult) -> Tuple[str, List[str]]:
    if not result.history:  # --resume on a run that had already reached max_steps: the reporter said why
        return "Nothing to do", [f"nothing trained; the model stays at [bold]{escape(str(result.checkpoint))}[/]"]
    k = max(1, min(5, len(result.history) // 3))
    start, end = result.mean_reward(True, k), result.mean_reward(False, k)
    lines = [f"steps: {result.steps}"]
    if result.history:
        delta = end - start
        arrow = "[green]▲[/]" if delta > 0 else "[red]▼[/]" if delta < 0 else "="
        steps = "step" if k == 1 else f"{k} steps"
        first = result.history[0].get(rn.STEP, result.steps - len(result.history) + 1)  # a resumed run: later
        where = "" if first == 1 else f" of this session, from step {first}"
        lines.append(f"reward (mean of first {steps}{where}): {start:.3f}")
        lines.append(f"reward (mean of last {steps}):  {end:.3f}  {arrow} {delta:+.3f}" if math.isfinite(delta)
                     else f"reward (mean of last {steps}):  {end:.3f}")
    lines += held_out_lines(result, end - start)
    times = {k: [m.get(key) or 0.0 for m in result.history]
             for k, key in (("step", rn.TIME_STEP), ("generation", rn.TIME_GENERATION), ("training", rn.TIME_TRAINING),
                            ("sync", rn.TIME_SYNC))}
    n, streamed = len(result.history), bool(summary_lines(result.history))
    lines.append(f"time: {sum(times['step']):.0f} s, {sum(times['step']) / n:.1f} s/step "
                 f"({'waiting for rollouts' if streamed else 'generation'} "
                 f"{sum(times['generation']) / n:.1f}, training {sum(times['training']) / n:.1f}, sync "
                 f"{sum(times['sync']) / n:.1f})")
    lines += summary_lines(result.history)
    last = result.history[-1]
    if last.get(rn.TOOL_SUCCESS_RATE) is not None:
        lines.append(f"tool calls in the last step: {last.get(rn.TOOL_CALLS, 0):.0f}, "
                     f"{last[rn.TOOL_SUCCESS_RATE]:.0%} succeeded")
    out = escape(str(result.output_dir))
    lines += failure_lines(result, out)
    lines += model_lines(result)
    lines.append(f"metrics: {escape(str(result.output_dir / rn.METRICS_FILE))}  (plot: [cyan]grpo-rollout plot {out}[/])")
    if (result.output_dir / rn.ROLLOUTS_DIR).is_dir():
        lines.append(f"token-level rollouts: {out}/{rn.ROLLOUTS_DIR}  ([cyan]grpo-rollout inspect {out}[/])")
    return "Training finished", lines


def held_out_lines(result: TrainResult, train_delta: float) -> List[str]:
    """The held-out evaluation's pass@1 from the first to the last evaluation of the session, beside the training
    reward's change, and a warning when the training reward rose while held-out success fell (reward hacking)."""
    key, se_key = rn.pass_at(1), rn.pass_at_stderr(1)
    evals = [(step, m[key], m.get(se_key), m.get(rn.EVAL_PROMPTS)) for step, m in result.evaluations if key in m]
    if not evals:
        return []
    (s0, v0, e0, _), (s1, v1, e1, p1) = evals[0], evals[-1]
    prompts = f" on {p1:.0f} prompts" if p1 else ""
    if len(evals) == 1:
        return [f"held-out pass@1{prompts} after step {s0}: {v0:.3f}{plus_minus(e0)}"]
    delta = v1 - v0
    arrow = "[green]▲[/]" if delta > 0 else "[red]▼[/]" if delta < 0 else "="
    lines = [f"held-out pass@1{prompts} (step {s0} → {s1}): {v0:.3f}{plus_minus(e0)} → {v1:.3f}{plus_minus(e1)}"
             f"  {arrow} {delta:+.3f}"]
    noise = math.hypot(e0, e1) if plus_minus(e0) and plus_minus(e1) else None
    if noise and abs(delta) < 2 * noise:
        lines.append(f"[yellow]the change is within twice its standard error (±{2 * noise:.3f}): on "
                     f"{p1:.0f} held-out prompts it may be noise; evaluate on more prompts[/]")
    if math.isfinite(train_delta) and train_delta > 0 and delta < 0:
        lines.append("[yellow]the training reward rose while held-out success fell: the policy may be gaming the "
                     "reward (reward hacking); read the held-out answers in eval/step_<k>.jsonl[/]")
    return lines



def model_lines(result: TrainResult) -> List[str]:
    """How many steps of the session changed the weights (``N of M steps updated the weights``, and why the others
    did not), and where the model is: the final checkpoint, or the base model when no step changed it (its checkpoint
    holds no weights, :data:`~..checkpoint.BASE_WEIGHTS_FILE`)."""
    rows = result.history
    updated = sum(1 for m in rows if updated_weights(m))
    flat = sum(1 for m in rows if m.get(rn.NO_SIGNAL_SKIPPED))
    why = [f"{flat} without learning signal: every group's rewards were equal"] if flat else []
    diverged = len(rows) - updated - flat
    why += [f"{diverged} whose updates were skipped for a NaN/inf loss"] if diverged else []
    session = "" if rows[0].get(rn.STEP, 1) == 1 else " of this session"
    said = f"{updated} of {len(rows)} steps{session} updated the weights" + (f" ({'; '.join(why)})" if why else "")
    lines = [f"[yellow]{said}[/]" if updated == 0 else said]
    lines.append(f"model saved to: [bold]{escape(str(result.checkpoint))}[/]")
    return lines


def failure_lines(result: TrainResult, out: str) -> List[str]:
    """With ``rollout.on_error`` retry or drop: the episodes that failed outside the model and the prompts left out
    (nothing when none failed)."""
    failed = sum(m.get(rn.EPISODES_FAILED) or 0 for m in result.history)
    if not failed:
        return []
    lost = sum(m.get(rn.EPISODES_PROMPTS_DROPPED) or 0 for m in result.history)
    return [f"[yellow]episodes that failed outside the model: {failed:.0f}; prompts left out: {lost:.0f}[/] (every "
            f"failure's text: {out}/{rn.FAILURES_FILE})"]
