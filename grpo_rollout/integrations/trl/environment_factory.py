"""TRL's ``environment_factory`` on the built-in tool-calling rollout: an environment is an object whose public methods
are the tools of one episode.

Config::

    rollout:
      function: grpo_rollout.rollouts.tool_calling:tool_calling_rollout
      kwargs:
        environment_factory: examples/counter/env.py:CounterEnv
        # or several, chosen per dataset row by its `environment` column:
        # environment_factory: {counter: env.py:CounterEnv, notes: env.py:NotesEnv}

What an environment written for TRL's ``GRPOTrainer(environment_factory=...)`` (TRL 1.16) gets here, unchanged:

- one instance per episode (each of a prompt's ``n`` samples has its own), made by calling the factory with no
  arguments (a class, or any callable returning an environment);
- ``reset(**row)`` before the episode: the dataset row's columns as keyword arguments (without ``environment`` when
  several environments are named). A returned string is appended to the prompt's last user message, as TRL does;
  ``None`` leaves the prompt as it is;
- its public methods (not ``reset`` or ``get_reward``, not ``_``-prefixed) are the episode's tools, beside any
  ``tools`` of the config: type hints and an ``Args:`` docstring each, as for any tool. With several environments a
  prompt is shown only its own environment's tools;
- ``reset`` and ``get_reward`` may each take ``rollout.env_timeout_s`` seconds
  (:mod:`grpo_rollout.rollouts.env_timeouts`); the tools, ``rollout.kwargs.tool_timeout_s``;
- ``get_reward()`` (optional; plain or ``async def``): after the episode the environment scores it. Each environment
  class that has one adds a reward function of weight 1 named after the class (``rewards/<Class>``), summed with the
  configured ones, which may then be empty;
- reward functions may take ``environments``: the episode's environment object, one per completion.

Simplified on purpose: the environments of a step are made afresh for it (no pool of instances reused across steps).
"""

from __future__ import annotations

import asyncio
import inspect
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ...rollouts.contract import RolloutError
from ...rollouts.env_timeouts import DEFAULT_ENV_TIMEOUT_S, bounded_call
from ...rollouts.environment import call_env
from ...rollouts.kwargs_checks import KwargsProblem
from ...rollouts.tool_sources import EpisodeTools, SourceStart, ToolSource, register_tool_source
from ...user_code.coroutines import run_coroutine
from ...user_code.signatures import a_type

#: methods of an environment that are not tools
RESERVED = ("reset", "get_reward")
#: the dataset column naming a row's environment when ``environment_factory`` names several
ENVIRONMENT_COLUMN = "environment"

Factories = Dict[Optional[str], Callable[[], Any]]


def load_factories(spec: Any, base_dir: Optional[Path] = None) -> Factories:
    """``{None: factory}`` for one factory, ``{name: factory}`` for a mapping of names to factories; a factory is a
    callable (usually a class) or its name (``pkg.module:Class``, ``path/file.py:Class``).

    Raises:
        RolloutError: a name does not import, a factory is not callable, or the mapping is empty.
    """
    from ...user_code.resolve import ImportSpecError, resolve_callable

    named = dict(spec) if isinstance(spec, Mapping) else {None: spec}
    if not named:
        raise RolloutError("environment_factory is an empty mapping; name at least one environment class")
    out: Factories = {}
    for name, factory in named.items():
        label = "environment_factory" + ("" if name is None else f".{name}")
        if isinstance(factory, str):
            try:
                factory = resolve_callable(factory, base_dir)
            except ImportSpecError as exc:
                raise RolloutError(f"{label} {factory!r}: {exc}") from exc
        if not callable(factory):
            raise RolloutError(f"{label} is {a_type(factory)}, not a class or function making an "
                               "environment")
        out[name] = factory
    return out


def make_environment(factory: Callable[[], Any]) -> Any:
    """``factory()``, checked to have a callable ``reset``.

    Raises:
        RolloutError: the factory raised, or what it made has no ``reset`` method.
    """
    label = getattr(factory, "__name__", repr(factory))
    try:
        env = factory()
    except (Exception, SystemExit) as exc:
        raise RolloutError(f"creating the environment {label}() raised {type(exc).__name__}: {exc}; an "
                           "environment_factory is called with no arguments") from exc
    if not callable(getattr(env, "reset", None)):
        raise RolloutError(f"the environment {label}() made {a_type(env)}, which has no reset method; TRL's "
                           "environment_factory needs reset(**row)")
    return env


