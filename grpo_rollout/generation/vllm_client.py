"""Generation and weight sync through a grpo-rollout vLLM server, token-in/token-out over HTTP."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Hashable, Iterator, Optional, Sequence

import httpx

# how weights reach a server: ``folder`` (this machine), ``http``, ``nccl`` (:mod:`.nccl_sync`); ``auto`` picks one
from ..config.schema import WEIGHT_TRANSFERS as TRANSFERS
from .addresses import is_local_url  # noqa: F401 - re-exported (nccl_sync and older imports use it from here)
from .base import GenerationClient, GenerationResult
from .sampling_settings import SamplingSettings
from .version_stamps import reverted_problem
# staged_weights, weights_root, WEIGHTS_FILE, weights_for_sync: re-exported (their callers import them from here)
from .weight_files import (CHUNK_BYTES as _CHUNK, WEIGHTS_FILE, file_sha256, staged_weights,  # noqa: F401
                           weights_for_sync, weights_root)

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


class ServerError(RuntimeError):
    """The vLLM server refused a request or could not be reached (the message has its answer). ``status``: the HTTP
    status of its answer (``None``: none; 400: a request it cannot serve, e.g. a prompt longer than its context)."""

    def __init__(self, message: str, status: Optional[int] = None):
        super().__init__(message)
        self.status = status


#: Answers and connection failures worth another try: the server may be restarting or briefly overloaded. Timeouts
#: are not retried (a request that already waited the whole timeout would wait as long again).
TRANSIENT_STATUS = (502, 503, 504)
#: What sets a request's timeout when nothing else does (generation: ``VllmClient(timeout=...)``, 3600 s by default).
REQUEST_TIMEOUT = "VllmClient's request timeout"
#: Seconds ``GET /health/`` may take.
HEALTH_TIMEOUT_S = 10.0
TRANSIENT_ERRORS = (httpx.ConnectError, httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError)


def _raise_for(resp: httpx.Response, what: str) -> Dict[str, Any]:
    if resp.status_code >= 400:
        try:
            detail = resp.json().get("detail", resp.text)
        except ValueError:
            detail = resp.text
        raise ServerError(f"{what}: HTTP {resp.status_code}: {detail}", resp.status_code)
    try:
        return resp.json()
    except ValueError as exc:
        raise ServerError(f"{what}: the answer is not JSON: {resp.text[:200]!r}") from exc




class VllmClient(GenerationClient):
    """Talks to ``grpo-rollout serve`` (or a spawned server) at ``url``.

    Args:
        url: server base URL, e.g. ``http://127.0.0.1:8000``. tokenizer: the model's tokenizer (prompts are tokenized
            here, so the server receives exactly the ids the trainer sees). max_prompt_length: left-truncation.
        api_key: bearer token if the server requires one. timeout: seconds per request.
        retries: further tries of a request that failed transiently (connection refused or reset, 502/503/504),
            ``retry_backoff_s`` seconds apart, doubling each time.
        transfer: how weights reach the server (see :data:`TRANSFERS`): ``folder`` hands it the path of a folder on
            this machine; ``http`` streams the file's bytes with a SHA-256 checksum (works across hosts); ``auto``
            picks ``folder`` for a server on this machine, else ``http``.
        sync_timeout: seconds a weight sync may go without an answer before it fails (``vllm.sync_timeout_s``).

    Attributes:
        weight_version: the version the server last confirmed (a sync); an answer sampled with an older one is an
            error (the server restarted or reverted, :func:`~.version_stamps.reverted_problem`).
        in_flight_updates: have the server load a sync between engine steps, keeping running requests (streaming
            rollouts; :func:`~.version_stamps.use_in_flight_updates`), instead of after they finish.
    """

    def __init__(self, url: str, tokenizer: PreTrainedTokenizerBase, max_prompt_length: Optional[int] = None,
                 api_key: Optional[str] = None, timeout: float = 3600.0, retries: int = 3,
                 retry_backoff_s: float = 0.5, transfer: str = "auto", sync_timeout: float = 600.0):
        if transfer not in TRANSFERS or transfer == "nccl":
            raise ValueError(f"transfer must be auto, folder or http (nccl has its own client), got {transfer!r}")
        self.url = url.rstrip("/")
        self.transfer = transfer if transfer != "auto" else ("folder" if is_local_url(self.url) else "http")
        self.tokenizer = tokenizer
        self.max_prompt_length = max_prompt_length
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)
        self._headers, self._timeout = headers, timeout
        self.retries, self.retry_backoff_s, self.sync_timeout = retries, retry_backoff_s, sync_timeout
        self.weight_version = 0
        self.in_flight_updates = False
        self.last_sync_seconds = 0.0

    def failure_detail(self) -> str:
        """Said after a request failed for good: where to look (a spawned server adds its exit code and log)."""
        return "; check that the server is running and read its log"

    def _gave_up(self, what: str, error: str, attempts: int) -> ServerError:
        tries = f" after {attempts} attempts" if attempts > 1 else ""
        return ServerError(f"the vLLM server at {self.url} failed {what}{tries}: {error}{self.failure_detail()}")

    def _retry_or_raise(self, what: str, attempt: int, resp: Optional[httpx.Response],
                        exc: Optional[Exception], limit: str = "") -> Optional[Dict[str, Any]]:
        """The JSON of a final answer; ``None`` when the failure is transient and tries are left; else raises.
        ``limit``: the request's timeout and what sets it, named when it runs out (a loaded machine can reach it)."""
        if exc is None and resp.status_code not in TRANSIENT_STATUS:
            return _raise_for(resp, f"{what} to {self.url}")
        if isinstance(exc, httpx.TimeoutException):
            raise self._gave_up(what, f"no answer within {limit or 'the request timeout'} "
                                      f"({type(exc).__name__}): the server is stuck or overloaded", attempt + 1) from exc
        if exc is not None and not isinstance(exc, TRANSIENT_ERRORS):
            raise self._gave_up(what, f"{type(exc).__name__}: {exc}", attempt + 1) from exc
        if attempt >= self.retries or not self.alive():
            error = f"{type(exc).__name__}: {exc}" if exc is not None else f"HTTP {resp.status_code}"
            raise self._gave_up(what, error, attempt + 1) from exc
        return None

    def alive(self) -> bool:
        """False when the server is known to be gone (a spawned server whose process exited): no retry then."""
        return True

    def _request(self, method: str, path: str, timeout: Optional[float] = None, body: Any = None,
                 timeout_name: str = REQUEST_TIMEOUT, **kwargs: Any) -> Dict[str, Any]:
        """One request, retried with exponential backoff (``retry_backoff_s`` × 1, 2, 4, ...) on connection errors
        and 502/503/504 answers, at most ``retries`` more times. ``body``: a callable returning the request body (an
        iterator of bytes is streamed), called anew for every attempt.

        Raises:
            ServerError: a 4xx/5xx answer, or the server still unreachable after the retries (the message names the
                server, the request, the error, and where its log is).
        """
        what = f"{method} {path}"
        for attempt in range(self.retries + 1):
            resp = exc = None
            if body is not None:
                kwargs["content"] = body()  # a fresh stream for every attempt
            try:
                resp = self._http.request(method, path, timeout=timeout or self._timeout, **kwargs)
            except httpx.HTTPError as error:
                exc = error
            data = self._retry_or_raise(what, attempt, resp, exc, f"{timeout or self._timeout:g} s ({timeout_name})")
            if data is not None:
                return data
            time.sleep(self.retry_backoff_s * 2 ** attempt)
        raise AssertionError("unreachable")

    async def _arequest(self, path: str, body: Dict[str, Any]) -> Dict[str, Any]:
        """Async ``POST`` with the same retries as :meth:`_request`."""
        what = f"POST {path}"
        async with httpx.AsyncClient(base_url=self.url, headers=self._headers, timeout=self._timeout) as http:
            for attempt in range(self.retries + 1):
                resp = exc = None
                try:
                    resp = await http.post(path, json=body)
                except httpx.HTTPError as error:
                    exc = error
                data = self._retry_or_raise(what, attempt, resp, exc, f"{self._timeout:g} s ({REQUEST_TIMEOUT})")
                if data is not None:
                    return data
                await asyncio.sleep(self.retry_backoff_s * 2 ** attempt)
        raise AssertionError("unreachable")

    def health(self) -> Dict[str, Any]:
        """``GET /health/``: ``status``, ``model``, ``weight_version``, ``max_model_len``, ``vocab_size``.

        Raises:
            ServerError: unreachable or not a grpo-rollout server.
        """
        return self._request("GET", "/health/", timeout=HEALTH_TIMEOUT_S, timeout_name="the health check's limit")

    def sleep(self) -> None:
        """``POST /sleep/`` (vLLM sleep level 1, after running requests finish).

        Raises:
            ServerError: the server has no sleep mode (started without ``--enable-sleep-mode``) or failed.
        """
        self._request("POST", "/sleep/", timeout=self.sync_timeout, timeout_name="vllm.sync_timeout_s")

    def wake_up(self) -> None:
        """``POST /wake_up/``: weights and KV cache back; generation and weight updates accepted again.

        Raises:
            ServerError: the server failed to wake up.
        """
        self._request("POST", "/wake_up/", timeout=self.sync_timeout, timeout_name="vllm.sync_timeout_s")

    def _body(self, prompt_ids: Sequence[Sequence[int]], settings: SamplingSettings, truncate: bool) -> Dict[str, Any]:
        """The ``/generate/`` body: the prompts and the settings' fields (the server's ``GenerateRequest``)."""
        return {"prompts": self.cut_prompts(prompt_ids, truncate), **settings.request_kwargs()}

    def _result(self, data: Dict[str, Any], confirmed: int) -> GenerationResult:
        """The answer as a result, carrying the weight versions the server stamped on it; ``confirmed``: the version
        this client had confirmed when it sent the request. Raises :class:`ServerError` when the answer is older."""
        problem = reverted_problem(self.url, data.get("weight_version"), confirmed)
        if problem:
            raise ServerError(problem)
        return GenerationResult(data["prompt_ids"], data["completion_ids"], data["logprobs"], data["finish_reasons"],
                                data.get("weight_version"), data.get("weight_version_end"))

    def generate(self, prompt_ids: Sequence[Sequence[int]], *, n: int = 1, temperature: float = 1.0,
                 top_p: float = 1.0, top_k: int = -1, min_p: float = 0.0, repetition_penalty: float = 1.0,
                 max_tokens: int = 256, seed: Optional[int] = None, stop: Optional[Sequence[str]] = None,
                 truncate: bool = True, affinity: Optional[Hashable] = None) -> GenerationResult:
        """``POST /generate/`` with all prompts at once (vLLM batches them), retried on transient failures.
        Raises :class:`ServerError` (also when the answer was sampled with weights older than the last sync)."""
        body = self._body(prompt_ids, SamplingSettings(n, temperature, top_p, top_k, min_p, repetition_penalty,
                                                       max_tokens, seed, tuple(stop) if stop else None), truncate)
        confirmed = self.weight_version
        return self._result(self._request("POST", "/generate/", json=body), confirmed)

    async def agenerate(self, prompt_ids: Sequence[Sequence[int]], *, n: int = 1, temperature: float = 1.0,
                        top_p: float = 1.0, top_k: int = -1, min_p: float = 0.0, repetition_penalty: float = 1.0,
                        max_tokens: int = 256, seed: Optional[int] = None,
                        stop: Optional[Sequence[str]] = None, truncate: bool = True,
                        affinity: Optional[Hashable] = None) -> GenerationResult:
        """Async ``POST /generate/``: concurrent calls are batched together by the server."""
        body = self._body(prompt_ids, SamplingSettings(n, temperature, top_p, top_k, min_p, repetition_penalty,
                                                       max_tokens, seed, tuple(stop) if stop else None), truncate)
        confirmed = self.weight_version
        return self._result(await self._arequest("/generate/", body), confirmed)

    def update_weights(self, weights: Any) -> None:
        """Stage the weights (a model or ``name → tensor``) in a fresh folder, have the server load them, confirm
        the new version, delete the folder. Sets ``last_sync_seconds``.

        Raises:
            ServerError: the server is unreachable, refuses, or does not confirm the new version.
        """
        start = time.perf_counter()
        version = self.weight_version + 1
        with staged_weights(weights, version) as folder:
            self.reload(folder, version)
        self.last_sync_seconds = time.perf_counter() - start

    def reload(self, folder: Path, version: int) -> None:
        """Have the server load the weights staged in ``folder`` (see :func:`staged_weights`) as ``version``: by path
        (``folder`` transfer) or by streaming the file (``http``).

        Raises:
            ServerError: the server is unreachable, refuses (e.g. names or shapes that do not fit its model, a
                checksum that does not match), answers another version, or sends nothing for ``sync_timeout``
                seconds.
        """
        try:
            data = self._send_weights(folder, version)
        except ServerError as exc:
            if isinstance(exc.__cause__, httpx.TimeoutException):
                raise ServerError(f"the vLLM server at {self.url} did not answer the weight sync within "
                                  f"{self.sync_timeout:g} s (vllm.sync_timeout_s): it is stuck or overloaded"
                                  f"{self.failure_detail()}; raise vllm.sync_timeout_s if the model is large and "
                                  "the sync only slow") from exc.__cause__
            raise
        if data.get("weight_version") != version:
            raise ServerError(f"the server at {self.url} answered weight_version {data.get('weight_version')}, "
                              f"expected {version}")
        self.weight_version = version

    def _send_weights(self, folder: Path, version: int) -> Dict[str, Any]:
        if self.transfer == "http":
            file = folder / WEIGHTS_FILE
            checksum = file_sha256(file)

            def chunks() -> Iterator[bytes]:
                with open(file, "rb") as f:
                    yield from iter(lambda: f.read(_CHUNK), b"")

            params = {"version": version, **({"in_flight": "true"} if self.in_flight_updates else {})}
            return self._request("POST", "/upload_weights/", body=chunks, params=params,
                                 timeout=self.sync_timeout, timeout_name="vllm.sync_timeout_s",
                                 headers={"content-type": "application/octet-stream", "x-sha256": checksum,
                                          "content-length": str(file.stat().st_size)})
        body = {"path": str(folder), "version": version, **({"in_flight": True} if self.in_flight_updates else {})}
        return self._request("POST", "/update_weights/", json=body,
                             timeout=self.sync_timeout, timeout_name="vllm.sync_timeout_s")

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._http.close()
