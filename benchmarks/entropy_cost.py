"""Benchmark: what the policy's entropy costs a training micro-batch (issue 32.1). The entropy is measured on every
step's first iteration (``"measure"``: no gradient), and with ``training.entropy_coef > 0`` it is part of the loss
(``"train"``: differentiable); against the log-probs alone (``None``, the cost before issue 32), on the embedded
SmolLM2-135M-Instruct, one forward + backward of a micro-batch each, the three interleaved over ``--repeats`` rounds.

    .venv/bin/python benchmarks/entropy_cost.py [--sequences 8] [--prompt 32] [--completion 96] [--repeats 3]

Prints one line per mode (median seconds, and the ratio to the log-probs alone; paste them into docs/benchmarks.md
with the command and the machine).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from grpo_rollout.models.builtin import resolve_model_path
from grpo_rollout.trainer.update.logprobs import completion_logprobs, pack

MODES = (None, "measure", "train")


def one_pass(model, batch, mode):
    start = time.perf_counter()
    out = completion_logprobs(model, batch, 1.0, 1024, entropy=mode)
    logps, entropy = out if mode else (out, None)
    loss = -logps.sum() - (entropy.sum() * 0.01 if mode == "train" else 0.0)
    loss.backward()
    model.zero_grad(set_to_none=True)
    return time.perf_counter() - start


def main() -> None:
    from transformers import AutoModelForCausalLM

    ap = argparse.ArgumentParser()
    ap.add_argument("--sequences", type=int, default=8)
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--completion", type=int, default=96)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    model = AutoModelForCausalLM.from_pretrained(resolve_model_path("builtin:smollm2-135m-instruct"),
                                                 dtype=torch.float32)
    gen = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size
    prompts = torch.randint(0, vocab, (args.sequences, args.prompt), generator=gen).tolist()
    completions = torch.randint(0, vocab, (args.sequences, args.completion), generator=gen).tolist()
    batch = pack(prompts, completions, 0)
    one_pass(model, batch, None)  # warm-up
    times = {mode: [] for mode in MODES}
    for _ in range(args.repeats):
        for mode in MODES:
            times[mode].append(one_pass(model, batch, mode))
    base = statistics.median(times[None])
    print(f"micro-batch: {args.sequences} sequences x ({args.prompt} prompt + {args.completion} completion) tokens, "
          f"vocab {vocab}, {torch.get_num_threads()} threads, median of {args.repeats}")
    for mode in MODES:
        median = statistics.median(times[mode])
        print(f"entropy={str(mode):8s} forward+backward {median:6.2f} s  x{median / base:.3f}")


if __name__ == "__main__":
    main()
