"""Benchmark: one GRPO job with TRL's GRPOTrainer and with grpo-rollout (``vllm.mode: off`` and ``spawn``), run one
after the other in one invocation (alternating when ``--rounds`` > 1), same model, data, seeds and lengths.

    make bench                      # installs TRL (only for this script) and runs it with the defaults
    .venv/bin/python benchmarks/vs_trl.py [--steps 4] [--rounds 1] [--model builtin:smollm2-135m-instruct]

The job (issue 11): SmolLM2-135M-Instruct in float32; per step 8 prompts "Name one thing that is usually <colour>."
× 4 completions of up to 64 tokens at temperature 1; reward 1 when the colour word appears; beta 0, learning rate
1e-6, loss ``dapo``, one micro-batch of 32 sequences. Every run is a fresh child process (its peak RSS is the
trainer's own; a spawned vLLM server is a separate process and not counted).

Printed: per-step times, medians over steps 2.. (the first warms up), completion tokens/s of each generation
backend, training GFLOP/s (6 · N · real tokens / time) next to the machine's fp32 matmul rate measured in the same
run, the generation compute limit (2 · N · tokens at that rate), sync share, peak RSS, and ratios to TRL.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COLOURS = ["red", "green", "blue", "yellow", "orange", "purple", "white", "black", "brown", "pink", "grey", "gold",
           "silver", "violet", "navy", "beige"]
BATCH = {"prompts": 8, "n": 4, "max_tokens": 64}


def rows(count: int = 64):
    """Chat prompts asking for something of a colour, with the colour as ``answer``."""
    return [{"prompt": [{"role": "user", "content": f"Name one thing that is usually {c}."}], "answer": c}
            for c in (COLOURS[i % len(COLOURS)] for i in range(count))]


def colour_reward(completions, answer, **kwargs):
    """1.0 when the colour word appears in the completion."""
    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return [1.0 if a in t.lower() else 0.0 for t, a in zip(texts, answer)]


def matmul_gflops(size: int = 2048, repeats: int = 10) -> float:
    """The machine's fp32 matmul rate on all threads (GFLOP/s, best of ``repeats``)."""
    import torch

    a, b = torch.randn(size, size), torch.randn(size, size)
    a @ b
    best = min(_timed(lambda: a @ b) for _ in range(repeats))
    return 2 * size ** 3 / best / 1e9


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


# --- workers (each in its own process) -------------------------------------------------------------------------------

def work_trl(args, out: dict) -> None:
    import torch
    import transformers
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from grpo_rollout.models.builtin import resolve_model_path

    path = resolve_model_path(args.model)
    gen = {"seconds": 0.0, "tokens": 0}
    real_generate = transformers.GenerationMixin.generate

    def timed_generate(self, *a, **kw):  # TRL's generation time and tokens, for tokens/s
        start = time.perf_counter()
        result = real_generate(self, *a, **kw)
        gen["seconds"] += time.perf_counter() - start
        seqs = result.sequences if hasattr(result, "sequences") else result
        prompt_len = (kw.get("input_ids") if kw.get("input_ids") is not None else a[0]).shape[1]
        pad = self.generation_config.pad_token_id
        gen["tokens"] += int((seqs[:, prompt_len:] != pad).sum())
        return result

    transformers.GenerationMixin.generate = timed_generate
    steps, marks = [], {}

    class Clock(TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):
            marks["start"], marks["gen"], marks["tokens"] = time.perf_counter(), gen["seconds"], gen["tokens"]

        def on_step_end(self, a, state, control, **kw):
            steps.append({"step": time.perf_counter() - marks["start"], "generation": gen["seconds"] - marks["gen"],
                          "gen_tokens": gen["tokens"] - marks["tokens"]})

    model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, args.dtype))
    tokenizer = AutoTokenizer.from_pretrained(path)
    gpu = {"use_cpu": False, "bf16": args.dtype == "bfloat16", "use_vllm": bool(args.trl_vllm)} if args.gpu else \
        {"use_cpu": True, "bf16": False, "use_vllm": False}
    if args.gpu and args.trl_vllm:  # TRL's own vLLM: "colocate" on the training GPU, or "server" (trl vllm-serve)
        gpu.update(vllm_mode=args.trl_vllm, **({"vllm_server_base_url": args.trl_vllm_url} if args.trl_vllm_url else {}))
    config = GRPOConfig(output_dir=tempfile.mkdtemp(),  # save_strategy "no": nothing is written there per_device_train_batch_size=BATCH["prompts"] * BATCH["n"],
                        gradient_accumulation_steps=1, num_generations=BATCH["n"],
                        max_completion_length=BATCH["max_tokens"], temperature=1.0, beta=0.0, learning_rate=1e-6,
                        loss_type="dapo", max_steps=args.steps, logging_steps=1, save_strategy="no",
                        report_to="none", seed=0, disable_dropout=True, dataloader_num_workers=0, **gpu)
    trainer = GRPOTrainer(model=model, reward_funcs=[colour_reward], args=config,
                          train_dataset=Dataset.from_list(rows()), processing_class=tokenizer, callbacks=[Clock()])
    trainer.train()
    out["steps"] = [{**s, "training": s["step"] - s["generation"]} for s in steps]


