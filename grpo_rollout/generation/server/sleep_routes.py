"""``POST /sleep/`` and ``POST /wake_up/``: a spawned server on the trainer's GPU gives its memory back while the
trainer computes (``vllm.sleep_during_training``), the way TRL's colocate mode sleeps its in-process vLLM.

Sleep is vLLM's level 1: the KV cache is freed and the weights are offloaded to CPU memory; waking copies them back
and re-allocates the cache. The next weight sync then loads the new weights into the woken model. Only an engine
started with ``--enable-sleep-mode`` (CUDA) can sleep; like every route of the server they need the API key, or
without one a trusted network (:mod:`.access`). While asleep the grpo-rollout generation and weight
routes answer 409; vLLM's own ``/v1/...`` routes are not guarded, and a request there waits until the wake-up.
"""

from __future__ import annotations

from typing import Any, Dict

from fastapi import APIRouter, HTTPException, Request

from .state import _state

router = APIRouter()

#: vLLM's sleep level used: 1 keeps the weights (in CPU memory) so a wake-up needs no reload. Level 2 discards them.
SLEEP_LEVEL = 1


@router.post("/sleep/")
async def sleep(request: Request) -> Dict[str, Any]:
    """Wait for running requests, then sleep (level 1). Idempotent. 400 when the engine has no sleep mode."""
    state = _state(request)
    if not state.sleep_mode:
        raise HTTPException(400, "this server was started without --enable-sleep-mode; restart it with "
                                 "vllm.sleep_during_training: true (grpo-rollout serve CONFIG adds the flag)")
    async with state.lock:  # not during a weight update
        if not state.asleep:
            state.asleep = True  # from now on new requests get 409; running ones finish first (mode "wait")
            try:
                await state.engine.sleep(SLEEP_LEVEL, mode="wait")
            except BaseException:
                state.asleep = False
                raise
    return {"asleep": True, "level": SLEEP_LEVEL}


@router.post("/wake_up/")
async def wake_up(request: Request) -> Dict[str, Any]:
    """Bring the weights and KV cache back; generation and weight updates are accepted again. Idempotent.

    vLLM's ``wake_up`` answers whether the engine is fully awake; partly awake, it schedules nothing, so the server
    stays asleep (409 to generation) and the answer is a 500 saying so: call it again, or restart the server."""
    state = _state(request)
    async with state.lock:
        if state.asleep:
            if await state.engine.wake_up() is False:  # None: an engine that does not say
                raise HTTPException(500, "vLLM woke up only partly (some of its memory is still offloaded, and it "
                                         "schedules nothing until fully awake); the server stays asleep: POST "
                                         "/wake_up/ again, or restart it")
            state.asleep = False
    return {"asleep": False}
