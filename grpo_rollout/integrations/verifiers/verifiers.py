"""verifiers tasksets (verifiers 0.4, ``verifiers.v1``) trained through the recording endpoint.

Config::

    data:
      train: verifiers:my-env            # an installed taskset's id, or a .py file / package folder exporting one
      task_kwargs: {num_tasks: 64}       # the taskset's config fields
    rollout:
      function: grpo_rollout.integrations.verifiers.verifiers:verifiers_rollout
      kwargs:
        harness: null                    # the taskset's own harness, else a one-call chat (chat_harness.py)
        runtime: subprocess              # where verifiers runs the harness program: subprocess, docker, prime, ...
    # no `rewards:` needed: the task's @vf.reward methods are the reward

One episode, as verifiers plays it for prime-rl (a taskset written for it runs unchanged):

- each row of ``data.train: verifiers:<taskset>`` is one task (:mod:`grpo_rollout.data.verifiers_tasks`); its
  ``sampling.num_generations`` episodes are episodes of the recording endpoint's rollout
  (:func:`~grpo_rollout.rollouts.agent.agent_rollout`), each with its own session URL;
- in each, the taskset's environment (``vf.Env``: ``SingleAgentEnv`` unless the taskset's package exports one) runs
  the task (``Env.run_episode``) with its model client pointed at that URL: verifiers' interception layer hands the
  harness its own endpoint and forwards every model call to ours, which samples it on the run's vLLM server(s) and
  records its tokens, log-probs and weight version. Calls that continue each other are one training sequence, a
  context edit starts another (``segments``); the run's sampling settings, seeds and token budget apply as for any
  agent;
- verifiers scores the trace with the task's ``@vf.reward`` methods (and judges): their weighted sum is the reward
  function ``verifiers`` (extra ``agent_result``: ``reward``, ``rewards`` by name, ``metrics``).

A harness or task error stops the run naming it (verifiers' message, the user's file:line); a provider, sandbox,
interception or timeout error fails the episode (``rollout.on_error`` decides). The legacy ``vf.Environment`` API of
verifiers 0.2 is gone from verifiers 0.4, and so from here: port it to a taskset (docs/environments.md).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ...data.verifiers_tasks import ENV_COLUMN, PATH_COLUMN, TASK_COLUMN, TASKSET_COLUMN, importable
from ...rollouts.agent import agent_rollout
from ...rollouts.agent.agent_rollout import AGENT_RESULT
from ...rollouts.contract import SAMPLING_DEFAULTS as D, EpisodeFailure, RolloutError
from ...rollouts.env_timeouts import DEFAULT_ENV_TIMEOUT_S
from ...rollouts.kwargs_checks import one_of, type_problems, unknown_settings
from .chat_harness import HARNESS_ID

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from ...generation.base import GenerationClient

#: The start of the environment variable verifiers reads an episode's API key from (its client config names a
#: variable; each episode's session has a key of its own, so each episode its own variable).
KEY_VARIABLE = "GRPO_ROLLOUT_AGENT_KEY"
#: The reward function this rollout adds, and the prefix of its per-name extras.
REWARD_EXTRA = "verifiers"
#: verifiers' errors that fail an episode (``rollout.on_error``); any other (a task's or harness's) stops the run.
FAILURES = ("ProviderError", "SandboxError", "InterceptionError", "TunnelError", "TimeoutError")
LEGACY_FIX = ("name the taskset in data.train: verifiers:<id or file.py> (data.task_kwargs: its settings); a "
              "vf.Environment of verifiers 0.2 is ported to a vf.Taskset (docs/environments.md)")


class VerifiersEpisodeError(RolloutError):
    """A verifiers episode ended with an error (its type and message, and the user's frame when there is one)."""


def _env(row: Mapping[str, Any], harness: Optional[str], runtime: Any):
    """A fresh ``vf.Env`` for one episode (its serving resources are its own) of the row's taskset."""
    from verifiers.v1.utils.loaders import default_harness_id, load_environment, resolve_env_config

    importable(row[PATH_COLUMN])
    taskset_id = row[ENV_COLUMN]
    own = default_harness_id(taskset_id) == taskset_id  # the taskset's package exports a harness
    agent = {"harness": {"id": harness or (taskset_id if own else HARNESS_ID)},
             "runtime": runtime if isinstance(runtime, Mapping) else {"type": runtime}}
    config = resolve_env_config({"taskset": {**json.loads(row[TASKSET_COLUMN]), "id": taskset_id}, "agent": agent})
    return load_environment(config)


def _task(env: Any, row: Mapping[str, Any]) -> Any:
    """The row's task, rebuilt from its data (``TaskData`` JSON) with the taskset's task config."""
    task_type = type(env.taskset).task_type()
    data = task_type.data_type().model_validate_json(row[TASK_COLUMN])
    return task_type(data, env.taskset.config.task)


def _user_frame(traceback_text: Optional[str]) -> str:
    """`` (at file:line in function)``: the last frame of a traceback in the user's code (outside Python, installed
    libraries and this package), and the first when it is another (``, from file:line in the_reward_method``), or
    ``""``."""
    frames = re.findall(r'File "([^"]+)", line (\d+), in (\S+)', traceback_text or "")
    libraries = (sys.prefix, sys.base_prefix, str(Path(__file__).resolve().parents[2]))
    mine = [f for f in frames if "site-packages" not in f[0] and not f[0].startswith(libraries + ("<",))]
    if not mine:
        return ""
    outer = f", from {mine[0][0]}:{mine[0][1]} in {mine[0][2]}" if mine[0] != mine[-1] else ""
    return f" (at {mine[-1][0]}:{mine[-1][1]} in {mine[-1][2]}{outer})"


def _raise_errors(episode: Any, where: str = "") -> None:
    """Raise the episode's first error (``where``: which task it played): :class:`EpisodeFailure` for verifiers'
    transient kinds, else (a task's or harness's error, a request the endpoint refused with a 4xx)
    :class:`VerifiersEpisodeError`, the run's error."""
    errors = list(episode.errors) + [e for t in episode.traces for e in t.errors]
    if not errors and episode.ok:
        return
    first = errors[0] if errors else None
    said = f"{first.type}: {first.message}{_user_frame(first.traceback)}" if first else "the episode did not finish"
    refused = first is not None and 400 <= (first.status_code or 0) < 500  # the endpoint refused a request: a fault
    if first is not None and not refused and (first.type in FAILURES or episode.is_timeout):
        raise EpisodeFailure(f"verifiers episode{where} failed: {said}")
    raise VerifiersEpisodeError(f"verifiers episode{where} failed: {said}")


def _summary(episode: Any) -> Dict[str, Any]:
    """What reaches the reward functions as ``agent_result``: ``reward`` (the weighted sum of the task's rewards,
    ``None`` when scoring did not run), ``rewards`` and ``metrics`` by name."""
    trace = episode.traces[-1]
    rewards = {k: (None if r is None else r.score) for k, r in trace.rewards.items()}
    scored = any(r is not None for r in trace.rewards.values())
    return {"reward": trace.reward if scored else None, "rewards": rewards, "metrics": dict(trace.metrics)}


def episode_agent(harness: Optional[str] = None, runtime: Any = "subprocess") -> Callable:
    """The agent function that plays one row's task in verifiers against the endpoint it is handed (an
    ``agent_rollout`` agent: called as ``fn(base_url=..., api_key=..., model=..., **row)``)."""
    async def verifiers_episode(base_url: str, api_key: str, model: str, **row: Any) -> Dict[str, Any]:
        import verifiers.v1 as vf

        variable = f"{KEY_VARIABLE}_{hashlib.sha256(api_key.encode()).hexdigest()[:16].upper()}"  # the episode's
        os.environ[variable] = api_key
        try:
            env = _env(row, harness, runtime)
            context = vf.ModelContext(model=model, client=vf.EvalClientConfig(base_url=base_url,
                                                                              api_key_var=variable))
            task = _task(env, row)
            async with env.serving():
                episode = await env.run_episode(task, context)
        finally:
            os.environ.pop(variable, None)
        _raise_errors(episode, f" of task {task.data.idx} of taskset `{row[ENV_COLUMN]}`")
        return _summary(episode)

    return verifiers_episode


def verifiers_rollout(prompts: Sequence[Any], *, client: GenerationClient, tokenizer: PreTrainedTokenizerBase, n: int,
                      rows: Optional[Sequence[Dict[str, Any]]] = None, harness: Optional[str] = None,
                      runtime: Any = "subprocess", temperature: float = D.temperature, top_p: float = D.top_p,
                      top_k: int = D.top_k, min_p: float = D.min_p, repetition_penalty: float = D.repetition_penalty,
                      max_completion_length: int = D.max_completion_length, seed: Optional[int] = D.seed,
                      max_turn_tokens: Optional[int] = None, tool_prompt: str = "auto",
                      env_timeout_s: Optional[float] = DEFAULT_ENV_TIMEOUT_S, **_: Any) -> Dict[str, List[Any]]:
    """Play ``n`` verifiers episodes per task through the recording endpoint and return them in the rollout contract.

    Args:
        prompts: ``P`` prompts (each task's messages, for the logs); rows: their dataset rows, which carry the task
            (``data.train: verifiers:<taskset>``). harness: a verifiers harness id (``None``: the taskset's own, else
            :mod:`.chat_harness`). runtime: verifiers' runtime for the harness program (a type name or its config).
        client, tokenizer, n, the sampling settings, max_completion_length (tokens per episode), max_turn_tokens,
            tool_prompt, env_timeout_s (seconds per episode): :func:`~grpo_rollout.rollouts.agent.agent_rollout`'s.

    Returns:
        :func:`~grpo_rollout.rollouts.agent.agent_rollout`'s keys: the episode's token sequences, ``agent_result``
        (per episode: ``reward``, ``rewards``, ``metrics``; ``None`` when the token budget ended it), and
        ``verifiers/<name>`` per reward the task recorded (its unweighted score: logged as ``extras/verifiers/<name>``).

    Raises:
        RolloutError: the rows do not come from a ``verifiers:`` source, or a task's or harness's code raised
            (verifiers' message, with the file:line). EpisodeFailure: a provider, sandbox, interception or timeout
            error (``rollout.on_error``).
    """
    rows = list(rows or [])
    if not rows or any(TASK_COLUMN not in r for r in rows):
        raise RolloutError(f"verifiers_rollout plays verifiers tasks and these rows carry none (no {TASK_COLUMN} "
                           f"column): {LEGACY_FIX}")
    try:
        out = agent_rollout(prompts, client=client, tokenizer=tokenizer, n=n, rows=rows,
                            agent=episode_agent(harness, runtime), temperature=temperature, top_p=top_p, top_k=top_k,
                            min_p=min_p, repetition_penalty=repetition_penalty,
                            max_completion_length=max_completion_length, seed=seed, max_turn_tokens=max_turn_tokens,
                            tool_prompt=tool_prompt, env_timeout_s=env_timeout_s)
    except RolloutError as exc:  # said as the episode's, not as the agent function's that plays it
        if isinstance(exc.__cause__, (VerifiersEpisodeError, EpisodeFailure)):
            raise type(exc)(str(exc.__cause__)) from exc.__cause__
        raise
    names = dict.fromkeys(name for r in out[AGENT_RESULT] if r for name in r["rewards"])
    for name in names:  # each named reward as an extra: logged as extras/verifiers/<name>
        out[f"{REWARD_EXTRA}/{name}"] = [None if r is None else r["rewards"].get(name) for r in out[AGENT_RESULT]]
    return out


def verifiers_reward(completions: List[Any], agent_result: List[Optional[Dict[str, Any]]], **_: Any) -> List[Any]:
    """The verifiers reward: each episode's weighted sum of its task's rewards (``None``: not scored)."""
    return [None if r is None else r["reward"] for r in agent_result]


def implied_rewards(kwargs: Mapping[str, Any], base_dir: Any = None) -> List[Tuple[str, Callable, float]]:
    """The reward this rollout adds: ``verifiers`` (weight 1), verifiers' own score of each episode."""
    return [(REWARD_EXTRA, verifiers_reward, 1.0)]


def validate_kwargs(kwargs: Dict[str, Any], base_dir: Optional[Path] = None) -> List[Tuple[str, str, str]]:
    """Static checks of ``rollout.kwargs``: the legacy ``env``/``env_args`` (verifiers 0.2) are refused saying where
    the taskset goes now; a ``harness`` verifiers does not know is named with the ones it has; ``runtime`` a string or
    mapping; unknown settings (with the nearest one), ``max_turn_tokens`` and ``tool_prompt`` as the agent rollout
    checks them."""
    legacy = {k: v for k, v in kwargs.items() if k in ("env", "env_args")}
    rest = {k: v for k, v in kwargs.items() if k not in legacy}
    problems = (unknown_settings(verifiers_rollout, rest) + type_problems(rest)
                + one_of(rest, "tool_prompt", ("auto", "template", "system"), "auto"))
    for key, value in legacy.items():
        named = value if key == "env" and isinstance(value, str) and ":" not in value else None
        problems.append((f"rollout.kwargs.{key}", "verifiers 0.4 has no vf.Environment to load; the taskset comes "
                         "with the data", f"data.train: verifiers:{named}" if named else LEGACY_FIX))
    if not isinstance(kwargs.get("runtime", "subprocess"), (str, Mapping)):
        problems.append(("rollout.kwargs.runtime", f"{kwargs['runtime']!r} is not a runtime",
                         "subprocess, docker, prime, ... or a mapping of verifiers' runtime config"))
    return problems + _harness_problems(kwargs.get("harness"))


def _harness_problems(harness: Any) -> List[Tuple[str, str, str]]:
    """``rollout.kwargs.harness``, when given: a harness id verifiers can load."""
    fix = "a verifiers harness id (e.g. null, bash), or leave it out: the taskset's own, else a one-call chat"
    if harness is None:
        return []
    if not isinstance(harness, str):
        return [("rollout.kwargs.harness", f"{harness!r} is not a harness id", fix)]
    try:
        from verifiers.v1.utils.loaders import harness_class

        harness_class(harness)
    except ImportError as exc:  # verifiers' message lists its built-in harnesses
        return [("rollout.kwargs.harness", str(exc), fix)]
    except Exception as exc:  # noqa: BLE001 - a module that exports no harness: verifiers says what it found
        return [("rollout.kwargs.harness", f"{type(exc).__name__}: {exc}", fix)]
    return []


verifiers_rollout.validate_kwargs = validate_kwargs  # type: ignore[attr-defined]
verifiers_rollout.implied_rewards = implied_rewards  # type: ignore[attr-defined]
verifiers_rollout.extras = agent_rollout.extras  # type: ignore[attr-defined]
