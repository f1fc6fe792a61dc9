"""Routes added to vLLM's own OpenAI-compatible server (a ``vllm.endpoint_plugins`` entry point).

vLLM loads this only when the server's environment says ``VLLM_PLUGINS=grpo_rollout`` (``grpo-rollout serve`` and
spawn mode set it). Every ``/v1/...`` route of vLLM stays; these are added:

- ``POST /generate/``: body ``prompts`` (strings, chat-message lists — the chat template is applied with the
  generation prompt — or token-id lists), ``n``, ``temperature``, ``top_p``, ``top_k``, ``min_p``, ``max_tokens``,
  ``repetition_penalty``, optional ``seed`` (each prompt is seeded from it and its own tokens, its samples with that
  ``+ 0 .. n-1``: :mod:`grpo_rollout.generation.seeds`) and ``stop``; answer ``prompt_ids`` (one per prompt), ``completion_ids``
  (``len(prompts) × n``, grouped by prompt), ``logprobs`` (one float per completion token, of the distribution
  actually sampled when the server runs with ``--logprobs-mode processed_logprobs``), ``finish_reasons``,
  ``weight_version`` (the version held when the request started) and ``weight_version_end`` (when it finished: newer
  when an in-flight weight update landed during it).
- ``POST /update_weights/``: body ``path`` (a folder of ``*.safetensors``), optional ``version`` and ``in_flight``;
  checks the files' tensor names and shapes against the folder the server loaded (400, weights unchanged, when they
  do not fit), pauses generation (letting running requests finish; with ``in_flight: true`` freezing them between
  engine steps instead), reloads the weights in place (``reload_weights``, the path that is safe on CPU), resets the
  prefix cache, resumes, and answers the new ``weight_version``.

Bad input never stops the server: a body of the wrong shape is refused with 422, an impossible request (a prompt
plus ``max_tokens`` beyond ``max_model_len``, more than :data:`MAX_N` samples or :data:`MAX_SEQUENCES` sequences,
token ids outside the vocabulary, malformed chat messages) with 400 and the reason.
- ``POST /upload_weights/?version=V[&in_flight=true]``: the same, for a trainer on another host: the body is the
  bytes of one safetensors file (streamed), the ``x-sha256`` header its checksum; the file goes to this server's
  memory folder.
- ``POST /sleep/`` and ``POST /wake_up/`` (a server started with ``--enable-sleep-mode``): vLLM's sleep level 1 (KV
  cache freed, weights offloaded to CPU memory) and back; while asleep ``/generate/`` and the weight routes answer
  409. Refused without the API key (or a trusted network), as vLLM's own dev-mode ``/sleep`` is.
- ``GET /health/``: ``status``, ``model``, ``weight_version``, ``max_model_len``, ``vocab_size``, ``sleep_mode``,
  ``asleep``, ``dtype`` (the dtype the model is served in: ``float32``, ``bfloat16``, ``float16``), ``weight_updates``
  (who may change the weights: ``key``, ``anyone`` or ``refused``, :func:`.access.weight_access`).

Every route of the app, vLLM's included, passes :class:`.access.AccessGuard` first: with an API key all but
``GET /health`` need it; without one the weight and control routes are refused unless the server is on a trusted
network (:mod:`.access`).
"""

from __future__ import annotations

from typing import Any, Dict

from fastapi import APIRouter, FastAPI, Request

from . import generate_route, sleep_routes, weight_routes
from .access import AccessGuard, is_trusted, server_keys, weight_access
from .generate_route import MAX_N, MAX_SEQUENCES, GenerateRequest, Prompt
from .state import _State, _state
from .weight_layout import _served_layout
from .weight_routes import UpdateWeightsRequest, VersionRequest

router = APIRouter()


@router.get("/health/")
async def health(request: Request) -> Dict[str, Any]:
    state = _state(request)
    return {"status": "ok", "model": state.model, "weight_version": state.weight_version,
            "max_model_len": state.max_model_len, "vocab_size": state.vocab_size, "sleep_mode": state.sleep_mode,
            "asleep": state.asleep, "dtype": state.dtype,
            "weight_updates": weight_access(state.api_keys, state.trusted)}


router.include_router(generate_route.router)
router.include_router(weight_routes.router)
router.include_router(sleep_routes.router)


class GrpoRolloutPlugin:
    """The ``vllm.endpoint_plugins`` entry point (zero-argument factory)."""

    name = "grpo_rollout"
    required_tasks = ("generate",)

    def attach_router(self, app: FastAPI) -> None:
        """Add the grpo-rollout routes to vLLM's app, and :class:`.access.AccessGuard` in front of all its routes
        (with the keys of vLLM's ``app.state.args``, which vLLM sets before calling this).

        Raises:
            RuntimeError: the app has no ``state.args`` (a vLLM that calls plugins otherwise): the keys are unknown,
                so the server is not started unguarded.
        """
        args = getattr(app.state, "args", None)
        if args is None:
            raise RuntimeError("grpo-rollout's plugin cannot read the server's --api-key (vLLM's app.state.args is "
                               "not set before the endpoint plugins): not starting a server whose routes it cannot "
                               "guard; install the vLLM version grpo-rollout pins")
        app.include_router(router)
        app.add_middleware(AccessGuard, keys=server_keys(getattr(args, "api_key", None)), trusted=is_trusted())

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
                                    model_config.get_vocab_size(), server_keys(getattr(args, "api_key", None)),
                                    _served_layout(args.model), tied,
                                    bool(getattr(model_config, "enable_sleep_mode", False)),
                                    str(model_config.dtype).removeprefix("torch."), is_trusted())


__all__ = ["GenerateRequest", "GrpoRolloutPlugin", "MAX_N", "MAX_SEQUENCES", "Prompt", "UpdateWeightsRequest",
           "VersionRequest", "router"]
