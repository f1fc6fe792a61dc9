"""Open the generation backend a config asks for: transformers (``off``), a spawned vLLM server, or an attached one."""

from __future__ import annotations

import os
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ContextManager, List, Optional, Sequence

from ..config.schema import Config
from ..runs.names import server_log
from .base import GenerationClient
from .multi_server import MultiServerClient
from .vllm_client import ServerError, VllmClient

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


class BackendError(RuntimeError):
    """The configured backend cannot be used (the message says why and what to change)."""


def check_server(client: VllmClient, vocab_size: int, needed_len: Optional[int], sleep: bool = False,
                 dtype: Optional[str] = None) -> dict:
    """Check an attached server: healthy, serving a model with ``vocab_size`` tokens, long enough, (``sleep``:
    ``vllm.sleep_during_training``) started with vLLM's sleep mode, and (``dtype``: ``model.dtype``) serving in the
    dtype the trainer computes in (a server that does not report its dtype, an older grpo-rollout, is not compared).

    Raises:
        BackendError: unreachable, other vocabulary, ``max_model_len`` below ``needed_len``, no sleep mode, or
        another dtype.
    """
    try:
        info = client.health()
    except ServerError as exc:
        if "HTTP 401" in str(exc):
            raise BackendError(f"{exc}. The server was started with an API key: set vllm.api_key to it") from exc
        raise BackendError(f"{exc}. Start one with `grpo-rollout serve CONFIG`, or use vllm.mode: spawn") from exc
    if info.get("vocab_size") != vocab_size:
        raise BackendError(f"the server at {client.url} serves {info.get('model')!r} with a vocabulary of "
                           f"{info.get('vocab_size')} tokens, but the model being trained has {vocab_size}: it is a "
                           "different model. Serve the configured model (grpo-rollout serve CONFIG)")
    if needed_len and info.get("max_model_len", 0) < needed_len:
        raise BackendError(f"the server's max_model_len is {info.get('max_model_len')}, but max_prompt_length + "
                           f"max_completion_length = {needed_len}; restart it with --max-model-len {needed_len}")
    served = info.get("dtype")
    if dtype and served and served != dtype:
        raise BackendError(f"the server at {client.url} serves the model in {served} but model.dtype is {dtype}: "
                           f"the trainer computes its log-probs in {dtype} and sends {dtype} weights, which the server "
                           f"casts to {served}, so the sampler and the trainer disagree at every token (measured: "
                           "4.4e-2 nats per token instead of 4e-6 for float32 against bfloat16). Restart the server "
                           "from this config (`grpo-rollout serve CONFIG` serves model.dtype), or set model.dtype: "
                           f"{served}")
    if sleep and not info.get("sleep_mode"):
        raise BackendError(f"vllm.sleep_during_training is true but the server at {client.url} was started without "
                           "vLLM's sleep mode; restart it with `grpo-rollout serve CONFIG` from this config (it adds "
                           "--enable-sleep-mode), or set vllm.sleep_during_training: false")
    return info


def check_weight_access(client: VllmClient, info: dict) -> None:
    """Check that an attached server lets this trainer update its weights (``info``: its ``/health/`` answer): a
    server with no API key refuses weight updates unless started with ``--trusted-network`` (server/access.py); one
    that does not say (an older grpo-rollout) is not checked.

    Raises:
        BackendError: the server refuses weight updates from anyone.
    """
    if info.get("weight_updates") == "refused":
        raise BackendError(f"the server at {client.url} has no API key, so it refuses weight updates from anyone "
                           "(403). Restart it with a key (`grpo-rollout serve CONFIG --api-key KEY`, and set "
                           "vllm.api_key: KEY here), or, when everyone who can reach its port may change its weights, "
                           "with `grpo-rollout serve CONFIG --trusted-network`; or use vllm.mode: spawn")


class _SpawnedClient(VllmClient):
    """A :class:`VllmClient` that also stops its server on :meth:`close`, and knows when its server died."""

    server: Any = None
    api_key: Optional[str] = None  # the key its server was started with (vllm.api_key, or one made for the run)

    def alive(self) -> bool:
        """False once the spawned server's process has exited (a request is then not retried)."""
        return self.server is None or self.server.exit_code() is None

    def failure_detail(self) -> str:
        """The server's exit code and the end of its log, or where the log is."""
        if self.server is None:
            return super().failure_detail()
        code = self.server.exit_code()
        if code is None:
            return f"; the server process is still running, its log is {self.server.log_path}"
        return (f"; the server process exited with code {code}; the end of its log ({self.server.log_path}):\n"
                f"{self.server.log_tail()}")

    def close(self) -> None:
        super().close()
        if self.server is not None:
            self.server.stop()


def prompt_limit(config: Config, model: Any, say: Callable[[str], None] = lambda text: None) -> tuple:
    """``(max_prompt_length, needed_model_len)`` for a config and the model being trained: the configured limits,
    lowered so that prompt + completion fit the model's context.

    Raises:
        BackendError: ``max_completion_length`` alone does not fit the model's context.
    """
    from .server.launch import needed_model_len

    s = config.sampling
    needed = needed_model_len(s)
    context = getattr(model.config, "max_position_embeddings", None)
    max_prompt = s.max_prompt_length
    if context and (needed is None or needed > context):
        max_prompt = context - s.max_completion_length
        if max_prompt < 1:
            raise BackendError(f"sampling.max_completion_length ({s.max_completion_length}) does not fit the model's "
                               f"context of {context} tokens; lower it")
        if needed is not None:
            say(f"max_prompt_length + max_completion_length = {needed} exceeds the model's context ({context}); "
                f"prompts are cut to {max_prompt} tokens")
        needed = context
    return max_prompt, needed


