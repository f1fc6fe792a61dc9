"""GPU check of ``vllm.weight_transfer: nccl``: after an NCCL weight sync the server's greedy tokens and log-probs
equal the trainer's, and how long the sync takes next to the folder transfer. Needs 2 GPUs (NCCL cannot join two
processes on one device): the trainer on ``cuda:0``, the server on GPU 1.

    python benchmarks/nccl_check.py [--model builtin:smollm2-135m-instruct] [--dtype bfloat16]

Prints one line per check and a markdown table for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="builtin:smollm2-135m-instruct")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--syncs", type=int, default=5)
    args = parser.parse_args()
    if torch.cuda.device_count() < 2:
        raise SystemExit("needs 2 GPUs: the trainer on GPU 0, the vLLM server on GPU 1")

    from grpo_rollout.generation.nccl_sync import NcclWeightSync
    from grpo_rollout.generation.server.launch import ServerSettings
    from grpo_rollout.generation.spawn import ManagedServer
    from grpo_rollout.generation.vllm_client import VllmClient
    from grpo_rollout.models.pretrained import load_model_and_tokenizer

    model, tokenizer, path = load_model_and_tokenizer(args.model, args.dtype)
    model.to("cuda:0").eval()
    with tempfile.TemporaryDirectory() as tmp:
        server = ManagedServer(ServerSettings(model=path, port=0, dtype=args.dtype, max_model_len=512, devices="1",
                                              gpu_memory_utilization=0.5, weight_transfer="nccl"),
                               Path(tmp) / "vllm.log")
        server.start()
        try:
            client = VllmClient(server.url, tokenizer, transfer="folder")
            sync = NcclWeightSync([server.url], model, rank=0)
            with torch.no_grad():  # change every weight, the tied embedding too
                gen = torch.Generator(device="cuda:0").manual_seed(0)
                for p in model.parameters():
                    p.add_(torch.randn(p.shape, generator=gen, device=p.device, dtype=p.dtype) * 0.02)
            times = {"nccl": [], "folder": []}
            for _ in range(args.syncs):
                start = time.perf_counter()
                sync.send()
                times["nccl"].append(time.perf_counter() - start)
                start = time.perf_counter()
                client.weight_version = client.health()["weight_version"]
                client.update_weights(model)
                times["folder"].append(time.perf_counter() - start)
            sync.send()  # the last word: NCCL
            prompt = tokenizer("The capital of France is", add_special_tokens=False)["input_ids"]
            out = client.generate([prompt], n=1, temperature=0.0, max_tokens=8)
            with torch.no_grad():
                ids = out.completion_ids[0]
                logits = model(torch.tensor([prompt + ids], device="cuda:0")).logits[0, len(prompt) - 1:-1].float()
                ref = logits.log_softmax(-1).gather(-1, torch.tensor(ids, device="cuda:0")[:, None]).squeeze(-1)
                greedy = logits.argmax(-1).tolist()
            diff = (torch.tensor(out.logprobs[0]) - ref.cpu()).abs().max().item()
            print(f"greedy tokens equal: {greedy == ids}; max |Δlogp| server vs trainer: {diff:.2e} ({args.dtype})")
            print("| transfer | median sync (s) |\n|---|---:|")
            for name, values in times.items():
                print(f"| {name} | {sorted(values)[len(values) // 2]:.3f} |")
            sync.close()
        finally:
            server.stop()


if __name__ == "__main__":
    main()
