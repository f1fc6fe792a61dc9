"""Routes added to vLLM's own OpenAI-compatible server (a ``vllm.endpoint_plugins`` entry point).

vLLM loads this only when the server's environment says ``VLLM_PLUGINS=grpo_rollout`` (``grpo-rollout serve`` and
spawn mode set it). Every ``/v1/...`` route of vLLM stays; these are added:

- ``POST /generate/``: body ``prompts`` (strings, chat-message lists — the chat template is applied with the
  generation prompt — or token-id lists), ``n``, ``temperature``, ``top_p``, ``top_k``, ``min_p``, ``max_tokens``,
  ``repetition_penalty``, optional ``seed`` and ``stop``; answer ``prompt_ids`` (one per prompt), ``completion_ids``
  (``len(prompts) × n``, grouped by prompt), ``logprobs`` (one float per completion token, of the distribution
  actually sampled when the server runs with ``--logprobs-mode processed_logprobs``), ``finish_reasons``.
- ``POST /update_weights/``: body ``path`` (a folder of ``*.safetensors``) and optional ``version``; pauses generation,
  reloads the weights in place (``reload_weights``, the path that is safe on CPU), resets the prefix cache, resumes,
  and answers the new ``weight_version``.
- ``GET /health/``: ``status``, ``model``, ``weight_version``, ``max_model_len``, ``vocab_size``.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

from fastapi import APIRouter, FastAPI, HTTPException, Request
from pydantic import BaseModel, Field, field_validator

Prompt = Union[str, List[Dict[str, Any]], List[int]]


class GenerateRequest(BaseModel):
    """Body of ``POST /generate/``."""

    prompts: List[Prompt] = Field(min_length=1)
    n: int = Field(1, ge=1)
    temperature: float = Field(1.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = -1
    min_p: float = Field(0.0, ge=0.0, le=1.0)
    max_tokens: int = Field(16, ge=1)
    repetition_penalty: float = Field(1.0, gt=0.0)
    seed: Optional[int] = None
    stop: Optional[List[str]] = None

    @field_validator("top_k")
    @classmethod
    def _top_k(cls, v: int) -> int:
        if v < -1:
            raise ValueError("top_k must be -1 (disabled), 0 (disabled) or >= 1")
        return v


class UpdateWeightsRequest(BaseModel):
    """Body of ``POST /update_weights/``."""

    path: str
    version: Optional[int] = None


class _State:
    def __init__(self, engine: Any, tokenizer: Any, model: str, max_model_len: int, vocab_size: int,
                 api_keys: List[str]):
        self.engine, self.tokenizer, self.model, self.api_keys = engine, tokenizer, model, api_keys
        self.max_model_len, self.vocab_size = max_model_len, vocab_size
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
    if isinstance(prompt, str):
        return list(state.tokenizer(prompt, add_special_tokens=False)["input_ids"])
    if prompt and all(isinstance(t, int) for t in prompt):
        bad = [t for t in prompt if not 0 <= t < state.vocab_size]
        if bad:
            raise HTTPException(400, f"prompts[{index}]: token id {bad[0]} is outside [0, {state.vocab_size})")
        return list(prompt)
    if prompt and all(isinstance(m, dict) and "role" in m for m in prompt):
        ids = state.tokenizer.apply_chat_template(prompt, tokenize=True, add_generation_prompt=True)
        return list(ids["input_ids"] if hasattr(ids, "keys") else ids)
    raise HTTPException(400, f"prompts[{index}] must be a string, a list of chat messages or a list of token ids")


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
    prompt_ids = [_encode(state, p, i) for i, p in enumerate(body.prompts)]
    for i, ids in enumerate(prompt_ids):
        if not ids:
            raise HTTPException(400, f"prompts[{i}] is empty")
        if len(ids) + 1 > state.max_model_len:
            raise HTTPException(400, f"prompts[{i}] has {len(ids)} tokens; max_model_len is {state.max_model_len}")
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

    outputs = await asyncio.gather(*(one(ids) for ids in prompt_ids))
    completion_ids, logprobs, reasons = [], [], []
    for samples in outputs:
        for comp in samples:
            ids = list(comp.token_ids)
            completion_ids.append(ids)
            logprobs.append([float(step[t].logprob) for step, t in zip(comp.logprobs or [], ids)])
            reasons.append(comp.finish_reason or "length")
    return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": logprobs,
            "finish_reasons": reasons}


@router.post("/update_weights/")
async def update_weights(body: UpdateWeightsRequest, request: Request) -> Dict[str, Any]:
    state = _state(request)
    if not Path(body.path).is_dir() or not list(Path(body.path).glob("*.safetensors")):
        raise HTTPException(400, f"{body.path} is not a folder holding *.safetensors files")
    async with state.lock:
        await state.engine.pause_generation(mode="wait")
        try:
            await state.engine.collective_rpc("reload_weights", kwargs={"weights_path": body.path})
            await state.engine.reset_prefix_cache()
        finally:
            await state.engine.resume_generation()
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
        state.grpo_rollout = _State(engine_client, tokenizer, getattr(args, "served_model_name", None) and
                                    args.served_model_name[0] or args.model, model_config.max_model_len,
                                    model_config.get_vocab_size(), _api_keys(args))
