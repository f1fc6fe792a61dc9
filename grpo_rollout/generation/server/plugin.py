"""Routes added to vLLM's own OpenAI-compatible server (a ``vllm.endpoint_plugins`` entry point).

vLLM loads this only when the server's environment says ``VLLM_PLUGINS=grpo_rollout`` (``grpo-rollout serve`` and
spawn mode set it). Every ``/v1/...`` route of vLLM stays; these are added:

- ``POST /generate/``: body ``prompts`` (strings, chat-message lists — the chat template is applied with the
  generation prompt — or token-id lists), ``n``, ``temperature``, ``top_p``, ``top_k``, ``min_p``, ``max_tokens``,
  ``repetition_penalty``, optional ``seed`` and ``stop``; answer ``prompt_ids`` (one per prompt), ``completion_ids``
  (``len(prompts) × n``, grouped by prompt), ``logprobs`` (one float per completion token, of the distribution
  actually sampled when the server runs with ``--logprobs-mode processed_logprobs``), ``finish_reasons``,
  ``weight_version`` (the version held when the request started; a weight update waits for running requests).
- ``POST /update_weights/``: body ``path`` (a folder of ``*.safetensors``) and optional ``version``; checks the files'
  tensor names and shapes against the folder the server loaded (400, weights unchanged, when they do not fit), pauses
  generation, reloads the weights in place (``reload_weights``, the path that is safe on CPU), resets the prefix
  cache, resumes, and answers the new ``weight_version``.

Bad input never stops the server: a body of the wrong shape is refused with 422, an impossible request (a prompt
plus ``max_tokens`` beyond ``max_model_len``, more than :data:`MAX_N` samples or :data:`MAX_SEQUENCES` sequences,
token ids outside the vocabulary, malformed chat messages) with 400 and the reason.
- ``POST /upload_weights/?version=V``: the same, for a trainer on another host: the body is the bytes of one
  safetensors file (streamed), the ``x-sha256`` header its checksum; the file goes to this server's memory folder.
- ``GET /health/``: ``status``, ``model``, ``weight_version``, ``max_model_len``, ``vocab_size``.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

from fastapi import APIRouter, FastAPI, HTTPException, Request
from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator

from .disconnect import unless_disconnected

Prompt = Union[str, List[StrictInt], List[Dict[str, Any]]]  # StrictInt: `true` is not token id 1

#: Limits of one ``/generate/`` request: samples per prompt, and prompts × samples (what the server would have to
#: hold at once). Larger requests are refused with 400 instead of exhausting the server's memory.
MAX_N = 512
MAX_SEQUENCES = 16384


class GenerateRequest(BaseModel):
    """Body of ``POST /generate/``. Unknown keys, NaN/inf numbers and out-of-range values are refused (422)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    prompts: List[Prompt] = Field(min_length=1, max_length=MAX_SEQUENCES)
    n: int = Field(1, ge=1, le=MAX_N)
    temperature: float = Field(1.0, ge=0.0, le=1e4)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(-1, le=2 ** 31 - 1)
    min_p: float = Field(0.0, ge=0.0, le=1.0)
    max_tokens: int = Field(16, ge=1, le=2 ** 31 - 1)
    repetition_penalty: float = Field(1.0, gt=0.0, le=1e4)
    seed: Optional[int] = Field(None, ge=-(2 ** 63), le=2 ** 63 - 1)
    stop: Optional[List[str]] = Field(None, max_length=64)

    @field_validator("top_k")
    @classmethod
    def _top_k(cls, v: int) -> int:
        if v < -1:
            raise ValueError("top_k must be -1 (disabled), 0 (disabled) or >= 1")
        return v

    @field_validator("stop")
    @classmethod
    def _stop(cls, v: Optional[List[str]]) -> Optional[List[str]]:
        if v is not None and not all(v):
            raise ValueError("stop strings must not be empty")
        return v


