"""The built-in environment rollout: the model talks with a Python environment over several turns.

An environment is a class (named by ``rollout.kwargs.env``, built with ``rollout.kwargs.env_kwargs``) with::

    reset(row) -> first prompt        # row: the dataset row (a dict); a string or a list of chat messages
    step(text) -> (observation, reward, done)
        # text: the model's last turn (special tokens skipped)
        # observation: a string (sent as a user message), a message dict, a list of messages, or None
        # reward: a float or None (None adds nothing); done: True ends the episode

Either method may be ``async def``; plain methods run in a worker thread so a slow environment does not stall other
samples. One instance per sample (the ``n`` samples of a prompt play the same row). The sum of the rewards reaches
reward functions as the extra ``env_reward`` (use ``grpo_rollout.rewards.tools:env_reward``), with ``num_turns``.
Observation tokens get ``completion_mask`` 0 (see :mod:`.conversation`).

Config::

    rollout:
      function: grpo_rollout.rollouts.environment:environment_rollout
      kwargs: {env: examples/guess_number/env.py:GuessNumberEnv, max_turns: 4, env_kwargs: {low: 1, high: 10}}
"""

from __future__ import annotations

import asyncio
import inspect
import math
import numbers
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

from ..user_code.signatures import a_type, raised_at
from .contract import SAMPLING_DEFAULTS as D, RolloutError
from .kwargs_checks import check_constructor_kwargs, type_problems, unknown_settings
from ..runs import names as rn
from ..user_code.coroutines import run_coroutine
from ..user_code.deadlines import ExitedInUserCode
from .env_timeouts import DEFAULT_ENV_TIMEOUT_S, bounded_call
from .conversation import Conversation, as_messages, eos_ids_of, is_message
from .episodes import run_multi_turn
from .failed_groups import finished_groups

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase
    from ..generation.base import GenerationClient

ENV_EXTRAS = (rn.ENV_REWARD_EXTRA, rn.ENV_DONE_EXTRA, rn.NUM_TURNS_EXTRA, rn.FINAL_RESPONSE_EXTRA,
              rn.TRUNCATED_EXTRA, rn.END_REASON_EXTRA, rn.END_DETAIL_EXTRA, rn.FIRST_PROMPT_EXTRA, rn.TURN_STARTS_EXTRA,
              rn.TURN_REWARDS_EXTRA, rn.CALL_VERSIONS_EXTRA)


def _label(env: Any, method: str) -> str:
    return f"{type(env).__name__}.{method}"


async def call_env(env: Any, method: str, args: Sequence[Any] = (), kwargs: Optional[Dict[str, Any]] = None,
                   timeout_s: Optional[float] = DEFAULT_ENV_TIMEOUT_S) -> Any:
    """``env.<method>(*args, **kwargs)`` within ``timeout_s`` seconds (``rollout.env_timeout_s``): awaited when
    ``async def``, else on a daemon thread of its own (:func:`.env_timeouts.bounded_call`).

    Raises:
        EnvTimeout: it did not return in time (an :class:`~.contract.EpisodeFailure`).
        RolloutError: the method raised (the message names the environment class and the method).
    """
    fn = getattr(env, method)
    kwargs = kwargs or {}
    try:
        inspect.signature(fn).bind(*args, **kwargs)
    except TypeError as exc:  # said before the call: its traceback would point here, not at the user's method
        given = ", ".join([*(type(a).__name__ for a in args), *kwargs])
        raise RolloutError(f"{_label(env, method)}{inspect.signature(fn)} cannot be called with ({given}): {exc}; "
                           f"accept them (e.g. **kwargs)") from None
    except ValueError:  # no signature to check: the call will tell
        pass
    try:
        return await bounded_call(_label(env, method), fn, args, kwargs, timeout_s)
    except RolloutError:
        raise
    except ExitedInUserCode as exc:  # sys.exit() in a plain method: inside asyncio it would end the run unexplained
        raise RolloutError(f"{_label(env, method)} raised {exc}{raised_at(exc.__cause__)}") from exc.__cause__
    except (Exception, SystemExit) as exc:  # SystemExit too: inside asyncio it would end the whole run unexplained
        raise RolloutError(f"{_label(env, method)} raised {type(exc).__name__}: {exc}{raised_at(exc)}") from exc


def observation_messages(observation: Any) -> List[Dict[str, Any]]:
    """An environment's observation as chat messages: a string is one user message.

    Raises:
        RolloutError: anything other than a string, a message dict or a list of message dicts.
    """
    if isinstance(observation, str):
        return [{"role": "user", "content": observation}]
    if is_message(observation):
        return [dict(observation)]
    if isinstance(observation, (list, tuple)) and observation and all(is_message(m) for m in observation):
        return [dict(m) for m in observation]
    raise RolloutError("an environment observation must be a string, a chat message ({role: str, content: str}) or a "
                       f"list of them, got {str(observation)[:80]!r}")


