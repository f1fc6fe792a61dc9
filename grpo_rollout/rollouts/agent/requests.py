"""What the recording endpoint accepts from an agent (:mod:`.endpoint`): the checks of a request's body, done before
anything of the episode changes (a bad request is answered 400 naming what is wrong), and the messages as the chat
template is given them (text parts joined, the model's tool calls written back as the ``<tool_call>`` text it
sampled)."""

from __future__ import annotations

import json
import numbers
from typing import Any, Callable, Dict, List, Optional, Tuple

from ..tool_parsing import CALL_CLOSE, CALL_OPEN

#: The model name an agent sends (``model=`` of the OpenAI client); any other is refused.
AGENT_MODEL = "policy"
#: Bytes a request's body may have by default (``rollout.kwargs.max_request_bytes``): a longer one is a 413. Far above
#: any context a model takes (4 MiB of text is about a million tokens); a 50 MB message stalled every episode.
MAX_REQUEST_BYTES = 4 * 2 ** 20
#: A chat request's body (the OpenAI ``chat.completions`` JSON) and a message in it.
Body = Dict[str, Any]
Message = Dict[str, Any]


class AgentRequestError(ValueError):
    """A request the endpoint cannot answer and record; ``status`` is the HTTP status it answers with."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


def _text(content: Any) -> str:
    if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}]
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def _call_key(call: Any) -> tuple:
    fn = call.get("function") or {}
    try:
        arguments = json.loads(fn.get("arguments") or "{}")
    except (TypeError, ValueError):
        arguments = fn.get("arguments")
    return fn.get("name"), json.dumps(arguments, sort_keys=True)


def same_message(a: Message, b: Message) -> bool:
    """Whether two chat messages say the same (role, text, tool calls and the tool call answered); the fields an
    OpenAI client adds when it sends an answer back (``refusal: null``, call ids) do not count."""
    return (a.get("role") == b.get("role") and _text(a.get("content")).strip() == _text(b.get("content")).strip()
            and [_call_key(c) for c in a.get("tool_calls") or []] == [_call_key(c) for c in b.get("tool_calls") or []])


#: Roles a message may have.
ROLES = ("system", "developer", "user", "assistant", "tool")


def _check_messages(messages: Any) -> None:
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise AgentRequestError("`messages` must be a non-empty list of chat messages")
    for i, m in enumerate(messages):
        if m.get("role") not in ROLES:
            raise AgentRequestError(f"messages[{i}] has role {m.get('role')!r}; a role is one of {', '.join(ROLES)}")
        content = m.get("content")
        if content is not None and not isinstance(content, (str, list)):
            raise AgentRequestError(f"messages[{i}].content is {type(content).__name__}; send a string or a list of "
                                    "content parts")
        if isinstance(content, list) and not all(isinstance(p, dict) and p.get("type") == "text" for p in content):
            raise AgentRequestError(f"messages[{i}].content holds a part that is not text: only text parts are "
                                    "supported ({\"type\": \"text\", \"text\": ...})")
        _check_calls(m.get("tool_calls"), f"messages[{i}].tool_calls")


def _check_calls(calls: Any, where: str) -> None:
    """A message's ``tool_calls``: absent, or a list of ``{"function": {"name": str, "arguments": str or dict}}``."""
    if calls is None:
        return
    shape = ("send a list of {\"id\": ..., \"type\": \"function\", \"function\": {\"name\": ..., \"arguments\": "
             "\"<JSON>\"}} (the tool_calls of the answer you got)")
    if not isinstance(calls, list):
        raise AgentRequestError(f"{where} is {type(calls).__name__}: {shape}")
    for k, call in enumerate(calls):
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) \
                or not isinstance(fn.get("arguments", ""), (str, dict)):
            raise AgentRequestError(f"{where}[{k}] is not a function call: {shape}")


def _check_tools(tools: Any) -> None:
    if tools is None:
        return
    if not isinstance(tools, list) or not all(
            isinstance(t, dict) and isinstance(t.get("function"), dict) and isinstance(t["function"].get("name"), str)
            for t in tools):
        raise AgentRequestError("`tools` must be a list of {\"type\": \"function\", \"function\": {\"name\": ..., "
                                "\"parameters\": {...}}}")


#: Why the endpoint does not force the model's answer (a required or named tool, a JSON schema): constrained decoding
#: samples from another distribution than the policy's, so the recorded log-probs would not be the policy's and the
#: update would train the model on tokens it did not choose.
CONSTRAINED = ("it would need constrained decoding, which samples from another distribution than the policy the "
               "trainer updates (the recorded log-probs would not be the policy's)")


def tool_choice(body: Body) -> str:
    """The request's ``tool_choice``: ``"auto"`` (also when absent) or ``"none"`` (the answer's tool calls are not
    parsed: it comes back as text).

    Raises:
        AgentRequestError: ``"required"``, a named function or anything else (400, saying why: :data:`CONSTRAINED`).
    """
    choice = body.get("tool_choice")
    if choice is None or choice in ("auto", "none"):
        return choice or "auto"
    named = isinstance(choice, dict) and (choice.get("function") or {}).get("name", choice.get("name"))
    what = f"tool_choice {choice!r}" if not named else f"tool_choice naming the function {named!r}"
    if choice != "required" and not named:
        raise AgentRequestError(f"{what}: send \"auto\" or \"none\"")
    raise AgentRequestError(f"{what} is not supported: forcing a tool call {CONSTRAINED}. Send tool_choice \"auto\" "
                            "and reward the episodes that call the tool instead")


