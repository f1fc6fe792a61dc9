"""Who may call which route of a grpo-rollout vLLM server: an ASGI middleware the plugin puts in front of every route
of vLLM's app, vLLM's own and the grpo-rollout ones, whatever vLLM itself checks (0.32 checks ``--api-key`` only
under ``/v1``, ``/v2``, ``/inference`` and ``/cohere``).

- With an API key (``--api-key``/``vllm.api_key``, or vLLM's ``VLLM_API_KEY``): every route but ``GET /health``
  (vLLM's liveness probe, which says nothing about the model) needs ``Authorization: Bearer KEY``; 401 without it.
- Without a key: the generation and reading routes (:func:`open_without_key`) answer anyone who reaches the port;
  every other route (weight updates, the weight version, sleep, vLLM's ``/pause``, ``/collective_rpc``,
  ``/scale_elastic_ep``, LoRA loading, ...) answers 403, unless the server was started on a trusted network
  (``grpo-rollout serve --trusted-network``, ``vllm.trusted_network``), which opens them to anyone.

Spawn mode gives its servers a random key per run (:func:`new_run_key`), so a trainer's own server is guarded
without any setting.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from typing import Any, Callable, Iterable, List, Mapping, Optional, Sequence, Tuple

#: The environment variable that tells the plugin its server is on a trusted network (set by the launcher).
TRUSTED_ENV = "GRPO_ROLLOUT_TRUSTED_NETWORK"
#: vLLM's own environment variable for the API key (``--api-key`` wins over it, as in vLLM).
KEY_ENV = "VLLM_API_KEY"
#: Open to anyone even with a key: vLLM's liveness probe.
ALWAYS_OPEN = frozenset({"/health"})
#: Reading and generation routes that answer anyone when the server has no key (exact paths).
OPEN_PATHS = frozenset({
    "/health", "/health/", "/ping", "/version", "/load", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc",
    "/is_sleeping", "/is_paused", "/is_scaling_elastic_ep", "/tokenizer_info", "/generate/", "/invocations",
    "/tokenize", "/detokenize", "/pooling", "/classify", "/score", "/rerank", "/generative_scoring",
    "/inference/v1/generate", "/metrics"})
#: ... and every path under these (the OpenAI/Anthropic/Cohere-style APIs, the metrics app, offline docs' files).
OPEN_PREFIXES = ("/v1/", "/v2/", "/cohere/", "/metrics/", "/static/")
#: Under an open prefix but changing what the server serves: refused without a key like the weight routes.
CONTROL_PATHS = frozenset({"/v1/load_lora_adapter", "/v1/unload_lora_adapter"})


def new_run_key() -> str:
    """A random API key (256 bits, URL-safe text) for a server spawned for one run."""
    return secrets.token_urlsafe(32)


def server_keys(api_key: Any, environ: Optional[Mapping[str, str]] = None) -> List[str]:
    """The keys a vLLM server accepts: its ``--api-key`` values (a string or a list), else ``VLLM_API_KEY`` from
    ``environ`` (default: this process's), as vLLM decides; ``[]``: no key."""
    keys = [api_key] if isinstance(api_key, str) else list(api_key or [])
    if not keys:
        keys = [(os.environ if environ is None else environ).get(KEY_ENV, "")]
    return [k for k in keys if k]


def is_trusted(environ: Optional[Mapping[str, str]] = None) -> bool:
    """Whether the launcher said the server is on a trusted network (:data:`TRUSTED_ENV` is ``1``)."""
    return (os.environ if environ is None else environ).get(TRUSTED_ENV) == "1"


def open_without_key(path: str) -> bool:
    """Whether ``path`` answers anyone on a server with no key and no trusted network: generation and reading."""
    if path in CONTROL_PATHS:
        return False
    return path in OPEN_PATHS or path.startswith(OPEN_PREFIXES)


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).digest()


def key_matches(authorization: Optional[str], keys: Iterable[str]) -> bool:
    """Whether an ``Authorization`` header (``Bearer KEY``, the scheme in any case) carries one of ``keys``; compared
    in constant time."""
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer":
        return False
    found, given = False, _digest(token)
    for key in keys:
        found |= secrets.compare_digest(given, _digest(key))
    return found


def refusal(path: str, authorization: Optional[str], keys: Sequence[str], trusted: bool) -> Optional[Tuple[int, str]]:
    """``(status, reason)`` when a request for ``path`` with this ``Authorization`` header must be refused, else
    ``None``: 401 without the key on a server with one (every path but :data:`ALWAYS_OPEN`), 403 for a path that is
    not :func:`open_without_key` on a server with no key and no trusted network."""
    if keys:
        if path in ALWAYS_OPEN or key_matches(authorization, keys):
            return None
        return 401, "missing or wrong API key (send `Authorization: Bearer KEY`)"
    if trusted or open_without_key(path):
        return None
    return 403, (f"{path} is refused: this server has no API key, so only its generation and reading routes answer "
                 "(weight updates, the weight version, sleep and vLLM's control routes do not). Start it with "
                 "--api-key KEY (the trainer sends vllm.api_key), or with --trusted-network (vllm.trusted_network: "
                 "true) when everyone who can reach its port may change its weights")


def weight_access(keys: Sequence[str], trusted: bool) -> str:
    """Who may change the weights, as ``/health/`` says it: ``key`` (with the API key), ``anyone`` (no key, trusted
    network) or ``refused`` (no key: nobody)."""
    return "key" if keys else "anyone" if trusted else "refused"


def access_summary(keys: Sequence[str], trusted: bool) -> str:
    """One line for ``grpo-rollout serve``'s start: which routes are guarded and which answer anyone."""
    if keys:
        return "Access: every route but GET /health needs the API key (Authorization: Bearer KEY)."
    if trusted:
        return ("Access: no API key and --trusted-network: every route answers anyone who reaches the port, weight "
                "updates and vLLM's control routes included.")
    return ("Access: no API key: generation and reading routes (/generate/, /v1/..., /tokenize, /metrics, /health/, "
            "...) answer anyone who reaches the port; weight updates, sleep and vLLM's control routes answer 403 "
            "(--api-key guards everything; --trusted-network opens them).")


class AccessGuard:
    """ASGI middleware applying :func:`refusal` to every HTTP and WebSocket request (a refused WebSocket is closed
    with code 1008 before it is accepted).

    Args:
        app: the wrapped ASGI app. keys: the API keys (``[]``: none). trusted: no key needed for any route.
    """

    def __init__(self, app: Callable, keys: Sequence[str] = (), trusted: bool = False):
        self.app, self.keys, self.trusted = app, list(keys), trusted

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        path = scope["path"].removeprefix(scope.get("root_path", "")) or "/"
        header = dict(scope.get("headers") or []).get(b"authorization", b"").decode("latin-1")
        refused = refusal(path, header, self.keys, self.trusted)
        if refused is None:
            await self.app(scope, receive, send)
        elif scope["type"] == "websocket":
            reason = "missing or wrong API key" if refused[0] == 401 else "refused: no API key, no trusted network"
            await send({"type": "websocket.close", "code": 1008, "reason": reason})
        else:
            from starlette.responses import JSONResponse

            await JSONResponse({"detail": refused[1]}, refused[0])(scope, receive, send)
