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
Observation tokens get ``completion_mask`` 0 (see :mod:`.multi_turn`).

Config::

    rollout:
      function: grpo_rollout.rollouts.environment:environment_rollout
      kwargs: {env: examples/guess_number/env.py:GuessNumberEnv, max_turns: 4, env_kwargs: {low: 1, high: 10}}
"""

from __future__ import annotations

import asyncio
import inspect
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .contract import RolloutError
from .multi_turn import Conversation, as_messages, eos_ids_of, run_coroutine, run_multi_turn

ENV_EXTRAS = ("env_reward", "env_done", "num_turns", "final_response", "truncated")


async def _call(method: Any, *args: Any) -> Any:
    if inspect.iscoroutinefunction(method):
        return await method(*args)
    return await asyncio.to_thread(method, *args)


def observation_messages(observation: Any) -> List[Dict[str, Any]]:
    """An environment's observation as chat messages: a string is one user message.

    Raises:
        RolloutError: anything other than a string, a message dict or a list of message dicts.
    """
    if isinstance(observation, str):
        return [{"role": "user", "content": observation}]
    if isinstance(observation, dict) and "role" in observation:
        return [dict(observation)]
    if isinstance(observation, (list, tuple)) and observation and all(
            isinstance(m, dict) and "role" in m for m in observation):
        return [dict(m) for m in observation]
    raise RolloutError(f"an environment observation must be a string, a chat message or a list of them, got "
                       f"{str(observation)[:80]!r}")


class _EnvEpisode:
    """Feeds each sampled turn to one environment instance and sums its rewards."""

    def __init__(self, env: Any):
        self.env = env
        self.total_reward = 0.0
        self.done = False

    async def __call__(self, text: str) -> Optional[List[Dict[str, Any]]]:
        result = await _call(self.env.step, text)  # the environment's own errors propagate as they are
        if not isinstance(result, (tuple, list)) or len(result) != 3:
            raise RolloutError(f"{type(self.env).__name__}.step must return (observation, reward or None, done), "
                               f"got {str(result)[:80]!r}")
        observation, reward, done = result
        if reward is not None:
            self.total_reward += float(reward)
        if done:
            self.done = True
            return None
        if observation is None:
            raise RolloutError(f"{type(self.env).__name__}.step returned no observation but done=False")
        return observation_messages(observation)


def load_env(env: Any, base_dir: Optional[Path] = None) -> Any:
    """The environment class (or factory) for ``env``: a class, or its name ``pkg.module:Class``/``file.py:Class``.

    Raises:
        RolloutError: it cannot be imported, or it lacks ``reset``/``step``.
    """
    from ..config.imports import ImportSpecError, resolve_callable

    if isinstance(env, str):
        try:
            env = resolve_callable(env, base_dir)
        except ImportSpecError as exc:
            raise RolloutError(f"env {env!r}: {exc}") from exc
    if inspect.isclass(env) and not (callable(getattr(env, "reset", None)) and callable(getattr(env, "step", None))):
        raise RolloutError(f"env {env.__name__} needs methods reset(row) and step(text)")
    return env


async def _reset_all(envs: List[Any], rows: List[Any]) -> List[Any]:
    return list(await asyncio.gather(*(_call(e.reset, r) for e, r in zip(envs, rows))))


def environment_rollout(prompts: Sequence[Any], *, client: Any, tokenizer: Any, rows: Sequence[Dict[str, Any]],
                        env: Any, n: int, temperature: float = 1.0, top_p: float = 1.0, top_k: int = -1,
                        min_p: float = 0.0, repetition_penalty: float = 1.0, max_completion_length: int = 256,
                        seed: Optional[int] = None, max_turns: int = 4, env_kwargs: Optional[Dict[str, Any]] = None,
                        stop: Optional[Sequence[str]] = None, max_turn_tokens: Optional[int] = None,
                        base_dir: Optional[str] = None,
                        **_: Any) -> Dict[str, List[Any]]:
    """Run ``n`` episodes of the environment per dataset row.

    Args:
        prompts: the ``P`` dataset prompts (unused: the first prompt comes from ``env.reset(row)``).
        rows: the ``P`` dataset rows; each of the ``n`` environments of prompt ``i`` is reset with ``rows[i]``.
        env: the environment class or its name; env_kwargs: keyword arguments for its constructor.
        n, temperature, ..., seed: sampling settings; ``max_completion_length`` bounds the whole completion
            (sampled + observation tokens). max_turns: sampled turns per episode. stop: extra stop strings per turn.
            max_turn_tokens: tokens per turn at most (a turn cut there still goes to ``step``).
        base_dir: where a relative env file path is also looked up.

    Returns:
        the contract dict (``prompt_ids`` one per completion) with extras ``env_reward`` (float: sum of the step
        rewards), ``env_done`` (the environment ended the episode), ``num_turns``, ``final_response``, ``truncated``.

    Raises:
        RolloutError: the environment cannot be loaded, or it broke its interface.
    """
    if max_turns < 1:
        raise RolloutError(f"max_turns must be >= 1, got {max_turns}")
    if rows is None or len(rows) != len(prompts):
        raise RolloutError(f"environment_rollout needs one dataset row per prompt ({len(prompts)}), got "
                           f"{None if rows is None else len(rows)}")
    factory = load_env(env, Path(base_dir) if base_dir else None)
    envs = [factory(**(env_kwargs or {})) for _ in range(len(prompts) * n)]
    per_env_rows = [dict(rows[i // n]) for i in range(len(envs))]
    first_prompts = run_coroutine(_reset_all(envs, per_env_rows))
    eos = eos_ids_of(client, tokenizer)
    episodes, handlers = [], []
    for e, first in zip(envs, first_prompts):
        conv = Conversation.start(tokenizer, as_messages(first), eos, client.max_prompt_length)
        handler = _EnvEpisode(e)
        episodes.append((conv, handler))
        handlers.append(handler)
    out = run_multi_turn(client, episodes, temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p,
                         repetition_penalty=repetition_penalty, seed=seed, stop=stop, max_turn_tokens=max_turn_tokens,
                         max_completion_length=max_completion_length, max_turns=max_turns)
    out["env_reward"] = [h.total_reward for h in handlers]
    out["env_done"] = [h.done for h in handlers]
    return out


environment_rollout.extras = ENV_EXTRAS


def validate_kwargs(kwargs: Dict[str, Any], base_dir: Optional[Path] = None) -> List[Tuple[str, str, str]]:
    """Static checks of ``rollout.kwargs`` for :func:`environment_rollout`: ``(key, message, fix)`` per problem."""
    problems: List[Tuple[str, str, str]] = []
    if not kwargs.get("env"):
        problems.append(("rollout.kwargs.env", "no environment configured", "env: package.module:MyEnv"))
    else:
        try:
            load_env(kwargs["env"], base_dir)
        except RolloutError as exc:
            problems.append(("rollout.kwargs.env", str(exc), "name a class with reset(row) and step(text)"))
    if int(kwargs.get("max_turns", 4)) < 1:
        problems.append(("rollout.kwargs.max_turns", "must be >= 1", "e.g. 4"))
    return problems


environment_rollout.validate_kwargs = validate_kwargs