def environment_tools(env: Any) -> Dict[str, Callable]:
    """The environment's public methods (not :data:`RESERVED`, not ``_``-prefixed), bound to it: name → method."""
    tools = {}
    for name in dir(type(env)):
        if name.startswith("_") or name in RESERVED:
            continue
        if inspect.isfunction(inspect.getattr_static(env, name, None)):  # a plain method; a property is not read
            tools[name] = getattr(env, name)
    return tools


def checked_observation(observation: Any, label: str) -> Optional[str]:
    """What ``reset`` returned (``label``: ``Class.reset``), checked to be text to append to the prompt or ``None``.

    Raises:
        RolloutError: it is neither a string nor ``None``.
    """
    if observation is not None and not isinstance(observation, str):
        raise RolloutError(f"{label} returned {a_type(observation)}; reset must return a string (appended to "
                           "the prompt) or None")
    return observation


def start_environments(factories: Factories, rows: Optional[Sequence[Mapping[str, Any]]], num_prompts: int,
                       n: int, timeout_s: Optional[float] = DEFAULT_ENV_TIMEOUT_S) -> Tuple[List[Any], List[Any]]:
    """One environment per episode (``num_prompts × n``, grouped by prompt), each reset with its prompt's row
    (concurrently; plain ``reset`` methods on daemon threads, each given ``timeout_s`` seconds:
    ``rollout.env_timeout_s``). Returns the environments and what each ``reset`` returned.

    Raises:
        EnvTimeout: a ``reset`` did not return in time (an EpisodeFailure).
        RolloutError: no rows, a row naming an unknown environment (or none, with several), or a factory or
            ``reset`` that raised.
    """
    if rows is None or len(rows) != num_prompts:
        raise RolloutError(f"environment_factory needs one dataset row per prompt ({num_prompts}), got "
                           f"{None if rows is None else len(rows)}")
    several = list(factories) != [None]
    envs, kwargs = [], []
    for i, row in enumerate(rows):
        name = row.get(ENVIRONMENT_COLUMN) if several else None
        if name not in factories:
            raise RolloutError(f"the row of prompt {str(row.get('prompt'))[:60]!r} (the step's prompt {i}) has "
                               f"{ENVIRONMENT_COLUMN}={name!r}, which environment_factory does not name; give every "
                               f"row a column `{ENVIRONMENT_COLUMN}` with one of: {', '.join(map(str, factories))}")
        reset_kwargs = {k: v for k, v in row.items() if not (several and k == ENVIRONMENT_COLUMN)}
        for _ in range(n):
            envs.append(make_environment(factories[name]))
            kwargs.append(reset_kwargs)

    async def reset_all() -> List[Any]:
        return list(await asyncio.gather(*(call_env(e, "reset", kwargs=k, timeout_s=timeout_s)
                                           for e, k in zip(envs, kwargs))))

    return envs, run_coroutine(reset_all())


def _environment_class(factory: Callable[[], Any]) -> type:
    """The class a factory makes: itself when a class, else the type of one instance it makes."""
    return factory if inspect.isclass(factory) else type(make_environment(factory))


def _get_reward_of(cls: type, timeout_s: Optional[float]) -> Callable:
    """A reward function (``async def``) scoring each completion whose environment is a ``cls`` by its
    ``get_reward()`` (``None`` for completions of other environments): ``async def`` ones concurrently, plain ones
    one after another (as TRL calls them), each on a daemon thread; every call given ``timeout_s`` seconds (raises
    :class:`~.env_timeouts.EnvTimeout` past it)."""
    label = f"{cls.__name__}.get_reward"

    async def reward(environments: Sequence[Any], **_: Any) -> List[Optional[float]]:
        mine = [e for e in environments if type(e) is cls]
        if inspect.iscoroutinefunction(cls.get_reward):
            scores = iter(await asyncio.gather(*(bounded_call(label, e.get_reward, timeout_s=timeout_s)
                                                 for e in mine)))
        else:
            scores = iter([await bounded_call(label, e.get_reward, timeout_s=timeout_s) for e in mine])
        return [next(scores) if type(e) is cls else None for e in environments]
    reward.__name__ = reward.__qualname__ = cls.__name__
    reward.__module__ = cls.__module__
    return reward


