"""Shared by the streaming-rollout tests (tests/integration/test_streaming*.py): a config trained against the simulated
server (benchmarks/simulated_server.py), what a run trained, and the user scripts the tests train with."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tiny_model import tiny_config

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
from simulated_server import SimulatedServer, lognormal_latency, use_simulated_server  # noqa: E402

#: metric prefixes that differ between two identical runs (clocks, memory)
TIMES = ("time/", "memory/")


def streaming_config(tmp_path, tiny_model, monkeypatch, k, rows=40, median_s=0.05, **training):
    use_simulated_server(monkeypatch.setattr,
                         lambda loaded: SimulatedServer(loaded.tokenizer, lognormal_latency(median_s, seed=3), 49152))
    return tiny_config(tmp_path, tiny_model, rows=rows, training={"max_staleness": k, **training},
                       vllm={"mode": "attach", "url": "http://simulated", "max_logprob_mismatch": None})


def trained_prompts(run_dir: Path):
    """The prompt of each trained group, step by step (completions.jsonl: num_generations lines per group)."""
    by_step = {}
    for line in (run_dir / "completions.jsonl").read_text().splitlines():
        row = json.loads(line)
        by_step.setdefault(row["step"], []).append(row["prompt"])
    return {step: prompts[::8] for step, prompts in by_step.items()}


def user_module(path: Path):
    """The module the trainer loaded from the user's file ``path``."""
    return next(m for name, m in sys.modules.items() if name.startswith("grpo_rollout_user_") and
                getattr(m, "__file__", "") == str(path))


FAILING = '''
from grpo_rollout.rollouts import builtin_rollout

def rollout(prompts, client, **kw):
    if prompts[0] == "Count to 17.":
        raise KeyError("no tool for 17")
    return builtin_rollout()(prompts, client=client, **kw)
'''

ASYNC = '''
import asyncio
import time

LOOPS = set()

async def rollout(prompts, client, n, max_completion_length, seed, **kw):
    # two turns; groups of odd prompts wait between them until a weight sync lands (the even ones let steps go on)
    LOOPS.add(id(asyncio.get_running_loop()))
    ids = client.encode_prompts(prompts)
    first = await client.agenerate(ids, n=n, max_tokens=2, seed=seed)
    seen, deadline = client.weight_version, time.monotonic() + 10
    while int(prompts[0].split()[-1].rstrip(".")) % 2 and client.weight_version == seen and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    second = await client.agenerate([p + c for p, c in zip(ids * n, first.completion_ids)], n=1,
                                    max_tokens=max_completion_length - 2, seed=seed)
    return {"prompt_ids": ids, "completion_ids": [a + b for a, b in zip(first.completion_ids,
                                                                        second.completion_ids)],
            "logprobs": [a + b for a, b in zip(first.logprobs, second.logprobs)]}
'''


RECORDING = '''
from grpo_rollout.rollouts import builtin_rollout

CALLS = []

def rollout(prompts, client, **kw):
    CALLS.append((prompts[0], client.weight_version))  # the server's version when the call starts
    return builtin_rollout()(prompts, client=client, **kw)
'''


SLOW_SEVENS = '''
import time
from grpo_rollout.rollouts import builtin_rollout

def rollout(prompts, client, **kw):
    time.sleep(0.4 if "7" in prompts[0] else 0.01)  # a long tail: prompts with a 7
    return builtin_rollout()(prompts, client=client, **kw)
'''


STUCK_SEVENS = SLOW_SEVENS.replace("0.4 if", "600 if")  # an episode that would run for ten minutes


TWO_RANKS = '''
import sys, time
sys.path.insert(0, sys.argv[2])
import torch.distributed as dist
from simulated_server import SimulatedServer, use_simulated_server
from grpo_rollout.config import load_config
from grpo_rollout.trainer import train
from grpo_rollout.trainer.reporting.progress import RichReporter

use_simulated_server(setattr, lambda loaded: SimulatedServer(loaded.tokenizer, lambda: 0.02, 49152))
dist.init_process_group("gloo")
loaded = load_config(sys.argv[1])
train(loaded.config, base_dir=loaded.base_dir, reporter=RichReporter(quiet=True))
dist.destroy_process_group()
'''

ONE_RANK = '''
import sys
sys.path.insert(0, sys.argv[2])
from simulated_server import SimulatedServer, use_simulated_server
from grpo_rollout.config import load_config
from grpo_rollout.trainer import train
from grpo_rollout.trainer.reporting.progress import RichReporter

use_simulated_server(setattr, lambda loaded: SimulatedServer(loaded.tokenizer, lambda: 0.02, 49152))
loaded = load_config(sys.argv[1])
try:
    train(loaded.config, base_dir=loaded.base_dir, reporter=RichReporter(quiet=True))
except KeyboardInterrupt:
    sys.exit(130)
'''
