"""Faults found by trying real-world failure cases (issue 9), each with its input: the trainer side.

Tiny random models, transformers generation (``vllm.mode: off``); the server-side faults are in test_server_faults.py.
"""

from __future__ import annotations

import io
import json
import math
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from rich.console import Console
from transformers import AutoModelForCausalLM, GPT2LMHeadModel

from grpo_rollout.models.pretrained import disable_dropout
from grpo_rollout.trainer import recipe, train
from grpo_rollout.trainer.update.logprobs import CompletionLogprobs
from grpo_rollout.trainer.checkpoint import STATE_FILE, load_trainer_state
from grpo_rollout.trainer.guards import NonFiniteError
from grpo_rollout.trainer.reporting.progress import RichReporter
from tiny_model import tiny_config

pytestmark = pytest.mark.model


def _config(root: Path, model: Path, rollout: str = "", **training):
    return tiny_config(root, model, rollout={"function": rollout},
                       sampling={"num_generations": 4, "max_completion_length": 6},
                       training={"prompts_per_step": 2, "micro_batch_size": 8, "max_steps": 2, **training})


def _quiet() -> RichReporter:
    return RichReporter(quiet=True)


def _state(folder: Path) -> dict:
    return AutoModelForCausalLM.from_pretrained(folder).state_dict()


# 9.5: dropout stayed on while the trainer computed log-probs (KL 0.0014 at step 1, |Δlogp| 0.04, weights 0.88-1.13).
def test_dropout_is_off_in_every_logprob_computation(tmp_path, tiny_gpt2):
    assert disable_dropout(GPT2LMHeadModel.from_pretrained(tiny_gpt2)) > 0  # the fixture really has dropout
    result = train(_config(tmp_path, tiny_gpt2, max_steps=1, beta=0.1), base_dir=tmp_path, reporter=_quiet())
    first = result.history[0]
    assert first["kl"] == 0.0
    assert first["ratio/max"] == 1.0
    assert first["sampler/logprob_abs_diff"] < 1e-5
    assert first["sampler/is_weight_min"] == pytest.approx(1.0, abs=1e-5)
    assert first["sampler/is_weight_max"] == pytest.approx(1.0, abs=1e-5)


MINUS_INF_ROLLOUT = '''
from grpo_rollout.rollouts.single_turn import single_turn

def rollout(prompts, client, **sampling):
    """Single-turn sampling plus two inserted (mask 0) tokens whose log-prob placeholder is -inf."""
    out = single_turn(prompts, client=client, **sampling)
    out["completion_ids"] = [ids + [17, 18] for ids in out["completion_ids"]]
    out["logprobs"] = [lps + [float("-inf")] * 2 for lps in out["logprobs"]]
    out["completion_mask"] = [[1] * (len(ids) - 2) + [0, 0] for ids in out["completion_ids"]]
    return out
'''


# 9.6: a -inf placeholder log-prob (allowed by the contract on masked tokens) turned the loss into NaN.
def test_minus_inf_placeholders_never_reach_the_arithmetic(tmp_path, tiny_model):
    (tmp_path / "inf_rollout.py").write_text(MINUS_INF_ROLLOUT)
    cfg = _config(tmp_path, tiny_model, rollout=f"{tmp_path / 'inf_rollout.py'}:rollout", max_steps=2,
                  sampler_correction="sequence_truncate")
    result = train(cfg, base_dir=tmp_path, reporter=_quiet())
    for m in result.history:
        assert all(math.isfinite(m[k]) for k in ("loss", "grad_norm", "sampler/logprob_abs_diff",
                                                 "sampler/is_weight_mean", "sampler/is_weight_max"))
        assert m["nonfinite_skipped"] == 0 and m["sampler/logprob_abs_diff"] < 1e-4
    assert _state(result.checkpoint)["model.embed_tokens.weight"].isfinite().all()


def _poison_policy_logprobs(monkeypatch, steps) -> None:
    """Make the policy's log-probs NaN (what a diverged model gives) during the updates of ``steps`` (0-based)."""
    current = {}
    real_step, real_logprobs = recipe.GRPORecipe.train_step, CompletionLogprobs.forward

    def step(self, n):
        current["step"] = n
        return real_step(self, n)

    def poisoned(model, batch, *args, **kwargs):
        out = real_logprobs(model, batch, *args, **kwargs)
        logps, entropy = out if isinstance(out, tuple) else (out, None)  # with the entropy (issue 32.1)
        if logps.requires_grad and current.get("step") in steps:
            logps = logps * float("nan")
        return logps if entropy is None else (logps, entropy)

    monkeypatch.setattr(recipe.GRPORecipe, "train_step", step)
    monkeypatch.setattr(CompletionLogprobs, "forward", poisoned)


# 9.6: a NaN/inf loss or gradient must be caught: skip the step with a warning, stop after K in a row.
def test_nonfinite_updates_are_skipped_then_the_run_stops(tmp_path, tiny_model, monkeypatch):
    _poison_policy_logprobs(monkeypatch, {1, 2})
    buffer = io.StringIO()
    cfg = _config(tmp_path, tiny_model, max_steps=4, save_steps=1, max_nonfinite_steps=3)
    result = train(cfg, base_dir=tmp_path, reporter=RichReporter(Console(file=buffer, width=300)))
    assert [m["nonfinite_skipped"] for m in result.history] == [0, 1, 1, 0]
    assert "Step 2: the loss or gradient was NaN/inf; 1 update(s) skipped" in buffer.getvalue()
    out = tmp_path / "out"
    one, three, four = (_state(out / f"checkpoint-{k}") for k in (1, 3, 4))
    assert all(torch.equal(one[k], three[k]) for k in one)  # the skipped updates left the weights alone
    assert not all(torch.equal(one[k], four[k]) for k in one)  # ... and training went on after them
    assert all(v.isfinite().all() for v in four.values())

    # K in a row stops the run, keeping the finished steps (the weights are the last finite ones)
    root = tmp_path / "stop"
    root.mkdir()
    with pytest.raises(NonFiniteError, match=r"NaN/inf in 2 steps in a row \(steps 2-3; training.max_nonfinite"):
        train(_config(root, tiny_model, max_steps=4, max_nonfinite_steps=2), base_dir=root, reporter=_quiet())
    assert load_trainer_state(root / "out" / "checkpoint-3")["step"] == 3


