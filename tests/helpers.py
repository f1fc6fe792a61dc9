"""Small helpers for tests: waiting on a condition with a deadline instead of sleeping a fixed time, answering
HTTP requests in fake servers, and running parsed tool calls from synchronous code."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any, Callable, List, Mapping, Optional


def wait_until(predicate: Callable[[], object], timeout_s: float, interval_s: float = 0.05) -> bool:
    """Call ``predicate`` until it returns something true or ``timeout_s`` has passed; return its last truth value.

    The deadline only bounds the wait: the caller asserts on the condition itself (``wait_until`` never fails)."""
    deadline = time.monotonic() + timeout_s
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return bool(predicate())
        time.sleep(interval_s)


def send_json(handler: Any, status: int, body: Any) -> None:
    """Answer an ``http.server.BaseHTTPRequestHandler`` request with ``body`` as JSON (the fake servers' reply)."""
    data = json.dumps(body).encode()
    handler.send_response(status)
    handler.send_header("content-type", "application/json")
    handler.send_header("content-length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def run_tool_calls_sync(calls: List[Any], tools: Mapping[str, Callable],
                        timeout_s: Optional[float] = 10.0) -> List[Any]:
    """``grpo_rollout.rollouts.tool_running.run_tool_call`` for several parsed calls, concurrently, from synchronous code:
    their ``ToolResult`` objects in the order of ``calls``."""
    from grpo_rollout.user_code.coroutines import run_coroutine
    from grpo_rollout.rollouts.tool_running import run_tool_call

    async def all_calls() -> List[Any]:
        return list(await asyncio.gather(*(run_tool_call(c, tools, timeout_s) for c in calls)))

    return run_coroutine(all_calls())


def train_example_briefly(name: str, tiny_model: Any, output_dir: Any, monkeypatch: Any, **sampling: Any) -> Any:
    """``configs/<name>.yaml`` checked (no problems allowed), then trained 2 steps of 2 prompts × 4 completions on
    the tiny model with in-process generation, from the repository root (the examples' paths are relative to it);
    ``sampling``: other ``sampling.*`` values. Returns the ``TrainResult``."""
    from pathlib import Path

    from grpo_rollout.config import load_config
    from grpo_rollout.preflight import check_config
    from grpo_rollout.trainer import train
    from grpo_rollout.trainer.reporting.progress import RichReporter

    repo = Path(__file__).resolve().parents[1]
    monkeypatch.chdir(repo)
    config = repo / "configs" / f"{name}.yaml"
    _, problems = check_config(config)
    assert not problems, [str(p) for p in problems]
    loaded = load_config(config, [
        f"model.name_or_path={tiny_model}", "vllm.mode=off", f"training.output_dir={output_dir}",
        "training.max_steps=2", "training.prompts_per_step=2", "sampling.num_generations=4",
        "training.micro_batch_size=8", *(f"sampling.{k}={v}" for k, v in sampling.items())])
    return train(loaded.config, base_dir=loaded.base_dir, reporter=RichReporter(quiet=True))