class UpdateWeightsRequest(BaseModel):
    """Body of ``POST /update_weights/``."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(min_length=1)
    version: Optional[int] = Field(None, ge=0, le=2 ** 63 - 1)


class VersionRequest(BaseModel):
    """Body of ``POST /set_weight_version/``."""

    model_config = ConfigDict(extra="forbid")

    version: Optional[int] = Field(None, ge=0, le=2 ** 63 - 1)


class _State:
    def __init__(self, engine: Any, tokenizer: Any, model: str, max_model_len: int, vocab_size: int,
                 api_keys: List[str], layout: Optional[Dict[str, tuple]] = None, tied: bool = False):
        self.engine, self.tokenizer, self.model, self.api_keys = engine, tokenizer, model, api_keys
        self.max_model_len, self.vocab_size = max_model_len, vocab_size
        self.layout, self.tied = layout, tied
        self.weight_version = 0
        self.lock = asyncio.Lock()


router = APIRouter()


def _state(request: Request) -> _State:
    state = getattr(request.app.state, "grpo_rollout", None)
    if state is None:
        raise HTTPException(503, "grpo-rollout routes are not initialised (no engine)")
    if state.api_keys and request.headers.get("authorization", "") not in {f"Bearer {k}" for k in state.api_keys}:
        raise HTTPException(401, "missing or wrong API key (send `Authorization: Bearer KEY`)")
    return state


def _encode(state: _State, prompt: Prompt, index: int) -> List[int]:
    from ...data import CHAT, prompt_format

    if isinstance(prompt, str):
        return list(state.tokenizer(prompt, add_special_tokens=False)["input_ids"])
    if prompt and all(isinstance(t, int) for t in prompt):
        bad = [t for t in prompt if not 0 <= t < state.vocab_size]
        if bad:
            raise HTTPException(400, f"prompts[{index}]: token id {bad[0]} is outside [0, {state.vocab_size})")
        return list(prompt)
    fmt, problem = prompt_format(prompt)
    if fmt == CHAT and problem is None:
        try:
            ids = state.tokenizer.apply_chat_template(prompt, tokenize=True, add_generation_prompt=True)
        except Exception as exc:  # the model's own template refusing these messages (e.g. roles out of order)
            raise HTTPException(400, f"prompts[{index}]: the chat template refused the messages: {exc}") from exc
        return list(ids["input_ids"] if hasattr(ids, "keys") else ids)
    raise HTTPException(400, f"prompts[{index}] must be a string, a list of chat messages or a list of token ids"
                             + (f": {problem}" if problem else ""))


def _weight_layout(folder: Path) -> Dict[str, tuple]:
    """Tensor name → shape of every ``*.safetensors`` file in ``folder``, read from the file headers only.

    Raises:
        ValueError: a file is not a readable safetensors file.
    """
    from safetensors import safe_open

    layout: Dict[str, tuple] = {}
    for file in sorted(folder.glob("*.safetensors")):
        try:
            with safe_open(str(file), framework="pt") as f:
                for name in f.keys():
                    layout[name] = tuple(f.get_slice(name).get_shape())
        except Exception as exc:  # safetensors raises its own error types for a bad header
            raise ValueError(f"{file.name} is not a readable safetensors file ({exc})") from exc
    return layout


def _layout_problem(got: Dict[str, tuple], expected: Optional[Dict[str, tuple]], tied: bool) -> Optional[str]:
    """Why a weight folder does not fit the served model: unknown or missing tensors, or other shapes (``None``: it
    fits). ``expected`` is the layout of the folder the server loaded (``None``: unknown, only the files are read);
    with ``tied`` embeddings ``lm_head.weight`` may come along, with the embedding's shape."""
    if not got:
        return "it holds no tensors"
    if expected is None:
        return None
    expected = dict(expected)
    if tied and "lm_head.weight" not in expected:
        embedding = next((shape for name, shape in expected.items() if name.endswith("embed_tokens.weight")), None)
        if embedding is not None:
            expected["lm_head.weight"] = embedding
    unknown = sorted(set(got) - set(expected))
    if unknown:
        return f"{len(unknown)} tensor(s) the served model does not have, e.g. {unknown[0]!r}"
    missing = sorted(set(expected) - set(got) - {"lm_head.weight"})
    if missing:
        return f"{len(missing)} tensor(s) of the served model are missing, e.g. {missing[0]!r}"
    for name, shape in got.items():
        if shape != expected[name]:
            return f"{name!r} has shape {list(shape)}, the served model's has {list(expected[name])}"
    return None