class _EnvEpisode:
    """Feeds each sampled turn to one environment instance and sums its rewards."""

    def __init__(self, env: Any, timeout_s: Optional[float] = DEFAULT_ENV_TIMEOUT_S):
        self.env, self.timeout_s = env, timeout_s
        self.total_reward = 0.0
        self.turn_rewards: List[Optional[float]] = []  # one per step: the reward after each sampled turn, or None
        self.done = False

    async def __call__(self, text: str) -> Optional[List[Dict[str, Any]]]:
        result = await call_env(self.env, "step", (text,), timeout_s=self.timeout_s)
        label = _label(self.env, "step")
        if not isinstance(result, (tuple, list)) or len(result) != 3:
            raise RolloutError(f"{label} must return (observation, reward or None, done), got {str(result)[:80]!r}")
        observation, reward, done = result
        self.turn_rewards.append(None)
        if reward is not None:
            if isinstance(reward, bool) or not isinstance(reward, numbers.Real) or not math.isfinite(reward):
                raise RolloutError(f"{label} returned reward {reward!r}; expected a finite number or None")
            self.total_reward += float(reward)
            self.turn_rewards[-1] = float(reward)
            if not math.isfinite(self.total_reward):
                raise RolloutError(f"{label}: the episode's rewards add up to {self.total_reward}; scale them down")
        if isinstance(done, str) or done not in (True, False):
            raise RolloutError(f"{label} returned done={done!r}; expected True or False")
        if done:
            self.done = True
            return None
        if observation is None:
            raise RolloutError(f"{label} returned no observation but done=False")
        try:
            return observation_messages(observation)
        except RolloutError as exc:
            raise RolloutError(f"{label}: {exc}") from None


def load_env(env: Any, base_dir: Optional[Path] = None) -> Any:
    """The environment class for ``env``: a class, or its name ``pkg.module:Class``/``file.py:Class``.

    Raises:
        RolloutError: it cannot be imported, is not a class, or lacks ``reset``/``step``.
    """
    from ..user_code.resolve import ImportSpecError, resolve_callable

    if isinstance(env, str):
        try:
            env = resolve_callable(env, base_dir)
        except ImportSpecError as exc:
            raise RolloutError(f"env {env!r}: {exc}") from exc
    name = getattr(env, "__name__", type(env).__name__)
    if not inspect.isclass(env):
        raise RolloutError(f"env {name} is {a_type(env)}, not a class; name a class with methods reset(row) "
                           "and step(text)")
    if not (callable(getattr(env, "reset", None)) and callable(getattr(env, "step", None))):
        raise RolloutError(f"env {name} needs methods reset(row) and step(text)")
    return env


async def _reset_all(envs: List[Any], rows: List[Any], timeout_s: Optional[float]) -> List[Any]:
    return list(await asyncio.gather(*(call_env(e, "reset", (r,), timeout_s=timeout_s) for e, r in zip(envs, rows))))


def _make_envs(env_class: Any, count: int, env_kwargs: Optional[Dict[str, Any]]) -> List[Any]:
    """``count`` environments ``env_class(**env_kwargs)``.

    Raises:
        RolloutError: the constructor raised, or what it made has no ``reset``/``step`` methods.
    """
    name = getattr(env_class, "__name__", repr(env_class))
    envs = []
    for _ in range(count):
        try:
            env = env_class(**(env_kwargs or {}))
        except (Exception, SystemExit) as exc:
            raise RolloutError(f"creating the environment {name}(**env_kwargs) raised {type(exc).__name__}: "
                               f"{exc}") from exc
        if not (callable(getattr(env, "reset", None)) and callable(getattr(env, "step", None))):
            raise RolloutError(f"env {name} made {a_type(env)}, which has no reset(row)/step(text) methods; "
                               "name a class with those methods")
        envs.append(env)
    return envs


