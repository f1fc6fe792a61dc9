"""What the recording endpoint and verifiers cost per episode, apart from the model (issue 41).

The same one-call episode played three ways against a model that answers at once (a scripted client: no sampling
time), so what is left is each path's own work: the built-in multi-turn rollout (no HTTP), an agent with the
``openai`` client through the recording endpoint (one HTTP round trip per call), and a verifiers 0.4 taskset
(a fresh ``vf.Env`` per episode, its interception server, the chat harness, scoring). Seconds per episode and the
ratio to the built-in rollout, in one run (the machine is shared).

    .venv/bin/python benchmarks/agent_overhead.py --prompts 8 --n 8 --repeats 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

AGENT = '''
from openai import OpenAI


def once(base_url, api_key, model, prompt, **row):
    client = OpenAI(base_url=base_url, api_key=api_key)
    return client.chat.completions.create(model=model, messages=prompt).choices[0].message.content
'''


def add(a: int, b: int) -> int:
    """Add two integers (the built-in rollout needs a tool; the scripted model never calls it).

    Args:
        a: the first
        b: the second
    """
    return a + b


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    from transformers import AutoTokenizer

    from grpo_rollout.data.verifiers_tasks import task_rows
    from grpo_rollout.integrations.verifiers.verifiers import verifiers_rollout
    from grpo_rollout.models.builtin import resolve_model_path
    from grpo_rollout.rollouts.agent import agent_rollout
    from grpo_rollout.rollouts.run_end import end_run
    from grpo_rollout.rollouts.tool_calling import tool_calling_rollout
    from scripted_client import ScriptedClient

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path("builtin:smollm2-135m-instruct"))
    client = ScriptedClient(tokenizer, lambda prompt: ("5", True))
    rows = task_rows(str(REPO / "examples" / "verifiers_sums" / "sums_taskset.py"), {"num_tasks": args.prompts})
    prompts = [r["prompt"] for r in rows]
    folder = Path(tempfile.mkdtemp())
    (folder / "agent.py").write_text(AGENT)
    common = dict(client=client, tokenizer=tokenizer, n=args.n, max_completion_length=64, seed=0)

    ways = {
        "built-in tool-calling rollout (one turn, no HTTP)": lambda: tool_calling_rollout(
            prompts, tools=[add], max_turns=1, **common),
        "agent: openai client through the recording endpoint": lambda: agent_rollout(
            prompts, agent=str(folder / "agent.py") + ":once", rows=rows, **common),
        "verifiers 0.4 taskset (chat harness, interception, scoring)": lambda: verifiers_rollout(
            prompts, rows=rows, **common),
    }
    episodes = args.prompts * args.n
    seconds = {}
    try:
        for name, play in ways.items():
            play()  # warm: imports, the endpoint's start
            times = []
            for _ in range(args.repeats):
                start = time.perf_counter()
                out = play()
                times.append(time.perf_counter() - start)
                assert len(out["completion_ids"]) == episodes
            seconds[name] = statistics.median(times) / episodes
    finally:
        end_run()
    base = seconds[next(iter(ways))]
    print(f"{args.prompts} prompts x {args.n} episodes, one call each, median of {args.repeats}")
    print("| path | ms per episode | × built-in |\n|---|---:|---:|")
    for name, s in seconds.items():
        print(f"| {name} | {s * 1000:.1f} | {s / base:.1f} |")


if __name__ == "__main__":
    main()