def work_grpo(args, out: dict, mode: str) -> None:
    from grpo_rollout.config import config_from_dict
    from grpo_rollout.trainer import train
    from grpo_rollout.trainer.reporting.progress import RichReporter

    folder = Path(tempfile.mkdtemp())
    (folder / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows()))
    cfg, problems = config_from_dict({
        "model": {"name_or_path": args.model, "dtype": args.dtype},
        "data": {"train": str(folder / "data.jsonl"), "shuffle": False},
        "rewards": [{"function": f"{Path(__file__).resolve()}:colour_reward"}],
        "sampling": {"num_generations": BATCH["n"], "temperature": 1.0, "max_completion_length": BATCH["max_tokens"],
                     "max_prompt_length": 128, "seed": 0},
        "training": {"output_dir": str(folder / "out"), "max_steps": args.steps, "prompts_per_step": BATCH["prompts"],
                     "micro_batch_size": BATCH["prompts"] * BATCH["n"], "learning_rate": 1e-6, "beta": 0.0,
                     "loss_type": "dapo", **json.loads(args.training or "{}")},
        "vllm": {"mode": mode, **json.loads(args.vllm or "{}")},
    })
    assert not [p for p in problems if p.is_error], problems
    start = time.perf_counter()
    result = train(cfg, base_dir=ROOT, reporter=RichReporter(quiet=True))
    out["setup"] = time.perf_counter() - start - sum(m["time/step"] for m in result.history)  # + the final save
    out["steps"] = [{"step": m["time/step"], "generation": m["time/generation"], "training": m["time/training"],
                     "sync": m["time/sync"], "gen_tokens": m["completions/mean_length"] * BATCH["prompts"] * BATCH["n"],
                     "forward_tokens": m["tokens/forward"], "padded_tokens": m["tokens/padded"]}
                    for m in result.history]
    shutil.rmtree(folder, ignore_errors=True)  # the run's checkpoint (1.6 GiB here): nothing reads it


ROOT = Path(__file__).resolve().parent.parent
#: runs that are spawn mode with one training setting changed
SPAWN_VARIANTS = {"grpo-async": {"training": {"async_generation": True}}, "grpo-compile": {"training": {"compile": True}},
                  "grpo-ckpt": {"training": {"gradient_checkpointing": True}},
                  "grpo-no-ckpt": {"training": {"gradient_checkpointing": False}},
                  "grpo-graph": {"vllm": {"enforce_eager": False}}}


