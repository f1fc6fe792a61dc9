"""What an OpenEnv server's error answer means for the episode (issue 51.18): openenv-core's client raises
``RuntimeError("Server error: <message> (code: <code>)")`` whatever happened, without the type, the file:line or the
field. Here it is told apart:

- ``EXECUTION_ERROR``: the environment's own ``reset``/``step`` raised: a bug in the user's environment, which stops
  the run as the agent path's own exceptions do, said with the exception's type and the user's file:line when this
  process serves the app (``rollout.kwargs.server``: the exception itself is kept when the server answers with it,
  :func:`record_app_errors`), else with the server's message. Raised from the environment's own exception, so one of
  ``rollout.failure_errors`` (a ``ConnectionError`` in the environment) still counts as a failed episode.
- ``VALIDATION_ERROR`` for a step whose action does not fit the environment's action schema (``GET /schema``): the
  model's bad action, never a run stop: the model is answered with an error naming the field
  (:func:`action_problem`), as the built-in tool loop answers a call whose arguments its schema refuses.
- anything else (a connection lost, a server at capacity): the caller's :class:`~...rollouts.contract.EpisodeFailure`.
"""

from __future__ import annotations

import re
import sys
import threading
from collections import OrderedDict
from typing import Any, Dict, Optional, Tuple

from ...rollouts.contract import RolloutError
from ...rollouts.tool_schemas import arguments_problem
from ...user_code.signatures import raised_at

#: openenv-core's client's text for a server's error answer
_SERVER_ERROR = re.compile(r"^Server error: (?P<message>.*) \(code: (?P<code>\w+)\)$", re.DOTALL)
#: message → the exception behind an error answer of an app this process serves (the newest 64)
_RAISED: "OrderedDict[str, BaseException]" = OrderedDict()
_SCHEMAS: Dict[str, Optional[Dict[str, Any]]] = {}
_LOCK = threading.Lock()
_HOOKED = False


def record_app_errors() -> None:
    """Keep the exception behind each error answer of the OpenEnv apps this process serves (openenv-core's server
    answers inside its ``except``: the exception, with its traceback, is the one being handled), so that an
    environment's bug is said with its file:line. Once per process; nothing when openenv-core changed its server."""
    global _HOOKED
    try:
        from openenv.core.env_server import http_server
    except ImportError:
        return
    base = getattr(http_server, "WSErrorResponse", None)
    with _LOCK:
        if _HOOKED or base is None:
            return
        _HOOKED = True

    class _Recorded(base):  # type: ignore[misc, valid-type]
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            exc, message = sys.exc_info()[1], (kwargs.get("data") or {}).get("message")
            if exc is not None and isinstance(message, str):
                with _LOCK:
                    _RAISED[message] = exc
                    while len(_RAISED) > 64:
                        _RAISED.popitem(last=False)

    http_server.WSErrorResponse = _Recorded


def server_error(exc: BaseException) -> Optional[Tuple[str, str]]:
    """``(message, code)`` of an OpenEnv server's error answer as the client raised it; ``None`` for anything else."""
    found = _SERVER_ERROR.match(str(exc)) if isinstance(exc, RuntimeError) else None
    return (found["message"], found["code"]) if found else None


def environment_bug(url: str, method: str, message: str, code: str) -> RolloutError:
    """The error that stops the run when the environment's ``method`` raised (its exception, type and file:line,
    when this process serves the app and kept it; else the server's ``message``)."""
    with _LOCK:
        raised = _RAISED.get(message)
    if raised is None:
        return RolloutError(f"the OpenEnv environment at {url} raised in {method}: {message} ({code}): a bug in the "
                            "environment's code; its traceback is in the server's log")
    error = RolloutError(f"the OpenEnv environment's {method} raised {type(raised).__name__}: {raised}"
                         f"{raised_at(raised)}: a bug in the environment's code (served by this run at {url})")
    error.__cause__ = raised  # a failure_errors type in it still counts as a failed episode
    return error


def action_problem(url: str, action: Any) -> Optional[str]:
    """What is wrong with ``action`` (a dict, or a pydantic model) for the server's action schema (``GET /schema``,
    fetched once per server), naming the field; ``None`` when it fits or the schema cannot be had."""
    with _LOCK:
        known = url in _SCHEMAS
    if not known:
        import httpx

        try:
            schema = httpx.get(url.rstrip("/") + "/schema", timeout=10).json().get("action")
        except (httpx.HTTPError, ValueError, AttributeError):
            schema = None
        with _LOCK:
            _SCHEMAS[url] = schema if isinstance(schema, dict) else None
    schema = _SCHEMAS[url]
    if schema is None:
        return None
    fields = action.model_dump() if hasattr(action, "model_dump") else action
    if not isinstance(fields, dict):
        return None
    problem = arguments_problem({"parameters": schema}, dict(fields))
    return problem.replace("argument '", "field '") if problem else None
