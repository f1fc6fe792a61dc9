"""``POST /update_weights/``, ``/upload_weights/`` and ``/set_weight_version/``: new weights for the served model,
checked against its layout before anything is loaded."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Dict, Optional

from fastapi import APIRouter, HTTPException, Request
from pydantic import BaseModel, ConfigDict, Field

from .state import _State, _state, awake
from .weight_layout import _layout_problem, _weight_layout


class UpdateWeightsRequest(BaseModel):
    """Body of ``POST /update_weights/``."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(min_length=1)
    version: Optional[int] = Field(None, ge=0, le=2 ** 63 - 1)
    in_flight: bool = False  # load between engine steps, running requests kept (streaming rollouts)


class VersionRequest(BaseModel):
    """Body of ``POST /set_weight_version/``."""

    model_config = ConfigDict(extra="forbid")

    version: Optional[int] = Field(None, ge=0, le=2 ** 63 - 1)


router = APIRouter()


async def reset_prefix_cache(state: _State) -> None:
    """Reset vLLM's prefix cache after new weights, so no prompt is read from key/values the old weights computed.

    vLLM answers ``False`` (and resets nothing) while running requests hold cache blocks; those are then preempted
    (they resume, recomputed with the new weights) and the cache reset again.

    Raises:
        HTTPException: 500 when the cache still could not be reset (the weight version is not advanced).
    """
    if await state.engine.reset_prefix_cache() is not False:  # True; None from an engine that does not say
        return
    try:
        done = await state.engine.reset_prefix_cache(reset_running_requests=True)
    except Exception as exc:  # noqa: BLE001 - vLLM raises when even preempting the running requests did not free it
        done, detail = False, f"{type(exc).__name__}: {exc}"
    else:
        detail = "it answered False twice, the second time after preempting the running requests"
    if done is False:
        raise HTTPException(500, f"vLLM could not reset its prefix cache after loading the new weights ({detail}): "
                                 "cached prompts would be read with the old weights' key/values. The weight version "
                                 "is not advanced; restart the server")


async def _load_folder(state: _State, folder: Path, version: Optional[int], label: str,
                       in_flight: bool = False) -> Dict[str, Any]:
    """Check ``folder``'s tensor names and shapes against the served model, then reload the weights from it.

    By default the engine first lets running requests finish (``pause_generation(mode="wait")``): every answer is
    sampled with one version. With ``in_flight`` (streaming rollouts) it freezes them instead (``mode="keep"``),
    loads the weights between two engine steps and resumes them: no request fails or starts over, the sync does not
    wait for the longest one, and a request's later tokens are sampled with the new weights (their log-probs say so;
    its answer carries both versions). The prefix-cache reset then recomputes the running requests' cached keys and
    values with the new weights (vLLM preempts them, keeping their tokens)."""
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
        awake(state, "weight update")
        await state.engine.pause_generation(mode="keep" if in_flight else "wait")
        try:
            await state.engine.collective_rpc("reload_weights", kwargs={"weights_path": str(folder)})
            await reset_prefix_cache(state)
            # before resuming: a kept request that finishes right after says it met the new version
            state.weight_version = version if version is not None else state.weight_version + 1
        finally:
            await state.engine.resume_generation()
    return {"weight_version": state.weight_version}


@router.post("/update_weights/")
async def update_weights(body: UpdateWeightsRequest, request: Request) -> Dict[str, Any]:
    state = _state(request)
    folder = Path(body.path)
    if not folder.is_dir() or not list(folder.glob("*.safetensors")):
        raise HTTPException(400, f"{body.path} is not a folder holding *.safetensors files")
    return await _load_folder(state, folder, body.version, body.path, body.in_flight)


@router.post("/upload_weights/")
async def upload_weights(request: Request, version: Optional[int] = None, in_flight: bool = False) -> Dict[str, Any]:
    """The weights as the bytes of one safetensors file in the body (streamed), with its SHA-256 in the ``x-sha256``
    header: for a trainer on another host. Written to this server's memory folder, checked, loaded, deleted."""
    import hashlib
    import shutil
    import tempfile

    from ..vllm_client import WEIGHTS_FILE, weights_root

    state = _state(request)
    awake(state, "weight update")  # before the upload is read, not after
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
        return await _load_folder(state, folder, version, "the uploaded file", in_flight)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@router.post("/set_weight_version/")
async def set_weight_version(body: VersionRequest, request: Request) -> Dict[str, Any]:
    """After weights arrived another way (vLLM's NCCL weight transfer): reset the prefix cache, record ``version``."""
    state = _state(request)
    async with state.lock:
        awake(state, "weight update")
        await reset_prefix_cache(state)
        state.weight_version = body.version if body.version is not None else state.weight_version + 1
    return {"weight_version": state.weight_version}
