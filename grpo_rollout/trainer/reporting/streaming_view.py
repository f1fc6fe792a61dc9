"""How streaming rollouts (``training.max_staleness`` ≥ 1) read on the console: the start-up line naming the bound,
the streaming part of each logged step's dim line (staleness as mean/max against the bound, the trainer's wait for
rollouts, its busy share and the servers' idle share, the sampler/trainer gap of fresh and stale samples), and the
final panel's lines with a one-line verdict on which side is the bottleneck."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from ...config.training_section import TrainingConfig
from ...runs import names as rn

#: the trainer waited for rollouts less than this share of the time: it is the bottleneck
TRAINER_BOUND = 0.1
#: ... more than this share: the rollouts are
ROLLOUT_BOUND = 0.5


def startup_lines(t: TrainingConfig, world_size: int) -> List[str]:
    """What the console says when a streamed run starts: the bound and how many groups may run at once (per
    process), and, under the ``async_generation`` alias, what it means."""
    k, share = t.staleness(), t.prompts_per_step // world_size
    inflight = min(t.max_inflight_groups or 2 * share, (k + 1) * share)  # the stream's bound caps it too
    out = [f"Streaming rollouts: training.max_staleness {k} (a group is trained at most {k} weight version(s) after "
           f"the one that sampled it); up to {inflight} groups in flight per process "
           f"(training.max_inflight_groups), {share} per step. Each step shows `stale mean/max≤{k}`, the trainer's "
           "wait for rollouts and the sampler/trainer log-prob gap of fresh and stale samples"]
    if t.async_generation:
        out.insert(0, "training.async_generation streams rollouts with training.max_staleness: 1 (each group at most "
                      "one weight version behind; docs/vllm.md); set max_staleness instead to choose another bound")
    return out


def _num(value: Any, fmt: str) -> str:
    return "-" if value is None or value != value else fmt.format(value)


def step_text(metrics: Dict[str, Any], bound: Optional[int]) -> str:
    """The streaming part of a logged step's dim line, e.g. ``stale 0.5/1≤2  wait 0.3 s  trainer busy 88%  servers
    idle 5%  in flight 6  buffered 2  dropped stale 0`` (``bound``: ``max_staleness``; ``None``: not shown)."""
    parts = [f"stale {_num(metrics.get(rn.STALENESS_MEAN), '{:.1f}')}/{_num(metrics.get(rn.STALENESS_MAX), '{:.0f}')}"
             + ("" if bound is None else f"≤{bound}"),
             f"wait {_num(metrics.get(rn.TIME_WAITING_FOR_ROLLOUTS), '{:.1f}')} s"]
    if rn.TRAINER_BUSY_SHARE in metrics:
        parts.append(f"trainer busy {_num(metrics[rn.TRAINER_BUSY_SHARE], '{:.0%}')}")
    parts += [f"servers idle {_num(metrics.get(rn.ROLLOUTS_IDLE_SHARE), '{:.0%}')}",
              f"in flight {_num(metrics.get(rn.GROUPS_IN_FLIGHT), '{:.0f}')}",
              f"buffered {_num(metrics.get(rn.BUFFER_GROUPS), '{:.0f}')}",
              f"dropped stale {_num(metrics.get(rn.GROUPS_DROPPED_STALE), '{:.0f}')}"]
    if rn.DS_GROUPS_DROPPED in metrics:
        parts.append(f"no-variance dropped {_num(metrics[rn.DS_GROUPS_DROPPED], '{:.0f}')}")
    return "  ".join(parts)


def gap_text(metrics: Dict[str, Any]) -> str:
    """The sampler/trainer log-prob gap, with a streamed step's fresh and stale samples apart (stale ones were
    sampled by older weights, so their gap is larger by design); empty without sampler log-probs."""
    if rn.SAMPLER_LOGPROB_ABS_DIFF not in metrics:
        return ""
    text = f"|Δlogp| sampler-trainer={_num(metrics[rn.SAMPLER_LOGPROB_ABS_DIFF], '{:.2e}')}"
    split = [f"{name} {_num(metrics[key], '{:.2e}')}" for name, key in
             (("fresh", rn.SAMPLER_LOGPROB_ABS_DIFF_FRESH), ("stale", rn.SAMPLER_LOGPROB_ABS_DIFF_STALE))
             if key in metrics]
    if rn.SAMPLER_LOGPROB_ABS_DIFF_STALE in metrics:
        split[-1] += " from older weights"
    return text + (f" ({', '.join(split)})" if split else "")


def verdict(history: List[Dict[str, Any]]) -> Optional[str]:
    """One line on where a streamed run's time went (``None`` for a run that did not stream): the share of the steps'
    time the trainer waited for rollouts, after its first step (which waits for the first groups), decides it."""
    steps = [m for m in history if rn.TIME_WAITING_FOR_ROLLOUTS in m]
    if not steps:
        return None
    steps = steps[1:] if len(steps) > 1 else steps
    total = sum(m.get(rn.TIME_STEP) or 0.0 for m in steps)
    wait = sum(m[rn.TIME_WAITING_FOR_ROLLOUTS] for m in steps) / total if total > 0 else 0.0
    idle = sum(m.get(rn.ROLLOUTS_IDLE_SHARE) or 0.0 for m in steps) / len(steps)
    shares = f"the trainer waited for rollouts {wait:.0%} of the time, the servers idled {idle:.0%}"
    if wait < TRAINER_BOUND:
        return (f"the trainer is the bottleneck ({shares}): streaming cannot help here; only a faster update does "
                "(fewer or shorter completions per step, more training GPUs)")
    if wait > ROLLOUT_BOUND:
        return (f"rollouts are the bottleneck ({shares}): more servers, or a larger training.max_staleness or "
                "max_inflight_groups, would help")
    return f"streaming overlaps rollouts and training ({shares})"


def summary_lines(history: List[Dict[str, Any]]) -> List[str]:
    """The final panel's streaming lines: staleness, drops and the verdict (none for a run that did not stream)."""
    line = verdict(history)
    if line is None:
        return []
    steps = [m for m in history if rn.STALENESS_MAX in m]
    mean = sum(m[rn.STALENESS_MEAN] for m in steps) / len(steps)
    dropped = sum(m.get(rn.GROUPS_DROPPED_STALE) or 0 for m in steps)
    skipped = sum(m.get(rn.GROUPS_SKIPPED_STALE) or 0 for m in steps)
    return [f"streaming: staleness mean {mean:.2f}, max {max(m[rn.STALENESS_MAX] for m in steps):.0f}; groups "
            f"dropped stale {dropped:.0f}, left out {skipped:.0f}", f"verdict: {line}"]
