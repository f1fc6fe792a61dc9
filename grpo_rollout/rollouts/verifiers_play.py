"""Playing a verifiers environment's episodes for :mod:`.verifiers`: the client its episodes sample through, and one
step's groups played and scored on one event loop.

The client is verifiers' own OpenAI client (chat or completions, as the environment's ``message_type`` says), told
three things a trainer needs that an evaluation does not: an answer that is only the end-of-sequence token is an
answer (the policy sampled it; verifiers would fail the episode), each turn of an episode samples with its own seed,
and a turn may use only what is left of the episode's ``max_completion_length``.

Every call runs on one event loop of this process's (:class:`~grpo_rollout.user_code.coroutines.SharedLoop`), never a
fresh one per step: an environment is built once, and what it holds (a judge's async client, a tool's connection)
stays bound to the loop it first ran on.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import threading
import time
from typing import Any, Awaitable, Dict, List, Optional, Tuple

from ..generation.seeds import derive_seed
from ..user_code.coroutines import SharedLoop
from ..user_code.deadlines import task_at
from ..user_code.signatures import raised_at
from .contract import RolloutError
from .env_timeouts import DEFAULT_ENV_TIMEOUT_S, EnvTimeout, bounded_call

_LOOP: Optional[SharedLoop] = None
_LOOP_LOCK = threading.Lock()
_CLASSES: Dict[str, type] = {}


def run_on_loop(coro: Any) -> Any:
    """Run ``coro`` on this process's verifiers event loop (started at first use) and return its result."""
    global _LOOP
    with _LOOP_LOCK:
        if _LOOP is None:
            _LOOP = SharedLoop("grpo-rollout-verifiers")
    return _LOOP.run(coro)


class EnvClock:
    """How long an episode has been outside the model: since its last model call returned (or it started), while
    no model call is running (the environment's own work: its setup, its answers, its tools, its stop checks)."""

    def __init__(self) -> None:
        self.since, self.in_model = time.monotonic(), 0

    def model_call(self, start: bool) -> None:
        """A model call starts (``True``) or returns (``False``)."""
        self.in_model += 1 if start else -1
        self.since = time.monotonic()

    def left(self, timeout_s: float) -> float:
        """Seconds before the episode is over its time outside the model (``timeout_s`` while the model runs)."""
        return timeout_s if self.in_model else timeout_s - (time.monotonic() - self.since)


_CLOCK: contextvars.ContextVar[Optional[EnvClock]] = contextvars.ContextVar("grpo_rollout_env_clock", default=None)


async def outside_model_within(episode: Awaitable[Any], timeout_s: Optional[float], label: str) -> Any:
    """``await episode`` (a verifiers ``env.rollout(...)``), its time outside the model limited to ``timeout_s``
    seconds at a stretch (``rollout.env_timeout_s``); the model's own time is not counted.

    Raises:
        EnvTimeout: the environment took longer between two model calls (``label`` names it); the episode is
            cancelled.
    """
    clock = EnvClock()
    _CLOCK.set(clock)  # this task's context: the episode's task, and its model calls, inherit it
    task = asyncio.ensure_future(episode)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=None if timeout_s is None else max(clock.left(timeout_s), 0))
            if task in done:
                return task.result()
            if timeout_s is not None and clock.left(timeout_s) <= 0:
                where = task_at(task)
                task.cancel()
                raise EnvTimeout(label, timeout_s, where)
    except asyncio.CancelledError:
        task.cancel()
        raise


def episode_tokens_used(state: Dict[str, Any]) -> int:
    """Completion tokens an episode holds so far: its turns' prompts and completions after the first prompt."""
    steps = [s.get("tokens") for s in state.get("trajectory") or []]
    if not steps or not all(steps):
        return 0
    return len(steps[-1]["prompt_ids"]) + len(steps[-1]["completion_ids"]) - len(steps[0]["prompt_ids"])


