"""Where the tool-calling rollout's tools come from besides ``rollout.kwargs.tools``: a tool source.

An integration that adds tools (TRL's ``environment_factory``: an environment's methods; MCP servers: their tools)
registers a :class:`ToolSource` under its ``rollout.kwargs`` key when it is imported (``grpo_rollout`` imports them
all). The tool loop (:mod:`.tool_calling`) asks this registry for the keys it takes and never imports an
integration: the rollouts stay below the integrations (an import-linter contract).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from .contract import RolloutError
from .kwargs_checks import KwargsProblem

#: what the tools configured in ``rollout.kwargs.tools`` are called in messages
CONFIGURED_TOOLS = "rollout.kwargs.tools"


@dataclass(frozen=True)
class EpisodeTools:
    """What one source gives one episode.

    Attributes:
        tools: name → function (type hints and an ``Args:`` docstring, or a ``__tool_schema__``).
        owner: who gives them, in messages: ``"an MCP server"``, an environment's class name.
        observation: text appended to the prompt's last user message before the episode (TRL's ``reset``), or
            ``None``.
        environment: the object handed to reward functions as ``environments`` (``None``: no environment).
    """

    tools: Dict[str, Callable]
    owner: str
    observation: Optional[str] = None
    environment: Any = None


@dataclass(frozen=True)
class SourceStart:
    """What a source is started with for one step's rollout.

    Attributes:
        rows: the ``num_prompts`` dataset rows (``None`` when the caller has none).
        num_prompts, n: the step's prompts and samples per prompt: a source gives ``num_prompts × n`` episodes,
            grouped by prompt.
        base_dir: the config's folder (relative names are also looked up there).
        env_timeout_s: seconds an environment's ``reset`` or ``get_reward`` may take (``rollout.env_timeout_s``).
    """

    rows: Optional[Sequence[Mapping[str, Any]]]
    num_prompts: int
    n: int
    base_dir: Optional[Path]
    env_timeout_s: Optional[float]


@dataclass(frozen=True)
class ToolSource:
    """One integration's tools, under one ``rollout.kwargs`` key.

    Attributes:
        key: the ``rollout.kwargs`` key whose value (the source's spec) names them.
        start: ``(spec, SourceStart) -> [EpisodeTools] × (num_prompts × n)``; raises RolloutError (or an
            EpisodeFailure such as a timeout) when the tools cannot be had.
        problems: ``(spec, base_dir, has_tools) -> [(key, message, fix), ...]``: validate-config's checks of the
            spec (``has_tools``: other sources or ``rollout.kwargs.tools`` give tools too).
        rewards: ``(spec, base_dir, env_timeout_s) -> [(name, reward function), ...]``: the reward functions the
            source implies (an environment's ``get_reward``); none by default.
    """

    key: str
    start: Callable[[Any, SourceStart], List[EpisodeTools]]
    problems: Callable[[Any, Optional[Path], bool], List[KwargsProblem]]
    rewards: Callable[[Any, Optional[Path], Optional[float]], List[Tuple[str, Callable]]] = lambda *_: []


_SOURCES: Dict[str, ToolSource] = {}
_LOCK = threading.Lock()


def register_tool_source(source: ToolSource) -> ToolSource:
    """Make ``source`` the one the tool loop uses for ``source.key``; returns it."""
    with _LOCK:
        _SOURCES[source.key] = source
    return source


def tool_source(key: str) -> ToolSource:
    """The source registered for ``rollout.kwargs`` key ``key``.

    Raises:
        RolloutError: none is (the integration was not imported: ``import grpo_rollout`` imports them all).
    """
    with _LOCK:
        source = _SOURCES.get(key)
    if source is None:
        raise RolloutError(f"rollout.kwargs.{key}: no tool source is registered for it; import grpo_rollout (which "
                           "imports grpo_rollout.integrations) before calling the tool-calling rollout")
    return source


def merged_tools(parts: Sequence[EpisodeTools]) -> Dict[str, Callable]:
    """One episode's tools: every part's, in order.

    Raises:
        RolloutError: two parts have a tool of the same name (both named, and the fix), or there are none at all.
    """
    out: Dict[str, Callable] = {}
    owners: Dict[str, str] = {}
    for part in parts:
        for name, fn in part.tools.items():
            if name in out:
                raise RolloutError(f"{part.owner} has a tool named {name!r}, as {owners[name]} has; rename one of "
                                   "them")
            out[name], owners[name] = fn, part.owner
    if not out:
        raise RolloutError("no tools: list them in rollout.kwargs.tools, or give mcp_servers or an "
                           "environment_factory whose environment has public methods")
    return out


def with_observation(messages: List[Dict[str, Any]], observation: Optional[str]) -> List[Dict[str, Any]]:
    """``messages`` with ``observation`` appended to the last user message (TRL's rule; a new user message when there
    is none, or when its content is not text); ``None`` returns them unchanged."""
    if observation is None:
        return messages
    last = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=None)
    if last is None or not isinstance(messages[last].get("content"), str):
        return messages + [{"role": "user", "content": observation}]
    return messages[:last] + [{**messages[last], "content": messages[last]["content"] + observation}] \
        + messages[last + 1:]
