"""The panels of ``grpo-rollout plot`` and how one panel is drawn (the figure's layout and the reading of
``metrics.jsonl`` are in :mod:`grpo_rollout.views.plot`).

A :class:`Panel` names the metrics it draws; :data:`DEFAULT_PANELS` is the default figure, top to bottom: reward,
the held-out evaluation (pass@k, its reward), completion length, truncation, KL, clipping, sampler drift, tool success, multi-turn episodes (turns; how episodes
ended: done, ``max_turns``, cut by the token budget), streaming rollouts (staleness, drops), memory and time per step,
and the trainer's wait for streamed groups.
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from ..runs import names as rn

#: Line styles that tell a panel's metrics apart when the colours mean runs.
LINESTYLES = ["-", "--", ":", "-.", (0, (5, 1, 1, 1, 1, 1)), (0, (1, 3))]
#: Characters of a panel title per line: what fits the width of one panel (6.4 in) at 10 pt.
TITLE_CHARS = 70
#: The observed range of the step's rewards, which the ± std band is clipped to (when the run logged them).
REWARD_RANGE = (rn.REWARD_MIN, rn.REWARD_MAX)


@dataclass
class Panel:
    """One Axes: a title, a y-label, the metric keys it draws (chosen from the keys any run has), an optional
    ``(mean, std)`` pair drawn as a band, fixed y-limits, a log scale when every value is positive, a note shown
    when every value is exactly 0 (the usual reason why), and one added to the title when a point at step 0 is
    drawn (what step 0 means there); ``only_when``: the setting without which a run logs none of its metrics."""

    title: str
    ylabel: str
    choose: Callable[[List[str]], List[str]]
    band: Optional[Tuple[str, str]] = None
    ylim: Optional[Tuple[float, float]] = None
    log_if_positive: bool = False
    zero_note: Optional[str] = None
    step0_note: Optional[str] = None
    only_when: Optional[str] = None


@dataclass(frozen=True)
class Fixed:
    """A chooser of exactly ``wanted`` (those logged), in that order; ``wanted`` says which keys a panel draws."""

    wanted: Tuple[str, ...]

    def __call__(self, keys: List[str]) -> List[str]:
        return [k for k in self.wanted if k in keys]


def fixed(*wanted: str) -> Fixed:
    """A chooser of exactly ``wanted`` (those logged), in that order."""
    return Fixed(wanted)


def _reward_keys(keys: List[str]) -> List[str]:
    return fixed(rn.REWARD)(keys) + [k for k in keys if rn.reward_fn_of_mean(k) is not None]


def _eval_keys(keys: List[str]) -> List[str]:
    """The held-out evaluation's pass@k (k ascending) and its mean reward."""
    passes = sorted((k for k in keys if k.startswith(rn.EVAL_PREFIX + "pass@")), key=lambda k: int(k.split("@")[1]))
    return passes + fixed(rn.eval_metric(rn.REWARD))(keys)


def _memory_keys(keys: List[str]) -> List[str]:
    """The memory metrics a run logged (``memory/cuda_peak_gib`` only on CUDA)."""
    return [k for k in (rn.MEMORY_RSS, rn.MEMORY_PEAK_RSS, rn.MEMORY_CUDA_PEAK) if k in keys]


def _ended_keys(keys: List[str]) -> List[str]:
    """How episodes ended: the ``episodes/ended/<reason>`` shares, or ``extras/env_done`` for older runs."""
    ended = [k for k in keys if k.startswith(rn.ENDED_PREFIX)]
    return ended or fixed(rn.ENV_DONE)(keys)


