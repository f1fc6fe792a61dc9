"""MCP servers' tools on the built-in tool-calling rollout (``rollout.kwargs.mcp_servers``: :mod:`.mcp_tools`; the
tool source, :mod:`.mcp_source`; the ``mcp`` package loads when a server starts)."""

from . import mcp_source  # noqa: F401 - registers the tool source
