"""Benchmark: the built-in multi-turn rollouts against a vLLM server, all samples of a step concurrently (as they run
in training) vs one request at a time, on the embedded model and the two example tasks.

    .venv/bin/python benchmarks/multi_turn_rollout.py [--prompts 4] [--n 8]

Run from the repository root (the example files are named relative to it). Prints a markdown table (paste it into
docs/benchmarks.md with the command and the machine).
"""

from __future__ import annotations

import argparse
import importlib.util
import tempfile
import time
from pathlib import Path

from grpo_rollout.generation.server.launch import ServerSettings
from grpo_rollout.generation.spawn import ManagedServer
from grpo_rollout.generation.vllm_client import VllmClient
from grpo_rollout.models.pretrained import load_model_and_tokenizer
from grpo_rollout.rollouts.environment import environment_rollout
from grpo_rollout.rollouts.tool_calling import tool_calling_rollout

REPO = Path(__file__).resolve().parents[1]


class OneAtATime(VllmClient):
    """The same client, its ``agenerate`` blocking the event loop: the rollout's requests go one at a time."""

    async def agenerate(self, prompt_ids, **kwargs):
        return self.generate(prompt_ids, **kwargs)


def _module(rel: str):
    spec = importlib.util.spec_from_file_location(rel.replace("/", "_")[:-3], REPO / rel)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tasks(prompts: int):
    multiply, guess = _module("examples/multiply/task.py"), _module("examples/guess_number/env.py")
    rows_m = multiply.dataset(num_rows=prompts)
    rows_g = guess.dataset(num_rows=prompts)
    return [
        ("tool calling: multiply (max_turns 2)", tool_calling_rollout, [r["prompt"] for r in rows_m], rows_m,
         {"tools": [multiply.multiply], "max_turns": 2, "tool_timeout_s": 5, "max_completion_length": 64,
          "temperature": 0.7}),
        ("environment: guess the number (max_turns 4)", environment_rollout, [r["prompt"] for r in rows_g], rows_g,
         {"env": guess.GuessNumberEnv, "env_kwargs": {"hint_bonus": 0.2}, "max_turns": 4, "max_turn_tokens": 16,
          "max_completion_length": 160, "temperature": 1.0}),
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--n", type=int, default=8)
    args = parser.parse_args()
    _, tokenizer, path = load_model_and_tokenizer("builtin:smollm2-135m-instruct")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        server = ManagedServer(ServerSettings(model=path, port=0, max_model_len=512), Path(tmp) / "vllm.log")
        server.start()
        try:
            for name, fn, prompts, rows, kwargs in _tasks(args.prompts):
                for mode, cls in (("concurrent", VllmClient), ("one at a time", OneAtATime)):
                    client = cls(server.url, tokenizer, max_prompt_length=320)
                    try:
                        call = dict(client=client, tokenizer=tokenizer, seed=0, **kwargs)
                        if fn is environment_rollout:
                            call["rows"] = rows
                        fn(prompts[:1], **{**call, "n": 1, "rows": rows[:1]})  # warm-up
                        start = time.perf_counter()
                        out = fn(prompts, n=args.n, **call)
                        seconds = time.perf_counter() - start
                    finally:
                        client.close()
                    sampled = sum(sum(m) for m in out["completion_mask"])
                    turns = sum(out["num_turns"]) / len(out["num_turns"])
                    results.append((name, mode, len(out["completion_ids"]), turns, sampled, seconds))
        finally:
            server.stop()
    print(f"\n{args.prompts} prompts × {args.n} samples, model {path}\n")
    print("| rollout | requests | conversations | mean turns | sampled tokens | seconds | sampled tokens/s |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for name, mode, convs, turns, sampled, seconds in results:
        print(f"| {name} | {mode} | {convs} | {turns:.2f} | {sampled} | {seconds:.1f} | {sampled / seconds:.1f} |")


if __name__ == "__main__":
    main()
