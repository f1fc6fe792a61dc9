"""The recording endpoint: an OpenAI-compatible ``/v1`` per episode, served from the training process.

An agent that owns its loop (the ``openai`` client, the OpenAI Agents SDK, a plain ``httpx`` loop) is handed
``base_url = http://127.0.0.1:<port>/sessions/<id>/v1``; its ``chat/completions``, ``responses`` (:mod:`.responses`)
and ``completions`` calls are answered by the run's generation client
(:class:`~grpo_rollout.rollouts.agent.sessions.AgentSession`) and recorded as tokens. The idea is the field's (AReaL's
agent proxy, rLLM's model gateway, TRL/OpenEnv's transparent proxy); this one is a Starlette app on uvicorn in a
daemon thread, one per training process, started on first use and stopped at the run's end.

It listens on 127.0.0.1 only, and trusts no local process: each episode's session has an unguessable id (128 random
bits) and a key of its own (the ``api_key`` its agent is handed, sent as ``Authorization: Bearer <key>``, which
OpenAI clients do); a request without it is a 401, one with another episode's key a 403, and a session that does not
exist (or has ended) a 404. A body longer than the session's ``max_request_bytes`` is a 413 before it is read, and
rendering and tokenizing a request run on a worker thread, so one huge request never stalls the other episodes.
"""

from __future__ import annotations

import hmac
import json
import secrets
import threading
from typing import Any, Dict, List, Optional, Tuple

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..run_end import on_run_end
from .requests import AGENT_MODEL, AgentRequestError
from .responses import chat_body, response_events, response_of
from .sessions import AgentSession


def _error(message: str, status: int) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": "invalid_request_error", "code": status}}, status)


def _key_of(request: Request) -> Optional[str]:
    """The key a request carries: ``Authorization: Bearer <key>`` (OpenAI clients), else ``api-key`` or
    ``x-api-key`` (Azure's and Anthropic's headers)."""
    auth = request.headers.get("authorization", "")
    if auth[:7].lower() == "bearer ":
        return auth[7:].strip()
    return request.headers.get("x-api-key") or request.headers.get("api-key")


async def _body(request: Request, limit: int) -> Any:
    """The request's JSON body, read up to ``limit`` bytes.

    Raises:
        AgentRequestError: longer than ``limit`` (413: said before reading when ``Content-Length`` tells), not JSON
            (400).
    """
    too_long = AgentRequestError(f"the request body is longer than {limit} bytes (rollout.kwargs.max_request_bytes): "
                                 "send a shorter conversation", 413)
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_long
    data = bytearray()
    async for chunk in request.stream():
        data += chunk
        if len(data) > limit:
            raise too_long
    try:
        return json.loads(bytes(data))
    except ValueError as exc:
        raise AgentRequestError("the body is not JSON") from exc


def stream_events(answer: Dict[str, Any], usage: bool) -> List[str]:
    """An answer (``chat.completion`` or ``text_completion``) as the server-sent events of ``stream: true`` (chunks:
    the message or text, then its ``finish_reason``, then the usage when asked, then ``[DONE]``). The whole answer is
    sampled first: the trainer records tokens, not their timing."""
    choice, head = answer["choices"][0], {k: answer[k] for k in ("id", "model", "created")}
    if answer["object"] == "text_completion":  # the completions route: text pieces, same object name
        head["object"] = "text_completion"
        first, last = {"index": 0, "text": choice["text"]}, {"index": 0, "text": ""}
    else:
        message, head["object"] = choice["message"], "chat.completion.chunk"
        delta: Dict[str, Any] = {"role": "assistant", "content": message.get("content")}
        if message.get("tool_calls"):
            delta["tool_calls"] = [dict(call, index=k) for k, call in enumerate(message["tool_calls"])]
        first, last = {"index": 0, "delta": delta}, {"index": 0, "delta": {}}
    chunks = [dict(head, choices=[dict(first, finish_reason=None)]),
              dict(head, choices=[dict(last, finish_reason=choice["finish_reason"])])]
    if usage:
        chunks.append(dict(head, choices=[], usage=answer["usage"]))
    return [f"data: {json.dumps(c)}\n\n" for c in chunks] + ["data: [DONE]\n\n"]


