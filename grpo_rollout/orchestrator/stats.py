"""Per-step statistics of what a rollout returned: extras means, tool-use metrics, and which completions were cut."""

from __future__ import annotations

from typing import Any, Dict, List, Sequence, Set

from ..runs import names as rn


def extras_means(extras: Dict[str, List[Any]]) -> Dict[str, float]:
    """``extras/<name>``: the per-step mean of every numeric rollout extra (bools count as 0/1; ``None`` skipped)."""
    out = {}
    for name, values in extras.items():
        nums = [float(v) for v in values if isinstance(v, (int, float))]
        if nums and len(nums) == len([v for v in values if v is not None]):
            out[rn.extra(name)] = sum(nums) / len(nums)
    return out


def _total(values: Sequence[Any]) -> float:
    return float(sum(v for v in values if isinstance(v, (int, float))))


def tool_metrics(extras: Dict[str, List[Any]]) -> Dict[str, float]:
    """Tool use over the whole step, from the extras ``num_tool_calls``/``num_tool_errors`` and, per tool,
    ``tool_calls/<name>``/``tool_errors/<name>`` (what the built-in tool-calling rollout returns; a user rollout
    returning the same keys gets the same metrics).

    Returns:
        ``tools/calls`` (calls in the step), ``tools/errors``, ``tools/success_rate`` (1 − errors / calls), and
        ``tools/<name>/calls``, ``tools/<name>/success_rate`` per tool; rates only when there was at least one call.
        Empty when the rollout reports no tool counts.
    """
    out: Dict[str, float] = {}
    if rn.NUM_TOOL_CALLS_EXTRA in extras:
        calls, errors = _total(extras[rn.NUM_TOOL_CALLS_EXTRA]), _total(extras.get(rn.NUM_TOOL_ERRORS_EXTRA, []))
        out[rn.TOOL_CALLS], out[rn.TOOL_ERRORS] = calls, errors
        if calls:
            out[rn.TOOL_SUCCESS_RATE] = 1.0 - errors / calls
    for key, values in extras.items():
        if not key.startswith(rn.TOOL_CALLS_PREFIX):
            continue
        name = key[len(rn.TOOL_CALLS_PREFIX):]
        calls, errors = _total(values), _total(extras.get(rn.TOOL_ERRORS_PREFIX + name, []))
        out[rn.per_tool(name, "calls")] = calls
        if calls:
            out[rn.per_tool(name, "success_rate")] = 1.0 - errors / calls
    return out


def truncated_flags(completion_ids: Sequence[Sequence[int]], extras: Dict[str, List[Any]],
                    eos_ids: Set[int]) -> List[bool]:
    """Which completions were cut by the token budget: the rollout's ``truncated`` extra when it returns one (a
    multi-turn completion holds end-of-turn tokens in its inserted template text, so looking for EOS cannot tell),
    else "no end-of-sequence token anywhere in the completion"."""
    given = extras.get(rn.TRUNCATED_EXTRA)
    if given is not None and len(given) == len(completion_ids) and all(isinstance(v, bool) for v in given):
        return list(given)
    return [not any(tok in eos_ids for tok in ids) for ids in completion_ids]


def episode_metrics(extras: Dict[str, List[Any]]) -> Dict[str, float]:
    """Why the step's episodes ended, from the ``end_reason`` extra of the built-in multi-turn rollouts (a rollout
    of your own returning the same key gets the same metrics).

    Returns:
        ``episodes/cut_by_budget`` (how many episodes ``max_completion_length`` ended: a turn that used it up, or a
        tool/environment reply that did not fit) and ``episodes/ended/<reason>`` (share of the step's episodes, 0-1)
        for every reason in :data:`grpo_rollout.rollouts.episodes.END_REASONS`, and ``episodes/turns_capped``
        (sampled turns cut by ``max_turn_tokens``: unfinished answers the episode went on from; counted when the
        rollout returns the ``turns_capped`` extra). Empty without ``end_reason``.
    """
    from ..rollouts.episodes import BUDGET_REASONS, END_REASONS

    reasons = [r for r in extras.get(rn.END_REASON_EXTRA, []) if isinstance(r, str)]
    if not reasons:
        return {}
    out = {rn.CUT_BY_BUDGET: float(sum(r in BUDGET_REASONS for r in reasons))}
    for reason in END_REASONS:
        out[rn.ended(reason)] = sum(r == reason for r in reasons) / len(reasons)
    capped = [c for c in extras.get("turns_capped", []) if isinstance(c, (int, float))]
    if capped:
        out[rn.TURNS_CAPPED] = float(sum(capped))
    return out


def shown_prompts(dataset_prompts: Sequence[Any], extras: Dict[str, List[Any]], g: int,
                  num_completions: int) -> List[Any]:
    """The prompt of each of the ``num_completions`` completions as the model saw it: the rollout's ``first_prompt``
    extra when it returns one per completion (the environment rollout: what ``reset(row)`` returned), else the
    dataset prompt of its group (``g`` completions per prompt)."""
    given = extras.get(rn.FIRST_PROMPT_EXTRA)
    if given is not None and len(given) == num_completions and all(p is not None for p in given):
        return list(given)
    return [dataset_prompts[i // g] for i in range(num_completions)]
