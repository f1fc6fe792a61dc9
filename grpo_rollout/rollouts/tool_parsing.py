"""Finding tool calls in generated text.

The format is the common one (Qwen, Hermes, many others)::

    <tool_call>{"name": "multiply", "arguments": {"a": 3, "b": 4}}</tool_call>

Several calls may follow each other in one turn. Parsing never raises: a block whose content is not a JSON object with
a string ``name`` and an object ``arguments`` becomes a :class:`ToolCall` with ``error`` set, so the rollout can tell
the model what was wrong and rewards can count malformed calls.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

CALL_OPEN = "<tool_call>"
CALL_CLOSE = "</tool_call>"
_OPEN_OR_CLOSE = re.compile(re.escape(CALL_OPEN) + "|" + re.escape(CALL_CLOSE))


@dataclass
class ToolCall:
    """One ``<tool_call>`` block.

    Attributes:
        name: the tool name (``None`` when the block could not be read).
        arguments: the keyword arguments (``{}`` when absent or unreadable).
        raw: the text between the tags, as written.
        error: why the block is malformed, or ``None`` for a well-formed call (which may still name an unknown tool).
    """

    name: Optional[str]
    arguments: Dict[str, Any] = field(default_factory=dict)
    raw: str = ""
    error: Optional[str] = None

    @property
    def well_formed(self) -> bool:
        """True when the block held a JSON object with a string ``name`` and object ``arguments``."""
        return self.error is None


def _decode_call(raw: str) -> ToolCall:
    text = raw.strip()
    if text.startswith("```"):  # a fenced block inside the tags: ```json ... ```
        text = re.sub(r"^```[a-zA-Z]*\s*|\s*```$", "", text)
    try:
        # raw_decode reads one JSON value and tells where it ended: braces inside strings are handled by the JSON
        # grammar itself, and trailing junk after the object is reported instead of silently accepted.
        obj, end = json.JSONDecoder().raw_decode(text)
    except json.JSONDecodeError as exc:
        return ToolCall(None, {}, raw, f"invalid JSON: {exc.msg} at character {exc.pos}")
    if text[end:].strip():
        return ToolCall(None, {}, raw, f"unexpected text after the JSON object: {text[end:].strip()[:40]!r}")
    if not isinstance(obj, dict):
        return ToolCall(None, {}, raw, f"expected a JSON object, got {type(obj).__name__}")
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return ToolCall(None, {}, raw, 'the object has no string "name"')
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):  # some models write the arguments as a JSON string
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as exc:
            return ToolCall(name, {}, raw, f'"arguments" is a string that is not JSON: {exc.msg}')
    if args is None:
        args = {}
    if not isinstance(args, dict):
        return ToolCall(name, {}, raw, f'"arguments" must be an object, got {type(args).__name__}')
    return ToolCall(name, args, raw)


def parse_tool_calls(text: str) -> List[ToolCall]:
    """Every ``<tool_call>...</tool_call>`` block in ``text``, in order.

    A block left open at the end of the text (generation stopped before ``</tool_call>``) is parsed up to the end; a
    second ``<tool_call>`` before the first one closes ends the first block there. Text outside blocks is ignored.

    Returns:
        one :class:`ToolCall` per block (malformed ones have ``error`` set); ``[]`` when there is no block.
    """
    calls: List[ToolCall] = []
    start: Optional[int] = None  # where the content of the open block begins
    for match in _OPEN_OR_CLOSE.finditer(text):
        if match.group() == CALL_OPEN:
            if start is not None:
                calls.append(_decode_call(text[start:match.start()]))
            start = match.end()
        elif start is not None:
            calls.append(_decode_call(text[start:match.start()]))
            start = None
    if start is not None:
        call = _decode_call(text[start:])
        if call.error is None:
            call.error = f"unterminated: no {CALL_CLOSE}"
        calls.append(call)
    return calls


def format_tool_call(name: str, arguments: Dict[str, Any]) -> str:
    """The text of one call in the format :func:`parse_tool_calls` reads (used for the example in prompts)."""
    return f"{CALL_OPEN}{json.dumps({'name': name, 'arguments': arguments})}{CALL_CLOSE}"