class RecordingEndpoint:
    """The HTTP server and its open sessions.

    Attributes:
        port: the port it listens on (127.0.0.1 only).
    """

    def __init__(self) -> None:
        import uvicorn

        self.sessions: Dict[str, Tuple[AgentSession, str]] = {}
        app = Starlette(routes=[Route("/sessions/{sid}/v1/chat/completions", self._chat, methods=["POST"]),
                                Route("/sessions/{sid}/v1/completions", self._complete, methods=["POST"]),
                                Route("/sessions/{sid}/v1/responses", self._respond, methods=["POST"]),
                                Route("/sessions/{sid}/v1/models", self._models, methods=["GET"]),
                                Route("/{rest:path}", self._unknown, methods=["GET", "POST", "PUT", "DELETE"])])
        self._server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning",
                                                     lifespan="off"))
        self._thread = threading.Thread(target=self._server.run, name="grpo-rollout-agent-endpoint", daemon=True)
        self._thread.start()
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError("the agent endpoint could not start (see the log above)")
            threading.Event().wait(0.01)
        self.port = self._server.servers[0].sockets[0].getsockname()[1]

    def open(self, session: AgentSession) -> Tuple[str, str]:
        """Register ``session`` under a fresh unguessable id; return its ``base_url`` (ends in ``/v1``) and the key
        its requests must carry (``Authorization: Bearer <key>``)."""
        sid, key = secrets.token_hex(16), secrets.token_urlsafe(32)
        self.sessions[sid] = (session, key)
        return f"http://127.0.0.1:{self.port}/sessions/{sid}/v1", key

    def close_session(self, base_url: str) -> None:
        """Forget a session: later requests to its URL get 404."""
        self.sessions.pop(base_url.rstrip("/").split("/")[-2], None)

    async def _chat(self, request: Request) -> Response:
        return await self._answer(request, AgentSession.chat)

    async def _complete(self, request: Request) -> Response:
        return await self._answer(request, AgentSession.complete)

    async def _respond(self, request: Request) -> Any:
        async def respond(session: AgentSession, body: Dict[str, Any], gone: Any) -> Dict[str, Any]:
            return response_of(await session.chat(chat_body(body), gone), body)

        return await self._answer(request, respond, events=lambda response, body: response_events(response))

    def _session(self, request: Request) -> AgentSession:
        """The session a request is for, once its key is that session's.

        Raises:
            AgentRequestError: no such session (404: ended, or never opened), no key (401), another key (403).
        """
        found = self.sessions.get(request.path_params["sid"])
        if found is None:
            raise AgentRequestError("no such session: this episode has ended (or the URL is not one this run "
                                    "handed out)", 404)
        key = _key_of(request)
        if not key:
            raise AgentRequestError("no API key: send the api_key your agent function was called with "
                                    "(Authorization: Bearer <api_key>; OpenAI clients do when given api_key=)", 401)
        if not hmac.compare_digest(key.encode(), found[1].encode()):
            raise AgentRequestError("this API key is not this episode's: send the api_key your agent function was "
                                    "called with, to the base_url it was called with", 403)
        return found[0]

    async def _answer(self, request: Request, method: Any, events: Any = None) -> Response:
        """Answer a request with ``method`` of its session: JSON, or server-sent events for ``stream: true``
        (``events(answer, body)``; by default the chat and completions routes' chunks), sent whole (the answer is
        sampled first): the answer is recorded only when its client is still there to get it."""
        try:
            session = self._session(request)
            body = await _body(request, session.max_request_bytes)
            if not isinstance(body, dict):
                raise AgentRequestError("the body must be a JSON object")
            answer = await method(session, body, request.is_disconnected)
        except AgentRequestError as exc:
            return _error(str(exc), exc.status)
        except Exception as exc:  # the generation client failed: the agent's client raises it (rollout.on_error)
            return _error(f"generation failed: {type(exc).__name__}: {exc}", 500)
        if not body.get("stream"):
            return JSONResponse(answer)
        if events is not None:
            return Response("".join(events(answer, body)), media_type="text/event-stream")
        usage = bool((body.get("stream_options") or {}).get("include_usage"))
        return Response("".join(stream_events(answer, usage)), media_type="text/event-stream")

    async def _unknown(self, request: Request) -> JSONResponse:
        return _error(f"{request.method} {request.url.path}: this endpoint answers POST <base_url>/chat/completions, "
                      "POST <base_url>/completions, POST <base_url>/responses and GET <base_url>/models", 404)

    async def _models(self, request: Request) -> JSONResponse:
        try:
            self._session(request)
        except AgentRequestError as exc:
            return _error(str(exc), exc.status)
        return JSONResponse({"object": "list", "data": [{"id": AGENT_MODEL, "object": "model",
                                                         "owned_by": "grpo-rollout"}]})

    def close(self) -> None:
        """Stop the server (waits up to 5 s)."""
        self._server.should_exit = True
        self._thread.join(timeout=5)


_ENDPOINT: Optional[RecordingEndpoint] = None
_LOCK = threading.Lock()


def shared_endpoint() -> RecordingEndpoint:
    """This process's endpoint, started on first use and stopped when the run ends (:func:`~grpo_rollout.rollouts.
    run_end.end_run`)."""
    global _ENDPOINT
    with _LOCK:
        if _ENDPOINT is None:
            _ENDPOINT = RecordingEndpoint()
            on_run_end(_stop_shared)
        return _ENDPOINT


def _stop_shared() -> None:
    global _ENDPOINT
    with _LOCK:
        endpoint, _ENDPOINT = _ENDPOINT, None
    if endpoint is not None:
        endpoint.close()

