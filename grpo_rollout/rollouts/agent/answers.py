"""The chat answer the recording endpoint gives an agent for a sampled turn (:mod:`.sessions`): its text, and the tool
calls parsed from it that the request allows.

The rule is the built-in tool loop's (:func:`~grpo_rollout.rollouts.tool_running.run_tool_call`): a call that is
malformed, names a tool the request did not offer, or whose arguments do not fit that tool's JSON schema is never
run. The built-in loop answers the model with the error itself; here the agent runs the tools, so such a call is not
handed to it as a ``tool_calls`` entry: the answer is the text as sampled (``finish_reason: stop``), the model's
mistake stays in the trained tokens, and the rewards see an episode that did not call its tool. ``tool_choice:
"none"`` hands over no call at all.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional, Tuple

from ..tool_parsing import CALL_OPEN, ToolCall, parse_tool_calls
from ..tool_schemas import arguments_problem
from .requests import Message


def call_problem(call: ToolCall, tools: Dict[str, Dict[str, Any]]) -> Optional[str]:
    """Why ``call`` may not be handed to the agent (``None``: it may): malformed, a tool the request did not offer
    (``tools``: name → the request's tool), or arguments its schema refuses."""
    if not call.well_formed:
        return f"malformed tool call ({call.error})"
    if call.name not in tools:
        return f"unknown tool {call.name!r}; the request offered: {', '.join(sorted(tools)) or 'none'}"
    problem = arguments_problem(tools[call.name], call.arguments)
    return f"bad arguments for {call.name}: {problem}" if problem else None


def answer_message(text: str, tools: Optional[List[Any]], choice: str, call_id: str) -> Tuple[Message, List[str]]:
    """The assistant message for a sampled turn's ``text`` (stop string already removed), and why each call in it
    was not handed over.

    Args:
        text: the turn's text. tools: the request's ``tools`` (``None``: none). choice: its ``tool_choice``
            (``"auto"`` or ``"none"``: :func:`~.requests.tool_choice`). call_id: the prefix of the calls' ids.

    Returns:
        ``({"role": "assistant", "content": text}, problems)`` when no call is handed over; else the text before
        the first call as ``content`` (``None`` when empty) and ``tool_calls`` (ids ``<call_id>_<k>``, arguments as
        JSON strings), with ``problems`` empty.
    """
    calls = parse_tool_calls(text) if choice != "none" else []
    offered = {t["function"]["name"]: t for t in tools or []}
    problems = [p for p in (call_problem(c, offered) for c in calls) if p]
    if not calls or problems:
        return {"role": "assistant", "content": text}, problems
    content = text.split(CALL_OPEN, 1)[0].strip()
    return {"role": "assistant", "content": content or None, "tool_calls": [
        {"id": f"{call_id}_{k}", "type": "function",
         "function": {"name": c.name, "arguments": json.dumps(c.arguments)}} for k, c in enumerate(calls)]}, []
