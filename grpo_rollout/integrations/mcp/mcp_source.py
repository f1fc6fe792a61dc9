"""MCP servers as a tool source of the tool-calling rollout (``rollout.kwargs.mcp_servers``): each episode's tools
(:func:`~.mcp_tools.mcp_tools`) and validate-config's checks of the entries, registered when imported."""

from __future__ import annotations

from pathlib import Path
from typing import Any, List, Mapping, Optional, Sequence

from ...rollouts.contract import RolloutError
from ...rollouts.kwargs_checks import KwargsProblem
from ...rollouts.tool_sources import EpisodeTools, SourceStart, ToolSource, register_tool_source
from .mcp_checks import label, located, server_problem
from .mcp_tools import MCPHost, mcp_tools


def mcp_problems(specs: Any, base_dir: Optional[Path] = None, has_tools: bool = False) -> List[KwargsProblem]:
    """validate-config's checks of ``rollout.kwargs.mcp_servers``: the ``mcp`` package is installed, each entry is well
    formed, each server starts and lists its tools (then stops). ``(key, message, fix)`` per problem. ``has_tools``
    (other tools are configured) changes nothing: servers without tools are not a problem of their own."""
    key = "rollout.kwargs.mcp_servers"
    try:
        import mcp  # noqa: F401
    except ImportError:
        return [(key, "the package mcp is not installed", "pip install mcp (make install does)")]
    if not isinstance(specs, list):
        return [(key, f"must be a list of servers, got {specs!r}",
                 "mcp_servers: [{command: python, args: [server.py]}]")]
    problems = [(f"{key}[{i}]", f"{key}[{i}] {p}", "e.g. {command: python, args: [server.py]} or {url: http://...}")
                for i, p in ((i, server_problem(s)) for i, s in enumerate(specs)) if p]
    if problems:
        return problems
    try:  # started, listed and stopped again: a check leaves no process behind (the run starts its own)
        MCPHost([located(spec, base_dir) for spec in specs]).start().close()
    except RolloutError as exc:
        message = str(exc)
        index = next((i for i, spec in enumerate(specs) if f"`{label(located(spec, base_dir))}`" in message), None)
        if "two MCP servers" in message:
            fix = "remove one of the servers, or rename the tool in one of them"
        elif "within" in message:
            fix = "check that the command speaks MCP over stdin/stdout, or raise its startup_timeout_s"
        else:
            fix = ("check the command (it must speak MCP over stdin/stdout; relative paths are looked up in the "
                   "current folder, then the config's) or that the URL's server is running")
        return [(key if index is None else f"{key}[{index}]", message, fix)]
    return []


def episode_tools(specs: Sequence[Mapping[str, Any]], start: SourceStart) -> List[EpisodeTools]:
    """The tool source's episodes: the servers' tools (:func:`mcp_tools`; none for an empty list), the same for each
    of the ``start.num_prompts × n`` episodes.

    Raises:
        RolloutError: see :func:`mcp_tools`.
    """
    tools = EpisodeTools(mcp_tools(specs, start.base_dir) if specs else {}, owner="an MCP server")
    return [tools] * (start.num_prompts * start.n)


SOURCE = register_tool_source(ToolSource("mcp_servers", episode_tools, mcp_problems))
