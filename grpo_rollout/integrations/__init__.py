"""The ecosystems' environments, trained through the rollout contract: each sub-package adapts one (verifiers,
OpenEnv, TRL's environment_factory, MCP servers) and imports :mod:`grpo_rollout.rollouts`; nothing in the rollouts
imports them (an import-linter contract).

Importing this package registers the tool sources of the built-in tool-calling rollout (:mod:`.trl`, :mod:`.mcp`;
cheap: the ``mcp`` package loads only when a server starts). verifiers and OpenEnv are rollouts of their own, named
by ``rollout.function``, and load when named.
"""

from . import mcp, trl  # noqa: F401 - registers their tool sources