DEFAULT_PANELS: List[Panel] = [
    Panel("Reward: mean ± std, and each reward function's mean", rn.REWARD, _reward_keys,
          band=(rn.REWARD, rn.REWARD_STD)),
    Panel("Held-out evaluation: pass@k and mean reward", "eval/*", _eval_keys, step0_note="step 0: before training"),
    Panel("Completion length: mean and max", "completions/*_length (tokens)",
          fixed(rn.MEAN_LENGTH, rn.MAX_LENGTH)),
    Panel("Truncated completions (cut at max_completion_length)", rn.TRUNCATED_FRACTION,
          fixed(rn.TRUNCATED_FRACTION), ylim=(-0.03, 1.03)),
    Panel("KL to the reference model", rn.KL, fixed(rn.KL),
          zero_note="kl is 0 at every step: it is only computed when training.beta > 0"),
    Panel("Policy entropy per trained token: mean, and the lowest and highest sequence's mean", "entropy (nats)",
          fixed(rn.ENTROPY, rn.ENTROPY_SEQ_MIN, rn.ENTROPY_SEQ_MAX)),
    Panel("Clipped tokens (importance ratio outside 1 ± epsilon)", rn.CLIP_REGION, fixed(rn.CLIP_REGION),
          zero_note="no token was clipped (with training.num_iterations = 1 the ratio is always 1)"),
    Panel("Sampler vs trainer log-probs: mean |Δlogp| per token", f"{rn.SAMPLER_LOGPROB_ABS_DIFF} (nats)",
          fixed(rn.SAMPLER_LOGPROB_ABS_DIFF), log_if_positive=True),
    Panel("Tool calls that succeeded", rn.TOOL_SUCCESS_RATE, fixed(rn.TOOL_SUCCESS_RATE), ylim=(-0.03, 1.03)),
    Panel("Multi-turn: sampled turns per episode (mean)", rn.NUM_TURNS, fixed(rn.NUM_TURNS)),
    Panel("Multi-turn: how episodes ended (share of the step's episodes)", f"{rn.ENDED_PREFIX}*", _ended_keys,
          ylim=(-0.03, 1.03)),
    Panel("Multi-turn: episodes cut by the token budget", f"{rn.CUT_BY_BUDGET} (episodes)", fixed(rn.CUT_BY_BUDGET),
          zero_note="no episode was cut by sampling.max_completion_length"),
    Panel("Multi-turn: turns cut by max_turn_tokens (unfinished answers)", f"{rn.TURNS_CAPPED} (turns)",
          fixed(rn.TURNS_CAPPED), zero_note="no sampled turn was cut by max_turn_tokens"),
    Panel("Streaming rollouts: versions behind (mean, max) and groups dropped as stale", "async/*",
          fixed(rn.STALENESS_MEAN, rn.STALENESS_MAX, rn.GROUPS_DROPPED_STALE),
          only_when="training.max_staleness >= 1"),
    Panel("Memory: the trainer's resident set (now, peak) and CUDA's peak of the step", "memory/* (GiB)",
          _memory_keys),
    Panel("Time per step, by phase", "time/* (seconds)",
          fixed(rn.TIME_GENERATION, rn.TIME_REWARDS, rn.TIME_TRAINING, rn.TIME_SYNC)),
    Panel("Streaming rollouts: the trainer waiting for finished groups", "time/* (seconds)",
          fixed(rn.TIME_WAITING_FOR_ROLLOUTS), only_when="training.max_staleness >= 1"),
]


def band(records: Sequence[Dict[str, float]], mean_key: str,
         std_key: str) -> Tuple[List[float], List[float], List[float]]:
    """``(steps, low, high)`` of the ``mean ± std`` band, clipped per step to the observed range
    (:data:`REWARD_RANGE` when the records have it): rewards in [0, 1] never get a band below 0."""
    xs, lo, hi = [], [], []
    for record in records:
        if mean_key in record and std_key in record:
            m, s = record[mean_key], record[std_key]
            low, high = m - s, m + s
            if mean_key == rn.REWARD:
                low_seen, high_seen = (record.get(k, math.nan) for k in REWARD_RANGE)
                low = max(low, low_seen) if math.isfinite(low_seen) else low
                high = min(high, high_seen) if math.isfinite(high_seen) else high
            xs.append(record[rn.STEP])
            lo.append(low)
            hi.append(high)
    return xs, lo, hi