def _served_layout(model: str) -> Optional[Dict[str, tuple]]:
    """The weight layout of the folder the server loaded (a local folder, or a hub model already in the local
    cache); ``None`` when it cannot be found."""
    folder = Path(model)
    if not folder.is_dir():
        try:
            from huggingface_hub import snapshot_download

            folder = Path(snapshot_download(model, local_files_only=True))
        except Exception:  # not a hub id, or not cached: the update's own files are still checked
            return None
    try:
        return _weight_layout(folder) or None
    except ValueError:
        return None


@router.get("/health/")
async def health(request: Request) -> Dict[str, Any]:
    state = _state(request)
    return {"status": "ok", "model": state.model, "weight_version": state.weight_version,
            "max_model_len": state.max_model_len, "vocab_size": state.vocab_size}


@router.post("/generate/")
async def generate(body: GenerateRequest, request: Request) -> Dict[str, Any]:
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    state = _state(request)
    version = state.weight_version  # the weights this request samples from (an update waits for it to finish)
    if len(body.prompts) * body.n > MAX_SEQUENCES:
        raise HTTPException(400, f"{len(body.prompts)} prompts × n={body.n} is more than {MAX_SEQUENCES} sequences in "
                                 "one request; send fewer prompts per request")
    prompt_ids = [_encode(state, p, i) for i, p in enumerate(body.prompts)]
    for i, ids in enumerate(prompt_ids):
        if not ids:
            raise HTTPException(400, f"prompts[{i}] is empty")
        if len(ids) + body.max_tokens > state.max_model_len:
            room = state.max_model_len - len(ids)
            fix = f"lower max_tokens to {room}" if room > 0 else "shorten the prompt"
            raise HTTPException(400, f"prompts[{i}] has {len(ids)} tokens and max_tokens is {body.max_tokens}: "
                                     f"together more than max_model_len {state.max_model_len}; {fix}")
    try:
        params = SamplingParams(n=body.n, temperature=body.temperature, top_p=body.top_p,
                                top_k=body.top_k if body.top_k > 0 else -1, min_p=body.min_p,
                                repetition_penalty=body.repetition_penalty, seed=body.seed, stop=body.stop,
                                include_stop_str_in_output=True, logprobs=0, max_tokens=body.max_tokens,
                                output_kind=RequestOutputKind.FINAL_ONLY)
    except ValueError as exc:  # vLLM's own checks of the sampling settings
        raise HTTPException(400, f"invalid sampling settings: {exc}") from exc

    async def one(ids: List[int]) -> List[Any]:
        # with n > 1 a yield may carry only some of the n samples: keep the latest state of each by index
        by_index: Dict[int, Any] = {}
        async for out in state.engine.generate({"prompt_token_ids": ids}, params, f"grpo-{uuid.uuid4().hex}"):
            by_index.update({c.index: c for c in out.outputs})
        if len(by_index) != body.n:
            raise HTTPException(500, f"vLLM returned {len(by_index)} samples for a prompt, expected {body.n}")
        return [by_index[i] for i in sorted(by_index)]

    try:  # a client that disconnects (a failed rollout cancelling its requests) aborts the generation
        outputs = await unless_disconnected(request, asyncio.gather(*(one(ids) for ids in prompt_ids)))
    except (ValueError, TypeError) as exc:  # the engine refusing the request; it keeps serving others
        raise HTTPException(400, f"vLLM refused the request: {exc}") from exc
    completion_ids, logprobs, reasons = [], [], []
    for samples in outputs:
        for comp in samples:
            ids = list(comp.token_ids)
            completion_ids.append(ids)
            logprobs.append([float(step[t].logprob) for step, t in zip(comp.logprobs or [], ids)])
            reasons.append(comp.finish_reason or "length")
    return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": logprobs,
            "finish_reasons": reasons, "weight_version": version}


