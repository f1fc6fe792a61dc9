"""``rollout.kwargs.mcp_servers`` entries (:mod:`.mcp_tools`): their settings checked, where their relative paths
are, how they are named in messages."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Mapping, Optional

#: seconds to start a server and list its tools (an entry's ``startup_timeout_s``)
STARTUP_TIMEOUT_S = 60.0
#: the keys of one ``mcp_servers`` entry
SERVER_KEYS = ("command", "args", "env", "cwd", "url", "startup_timeout_s")


def server_problem(spec: Any) -> Optional[str]:
    """What is wrong with one ``mcp_servers`` entry (``None``: nothing)."""
    if not isinstance(spec, Mapping):
        return f"must be a mapping ({{command: ..., args: [...]}} or {{url: ...}}), got {spec!r}"
    unknown = [k for k in spec if k not in SERVER_KEYS]
    if unknown:
        return f"has no setting `{unknown[0]}` (its settings: {', '.join(SERVER_KEYS)})"
    if bool(spec.get("command")) == bool(spec.get("url")):
        return "needs either `command` (a stdio server to start) or `url` (a streamable-HTTP server), not both"
    if not isinstance(spec.get("args", []), list) or not all(isinstance(a, str) for a in spec.get("args", [])):
        return f"`args` must be a list of strings, got {spec.get('args')!r}"
    env = spec.get("env") or {}
    if not isinstance(env, Mapping) or not all(isinstance(v, str) for v in env.values()):
        bad = next((f"{k}: {v!r}" for k, v in env.items() if not isinstance(v, str)), repr(env)) \
            if isinstance(env, Mapping) else repr(env)
        return f"`env` must map names to strings, got {bad} (quote the value in YAML: '5')"
    timeout = spec.get("startup_timeout_s", STARTUP_TIMEOUT_S)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
        return f"`startup_timeout_s` must be a number of seconds > 0, got {timeout!r}"
    if spec.get("url") and not str(spec["url"]).startswith(("http://", "https://")):
        return f"`url` must start with http:// or https://, got {spec['url']!r}"
    return None


def located(spec: Mapping[str, Any], base_dir: Optional[Path]) -> Dict[str, Any]:
    """``spec`` with a relative ``cwd``, and relative ``args`` naming files, found in the current folder or else in
    ``base_dir`` (the config's folder), as every other path of a config is."""
    out = dict(spec)
    if base_dir is None or out.get("url"):
        return out

    def find(path: str) -> str:
        return path if Path(path).exists() or not (Path(base_dir) / path).exists() else str(Path(base_dir) / path)

    if out.get("cwd") and not Path(out["cwd"]).is_absolute():
        out["cwd"] = find(out["cwd"])
    if not out.get("cwd"):
        out["args"] = [find(a) if not a.startswith("-") else a for a in out.get("args", [])]
    return out


def label(spec: Mapping[str, Any]) -> str:
    """How an entry is named in messages: its URL, or its command line."""
    return spec["url"] if spec.get("url") else " ".join([spec["command"], *spec.get("args", [])])


def startup_timeout(spec: Mapping[str, Any]) -> float:
    """Seconds an entry may take to start and list its tools: its ``startup_timeout_s``, else
    :data:`STARTUP_TIMEOUT_S`."""
    return float(spec.get("startup_timeout_s", STARTUP_TIMEOUT_S))
