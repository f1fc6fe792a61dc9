"""What the grpo-rollout routes share: the engine, tokenizer, limits and weight version of the server (kept on
vLLM's ``app.state`` by the plugin), and the lookup every route starts with (503 without an engine, 401 without the
API key). ``sleep_mode``: the engine was started with ``--enable-sleep-mode``; ``asleep``: it is asleep now (no
generation, no weight update until ``/wake_up/``); ``dtype``: the dtype the model is served in (``float32``,
``bfloat16``, ...), which a trainer attaching compares with its ``model.dtype``; ``trusted``: started with
``--trusted-network`` (weight updates need no key). The app-wide :class:`.access.AccessGuard` checks the key and the
trusted network before any route; the check here is the routes' own, kept for an app without the guard."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Dict, List, Optional

from fastapi import HTTPException, Request

from .access import key_matches

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


class _State:
    def __init__(self, engine: Any, tokenizer: PreTrainedTokenizerBase, model: str, max_model_len: int, vocab_size: int,
                 api_keys: List[str], layout: Optional[Dict[str, tuple]] = None, tied: bool = False,
                 sleep_mode: bool = False, dtype: str = "", trusted: bool = False):
        self.engine, self.tokenizer, self.model, self.api_keys = engine, tokenizer, model, api_keys
        self.max_model_len, self.vocab_size = max_model_len, vocab_size
        self.layout, self.tied = layout, tied
        self.weight_version = 0
        self.sleep_mode, self.asleep = sleep_mode, False
        self.dtype = dtype
        self.trusted = trusted  # no key needed for weight updates (--trusted-network)
        self.lock = asyncio.Lock()


def _state(request: Request) -> _State:
    state = getattr(request.app.state, "grpo_rollout", None)
    if state is None:
        raise HTTPException(503, "grpo-rollout routes are not initialised (no engine)")
    if state.api_keys and not key_matches(request.headers.get("authorization"), state.api_keys):
        raise HTTPException(401, "missing or wrong API key (send `Authorization: Bearer KEY`)")
    return state


def awake(state: _State, what: str) -> None:
    """Refuse ``what`` (409) while the server is asleep: its weights are offloaded and its KV cache freed."""
    if state.asleep:
        raise HTTPException(409, f"the server is asleep (vllm.sleep_during_training): no {what} until POST /wake_up/")
