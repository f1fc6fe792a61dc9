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
import functools
import inspect
import json
import threading
from contextvars import ContextVar
from typing import Any, Dict, List, Optional, Tuple

from ..generation.seeds import derive_seed
from ..user_code.coroutines import SharedLoop
from ..user_code.signatures import a_type, defined_at, raised_at
from .contract import EpisodeFailure, RolloutError

_LOOP: Optional[SharedLoop] = None
_LOOP_LOCK = threading.Lock()
_CLASSES: Dict[str, type] = {}
_GUARDED = "__grpo_rollout_guarded__"  # a rubric function's wrapper (guard_rubric)
_SCORING: ContextVar[bool] = ContextVar("grpo_rollout_verifiers_scoring", default=False)  # play_groups is scoring


def run_on_loop(coro: Any) -> Any:
    """Run ``coro`` on this process's verifiers event loop (started at first use) and return its result."""
    global _LOOP
    with _LOOP_LOCK:
        if _LOOP is None:
            _LOOP = SharedLoop("grpo-rollout-verifiers")
    return _LOOP.run(coro)


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


class RubricRaised(BaseException):
    """A rubric function raised (or returned no number): carried past verifiers' ``except Exception`` around each
    rubric function, which would log it and score the episode 0, to :func:`play_groups`. A ``BaseException`` only on
    that way; :meth:`error_for` turns it into the error the run sees."""

    def __init__(self, fn: Any, error: BaseException):
        super().__init__(f"{getattr(fn, '__name__', fn)}: {error}")
        self.fn, self.error = fn, error

    def error_for(self, where: str) -> RolloutError:
        """The error naming the function, its ``def``'s file:line and where it raised: an :class:`EpisodeFailure`
        when the function raised one or a verifiers ``vf.Error`` (a judge's server gone: outside the user's code;
        ``rollout.on_error`` applies), else a :class:`RolloutError` (a bug in the rubric: the run stops)."""
        from verifiers.errors import Error as VerifiersError

        kind = EpisodeFailure if isinstance(self.error, (EpisodeFailure, VerifiersError)) else RolloutError
        name = getattr(self.fn, "__qualname__", getattr(self.fn, "__name__", repr(self.fn)))
        fix = "" if kind is EpisodeFailure else "; fix the function (verifiers would score the episode 0 and train on)"
        return kind(f"{where}: the rubric function `{name}`{defined_at(self.fn)} raised {type(self.error).__name__}: "
                    f"{self.error}{raised_at(self.error)}{fix}")


def _is_number(value: Any) -> bool:
    """What verifiers takes as a score (``float(value)`` works), text left out."""
    if isinstance(value, (str, bytes)):
        return False
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


def _guarded(fn: Any, group: bool) -> Any:
    """``fn`` (a rubric function, sync or async) raising :class:`RubricRaised` where it raised, or returned something
    that is not a number (a list of them for a ``group`` function), while :func:`play_groups` scores (elsewhere, e.g.
    verifiers' own evaluation of the same environment, it behaves as written); its name and signature kept (verifiers
    reads them)."""
    if getattr(fn, _GUARDED, False):
        return fn

    def checked(result: Any) -> Any:
        ok = isinstance(result, (list, tuple)) and all(map(_is_number, result)) if group else _is_number(result)
        if not ok and _SCORING.get():
            raise RubricRaised(fn, TypeError(f"returned {a_type(result)} ({result!r:.60}); a rubric function returns "
                                             f"{'a list of numbers, one per episode' if group else 'a number'}"))
        return result

    async def awaited(pending: Any) -> Any:
        try:
            result = await pending
        except Exception as exc:
            if _SCORING.get():
                raise RubricRaised(fn, exc) from exc
            raise
        return checked(result)

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            result = fn(*args, **kwargs)
        except Exception as exc:
            if _SCORING.get():
                raise RubricRaised(fn, exc) from exc
            raise
        return awaited(result) if inspect.isawaitable(result) else checked(result)

    setattr(call, _GUARDED, True)
    return call


def guard_rubric(rubric: Any) -> None:
    """Every function of ``rubric`` and of the rubrics it holds (a ``RubricGroup``'s, an ``EnvGroup``'s environments')
    :func:`_guarded`, in place (again for functions added since: a guarded one is kept as it is)."""
    todo, seen = [rubric], set()
    while todo:
        r = todo.pop()
        if r is None or id(r) in seen:
            continue
        seen.add(id(r))
        if isinstance(getattr(r, "funcs", None), list):
            r.funcs[:] = [_guarded(f, r._is_group_func(f)) for f in r.funcs]
        todo += list(getattr(r, "rubrics", None) or [])
        todo += [getattr(e, "rubric", None) for e in (getattr(r, "env_map", None) or {}).values()]


async def play_groups(env: Any, inputs: List[Dict[str, Any]], n: int, endpoints: List[Tuple[str, Optional[str]]],
                      models: List[str], sampling: Dict[str, Any], seed: Optional[int],
                      budget: int) -> List[List[Any]]:
    """Play ``n`` episodes of each input (``env.rollout``), each group on one server, and score each group with the
    environment's rubric (``rubric.score_group``); the states, per group.

    Raises:
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
            return await env.rollout(json.loads(json.dumps(inputs[g], default=str)), clients[server], models[server],
                                     args(g, j))
        except Exception as exc:
            raise RolloutError(f"prompt {g}, episode {j}: the environment raised {type(exc).__name__}: {exc}"
                               f"{raised_at(exc)}") from exc

    async def group(g: int) -> List[Any]:
        async with asyncio.TaskGroup() as tasks:
            running = [tasks.create_task(episode(g, j)) for j in range(n)]
        states = [t.result() for t in running]
        try:
            if getattr(env, "score_rollouts", True):
                guard_rubric(env.rubric)
                _SCORING.set(True)  # this group's task's own context: its scoring tasks inherit it
                await env.rubric.score_group(states)
                _SCORING.set(False)
            else:
                await env.rubric.dummy_score_group(states)
            for state in states:
                await env.rubric.cleanup(state)
        except RubricRaised as raised:
            raise raised.error_for(f"prompt {g}") from raised.error
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
