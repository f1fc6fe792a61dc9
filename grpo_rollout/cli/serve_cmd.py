"""``grpo-rollout serve``: vLLM's OpenAI server plus the grpo-rollout routes, in the foreground."""

from __future__ import annotations

import os
from pathlib import Path
from typing import List, Optional

from rich.console import Console
from rich.markup import escape

from ..config import Config, check_config
from .render import print_problems


def run_serve(console: Console, config_path: Optional[Path], *, model: Optional[str], host: Optional[str],
              port: Optional[int], max_model_len: Optional[int], api_key: Optional[str], extra: List[str]) -> int:
    """Resolve settings (flags over the config's ``model``/``vllm`` sections over defaults) and exec the server."""
    config = Config()
    if config_path is not None:
        loaded, problems = check_config(config_path, load_data=False)
        problems = [p for p in problems if p.key.startswith(("model", "vllm", "sampling", "<config>"))]
        print_problems(console, problems)
        if any(p.is_error for p in problems):
            return 1
        config = loaded.config
    from ..generation.server.launch import ServerSettings, server_command
    from ..models.builtin import resolve_model_path

    v, s = config.vllm, config.sampling
    try:
        path = resolve_model_path(model or config.model.name_or_path, progress=lambda m: console.print(f"• {m}"))
    except ValueError as exc:
        console.print(f"[red]{escape(str(exc))}[/]")
        return 1
    needed = s.max_prompt_length + s.max_completion_length if (config_path and s.max_prompt_length) else None
    settings = ServerSettings(model=path, host=host or v.host, port=port or v.port, dtype=config.model.dtype,
                              max_model_len=max_model_len or v.max_model_len or needed, api_key=api_key or v.api_key,
                              kv_cache_space_gib=v.kv_cache_space_gib, gpu_memory_utilization=v.gpu_memory_utilization,
                              enforce_eager=v.enforce_eager, extra_args=list(v.extra_args) + list(extra))
    argv, env = server_command(settings)
    url = f"http://{settings.host}:{settings.port}"
    console.print(f"Serving [bold]{escape(path)}[/] at [bold]{url}[/]: POST /generate/, POST /update_weights/, "
                  "GET /health/ and vLLM's /v1/... routes. Ctrl-C stops it.")
    if settings.host not in ("127.0.0.1", "localhost", "::1") and not settings.api_key:
        console.print("[yellow]Listening beyond this machine without --api-key: anyone who reaches the port can "
                      "generate and replace the weights.[/]")
    os.execvpe(argv[0], argv, env)
    return 0  # not reached
