"""The Responses API (``POST <base_url>/responses``, the OpenAI Agents SDK's default model) on the chat route.

A Responses request is turned into the chat request it means (:func:`chat_body`), answered and recorded by the
session's ``chat`` as any chat call is, and the chat answer is turned back into a ``response`` object
(:func:`response_of`) or its server-sent events (:func:`response_events`). What maps:

- ``instructions`` → a system message first; ``input`` (a string, or items) → messages: a message item (``developer``
  is ``system``; ``input_text``/``output_text`` parts are text), ``function_call`` items → the preceding assistant
  message's ``tool_calls``, ``function_call_output`` → a ``tool`` message; ``reasoning`` items are left out (the model
  sees no reasoning of its own in a chat template either);
- ``tools`` of ``type: function`` → chat tools; ``max_output_tokens`` → ``max_tokens``;
- ``tool_choice``: ``auto`` and ``none`` as on the chat route (``required`` and a named function are refused there);
- the answer → a ``message`` item with its text (when there is text) and a ``function_call`` item per tool call; an
  answer cut by ``max_output_tokens`` (or the episode's budget) is ``status: incomplete`` with
  ``incomplete_details.reason: max_output_tokens``, as OpenAI's are (streamed: ``response.incomplete``).

Refused (400, naming what to send instead): ``previous_response_id`` and ``conversation`` (nothing is stored: send the
whole input), ``background``, a structured ``text.format`` (the Agents SDK's ``output_type``), item references,
non-text content, and tools that are not functions (web search, file search, ...).
"""

from __future__ import annotations

import json
import time
from typing import Any, Dict, List

from .requests import AGENT_MODEL, CONSTRAINED, AgentRequestError, Body, Message

#: The roles an input message may have.
ROLES = ("user", "assistant", "system", "developer")
#: Response fields the Agents SDK and the ``openai`` types require, with the values this endpoint always has.
_FIXED = {"object": "response", "parallel_tool_calls": True, "error": None, "metadata": {}}


def _refuse(message: str) -> AgentRequestError:
    return AgentRequestError(f"responses: {message}", 400)


def _text(content: Any, where: str) -> str:
    """A message's content (a string, or ``input_text``/``output_text`` parts) as text."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _refuse(f"{where}.content is {type(content).__name__}: a string or a list of text parts")
    parts = []
    for k, part in enumerate(content):
        if not isinstance(part, dict) or part.get("type") not in ("input_text", "output_text", "text"):
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            raise _refuse(f"{where}.content[{k}] is {kind!r}: only text parts are supported")
        parts.append(str(part.get("text", "")))
    return "".join(parts)


def _messages(items: Any) -> List[Message]:
    """The chat messages of a Responses ``input``."""
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    if not isinstance(items, list):
        raise _refuse(f"input is {type(items).__name__}: a string or a list of items")
    messages: List[Message] = []
    for k, item in enumerate(items):
        kind = item.get("type", "message") if isinstance(item, dict) else None
        if kind == "message":
            if item.get("role") not in ROLES:
                raise _refuse(f"input[{k}] has role {item.get('role')!r}; a role is one of {', '.join(ROLES)}")
            role = {"developer": "system"}.get(item["role"], item["role"])
            messages.append({"role": role, "content": _text(item.get("content"), f"input[{k}]")})
        elif kind == "function_call":
            call = {"id": item.get("call_id"), "type": "function",
                    "function": {"name": item.get("name"), "arguments": item.get("arguments", "")}}
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant":  # the answer's text, then its calls: one message
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            messages.append({"role": "tool", "tool_call_id": item.get("call_id"),
                             "content": output if isinstance(output, str) else _text(output, f"input[{k}].output")})
        elif kind != "reasoning":
            raise _refuse(f"input[{k}] is {kind!r}: send messages, function_call and function_call_output items "
                          "(item references and built-in tools' items are not supported)")
    return messages


def _text_format(body: Body) -> str:
    """The answer's requested format (``text.format.type``): ``text`` unless a structured one is asked for."""
    text = body.get("text")
    shape = text.get("format") if isinstance(text, dict) else None
    return str(shape.get("type", "text")) if isinstance(shape, dict) else "text"