def environment_rewards(spec: Any, base_dir: Optional[Path] = None,
                        env_timeout_s: Optional[float] = DEFAULT_ENV_TIMEOUT_S) -> List[Tuple[str, Callable]]:
    """The reward functions ``environment_factory`` ``spec`` adds: ``(class name, function)`` for each environment
    class with a ``get_reward`` method (none when ``spec`` is ``None``); each call given ``env_timeout_s`` seconds.

    Raises:
        RolloutError: see :func:`load_factories` and :func:`make_environment`.
    """
    if spec is None:
        return []
    classes = dict.fromkeys(_environment_class(f) for f in load_factories(spec, base_dir).values())
    return [(cls.__name__, _get_reward_of(cls, env_timeout_s)) for cls in classes if callable(getattr(cls, "get_reward", None))]


def factory_problems(spec: Any, base_dir: Optional[Path] = None, has_tools: bool = False) -> List[KwargsProblem]:
    """Static checks of ``rollout.kwargs.environment_factory`` for validate-config: ``(key, message, fix)`` per
    problem. Each factory is loaded and called once (as TRL does when it starts): it must make an environment with a
    ``reset`` method whose public methods all have a tool schema, and has some unless there are other tools
    (``has_tools``)."""
    from ...rollouts.tool_running import ToolError, tool_schema

    key = "rollout.kwargs.environment_factory"
    if not isinstance(spec, (str, Mapping)) and not callable(spec):
        return [(key, f"must be a class name (path/file.py:Class) or a mapping of names to them, got {spec!r}",
                 "environment_factory: path/env.py:MyEnv")]
    try:
        factories = load_factories(spec, base_dir)
    except RolloutError as exc:
        return [(key, str(exc), "name a class as package.module:Class or path/file.py:Class")]
    problems = []
    for name, factory in factories.items():
        where = key if name is None else f"{key}.{name}"
        try:
            env = make_environment(factory)
        except RolloutError as exc:
            fix = ("add a method reset(self, **kwargs) (the row's columns; return text to append to the prompt, or "
                   "None)" if "no reset method" in str(exc) else "give the class a constructor without required "
                                                                   "arguments")
            problems.append((where, str(exc), fix))
            continue
        if not environment_tools(env) and not has_tools:
            problems.append((where, f"{type(env).__name__} has no public methods: the model would have no tools",
                             "add a method with type hints and an Args: docstring, or list tools in "
                             "rollout.kwargs.tools"))
        for method, fn in environment_tools(env).items():
            try:
                tool_schema(fn)
            except ToolError as exc:
                problems.append((where, f"{type(env).__name__}.{method} is a tool (a public method): {exc}",
                                 "give it type hints and an Args: docstring, or make it private (_name)"))
    return problems


def episode_tools(spec: Any, start: SourceStart) -> List[EpisodeTools]:
    """The tool source's episodes: one environment each (``start.num_prompts × n``, grouped by prompt), reset with
    its prompt's row; its public methods are the episode's tools and what ``reset`` returned its observation.

    Raises:
        EnvTimeout: a ``reset`` did not return in time. RolloutError: see :func:`start_environments`, or a
            ``reset`` returned something other than text or ``None``.
    """
    factories = load_factories(spec, start.base_dir)
    envs, observations = start_environments(factories, start.rows, start.num_prompts, start.n, start.env_timeout_s)
    return [EpisodeTools(environment_tools(env), owner=type(env).__name__, environment=env,
                         observation=checked_observation(o, f"{type(env).__name__}.reset"))
            for env, o in zip(envs, observations)]


SOURCE = register_tool_source(ToolSource("environment_factory", episode_tools, factory_problems, environment_rewards))
