"""``POST /generate/``: the request model, its limits, prompt encoding, and the route."""

from __future__ import annotations

import asyncio
import uuid
from typing import Annotated, Any, Dict, List, Optional, Union

from fastapi import APIRouter, HTTPException, Request
from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator

from ...config.schema import MinP, RepetitionPenalty, TopK, TopP
from ..seeds import prompt_seeds
from .disconnect import unless_disconnected
from .state import _State, _state, awake

Prompt = Union[str, List[StrictInt], List[Dict[str, Any]]]  # StrictInt: `true` is not token id 1

#: Limits of one ``/generate/`` request: samples per prompt, and prompts × samples (what the server would have to
#: hold at once). Larger requests are refused with 400 instead of exhausting the server's memory.
MAX_N = 512
MAX_SEQUENCES = 16384


class GenerateRequest(BaseModel):
    """Body of ``POST /generate/``. Unknown keys, NaN/inf numbers and out-of-range values are refused (422); the
    sampling limits are the config's (``TopP``, ``TopK``, ... of :mod:`grpo_rollout.config.schema`)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    prompts: List[Prompt] = Field(min_length=1, max_length=MAX_SEQUENCES)
    n: int = Field(1, ge=1, le=MAX_N)
    temperature: float = Field(1.0, ge=0.0, le=1e4)  # 0 (greedy) is fine for evaluation; training needs > 0
    top_p: TopP = 1.0
    top_k: Annotated[TopK, Field(le=2 ** 31 - 1)] = -1
    min_p: MinP = 0.0
    max_tokens: int = Field(16, ge=1, le=2 ** 31 - 1)
    repetition_penalty: Annotated[RepetitionPenalty, Field(le=1e4)] = 1.0
    seed: Optional[int] = Field(None, ge=-(2 ** 63), le=2 ** 63 - 1)  # spread per prompt: generation/seeds.py
    stop: Optional[List[str]] = Field(None, max_length=64)

    @field_validator("stop")
    @classmethod
    def _stop(cls, v: Optional[List[str]]) -> Optional[List[str]]:
        if v is not None and not all(v):
            raise ValueError("stop strings must not be empty")
        return v


router = APIRouter()


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


@router.post("/generate/")
async def generate(body: GenerateRequest, request: Request) -> Dict[str, Any]:
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    state = _state(request)
    awake(state, "generation")
    version = state.weight_version  # the weights this request starts with (an in-flight update may change them)
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
    try:  # each prompt its own seed (generation/seeds.py): sample j of every prompt must not share seed + j
        params = [SamplingParams(n=body.n, temperature=body.temperature, top_p=body.top_p,
                                 top_k=body.top_k if body.top_k > 0 else -1, min_p=body.min_p,
                                 repetition_penalty=body.repetition_penalty, seed=seed, stop=body.stop,
                                 include_stop_str_in_output=True, logprobs=0, max_tokens=body.max_tokens,
                                 output_kind=RequestOutputKind.FINAL_ONLY)
                  for seed in prompt_seeds(body.seed, prompt_ids)]
    except ValueError as exc:  # vLLM's own checks of the sampling settings
        raise HTTPException(400, f"invalid sampling settings: {exc}") from exc

    async def one(ids: List[int], params: Any) -> List[Any]:
        # with n > 1 a yield may carry only some of the n samples: keep the latest state of each by index
        by_index: Dict[int, Any] = {}
        async for out in state.engine.generate({"prompt_token_ids": ids}, params, f"grpo-{uuid.uuid4().hex}"):
            by_index.update({c.index: c for c in out.outputs})
        if len(by_index) != body.n:
            raise HTTPException(500, f"vLLM returned {len(by_index)} samples for a prompt, expected {body.n}")
        return [by_index[i] for i in sorted(by_index)]

    try:  # a client that disconnects (a failed rollout cancelling its requests) aborts the generation
        outputs = await unless_disconnected(request, asyncio.gather(*(one(ids, p) for ids, p in zip(prompt_ids,
                                                                                                     params))))
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
            "finish_reasons": reasons, "weight_version": version,
            "weight_version_end": state.weight_version}  # newer when an in-flight update landed during the request
