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

from ...generation.seeds import derive_seed
from ...user_code.coroutines import SharedLoop
from ...user_code.deadlines import ExitedInUserCode, task_at
from ...user_code.signatures import raised_at
from ...rollouts.contract import RolloutError
from ...rollouts.env_timeouts import DEFAULT_ENV_TIMEOUT_S, EnvTimeout, bounded_call
from .verifiers_rubric import SCORING, RubricRaised, guard_rubric

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


#: The state key the training client sets when the token budget ended the episode: ``(end_reason, end_detail)``, the
#: built-in rollouts' ``budget_turn`` / ``budget_reply`` (:data:`~.episodes.END_REASONS`).
BUDGET_END = "grpo_rollout_budget_end"


def _end_at_budget(state: Dict[str, Any], reason: str, detail: str) -> None:
    """End the episode before its next turn: verifiers' own way for a prompt that does not fit (its loop catches
    ``OverlongPromptError``, marks the state truncated and stops), with why in ``state[BUDGET_END]``."""
    from verifiers.errors import OverlongPromptError

    state[BUDGET_END] = (reason, detail)
    raise OverlongPromptError(detail)


def why_ended(state: Dict[str, Any], budget: int) -> Tuple[str, str]:
    """Why a played episode ended, as the built-in rollouts say it (``end_reason``, ``end_detail``): the budget
    (``budget_turn``, ``budget_reply``), ``max_turns``, else ``done`` with verifiers' stop condition."""
    if state.get(BUDGET_END):
        return state[BUDGET_END]
    used, turns, stop = episode_tokens_used(state), len(state.get("trajectory") or []), state.get("stop_condition")
    if used >= budget:
        return "budget_turn", f"turn {turns} used the last of max_completion_length={budget} tokens ({used} used)"
    if stop == "max_turns_reached":
        return "max_turns", f"max_turns={turns} turns were sampled"
    return "done", f"done after turn {turns} (verifiers' stop condition: {stop})"


def _first_prompt_len(state: Dict[str, Any]) -> int:
    steps = state.get("trajectory") or []
    return len(steps[0]["tokens"]["prompt_ids"]) if steps and steps[0].get("tokens") else 0


def training_client(message_type: str, openai_client: Any, budget: int) -> Any:
    """verifiers' client for ``message_type`` (``chat`` or ``completion``) around ``openai_client``, for training:
    an empty answer is kept, each turn's seed is its own, and the episode keeps to its ``budget`` tokens as the
    built-in rollouts do (:func:`~.episodes.run_episode`): each turn samples at most what is left; no turn is sampled
    once a turn used the budget up (``budget_turn``) or the environment's reply left no token for one
    (``budget_reply``: that turn's answer is not kept); a turn that the reply left less room than it was asked for is
    sampled again within that room (with the same seed), so no sampled token past the budget is played, scored or
    trained."""
    from verifiers.clients import OpenAIChatCompletionsClient, OpenAICompletionsClient

    base = OpenAICompletionsClient if message_type == "completion" else OpenAIChatCompletionsClient
    if base.__name__ not in _CLASSES:
        class TrainingClient(base):  # type: ignore[misc, valid-type]
            async def raise_from_native_response(self, response: Any) -> None:
                if response is None or response.choices is None or len(response.choices) != 1:
                    await super().raise_from_native_response(response)  # only what is not one answer

            async def get_response(self, prompt: Any, model: str, sampling_args: Dict[str, Any], tools: Any = None,
                                   **kwargs: Any) -> Any:
                clock = _CLOCK.get()
                if clock is not None:  # model time is not the environment's: env_timeout_s does not count it
                    clock.model_call(True)
                try:
                    return await self._within_budget(prompt, model, sampling_args, tools, **kwargs)
                finally:
                    if clock is not None:
                        clock.model_call(False)

            async def _within_budget(self, prompt: Any, model: str, sampling_args: Dict[str, Any], tools: Any,
                                     **kwargs: Any) -> Any:
                state = kwargs.get("state")
                if state is None:
                    return await super().get_response(prompt, model, sampling_args, tools, **kwargs)
                args, turn = dict(sampling_args), len(state.get("trajectory") or [])
                if args.get("seed") is not None and turn:
                    args["seed"] = derive_seed(args["seed"], turn)
                used = episode_tokens_used(state)
                if used >= self.budget:
                    _end_at_budget(state, "budget_turn", f"turn {turn} used the last of max_completion_length="
                                   f"{self.budget} tokens ({used} used); no turn was sampled after it")
                args["max_tokens"] = min(int(args.get("max_tokens") or self.budget), self.budget - used)
                response = await super().get_response(prompt, model, args, tools, **kwargs)
                tokens = response.message.tokens
                if turn and tokens is not None:  # the reply's length is known once the server rendered the prompt
                    before = len(tokens.prompt_ids) - _first_prompt_len(state)
                    if before >= self.budget:
                        _end_at_budget(state, "budget_reply", f"the reply after turn {turn} needs {before - used} "
                                       f"tokens (template glue included) but only {self.budget - used} of "
                                       f"max_completion_length={self.budget} were left ({used} used); raise "
                                       f"sampling.max_completion_length to at least {before + 1} for one more turn, "
                                       "or shorten the reply")
                    if len(tokens.completion_ids) > self.budget - before:
                        args["max_tokens"] = self.budget - before
                        response = await super().get_response(prompt, model, args, tools, **kwargs)
                return response

        TrainingClient.__qualname__ = TrainingClient.__name__ = f"Training{base.__name__}"
        _CLASSES[base.__name__] = TrainingClient
    client = _CLASSES[base.__name__](openai_client)
    client.budget = budget
    return client


async def _score(env: Any, states: List[Any], where: str, timeout_s: Optional[float]) -> None:
    """Score one group's ``states`` with the environment's rubric (each call within ``timeout_s``), then clean up.

    Raises:
        EnvTimeout: a rubric call ran past ``timeout_s``.
        RolloutError / EpisodeFailure: a rubric function raised or returned no number (:class:`RubricRaised`), or the
            rubric itself raised (``where`` names the prompt).
    """
    rubric = type(env.rubric).__name__
    try:
        if getattr(env, "score_rollouts", True):
            guard_rubric(env.rubric)
            SCORING.set(True)  # this task's own context: the scoring tasks inherit it
            await bounded_call(f"{rubric}.score_group", env.rubric.score_group, (states,), timeout_s=timeout_s)
            SCORING.set(False)
        else:
            await bounded_call(f"{rubric}.dummy_score_group", env.rubric.dummy_score_group, (states,),
                               timeout_s=timeout_s)
        for state in states:
            await bounded_call(f"{rubric}.cleanup", env.rubric.cleanup, (state,), timeout_s=timeout_s)
    except (RubricRaised, ExitedInUserCode) as raised:
        carried = raised if isinstance(raised, RubricRaised) else raised.__cause__
        if not isinstance(carried, RubricRaised):  # a rubric's own sys.exit(): the rubric raised it
            raise RolloutError(f"{where}: the environment's rubric raised {raised}{raised_at(raised)}") from raised
        raise carried.error_for(where) from carried.error
    except EnvTimeout:
        raise
    except Exception as exc:
        raise RolloutError(f"{where}: the environment's rubric raised {type(exc).__name__}: {exc}"
                           f"{raised_at(exc)}") from exc


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
        await _score(env, states, f"prompt {g}", timeout_s)
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
