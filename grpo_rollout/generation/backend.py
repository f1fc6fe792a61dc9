"""Open the generation backend a config asks for: transformers (``off``), a spawned vLLM server, or an attached one."""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path
from typing import Any, Callable, ContextManager, Optional

from .base import GenerationClient
from .vllm_client import ServerError, VllmClient


class BackendError(RuntimeError):
    """The configured backend cannot be used (the message says why and what to change)."""


def check_server(client: VllmClient, vocab_size: int, needed_len: Optional[int]) -> dict:
    """Check an attached server: healthy, serving a model with ``vocab_size`` tokens, and long enough.

    Raises:
        BackendError: unreachable, other vocabulary, or ``max_model_len`` below ``needed_len``.
    """
    try:
        info = client.health()
    except ServerError as exc:
        raise BackendError(f"{exc}. Start one with `grpo-rollout serve CONFIG`, or use vllm.mode: spawn") from exc
    if info.get("vocab_size") != vocab_size:
        raise BackendError(f"the server at {client.url} serves {info.get('model')!r} with a vocabulary of "
                           f"{info.get('vocab_size')} tokens, but the model being trained has {vocab_size}: it is a "
                           "different model. Serve the configured model (grpo-rollout serve CONFIG)")
    if needed_len and info.get("max_model_len", 0) < needed_len:
        raise BackendError(f"the server's max_model_len is {info.get('max_model_len')}, but max_prompt_length + "
                           f"max_completion_length = {needed_len}; restart it with --max-model-len {needed_len}")
    return info


class _SpawnedClient(VllmClient):
    """A :class:`VllmClient` that also stops its server on :meth:`close`, and knows when its server died."""

    server: Any = None

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


def open_backend(config: Any, model: Any, tokenizer: Any, model_path: str, output_dir: Path,
                 say: Callable[[str], None] = print,
                 status: Callable[[str], ContextManager] = lambda text: nullcontext()) -> GenerationClient:
    """The generation client for ``config.vllm.mode``; for vLLM the server already holds ``model``'s weights.

    Args:
        model, tokenizer: the trainer's. model_path: the folder/hub id the model was loaded from (what a spawned
            server loads first). output_dir: the run folder (``vllm.log`` goes there).
        say: prints a status line. status: a context manager showing a spinner while waiting.

    Raises:
        BackendError: attach target unusable; ServerStartError: the spawned server did not start.
    """
    from .server.launch import needed_model_len

    v, s = config.vllm, config.sampling
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
    if v.mode == "off":
        from .transformers_client import TransformersClient

        return TransformersClient(model, tokenizer, max_prompt)
    vocab = model.get_input_embeddings().num_embeddings
    if v.mode == "attach":
        client = VllmClient(v.url, tokenizer, max_prompt, api_key=v.api_key)
        check_server(client, vocab, needed)
        say(f"Attached to vLLM at {v.url}")
    else:
        from .server.launch import settings_from_config
        from .spawn import ManagedServer

        settings = settings_from_config(config, model_path, max_model_len=v.max_model_len or needed,
                                        host="127.0.0.1", port=0)  # loopback, a free port
        server = ManagedServer(settings, Path(output_dir) / "vllm.log")
        with status(f"Starting vLLM server (log: {server.log_path}; first start takes ~1-2 min on CPU)"):
            url = server.start(v.startup_timeout_s)
        client = _SpawnedClient(url, tokenizer, max_prompt, api_key=v.api_key)
        client.server = server
        say(f"vLLM server ready at {url}")
    try:
        with status("Sending the current weights to vLLM"):
            client.update_weights(model)  # a resumed or non-base model must be what the server samples from
    except BaseException:
        client.close()
        raise
    return client
