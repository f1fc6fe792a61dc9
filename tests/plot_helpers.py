"""Helpers for the plot tests: the panels' titles, the CLI run with clean output, and lines found by title and label."""

from __future__ import annotations

import math
import re
from typing import Dict

from typer.testing import CliRunner

from grpo_rollout.cli.main import app


ANSI = re.compile(r"\x1b\[[0-9;]*m")

REWARD_TITLE = "Reward: mean ± std, and each reward function's mean"
LENGTH_TITLE = "Completion length: mean and max"
TRUNC_TITLE = "Truncated completions (cut at max_completion_length)"
KL_TITLE = "KL to the reference model"
ENTROPY_TITLE = "Policy entropy per trained token: mean, and the lowest and highest sequence's mean"  # issue 32
CLIP_TITLE = "Clipped tokens (importance ratio outside 1 ± epsilon)"
SAMPLER_TITLE = "Sampler vs trainer log-probs: mean |Δlogp| per token"
TOOLS_TITLE = "Tool calls that succeeded"
MEMORY_TITLE = "Memory: the trainer's resident set (now, peak) and CUDA's peak of the step"  # issue 23
TIME_TITLE = "Time per step, by phase"
TIME_KEYS = ["time/generation", "time/rewards", "time/training", "time/sync"]


def invoke(*args: str):
    """Run the CLI; return (exit code, output with colours removed and line wraps joined)."""
    result = CliRunner().invoke(app, [str(a) for a in args])
    # bad input must end in a clean exit, never an exception escaping the command
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, " ".join(ANSI.sub("", result.output).split())


def title(ax) -> str:
    """An Axes' title on one line (a long one is drawn on two)."""
    return " ".join(ax.get_title().split())


def by_title(fig) -> Dict[str, object]:
    return {title(ax): ax for ax in fig.axes}


def lines_by_label(ax) -> Dict[str, object]:
    return {line.get_label(): line for line in ax.get_lines()}


def same(a, b) -> bool:
    """Equal lists of numbers, ``None``/NaN counting as equal to each other."""
    norm = [[math.nan if v is None else float(v) for v in xs] for xs in (a, b)]
    return len(norm[0]) == len(norm[1]) and all(
        (math.isnan(x) and math.isnan(y)) or x == y for x, y in zip(*norm))
