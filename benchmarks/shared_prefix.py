"""Benchmark: the update's forward + backward with each group's shared prompt forwarded once
(``training.shared_prefix``, issue 52.1) against today's padding-free layout, on an agent-shaped micro-batch: one long shared system prompt (with
tool schemas, ``--prompt`` tokens) and ``--answers`` answers of ``--min-answer``-``--max-answer`` tokens, random ids.
Both layouts run the same micro-batch (the policy's log-probs at the completion tokens, a loss, its backward),
interleaved over ``--repeats`` rounds; the optimizer step is the same either way and left out.

    .venv/bin/python benchmarks/shared_prefix.py [--model builtin:smollm2-135m-instruct|tiny] [--prompt 1000]
        [--answers 8] [--min-answer 50] [--max-answer 200] [--repeats 3] [--dtype float32|bfloat16]
        [--no-checkpointing]

Prints the tokens each layout forwards, the median seconds of each and their ratio (paste into docs/benchmarks.md
with the command and the machine); also checks that both layouts give the same log-probs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from grpo_rollout.models.builtin import resolve_model_path
from grpo_rollout.trainer.update.logprobs import build_micro_batches, completion_logprobs
from grpo_rollout.trainer.update.shared_prefix import pack_shared


def one_update(model, batches, dtype):
    """Seconds for the forward + backward passes over ``batches``, and the log-probs."""
    start = time.perf_counter()
    out = []
    for mb in batches:
        with torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32):
            logps = completion_logprobs(model, mb.packed, 1.0, 1024)
        loss = -(logps * mb.advantages.unsqueeze(1) * mb.mask).sum() / mb.mask.sum()
        loss.backward()
        out.append(logps.detach())
    model.zero_grad(set_to_none=True)
    return time.perf_counter() - start, out


def load(name: str):
    from transformers import AutoModelForCausalLM

    if name == "tiny":  # the tests' 2-layer Llama
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
        from tiny_model import make_tiny_model

        name = str(make_tiny_model(Path(tempfile.mkdtemp()) / "tiny"))
    return AutoModelForCausalLM.from_pretrained(resolve_model_path(name), dtype=torch.float32).train()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="builtin:smollm2-135m-instruct")
    ap.add_argument("--prompt", type=int, default=1000)
    ap.add_argument("--answers", type=int, default=8)
    ap.add_argument("--min-answer", type=int, default=50)
    ap.add_argument("--max-answer", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--no-checkpointing", action="store_true", help="without gradient checkpointing (the default of "
                    "training.gradient_checkpointing is on)")
    args = ap.parse_args()
    dtype = getattr(torch, args.dtype)
    model = load(args.model)
    if not args.no_checkpointing:
        model.gradient_checkpointing_enable()
    gen = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size
    prompt = torch.randint(0, vocab, (args.prompt,), generator=gen).tolist()
    lengths = torch.randint(args.min_answer, args.max_answer + 1, (args.answers,), generator=gen).tolist()
    answers = [torch.randint(0, vocab, (n,), generator=gen).tolist() for n in lengths]
    adv = torch.linspace(-1, 1, args.answers)
    layouts = {shared: build_micro_batches([prompt] * args.answers, answers, [[1] * n for n in lengths], None, adv,
                                           args.answers, 0, torch.device("cpu"), True,
                                           pack_shared if shared else None)
               for shared in (False, True)}
    one_update(model, layouts[True], dtype)  # warm-up (the shorter one)
    times = {False: [], True: []}
    logps = {}
    for _ in range(args.repeats):
        for shared in (False, True):
            seconds, logps[shared] = one_update(model, layouts[shared], dtype)
            times[shared].append(seconds)
    gap = max(float((a - b).abs().max()) for a, b in zip(logps[True], logps[False]))
    off, on = statistics.median(times[False]), statistics.median(times[True])
    print(f"{args.model}: {args.answers} answers of {min(lengths)}-{max(lengths)} tokens after one "
          f"{args.prompt}-token prompt, {args.dtype}, gradient checkpointing {not args.no_checkpointing}, "
          f"{torch.get_num_threads()} threads, median of {args.repeats}")
    for shared, median in ((False, off), (True, on)):
        tokens = sum(mb.packed.num_tokens for mb in layouts[shared])
        print(f"shared_prefix={str(shared).lower():5s} tokens forwarded {tokens:6d}  forward+backward {median:7.2f} s")
    print(f"update speed-up (off / on): x{off / on:.2f}; largest |log-prob difference| {gap:.2e}")


if __name__ == "__main__":
    main()