def environment_rollout(prompts: Sequence[Any], *, client: GenerationClient, tokenizer: PreTrainedTokenizerBase, rows: Sequence[Dict[str, Any]],
                        env: Any, n: int, temperature: float = D.temperature, top_p: float = D.top_p,
                        top_k: int = D.top_k, min_p: float = D.min_p, repetition_penalty: float = D.repetition_penalty,
                        max_completion_length: int = D.max_completion_length, seed: Optional[int] = D.seed,
                        max_turns: int = 4, env_kwargs: Optional[Dict[str, Any]] = None,
                        stop: Optional[Sequence[str]] = None, max_turn_tokens: Optional[int] = None,
                        base_dir: Optional[str] = None, env_timeout_s: Optional[float] = DEFAULT_ENV_TIMEOUT_S,
                        **_: Any) -> Dict[str, List[Any]]:
    """Run ``n`` episodes of the environment per dataset row.

    Args:
        prompts: the ``P`` dataset prompts (unused, ``None`` when the dataset has no ``data.prompt_column``: the
            first prompt comes from ``env.reset(row)``).
        rows: the ``P`` dataset rows; each of the ``n`` environments of prompt ``i`` is reset with ``rows[i]``.
        env: the environment class or its name; env_kwargs: keyword arguments for its constructor.
        n, temperature, ..., seed: sampling settings; ``max_completion_length`` bounds the whole completion
            (sampled + observation tokens). max_turns: sampled turns per episode. stop: extra stop strings per turn.
            max_turn_tokens: tokens per turn at most (a turn cut there still goes to ``step``).
        base_dir: where a relative env file path is also looked up. env_timeout_s: seconds each ``reset``/``step``
            call may take (``rollout.env_timeout_s``).

    Returns:
        the contract dict (``prompt_ids`` one per completion) with extras ``env_reward`` (float: sum of the step
        rewards), ``turn_rewards`` (each step's reward), ``env_done`` (the environment ended the episode),
        ``num_turns``, ``turn_starts``, ``final_response``, ``truncated``,
        ``end_reason``/``end_detail`` (why the episode ended, see :data:`.episodes.END_REASONS`) and ``first_prompt``
        (what ``reset`` returned: the prompt the model saw; the trainer logs it as the sample's prompt).

    Raises:
        EnvTimeout: a ``reset`` or ``step`` did not return within ``env_timeout_s`` (an EpisodeFailure).
        RolloutError: the environment cannot be loaded, or it broke its interface.
    """
    if max_turns < 1:
        raise RolloutError(f"max_turns must be >= 1, got {max_turns}")
    if rows is None or len(rows) != len(prompts):
        raise RolloutError(f"environment_rollout needs one dataset row per prompt ({len(prompts)}), got "
                           f"{None if rows is None else len(rows)}")
    env_class = load_env(env, Path(base_dir) if base_dir else None)
    envs = _make_envs(env_class, len(prompts) * n, env_kwargs)
    per_env_rows = [dict(rows[i // n]) for i in range(len(envs))]
    first_prompts = run_coroutine(_reset_all(envs, per_env_rows, env_timeout_s))
    eos = eos_ids_of(client, tokenizer)
    episodes, handlers = [], []
    for e, first in zip(envs, first_prompts):
        try:
            messages = as_messages(first)
        except RolloutError:
            raise RolloutError(f"{_label(e, 'reset')} must return the first prompt: a string or a list of chat "
                               f"messages, got {str(first)[:80]!r}") from None
        conv = Conversation.start(tokenizer, messages, eos, client.max_prompt_length)
        handler = _EnvEpisode(e, env_timeout_s)
        episodes.append((conv, handler))
        handlers.append(handler)
    failed: Dict[int, BaseException] = {}  # episodes that failed outside the model, their groups played again
    out = run_multi_turn(client, episodes, temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p,
                         repetition_penalty=repetition_penalty, seed=seed, stop=stop, max_turn_tokens=max_turn_tokens,
                         max_completion_length=max_completion_length, max_turns=max_turns, failed=failed,
                         group_size=n)
    out[rn.ENV_REWARD_EXTRA] = [h.total_reward for h in handlers]
    out[rn.ENV_DONE_EXTRA] = [h.done for h in handlers]
    out[rn.TURN_REWARDS_EXTRA] = [list(h.turn_rewards) for h in handlers]  # training.credit: turn
    out[rn.FIRST_PROMPT_EXTRA] = list(first_prompts)  # what the model saw first: logged instead of the dataset's text
    return finished_groups(out, failed, len(prompts), n)


environment_rollout.extras = ENV_EXTRAS
environment_rollout.uses_prompts = False  # reset(row) makes the first prompt: data.prompt_column is optional


def validate_kwargs(kwargs: Dict[str, Any], base_dir: Optional[Path] = None) -> List[Tuple[str, str, str]]:
    """Static checks of ``rollout.kwargs`` for :func:`environment_rollout`: ``(key, message, fix)`` per problem
    (unknown settings, an environment that does not import or lacks ``reset``/``step``, ``env_kwargs`` its
    constructor does not accept, the types and ranges of ``max_turns``, ``max_turn_tokens``, ``stop``)."""
    problems = unknown_settings(environment_rollout, kwargs) + type_problems(kwargs)
    if not kwargs.get("env"):
        problems.append(("rollout.kwargs.env", "no environment configured", "env: package.module:MyEnv"))
        return problems
    try:
        env_class = load_env(kwargs["env"], base_dir)
    except RolloutError as exc:
        problems.append(("rollout.kwargs.env", str(exc), "name a class with reset(row) and step(text)"))
        return problems
    return problems + check_constructor_kwargs(env_class, kwargs, "env_kwargs")


environment_rollout.validate_kwargs = validate_kwargs
