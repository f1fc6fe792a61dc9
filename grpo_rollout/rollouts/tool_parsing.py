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
from typing import Any, Dict, List, Optional, Tuple

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
        closed: False for a block that runs to the end of the text without ``</tool_call>`` (generation stopped
            inside it: when a token limit stopped it, the call was cut off rather than malformed).
    """

    name: Optional[str]
    arguments: Dict[str, Any] = field(default_factory=dict)
    raw: str = ""
    error: Optional[str] = None
    closed: bool = True

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
        return ToolCall(None, {}, raw, f"invalid JSON: {exc.msg.removesuffix(' at')} at character {exc.pos}")
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


def _json_aware_end(text: str, start: int) -> Tuple[Optional[int], bool]:
    """Where the block whose content starts at ``start`` ends, reading the content as JSON: the first
    ``</tool_call>`` or ``<tool_call>`` that is *outside* a JSON string (a closing tag written inside a string
    argument is text). Returns ``(index or None, inside_string_at_end_of_text)``."""
    in_string = escaped = False
    i = start
    while i < len(text):
        c = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c == "<" and (text.startswith(CALL_CLOSE, i) or text.startswith(CALL_OPEN, i)):
            return i, False
        i += 1
    return None, in_string


def _blocks(text: str) -> List[Tuple[int, int, bool, bool]]:
    """``(content_start, content_end, closed, open_string)`` of every block, in order.

    A block ends at the first tag outside a JSON string when the content up to there decodes as a call (so
    ``</tool_call>`` inside a string argument is kept as text); otherwise at the first tag, as plain text reads it
    (so one malformed call with an unbalanced quote does not swallow the calls after it). ``open_string``: the text
    ends inside a JSON string of this (last, unclosed) block.
    """
    out = []
    match = _OPEN_OR_CLOSE.search(text)
    while match is not None:
        if match.group() != CALL_OPEN:  # a stray closing tag outside any block
            match = _OPEN_OR_CLOSE.search(text, match.end())
            continue
        start = match.end()
        aware, open_string = _json_aware_end(text, start)
        naive = _OPEN_OR_CLOSE.search(text, start)
        if aware is not None and (naive is None or naive.start() == aware or
                                  _decode_call(text[start:aware]).well_formed):
            end = aware
        elif naive is not None:
            end, open_string = naive.start(), False
        else:
            out.append((start, len(text), False, open_string))
            break
        closed = text.startswith(CALL_CLOSE, end)
        out.append((start, end, closed, False))
        match = _OPEN_OR_CLOSE.search(text, end + len(CALL_CLOSE) if closed else end)
    return out


def parse_tool_calls(text: str) -> List[ToolCall]:
    """Every ``<tool_call>...</tool_call>`` block in ``text``, in order.

    The content is read JSON-aware: ``</tool_call>`` inside a JSON string (an argument that mentions the tag) does
    not close the block. A block left open at the end of the text (generation stopped before ``</tool_call>``) is
    parsed up to the end; a second ``<tool_call>`` before the first one closes ends the first block there. Text
    outside blocks is ignored.

    Returns:
        one :class:`ToolCall` per block (malformed ones have ``error`` set); ``[]`` when there is no block.
    """
    calls: List[ToolCall] = []
    for start, end, closed, _ in _blocks(text):
        call = _decode_call(text[start:end])
        if not closed and end == len(text):
            call.closed = False
            call.error = call.error or f"unterminated: no {CALL_CLOSE}"
        calls.append(call)
    return calls


def stopped_inside_string(text: str) -> bool:
    """True when ``text`` ends with ``</tool_call>`` that lies inside a JSON string of an open call: a stop string
    ``</tool_call>`` cut the model off in the middle of an argument, and generation should go on."""
    if not text.endswith(CALL_CLOSE):
        return False
    head = text[: -len(CALL_CLOSE)]
    blocks = _blocks(head)
    return bool(blocks) and not blocks[-1][2] and blocks[-1][1] == len(head) and blocks[-1][3]


def format_tool_call(name: str, arguments: Dict[str, Any]) -> str:
    """The text of one call in the format :func:`parse_tool_calls` reads (used for the example in prompts)."""
    return f"{CALL_OPEN}{json.dumps({'name': name, 'arguments': arguments})}{CALL_CLOSE}"
