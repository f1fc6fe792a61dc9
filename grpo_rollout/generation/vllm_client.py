"""Generation and weight sync through a grpo-rollout vLLM server, token-in/token-out over HTTP."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, Optional, Sequence

import httpx

from .base import GenerationClient, GenerationResult


class ServerError(RuntimeError):
    """The vLLM server refused a request or could not be reached (the message has its answer)."""


#: Answers and connection failures worth another try: the server may be restarting or briefly overloaded. Timeouts
#: are not retried (a request that already waited the whole timeout would wait as long again).
TRANSIENT_STATUS = (502, 503, 504)
TRANSIENT_ERRORS = (httpx.ConnectError, httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError)


def _raise_for(resp: httpx.Response, what: str) -> Dict[str, Any]:
    if resp.status_code >= 400:
        try:
            detail = resp.json().get("detail", resp.text)
        except ValueError:
            detail = resp.text
        raise ServerError(f"{what}: HTTP {resp.status_code}: {detail}")
    try:
        return resp.json()
    except ValueError as exc:
        raise ServerError(f"{what}: the answer is not JSON: {resp.text[:200]!r}") from exc


def weights_root() -> Path:
    """Where weight folders for sync are written: ``/dev/shm`` (memory) when it exists, else the temp folder."""
    shm = Path("/dev/shm")
    return shm if shm.is_dir() else Path(tempfile.gettempdir())


def save_weights_for_vllm(model: Any, folder: Path) -> None:
    """Write ``model``'s weights as one safetensors file in ``folder`` for vLLM's ``reload_weights``.

    Tied weights are written under every name: vLLM (0.32, CPU) keeps its old ``lm_head`` when a tied model's file
    holds only ``model.embed_tokens.weight``, which silently corrupts its log-probs.
    """
    from safetensors.torch import save_file

    tensors, seen = {}, set()
    for name, tensor in model.state_dict().items():
        t = tensor.detach()
        key = (t.data_ptr(), t.shape)
        tensors[name] = t.clone().contiguous() if key in seen else t.contiguous()
        seen.add(key)
    if getattr(model.config, "tie_word_embeddings", False) and "lm_head.weight" not in tensors:
        emb = model.get_input_embeddings().weight.detach()
        tensors["lm_head.weight"] = emb.clone().contiguous()
    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(folder / "model.safetensors"))


class VllmClient(GenerationClient):
    """Talks to ``grpo-rollout serve`` (or a spawned server) at ``url``.

    Args:
        url: server base URL, e.g. ``http://127.0.0.1:8000``. tokenizer: the model's tokenizer (prompts are tokenized
            here, so the server receives exactly the ids the trainer sees). max_prompt_length: left-truncation.
        api_key: bearer token if the server requires one. timeout: seconds per request.
        retries: further tries of a request that failed transiently (connection refused or reset, 502/503/504),
            ``retry_backoff_s`` seconds apart, doubling each time.
    """

    def __init__(self, url: str, tokenizer: Any, max_prompt_length: Optional[int] = None,
                 api_key: Optional[str] = None, timeout: float = 3600.0, retries: int = 3,
                 retry_backoff_s: float = 0.5):
        self.url = url.rstrip("/")
        self.tokenizer = tokenizer
        self.max_prompt_length = max_prompt_length
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)
        self._headers, self._timeout = headers, timeout
        self.retries, self.retry_backoff_s = retries, retry_backoff_s
        self.weight_version = 0
        self.last_sync_seconds = 0.0

    def failure_detail(self) -> str:
        """Said after a request failed for good: where to look (a spawned server adds its exit code and log)."""
        return "; check that the server is running and read its log"

    def _gave_up(self, what: str, error: str, attempts: int) -> ServerError:
        tries = f" after {attempts} attempts" if attempts > 1 else ""
        return ServerError(f"the vLLM server at {self.url} failed {what}{tries}: {error}{self.failure_detail()}")

    def _retry_or_raise(self, what: str, attempt: int, resp: Optional[httpx.Response],
                        exc: Optional[Exception]) -> Optional[Dict[str, Any]]:
        """The JSON of a final answer; ``None`` when the failure is transient and tries are left; else raises."""
        if exc is None and resp.status_code not in TRANSIENT_STATUS:
            return _raise_for(resp, f"{what} to {self.url}")
        if exc is not None and not isinstance(exc, TRANSIENT_ERRORS):
            raise self._gave_up(what, f"{type(exc).__name__}: {exc}", attempt + 1) from exc
        if attempt >= self.retries or not self.alive():
            error = f"{type(exc).__name__}: {exc}" if exc is not None else f"HTTP {resp.status_code}"
            raise self._gave_up(what, error, attempt + 1) from exc
        return None

    def alive(self) -> bool:
        """False when the server is known to be gone (a spawned server whose process exited): no retry then."""
        return True

    def _request(self, method: str, path: str, timeout: Optional[float] = None, **kwargs: Any) -> Dict[str, Any]:
        """One request, retried with exponential backoff (``retry_backoff_s`` × 1, 2, 4, ...) on connection errors
        and 502/503/504 answers, at most ``retries`` more times.

        Raises:
            ServerError: a 4xx/5xx answer, or the server still unreachable after the retries (the message names the
                server, the request, the error, and where its log is).
        """
        what = f"{method} {path}"
        for attempt in range(self.retries + 1):
            resp = exc = None
            try:
                resp = self._http.request(method, path, timeout=timeout or self._timeout, **kwargs)
            except httpx.HTTPError as error:
                exc = error
            data = self._retry_or_raise(what, attempt, resp, exc)
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
                data = self._retry_or_raise(what, attempt, resp, exc)
                if data is not None:
                    return data
                await asyncio.sleep(self.retry_backoff_s * 2 ** attempt)
        raise AssertionError("unreachable")

    def health(self) -> Dict[str, Any]:
        """``GET /health/``: ``status``, ``model``, ``weight_version``, ``max_model_len``, ``vocab_size``.

        Raises:
            ServerError: unreachable or not a grpo-rollout server.
        """
        return self._request("GET", "/health/", timeout=10)

    def _body(self, prompt_ids, n, temperature, top_p, top_k, min_p, repetition_penalty, max_tokens, seed, stop,
              truncate):
        return {"prompts": self.cut_prompts(prompt_ids, truncate), "n": n, "temperature": temperature,
                "top_p": top_p, "top_k": top_k, "min_p": min_p, "repetition_penalty": repetition_penalty,
                "max_tokens": max_tokens, "seed": seed, "stop": list(stop) if stop else None}

    @staticmethod
    def _result(data: Dict[str, Any]) -> GenerationResult:
        return GenerationResult(data["prompt_ids"], data["completion_ids"], data["logprobs"], data["finish_reasons"])

    def generate(self, prompt_ids: Sequence[Sequence[int]], *, n: int = 1, temperature: float = 1.0,
                 top_p: float = 1.0, top_k: int = -1, min_p: float = 0.0, repetition_penalty: float = 1.0,
                 max_tokens: int = 256, seed: Optional[int] = None, stop: Optional[Sequence[str]] = None,
                 truncate: bool = True) -> GenerationResult:
        """``POST /generate/`` with all prompts at once (vLLM batches them), retried on transient failures.
        Raises :class:`ServerError`."""
        body = self._body(prompt_ids, n, temperature, top_p, top_k, min_p, repetition_penalty, max_tokens, seed, stop,
                          truncate)
        return self._result(self._request("POST", "/generate/", json=body))

    async def agenerate(self, prompt_ids: Sequence[Sequence[int]], *, n: int = 1, temperature: float = 1.0,
                        top_p: float = 1.0, top_k: int = -1, min_p: float = 0.0, repetition_penalty: float = 1.0,
                        max_tokens: int = 256, seed: Optional[int] = None,
                        stop: Optional[Sequence[str]] = None, truncate: bool = True) -> GenerationResult:
        """Async ``POST /generate/``: concurrent calls are batched together by the server."""
        body = self._body(prompt_ids, n, temperature, top_p, top_k, min_p, repetition_penalty, max_tokens, seed, stop,
                          truncate)
        return self._result(await self._arequest("/generate/", body))

    def update_weights(self, model: Any) -> None:
        """Write ``model``'s weights to a fresh folder, have the server reload them, confirm the new version, delete
        the folder. Sets ``last_sync_seconds``.

        Raises:
            ServerError: the server is unreachable, refuses, or does not confirm the new version.
        """
        start = time.perf_counter()
        version = self.weight_version + 1
        folder = Path(tempfile.mkdtemp(prefix=f"grpo-rollout-weights-v{version}-", dir=weights_root()))
        try:
            save_weights_for_vllm(model, folder)
            data = self._request("POST", "/update_weights/", json={"path": str(folder), "version": version})
        finally:
            shutil.rmtree(folder, ignore_errors=True)  # the server has read it (or failed); nothing else needs it
        if data.get("weight_version") != version:
            raise ServerError(f"the server answered weight_version {data.get('weight_version')}, expected {version}")
        self.weight_version = version
        self.last_sync_seconds = time.perf_counter() - start

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._http.close()