def _step_axis(ax: Any, runs: Sequence[Any]) -> None:
    """Every panel's x-axis spans the runs' logged steps (a panel with one point, e.g. a single held-out
    evaluation, is not zoomed to a 0.2-step window around it), with whole-step ticks only."""
    steps = [record[rn.STEP] for run in runs for record in run.records if math.isfinite(record.get(rn.STEP, math.nan))]
    if steps:
        lo, hi = min(steps), max(steps)
        pad = 1.0 if lo == hi else max(0.5, 0.03 * (hi - lo))  # two whole steps at least in view
        ax.set_xlim(lo - pad, hi + pad)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))


def draw_panel(ax: Any, panel: Panel, keys: List[str], runs: Sequence[Any], several: bool) -> None:
    """Draw ``keys`` of every run (objects with ``name``, ``records`` and ``series(key)``, see
    :class:`grpo_rollout.views.plot.Run`) on ``ax``. The band's mean (``reward``) is drawn last and thicker, and the
    other lines of a band panel dashed, so a reward function whose mean equals it (``env_reward``) does not hide
    it."""
    styles: List[Tuple[str, object, str]] = []  # (key, linestyle, colour) for the legend of a several-run panel
    for r, run in enumerate(runs):
        for k, key in enumerate(keys):
            xs, ys = run.series(key)
            if not xs:
                continue
            colour = f"C{r}" if several else f"C{k}"
            style = LINESTYLES[k % len(LINESTYLES)] if several else "-"
            main = panel.band is not None and key == panel.band[0]
            if panel.band is not None and not main and not several:
                style = "--"
            label = f"{run.name}: {key}" if several else key
            ax.plot(xs, ys, color=colour, linestyle=style, lw=2.4 if main else 1.4,
                    marker="." if len(xs) <= 40 else None, ms=4, label=label, zorder=3 if main else 2)
            if main:
                bx, lo, hi = band(run.records, *panel.band)
                if bx:
                    ax.fill_between(bx, lo, hi, color=colour, alpha=0.15, lw=0,
                                    label=f"{run.name}: {key} ± {panel.band[1]}" if several
                                    else f"{key} ± {panel.band[1]}")
        if several and r == 0:
            styles = [(key, LINESTYLES[k % len(LINESTYLES)], "0.25") for k, key in enumerate(keys)]
    step0 = any(0 in run.series(key)[0] for run in runs for key in keys)
    title = f"{panel.title} ({panel.step0_note})" if panel.step0_note and step0 else panel.title
    ax.set_title(textwrap.fill(title, TITLE_CHARS), fontsize=10)  # a long title on two lines, never cut off
    ax.set_ylabel(panel.ylabel, fontsize=9)
    ax.set_xlabel("step", fontsize=9)
    ax.grid(True, alpha=0.3)
    if panel.ylim is not None:
        ax.set_ylim(*panel.ylim)
    values = [v for run in runs for key in keys for v in run.series(key)[1] if math.isfinite(v)]
    if panel.log_if_positive and values and min(values) > 0:
        ax.set_yscale("log")
    _step_axis(ax, runs)
    ax.tick_params(which="both", labelsize=8)
    if panel.zero_note and values and all(v == 0 for v in values):
        ax.text(0.5, 0.62, panel.zero_note, transform=ax.transAxes, ha="center", va="center", fontsize=8,
                color="0.35")
    # legends go under the panel so they never hide a line
    below = dict(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), frameon=False, borderaxespad=0)
    if several:
        if len(keys) > 1:
            ax.legend([Line2D([], [], color=c, linestyle=s) for _, s, c in styles], [key for key, _, _ in styles],
                      ncols=min(len(keys), 4), **below)
    elif len(keys) > 1 or panel.band is not None:
        ax.legend(ncols=min(len(ax.get_legend_handles_labels()[0]), 4), **below)