def attach_urls(config: Config) -> List[str]:
    """The servers of ``vllm.mode: attach``: ``vllm.url`` then ``vllm.urls``, without repeats."""
    urls = ([config.vllm.url] if config.vllm.url else []) + list(config.vllm.urls)
    return list(dict.fromkeys(u.rstrip("/") for u in urls))


def _transfer(config: Config) -> str:
    return "auto" if config.vllm.weight_transfer == "nccl" else config.vllm.weight_transfer


def server_key(client: GenerationClient, config: Config) -> Optional[str]:
    """The API key of ``client``'s servers: the one spawn mode made for this run, else ``vllm.api_key``."""
    first = (getattr(client, "clients", None) or [client])[0]
    return getattr(first, "api_key", None) or config.vllm.api_key


def connect(urls: Sequence[str], config: Config, tokenizer: PreTrainedTokenizerBase, max_prompt: Optional[int],
            first: int = 0, api_key: Optional[str] = None) -> GenerationClient:
    """A client for servers that are already running (one :class:`VllmClient`, or a :class:`MultiServerClient`
    over several, whose first share goes to server ``first``); ``api_key``: their key (default ``vllm.api_key``)."""
    key = api_key or config.vllm.api_key
    clients = [VllmClient(u, tokenizer, max_prompt, api_key=key, transfer=_transfer(config),
                          sync_timeout=config.vllm.sync_timeout_s) for u in urls]
    return clients[0] if len(clients) == 1 else MultiServerClient(clients, first=first)


def open_backend(config: Config, model: Any, tokenizer: PreTrainedTokenizerBase, model_path: str, output_dir: Path,
                 say: Callable[[str], None] = print,
                 status: Callable[[str], ContextManager] = lambda text: nullcontext()) -> GenerationClient:
    """The generation client for ``config.vllm.mode``. The servers hold the weights they loaded from
    ``model_path``; the trainer syncs its own weights before the first step.

    Args:
        model, tokenizer: the trainer's (``model``: the causal LM). model_path: the folder/hub id the model was loaded
            from (what spawned servers load first). output_dir: the run folder (server logs go there).
        say: prints a status line. status: a context manager showing a spinner while waiting.

    Raises:
        BackendError: an attached server is unusable; ServerStartError: a spawned server did not start.
    """
    v = config.vllm
    max_prompt, needed = prompt_limit(config, model, say)
    if v.mode == "off":
        from .transformers_client import TransformersClient

        return TransformersClient(model, tokenizer, max_prompt, compute_dtype=config.model.dtype)
    vocab = model.get_input_embeddings().num_embeddings
    if v.mode == "attach":
        urls = attach_urls(config)
        client = connect(urls, config, tokenizer, max_prompt)
        for one in getattr(client, "clients", [client]):
            check_weight_access(one, check_server(one, vocab, needed, v.sleep_during_training, config.model.dtype))
        say(f"Attached to vLLM at {', '.join(urls)}")
        return client
    from .server.access import new_run_key
    from .server.gpu_share import shared_gpu_share
    from .server.launch import settings_from_config, sleep_allocator_note
    from .spawn import ManagedServer

    k = v.num_servers
    key = v.api_key or new_run_key()  # every route of a spawned server needs it (server/access.py)
    servers = []
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    for i in range(k):
        settings = settings_from_config(config, model_path, max_model_len=v.max_model_len or needed,
                                        host="127.0.0.1", port=0, api_key=key,  # loopback, a free port
                                        devices=v.server_devices[i] if v.server_devices else None)
        share = cores[i * len(cores) // k:(i + 1) * len(cores) // k]  # CPU build: the cores split among servers
        if share:
            settings.cpu_cores = ",".join(map(str, share))
        gpu = shared_gpu_share(config, model, settings.max_model_len or 0, settings.devices)
        if gpu is not None:  # on the trainer's own GPU: only what the server needs, not 0.9 of it
            settings.gpu_memory_utilization = gpu.share
            if i == 0:  # one message for all the servers it covers
                say(gpu.text())
        if i == 0 and sleep_allocator_note(settings):
            say(sleep_allocator_note(settings))
        servers.append(ManagedServer(settings, Path(output_dir) / server_log(i, k)))
    logs = servers[0].log_path if k == 1 else Path(output_dir) / "vllm-*.log"
    try:
        with status(f"Starting {'a vLLM server' if k == 1 else f'{k} vLLM servers'} (log: {logs}; first start takes "
                    "~1-2 min on CPU)"):
            for server in servers:
                server.launch()
            for server in servers:
                server.wait_ready(v.startup_timeout_s)
    except BaseException:
        for server in servers:
            server.stop()
        raise
    clients = []
    for server in servers:
        client = _SpawnedClient(server.url, tokenizer, max_prompt, api_key=key, transfer=_transfer(config),
                                sync_timeout=v.sync_timeout_s)
        client.server, client.api_key = server, key
        clients.append(client)
    say(f"vLLM server{'s' if k > 1 else ''} ready at {', '.join(s.url for s in servers)}")
    return clients[0] if k == 1 else MultiServerClient(clients)