async def _load_folder(state: _State, folder: Path, version: Optional[int], label: str) -> Dict[str, Any]:
    """Check ``folder``'s tensor names and shapes against the served model, then reload the weights from it."""
    # checked before anything is loaded: vLLM fails half-way through a folder with unknown names or other shapes,
    # leaving a model that is part old, part new
    try:
        problem = _layout_problem(await asyncio.to_thread(_weight_layout, folder), state.layout, state.tied)
    except ValueError as exc:
        problem = str(exc)
    if problem:
        raise HTTPException(400, f"{label} does not fit the served model {state.model}: {problem}; the weights "
                                 "were not changed")
    async with state.lock:
        await state.engine.pause_generation(mode="wait")
        try:
            await state.engine.collective_rpc("reload_weights", kwargs={"weights_path": str(folder)})
            await state.engine.reset_prefix_cache()
        finally:
            await state.engine.resume_generation()
        state.weight_version = version if version is not None else state.weight_version + 1
    return {"weight_version": state.weight_version}


@router.post("/update_weights/")
async def update_weights(body: UpdateWeightsRequest, request: Request) -> Dict[str, Any]:
    state = _state(request)
    folder = Path(body.path)
    if not folder.is_dir() or not list(folder.glob("*.safetensors")):
        raise HTTPException(400, f"{body.path} is not a folder holding *.safetensors files")
    return await _load_folder(state, folder, body.version, body.path)


@router.post("/upload_weights/")
async def upload_weights(request: Request, version: Optional[int] = None) -> Dict[str, Any]:
    """The weights as the bytes of one safetensors file in the body (streamed), with its SHA-256 in the ``x-sha256``
    header: for a trainer on another host. Written to this server's memory folder, checked, loaded, deleted."""
    import hashlib
    import shutil
    import tempfile

    from ..vllm_client import WEIGHTS_FILE, weights_root

    state = _state(request)
    expected = request.headers.get("x-sha256", "").lower()
    if len(expected) != 64:
        raise HTTPException(400, "send the file's SHA-256 (64 hex digits) in the x-sha256 header")
    if version is not None and not 0 <= version < 2 ** 63:
        raise HTTPException(400, f"version must be >= 0, got {version}")
    folder = Path(tempfile.mkdtemp(prefix="grpo-rollout-upload-", dir=weights_root()))
    try:
        digest, size = hashlib.sha256(), 0
        with open(folder / WEIGHTS_FILE, "wb") as f:
            async for chunk in request.stream():
                digest.update(chunk)
                f.write(chunk)
                size += len(chunk)
        if digest.hexdigest() != expected:
            raise HTTPException(400, f"the upload ({size} bytes) does not match its x-sha256 checksum: it was cut or "
                                     "changed on the way; the weights were not changed")
        return await _load_folder(state, folder, version, "the uploaded file")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@router.post("/set_weight_version/")
async def set_weight_version(body: VersionRequest, request: Request) -> Dict[str, Any]:
    """After weights arrived another way (vLLM's NCCL weight transfer): reset the prefix cache, record ``version``."""
    state = _state(request)
    async with state.lock:
        await state.engine.reset_prefix_cache()
        state.weight_version = body.version if body.version is not None else state.weight_version + 1
    return {"weight_version": state.weight_version}


def _api_keys(args: Any) -> List[str]:
    keys = getattr(args, "api_key", None) or []
    return [keys] if isinstance(keys, str) else list(keys)


class GrpoRolloutPlugin:
    """The ``vllm.endpoint_plugins`` entry point (zero-argument factory)."""

    name = "grpo_rollout"
    required_tasks = ("generate",)

    def attach_router(self, app: FastAPI) -> None:
        """Add ``/generate/``, ``/update_weights/`` and ``/health/`` to vLLM's app."""
        app.include_router(router)

    async def init_state(self, engine_client: Any, state: Any, args: Any) -> None:
        """Keep the engine, the model's tokenizer, its limits and the API keys for the routes (no engine: routes
        answer 503)."""
        if engine_client is None:
            return
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(getattr(args, "tokenizer", None) or args.model)
        model_config = engine_client.model_config
        tied = bool(getattr(model_config.hf_config, "tie_word_embeddings", False))
        state.grpo_rollout = _State(engine_client, tokenizer, getattr(args, "served_model_name", None) and
                                    args.served_model_name[0] or args.model, model_config.max_model_len,
                                    model_config.get_vocab_size(), _api_keys(args), _served_layout(args.model), tied)