def training_client(message_type: str, openai_client: Any, budget: int) -> Any:
    """verifiers' client for ``message_type`` (``chat`` or ``completion``) around ``openai_client``, for training:
    an empty answer is kept, each turn's seed is its own, each turn's ``max_tokens`` is at most what is left of the
    episode's ``budget`` tokens."""
    from verifiers.clients import OpenAIChatCompletionsClient, OpenAICompletionsClient

    base = OpenAICompletionsClient if message_type == "completion" else OpenAIChatCompletionsClient
    if base.__name__ not in _CLASSES:
        class TrainingClient(base):  # type: ignore[misc, valid-type]
            async def raise_from_native_response(self, response: Any) -> None:
                if response is None or response.choices is None or len(response.choices) != 1:
                    await super().raise_from_native_response(response)  # only what is not one answer

            async def get_response(self, prompt: Any, model: str, sampling_args: Dict[str, Any], tools: Any = None,
                                   **kwargs: Any) -> Any:
                state = kwargs.get("state")
                args = dict(sampling_args)
                if state is not None:
                    turn = len(state.get("trajectory") or [])
                    if args.get("seed") is not None and turn:
                        args["seed"] = derive_seed(args["seed"], turn)
                    left = self.budget - episode_tokens_used(state)
                    args["max_tokens"] = max(1, min(int(args.get("max_tokens") or left), left))
                clock = _CLOCK.get()
                if clock is not None:
                    clock.model_call(True)
                try:
                    return await super().get_response(prompt, model, args, tools, **kwargs)
                finally:
                    if clock is not None:
                        clock.model_call(False)

        TrainingClient.__qualname__ = TrainingClient.__name__ = f"Training{base.__name__}"
        _CLASSES[base.__name__] = TrainingClient
    client = _CLASSES[base.__name__](openai_client)
    client.budget = budget
    return client


async def play_groups(env: Any, inputs: List[Dict[str, Any]], n: int, endpoints: List[Tuple[str, Optional[str]]],
                      models: List[str], sampling: Dict[str, Any], seed: Optional[int],
                      budget: int, timeout_s: Optional[float] = DEFAULT_ENV_TIMEOUT_S) -> List[List[Any]]:
    """Play ``n`` episodes of each input (``env.rollout``), each group on one server, and score each group with the
    environment's rubric (``rubric.score_group``); the states, per group. ``timeout_s`` (``rollout.env_timeout_s``)
    bounds an episode's time outside the model at a stretch and each rubric call.

    Raises:
        EnvTimeout: the environment or its rubric took longer than ``timeout_s`` (the other episodes are cancelled).
        RolloutError: the environment or its rubric raised (named with the prompt, the episode and the user code's
            file:line); the other episodes are cancelled.
    """
    from openai import AsyncOpenAI

    kind = getattr(env, "message_type", "chat")
    clients = [training_client(kind, AsyncOpenAI(base_url=url + "/v1", api_key=key or "EMPTY", max_retries=2,
                                                 timeout=3600), budget) for url, key in endpoints]

    def args(g: int, j: int) -> Dict[str, Any]:
        out = dict(sampling, extra_body=dict(sampling["extra_body"]))
        if seed is not None:
            out["seed"] = derive_seed(seed, repr(inputs[g]["prompt"]), g, j)
        return out

    async def episode(g: int, j: int) -> Any:
        server = g % len(clients)
        try:
            return await outside_model_within(env.rollout(json.loads(json.dumps(inputs[g], default=str)),
                                                          clients[server], models[server], args(g, j)),
                                              timeout_s, f"{type(env).__name__}.rollout (its own work between "
                                                         "two model calls)")
        except EnvTimeout:
            raise
        except Exception as exc:
            raise RolloutError(f"prompt {g}, episode {j}: the environment raised {type(exc).__name__}: {exc}"
                               f"{raised_at(exc)}") from exc

    async def group(g: int) -> List[Any]:
        async with asyncio.TaskGroup() as tasks:
            running = [tasks.create_task(episode(g, j)) for j in range(n)]
        states = [t.result() for t in running]
        try:
            rubric = type(env.rubric).__name__
            scoring = "score_group" if getattr(env, "score_rollouts", True) else "dummy_score_group"
            await bounded_call(f"{rubric}.{scoring}", getattr(env.rubric, scoring), (states,), timeout_s=timeout_s)
            for state in states:
                await bounded_call(f"{rubric}.cleanup", env.rubric.cleanup, (state,), timeout_s=timeout_s)
        except EnvTimeout:
            raise
        except Exception as exc:
            raise RolloutError(f"prompt {g}: the environment's rubric raised {type(exc).__name__}: {exc}"
                               f"{raised_at(exc)}") from exc
        return states

    try:
        async with asyncio.TaskGroup() as tasks:
            running = [tasks.create_task(group(g)) for g in range(len(inputs))]
        return [t.result() for t in running]
    except BaseExceptionGroup as failed:  # the first failure, as it is; the others were cancelled with it
        first = failed.exceptions[0]
        while isinstance(first, BaseExceptionGroup):
            first = first.exceptions[0]
        raise first
    finally:
        for c in clients:
            await c.client.close()