# 9.7: clip_ratio/* and ratio/max were measured at the first iteration only, where the ratio is exactly 1.
def test_clip_metrics_are_measured_on_every_iteration(tmp_path, tiny_model):
    runs = {}
    for iterations in (1, 4):
        root = tmp_path / str(iterations)
        root.mkdir()
        runs[iterations] = train(_config(root, tiny_model, num_iterations=iterations, learning_rate=2e-2),
                                 base_dir=root, reporter=_quiet()).history
    assert all(m["ratio/max"] == 1.0 and m["clip_ratio/region"] == 0.0 for m in runs[1])
    assert all(m["ratio/max"] > 1.2 for m in runs[4])
    assert any(m["clip_ratio/region"] > 0 for m in runs[4])
    assert all(0.0 <= m["clip_ratio/region"] <= 1.0 for m in runs[4])


# 9.8: --resume latest on a finished run trained nothing and re-saved the last checkpoint without a word.
def test_resume_of_a_finished_run_says_so_and_saves_nothing(tmp_path, tiny_model):
    cfg = _config(tmp_path, tiny_model, max_steps=2)
    train(cfg, base_dir=tmp_path, reporter=_quiet())
    out = tmp_path / "out"
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*")}
    buffer = io.StringIO()
    result = train(cfg, base_dir=tmp_path, resume="latest", reporter=RichReporter(Console(file=buffer, width=300)))
    assert result.history == [] and result.steps == 2 and result.checkpoint == out / "checkpoint-2"
    assert "is already at step 2 and training.max_steps is 2: nothing to train" in buffer.getvalue()
    assert "training.max_steps=4" in buffer.getvalue()
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*")} == before  # nothing written, nothing rewritten


KILLED_SAVE = '''
import os, signal, sys
import torch
from grpo_rollout.config import load_config
from grpo_rollout.trainer import train
from grpo_rollout.trainer.reporting.progress import RichReporter

real_save = torch.save

def dying_save(obj, f, *args, **kwargs):
    """Die half-way through writing the trainer state of checkpoint 2, as a kill -9 or an OOM would."""
    if isinstance(obj, dict) and obj.get("step") == 2:
        with open(f, "wb") as fh:
            fh.write(b"half a file")
        os.kill(os.getpid(), signal.SIGKILL)
    return real_save(obj, f, *args, **kwargs)

torch.save = dying_save
loaded = load_config(sys.argv[1])
train(loaded.config, base_dir=loaded.base_dir, reporter=RichReporter(quiet=True))
'''


# Fault injection: a process killed during a save leaves the previous checkpoint usable.
def test_kill_during_a_save_then_resume_from_the_previous_checkpoint(tmp_path, tiny_model):
    from grpo_rollout.config import to_yaml

    cfg = _config(tmp_path, tiny_model, max_steps=3, save_steps=1)
    (tmp_path / "config.yaml").write_text(to_yaml(cfg))
    (tmp_path / "killed.py").write_text(KILLED_SAVE)
    proc = subprocess.run([sys.executable, str(tmp_path / "killed.py"), str(tmp_path / "config.yaml")],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    out = tmp_path / "out"
    assert (out / "checkpoint-1" / STATE_FILE).is_file()
    assert not (out / "checkpoint-2").exists() and (out / "checkpoint-2.tmp").is_dir()  # half-written, set aside
    resumed = train(cfg, base_dir=tmp_path, resume="latest", reporter=_quiet())
    assert resumed.steps == 3 and len(resumed.history) == 2  # from checkpoint-1: steps 2 and 3
    assert not (out / "checkpoint-2.tmp").exists()
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2", "checkpoint-3"]
    assert [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3]


def test_save_total_limit_and_weights_only_checkpoints(tmp_path, tiny_model):
    cfg = _config(tmp_path, tiny_model, max_steps=4, save_steps=1, save_total_limit=2, save_only_model=True)
    train(cfg, base_dir=tmp_path, reporter=_quiet())
    out = tmp_path / "out"
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-3", "checkpoint-4"]
    state = load_trainer_state(out / "checkpoint-4")
    assert state["optimizer"] is None and state["step"] == 4 and state["scheduler"] is not None
    full = tmp_path / "full"
    full.mkdir()
    train(_config(full, tiny_model, max_steps=1), base_dir=full, reporter=_quiet())
    with_optimizer = (full / "out" / "checkpoint-1" / STATE_FILE).stat().st_size
    assert (out / "checkpoint-4" / STATE_FILE).stat().st_size < with_optimizer / 10
    # a weights-only checkpoint still resumes (AdamW's moments restart, and the run says so)
    buffer = io.StringIO()
    cfg.training.max_steps = 5
    resumed = train(cfg, base_dir=tmp_path, resume="latest", reporter=RichReporter(Console(file=buffer, width=300)))
    assert resumed.steps == 5 and "no optimizer state (training.save_only_model)" in buffer.getvalue()