def check_format(body: Body) -> None:
    """Refuse a ``response_format`` other than plain text (``json_object``, ``json_schema``: :data:`CONSTRAINED`).

    Raises:
        AgentRequestError: (400) naming the format.
    """
    shape = body.get("response_format")
    kind = shape.get("type") if isinstance(shape, dict) else shape
    if shape is not None and kind != "text":
        raise AgentRequestError(f"response_format {kind!r} is not supported: a structured answer {CONSTRAINED}. Ask "
                                "for plain text and parse it (a reward can score whether it parses)")


def check_body(body: Body, chat: bool) -> Optional[int]:
    """Check a request body before it touches the episode; return the ``max_tokens`` it asks for (``None``: none).

    Raises:
        AgentRequestError: another model (404), ``n > 1``, ``max_tokens`` not a whole number >= 1, malformed
            ``messages`` (their ``tool_calls`` too) or ``tools``, a ``tool_choice`` or ``response_format`` that would
            force the answer (chat), or no ``prompt`` (completions checks that itself).
    """
    if body.get("model") != AGENT_MODEL:
        raise AgentRequestError(f"model {body.get('model')!r} is not this run's policy: send model={AGENT_MODEL!r} "
                                "(the `model` argument your agent function was called with)", 404)
    if (body.get("n") or 1) != 1:
        raise AgentRequestError(f"n={body.get('n')}: one completion per request (an episode is one sample; the run "
                                "samples sampling.num_generations episodes per prompt)")
    key = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    asked = body.get(key)
    if asked is not None and (isinstance(asked, bool) or not isinstance(asked, numbers.Integral) or asked < 1):
        raise AgentRequestError(f"{key}={asked!r}: send a whole number of tokens >= 1, or leave it out (the episode's "
                                "budget then limits the answer)")
    if chat:
        _check_messages(body.get("messages"))
        _check_tools(body.get("tools"))
        tool_choice(body)
        check_format(body)
    return None if asked is None else int(asked)


def text_prompt(body: Body) -> Any:
    """A ``completions`` request's ``prompt``: one non-empty string, or one list of token ids (a batch of one is
    unwrapped).

    Raises:
        AgentRequestError: anything else.
    """
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str) and prompt:
        return prompt
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) and t >= 0
                                                   for t in prompt):
        return list(prompt)
    raise AgentRequestError("`prompt` must be one non-empty string or one list of token ids")


def stop_strings(body: Body) -> Tuple[str, ...]:
    """The request's ``stop`` as a tuple (``()``: none): a string, or a list of up to 4 non-empty strings (OpenAI's
    limit).

    Raises:
        AgentRequestError: anything else.
    """
    stop = body.get("stop")
    if stop is None or stop == []:
        return ()
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or not 1 <= len(stops) <= 4 or not all(isinstance(s, str) and s for s in stops):
        raise AgentRequestError(f"stop={stop!r}: send a string or a list of up to 4 non-empty strings")
    return tuple(stops)


def without_stop(text: str, stops: Tuple[str, ...]) -> str:
    """``text`` without the stop string it ends with (the sampler returns it; OpenAI's answers leave it out)."""
    for stop in stops:
        if text.endswith(stop):
            return text[:-len(stop)]
    return text


def rendered(make: Callable[[], Any]) -> Any:
    """``make()`` (rendering messages with the chat template), its failure a 400 naming the template's complaint."""
    try:
        return make()
    except Exception as exc:
        raise AgentRequestError(f"the chat template cannot render these messages ({type(exc).__name__}: {exc}): "
                                "send string contents and tool calls as OpenAI's chat format has them") from exc


def for_template(messages: List[Message]) -> List[Message]:
    """``messages`` as the chat template is given them: text parts joined into one string, ``None`` content as
    ``""``, and an assistant message's ``tool_calls`` written into its content as the ``<tool_call>`` text the
    model sampled (what this endpoint parsed them from; templates that ignore ``tool_calls`` would drop them)."""
    out = []
    for m in messages:
        m = dict(m, content=_text(m.get("content")))
        calls = m.pop("tool_calls", None) or []
        if m["role"] == "assistant" and calls and CALL_OPEN not in m["content"]:
            written = []
            for call in calls:
                fn = call.get("function") or {}
                arguments = fn.get("arguments")
                try:
                    arguments = json.loads(arguments) if isinstance(arguments, str) else arguments
                except ValueError:
                    pass  # written as it came
                written.append(f"{CALL_OPEN}{json.dumps({'name': fn.get('name'), 'arguments': arguments})}{CALL_CLOSE}")
            m["content"] = (m["content"] + "\n" if m["content"] else "") + "\n".join(written)
        out.append(m)
    return out
