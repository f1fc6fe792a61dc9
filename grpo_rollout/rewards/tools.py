"""Rewards for tool-calling and environment rollouts (see :mod:`grpo_rollout.rollouts.tool_calling` and
:mod:`grpo_rollout.rollouts.environment`). Each returns one float (or ``None``) per completion.

They read the extras those rollouts return: ``tool_results`` (per sample, a list of ``{name, arguments, content,
error}``) and ``env_reward``. :func:`tool_call_validity` also works without them, by parsing the completion text.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

from ..rollouts.tool_parsing import parse_tool_calls
from .library import completion_text

#: ``error`` kinds that mean the model wrote the call wrong (a tool raising or timing out is not the format's fault).
FORMAT_ERRORS = ("malformed", "unknown_tool", "bad_arguments")
#: the ``error`` of a call a token limit cut off before ``</tool_call>``: the budget's doing, not the model's format
CUT = "truncated"


def _validity(results: Sequence[Dict[str, Any]], mode: str, no_call_score: Optional[float]) -> Optional[float]:
    if any(r.get("error") == CUT for r in results):
        results = [r for r in results if r.get("error") != CUT]
        if not results:  # its only call was cut off: nothing to judge the format by
            return None
    if not results:
        return no_call_score
    valid = [r.get("error") not in FORMAT_ERRORS for r in results]
    if mode == "fraction":
        return sum(valid) / len(valid)
    return float(all(valid))


def tool_call_validity(completions: Sequence[Any], tool_results: Optional[Sequence[Sequence[Dict[str, Any]]]] = None,
                       tool_names: Optional[Sequence[str]] = None, mode: str = "fraction",
                       no_call_score: Optional[float] = 0.0, truncated: Optional[Sequence[bool]] = None,
                       **kwargs: Any) -> List[Optional[float]]:
    """How well-formed the tool calls of each completion are: a call counts as valid when it is readable JSON in
    ``<tool_call>`` tags, names a known tool and its arguments fit the tool's JSON schema. A call the token budget
    cut off (``error`` ``"truncated"``; parsing text: the last, unclosed call of a ``truncated`` completion) is left
    out; ``None`` (no opinion) when it was the only call.

    Args:
        completions: ``N`` completions (parsed only when ``tool_results`` is not given).
        tool_results: the tool-calling rollout's extra (``N`` lists of call records); preferred, as it knows which
            tools exist and whether the arguments fit.
        tool_names: known tool names, used when parsing text (``None``: any name counts as known).
        mode: ``"fraction"`` (valid calls / calls) or ``"indicator"`` (1.0 when every call is valid).
        no_call_score: the score of a completion without any call (``None``: no opinion).
        truncated: per completion, whether the budget cut it (the rollouts' extra; read only when parsing text).

    Raises:
        ValueError: unknown ``mode``.
    """
    if mode not in ("fraction", "indicator"):
        raise ValueError(f"tool_call_validity: mode must be fraction or indicator, got {mode!r}")
    if tool_results is None:
        known = set(tool_names) if tool_names is not None else None
        tool_results = []
        for i, completion in enumerate(completions):
            records = []
            for call in parse_tool_calls(completion_text(completion)):
                error = "malformed" if not call.well_formed else (
                    "unknown_tool" if known is not None and call.name not in known else None)
                cut = not call.closed and truncated is not None and bool(truncated[i])
                records.append({"name": call.name, "arguments": call.arguments, "error": CUT if cut else error})
            tool_results.append(records)
    return [_validity(results, mode, no_call_score) for results in tool_results]


def tool_success(tool_results: Sequence[Sequence[Dict[str, Any]]], name: Optional[str] = None,
                 **kwargs: Any) -> List[float]:
    """1.0 when the completion made at least one call (of tool ``name``, if given) that ran without error, else 0.0."""
    return [float(any(r.get("error") is None and (name is None or r.get("name") == name) for r in results))
            for results in tool_results]


def env_reward(env_reward: Sequence[Optional[float]], **kwargs: Any) -> List[Optional[float]]:
    """The environment's total reward per completion (the environment rollout's ``env_reward`` extra), unchanged."""
    return [None if r is None else float(r) for r in env_reward]