def worker(args) -> None:
    out: dict = {}
    if args.worker == "trl":
        work_trl(args, out)
    elif args.worker in SPAWN_VARIANTS:  # spawn with one training setting changed
        extra = SPAWN_VARIANTS[args.worker]
        args.training = json.dumps({**json.loads(args.training or "{}"), **extra.get("training", {})})
        args.vllm = json.dumps({**json.loads(args.vllm or "{}"), **extra.get("vllm", {})})
        work_grpo(args, out, "spawn")
    else:
        work_grpo(args, out, args.worker.split("-", 1)[1])
    out["peak_rss_gib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20
    print("RESULT " + json.dumps(out))


# --- the comparison ----------------------------------------------------------------------------------------------------

def run_child(kind: str, args) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", kind, "--steps", str(args.steps),
           "--model", args.model, "--dtype", args.dtype]
    if args.gpu:
        cmd += ["--gpu"] + (["--trl-vllm", args.trl_vllm] if args.trl_vllm else []) + \
            (["--trl-vllm-url", args.trl_vllm_url] if args.trl_vllm_url else [])
    if args.training:
        cmd += ["--training", args.training]
    if args.vllm:
        cmd += ["--vllm", args.vllm]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"{kind} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--model", default="builtin:smollm2-135m-instruct")
    parser.add_argument("--only", default="trl,grpo-off,grpo-spawn,grpo-async",
                        help="which runs, comma-separated (grpo-async / grpo-compile / grpo-ckpt / grpo-no-ckpt / "
                             "grpo-graph: spawn with training.async_generation / compile / gradient_checkpointing on "
                             "/ off, vllm.enforce_eager false)")
    parser.add_argument("--json", default=None, help="also write every run's raw per-step numbers to this file")
    parser.add_argument("--training", default=None, help="JSON of extra training settings for grpo-rollout")
    parser.add_argument("--vllm", default=None, help="JSON of extra vllm settings for grpo-rollout")
    parser.add_argument("--dtype", default="float32", help="float32 (CPU) or bfloat16 (GPU)")
    parser.add_argument("--gpu", action="store_true", help="train on CUDA (TRL: use_cpu off; bf16 with --dtype)")
    parser.add_argument("--trl-vllm", default=None, choices=["colocate", "server"],
                        help="--gpu: TRL generates with its own vLLM (server: start `trl vllm-serve` first)")
    parser.add_argument("--trl-vllm-url", default=None, help="TRL's vLLM server URL (vllm_mode server)")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)

    from grpo_rollout.models.builtin import resolve_model_path
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(resolve_model_path(args.model))
    n_params = _param_count(config)
    rate = matmul_gflops()
    kinds = args.only.split(",")
    runs = {k: [] for k in kinds}
    for _ in range(args.rounds):
        for kind in kinds:
            result = run_child(kind, args)
            runs[kind].append(result)
            setup = f" (set-up and save {result['setup']:.0f} s)" if "setup" in result else ""
            print(f"{kind}: " + " ".join(f"{s['step']:.1f}" for s in result["steps"]) + setup, file=sys.stderr)
    rate_after = matmul_gflops()
    print(f"fp32 matmul rate (2048², all threads): {rate:.0f} GFLOP/s before, {rate_after:.0f} after; "
          f"N = {n_params / 1e6:.1f} M parameters\n")
    table = {}
    for kind, results in runs.items():
        steps = [s for r in results for s in r["steps"][1:]]
        med = {k: statistics.median(s[k] for s in steps) for k in steps[0] if isinstance(steps[0][k], (int, float))}
        table[kind] = med
        med["rss"] = max(r["peak_rss_gib"] for r in results)
        med["all"] = [round(s["step"], 1) for r in results for s in r["steps"]]
    if args.json:
        Path(args.json).write_text(json.dumps({"matmul_gflops": [rate, rate_after], "params": n_params, "runs": runs}))
    base = table.get("trl", {}).get("step")

    def tokens_per_s(m: dict) -> str:  # async_generation: the rollout overlaps training, the wait can be ~0
        return f"{m['gen_tokens'] / m['generation']:.0f}" if m["generation"] > 0.05 else "(overlapped)"

    print("| run | steps (s) | median step (s) | vs TRL | generation (s) | tokens/s | training (s) | GFLOP/s | "
          "sync share | peak RSS (GiB) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for kind, m in table.items():
        gflops = (6 * n_params * m["forward_tokens"] / m["training"] / 1e9) if "forward_tokens" in m else None
        print(f"| {kind} | {' / '.join(map(str, m['all']))} | {m['step']:.1f} | "
              f"{m['step'] / base if base else float('nan'):.2f} | {m['generation']:.1f} | "
              f"{tokens_per_s(m)} | {m['training']:.1f} | "
              f"{f'{gflops:.0f} ({gflops / rate:.0%})' if gflops else '-'} | "
              f"{m.get('sync', 0) / m['step']:.1%} | {m['rss']:.2f} |")
    spawn = table.get("grpo-spawn")
    if spawn and "forward_tokens" in spawn:
        limit = 2 * n_params * spawn["forward_tokens"] / (rate * 1e9)
        print(f"\ngeneration compute limit (2·N·(prompt+completion tokens) at the matmul rate): {limit:.1f} s; "
              f"spawn generation is {spawn['generation'] / limit:.1f}× that")
        print(f"padding: {spawn['padded_tokens'] / spawn['forward_tokens']:.2f} padded tokens per real token")
    if "grpo-off" in table and spawn:
        off = table["grpo-off"]
        print(f"vLLM vs transformers generate: {spawn['gen_tokens'] / spawn['generation'] / (off['gen_tokens'] / off['generation']):.1f}× the tokens/s")


def _param_count(config) -> int:
    from transformers import AutoModelForCausalLM

    import torch

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


if __name__ == "__main__":
    main()
