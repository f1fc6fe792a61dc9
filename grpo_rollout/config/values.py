"""The schema's value types: the allowed sets of enum-like keys (``Literal``), the sampling limits the server's
``POST /generate/`` shares, and the validators of keys whose rule is not an interval."""

from __future__ import annotations

import typing
from typing import Annotated, Literal

from pydantic import AfterValidator, Field
from pydantic_core import PydanticCustomError

BUILTIN_MODEL_PREFIX = "builtin:"

DType = Literal["float32", "bfloat16", "float16"]
LossType = Literal["grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo"]
ImportanceLevel = Literal["token", "sequence"]
ScaleRewards = Literal["group", "batch", "none"]
Advantage = Literal["grpo", "rloo", "reinforce_pp"]
VllmMode = Literal["spawn", "attach", "off"]
WeightTransfer = Literal["auto", "folder", "http", "nccl"]
SamplerCorrection = Literal["none", "token_truncate", "token_mask", "sequence_truncate", "sequence_mask"]
Device = Literal["auto", "cpu", "cuda"]
Logger = Literal["jsonl", "trackio", "wandb"]
DTYPES, LOSS_TYPES, IMPORTANCE_LEVELS, SCALE_REWARDS, VLLM_MODES, WEIGHT_TRANSFERS, SAMPLER_CORRECTIONS, DEVICES, \
    REPORT_TO, ADVANTAGES = (typing.get_args(t) for t in (DType, LossType, ImportanceLevel, ScaleRewards, VllmMode,
                                                          WeightTransfer, SamplerCorrection, Device, Logger, Advantage))


def _top_k(value: int) -> int:
    if value < -1:
        raise PydanticCustomError("rule", "must be -1 or 0 (disabled) or >= 1")
    return value


def _save_rollouts(value: str) -> str:
    if not (value in ("every", "off") or (value.isdigit() and int(value) >= 1)):
        raise PydanticCustomError("rule", "must be `every`, `off`, or a number N >= 1 (every N-th step and the last)")
    return value


# sampling limits shared with the server's POST /generate/ (grpo_rollout.generation.server.generate_route)
TopP = Annotated[float, Field(gt=0, le=1)]
TopK = Annotated[int, AfterValidator(_top_k)]
MinP = Annotated[float, Field(ge=0, le=1)]
RepetitionPenalty = Annotated[float, Field(gt=0)]