def chat_body(body: Body) -> Body:
    """The chat/completions request a Responses request means.

    Raises:
        AgentRequestError: (400) a stored conversation (``previous_response_id``, ``conversation``), non-text
            content, an item or a tool it cannot map.
    """
    for key in ("previous_response_id", "conversation"):
        if body.get(key):
            raise _refuse(f"{key} is not supported (nothing is stored): send the whole conversation as input")
    if body.get("background"):
        raise _refuse("background is not supported: the answer is sampled while the request waits")
    shape = _text_format(body)
    if shape != "text":
        raise _refuse(f"text.format {shape!r} is not supported (an Agents SDK output_type asks for it): a "
                      f"structured answer {CONSTRAINED}. Ask for plain text and parse it")
    if not body.get("input"):
        raise _refuse("input is missing: a string, or a list of message / function_call / function_call_output items")
    messages = _messages(body["input"])
    if body.get("instructions"):
        messages.insert(0, {"role": "system", "content": str(body["instructions"])})
    chat: Body = {"model": body.get("model"), "messages": messages}
    tools = body.get("tools") or []
    if not isinstance(tools, list):
        raise _refuse("tools must be a list")
    for k, tool in enumerate(tools):
        if not isinstance(tool, dict) or tool.get("type") != "function":
            kind = tool.get("type") if isinstance(tool, dict) else type(tool).__name__
            raise _refuse(f"tools[{k}] is {kind!r}: only function tools are supported")
    if tools:
        chat["tools"] = [{"type": "function", "function": {k: t[k] for k in ("name", "description", "parameters")
                                                           if k in t}} for t in tools]
    if body.get("max_output_tokens") is not None:
        chat["max_tokens"] = body["max_output_tokens"]
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") == "function":  # the Responses shape of a named function
        choice = {"type": "function", "function": {"name": choice.get("name")}}
    if choice is not None:
        chat["tool_choice"] = choice
    return chat


def response_of(answer: Body, body: Body) -> Body:
    """The ``response`` object of a chat ``answer`` to the Responses request ``body``."""
    message, cut = answer["choices"][0]["message"], answer["choices"][0]["finish_reason"] == "length"
    rid, status = answer["id"].replace("chatcmpl-", "resp_"), "incomplete" if cut else "completed"
    output: List[Dict[str, Any]] = []
    if message.get("content") or not message.get("tool_calls"):  # an empty answer too: it is sent back as input
        output.append({"type": "message", "id": rid.replace("resp_", "msg_"), "status": status,
                       "role": "assistant",
                       "content": [{"type": "output_text", "text": message["content"] or "", "annotations": []}]})
    for call in message.get("tool_calls") or []:
        output.append({"type": "function_call", "id": call["id"].replace("call_", "fc_"), "call_id": call["id"],
                       "name": call["function"]["name"], "arguments": call["function"]["arguments"],
                       "status": "completed"})
    usage = answer["usage"]
    return dict(_FIXED, id=rid, created_at=answer.get("created", int(time.time())), model=AGENT_MODEL, output=output,
                status=status, incomplete_details={"reason": "max_output_tokens"} if cut else None,
                tool_choice=body.get("tool_choice") or "auto",
                tools=[t for t in body.get("tools") or []], instructions=body.get("instructions"),
                usage={"input_tokens": usage["prompt_tokens"], "output_tokens": usage["completion_tokens"],
                       "total_tokens": usage["total_tokens"],
                       "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                       "output_tokens_details": {"reasoning_tokens": 0}})


def response_events(response: Body) -> List[str]:
    """A response as the server-sent events of ``stream: true``: ``response.created``, each output item added (its
    text as one ``response.output_text.delta``) and done, then ``response.completed`` (``response.incomplete`` for a
    cut answer) with the whole response. The
    whole answer is sampled first, as on the chat route."""
    events: List[Dict[str, Any]] = [{"type": "response.created",
                                     "response": dict(response, status="in_progress", output=[])}]
    for k, item in enumerate(response["output"]):
        events.append({"type": "response.output_item.added", "output_index": k, "item": item})
        if item["type"] == "message":
            events.append({"type": "response.output_text.delta", "item_id": item["id"], "output_index": k,
                           "content_index": 0, "delta": item["content"][0]["text"], "logprobs": []})
        events.append({"type": "response.output_item.done", "output_index": k, "item": item})
    events.append({"type": f"response.{response['status']}", "response": response})  # completed or incomplete
    return [f"event: {e['type']}\ndata: {json.dumps(dict(e, sequence_number=n))}\n\n" for n, e in enumerate(events)]
