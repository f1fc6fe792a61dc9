"""Generation and weight sync through a grpo-rollout vLLM server, token-in/token-out over HTTP."""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, Optional, Sequence

import httpx

from .base import GenerationClient, GenerationResult


class ServerError(RuntimeError):
    """The vLLM server refused a request or could not be reached (the message has its answer)."""


def _raise_for(resp: httpx.Response, what: str) -> Dict[str, Any]:
    if resp.status_code >= 400:
        try:
            detail = resp.json().get("detail", resp.text)
        except ValueError:
            detail = resp.text
        raise ServerError(f"{what}: HTTP {resp.status_code}: {detail}")
    return resp.json()


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
    """

    def __init__(self, url: str, tokenizer: Any, max_prompt_length: Optional[int] = None,
                 api_key: Optional[str] = None, timeout: float = 3600.0):
        self.url = url.rstrip("/")
        self.tokenizer = tokenizer
        self.max_prompt_length = max_prompt_length
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)
        self._headers, self._timeout = headers, timeout
        self.weight_version = 0
        self.last_sync_seconds = 0.0

    def health(self) -> Dict[str, Any]:
        """``GET /health/``: ``status``, ``model``, ``weight_version``, ``max_model_len``, ``vocab_size``.

        Raises:
            ServerError: unreachable or not a grpo-rollout server.
        """
        try:
            return _raise_for(self._http.get("/health/", timeout=10), f"GET {self.url}/health/")
        except httpx.HTTPError as exc:
            raise ServerError(f"cannot reach {self.url}: {exc}") from exc

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
        """``POST /generate/`` with all prompts at once (vLLM batches them). Raises :class:`ServerError`."""
        body = self._body(prompt_ids, n, temperature, top_p, top_k, min_p, repetition_penalty, max_tokens, seed, stop,
                          truncate)
        try:
            return self._result(_raise_for(self._http.post("/generate/", json=body), "POST /generate/"))
        except httpx.HTTPError as exc:
            raise ServerError(f"generation request to {self.url} failed: {exc}") from exc

    async def agenerate(self, prompt_ids: Sequence[Sequence[int]], *, n: int = 1, temperature: float = 1.0,
                        top_p: float = 1.0, top_k: int = -1, min_p: float = 0.0, repetition_penalty: float = 1.0,
                        max_tokens: int = 256, seed: Optional[int] = None,
                        stop: Optional[Sequence[str]] = None, truncate: bool = True) -> GenerationResult:
        """Async ``POST /generate/``: concurrent calls are batched together by the server."""
        body = self._body(prompt_ids, n, temperature, top_p, top_k, min_p, repetition_penalty, max_tokens, seed, stop,
                          truncate)
        async with httpx.AsyncClient(base_url=self.url, headers=self._headers, timeout=self._timeout) as http:
            try:
                return self._result(_raise_for(await http.post("/generate/", json=body), "POST /generate/"))
            except httpx.HTTPError as exc:
                raise ServerError(f"generation request to {self.url} failed: {exc}") from exc

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
            data = _raise_for(self._http.post("/update_weights/", json={"path": str(folder), "version": version}),
                              "POST /update_weights/")
        except httpx.HTTPError as exc:
            raise ServerError(f"weight update request to {self.url} failed: {exc}") from exc
        finally:
            shutil.rmtree(folder, ignore_errors=True)  # the server has read it (or failed); nothing else needs it
        if data.get("weight_version") != version:
            raise ServerError(f"the server answered weight_version {data.get('weight_version')}, expected {version}")
        self.weight_version = version
        self.last_sync_seconds = time.perf_counter() - start

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._http.close()
