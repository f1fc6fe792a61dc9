"""Resuming with a changed config, and the logged learning rate and update statistics (issue 18.8, 18.9)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from grpo_rollout.trainer import train
from grpo_rollout.orchestrator.prompt_order import PromptOrder
from grpo_rollout.trainer.reporting.progress import RichReporter
from tiny_model import tiny_config

pytestmark = pytest.mark.model


def _prompts_by_step(out: Path) -> dict:
    rows = [json.loads(x) for x in (out / "completions.jsonl").read_text().splitlines()]
    steps: dict = {}
    for r in rows:
        steps.setdefault(r["step"], [])
        if r["prompt"] not in steps[r["step"]]:
            steps[r["step"]].append(r["prompt"])
    return steps


def test_resume_with_fewer_prompts_per_step_continues_the_order(tmp_path, tiny_model):
    """18.8a: 2 steps of 4 prompts, then a resume with 2 prompts a step (the fix validate-config suggests when the
    world size does not divide prompts_per_step) replayed step 2's prompts. Now steps 3-4 take positions 8-11 of the
    order: the next prompts, none seen before."""
    quiet = RichReporter(quiet=True)
    train(tiny_config(tmp_path, tiny_model, rows=16, training={"max_steps": 2}), base_dir=tmp_path, reporter=quiet)
    resumed = tiny_config(tmp_path, tiny_model, rows=16, training={"max_steps": 4, "prompts_per_step": 2})
    train(resumed, base_dir=tmp_path, resume="latest", reporter=quiet)
    steps = _prompts_by_step(tmp_path / "out")
    order = PromptOrder(16, 1, resumed.training.seed, shuffle=True)
    expected = [f"Count to {order.indices(p)[0]}." for p in range(12)]
    assert steps[1] + steps[2] == expected[:8]
    assert steps[3] + steps[4] == expected[8:12]
    assert not set(steps[3] + steps[4]) & set(steps[1] + steps[2])


def test_raising_max_steps_on_resume_continues_the_new_schedule(tmp_path, tiny_model):
    """18.8b/c: a linear schedule over 2 steps ends at lr 0; resumed with max_steps 4, step 3 trained at 0.0 (weights
    unchanged) while 0.00025 was logged, and every logged rate was the next step's. Now step k logs and uses the
    rate of the schedule at k: 1e-3, 5e-4 (2 steps), then 5e-4, 2.5e-4 on the 4-step schedule."""
    console_reporter = RichReporter(quiet=True)
    base = {"learning_rate": 1e-3, "lr_scheduler": "linear", "warmup_steps": 0, "save_steps": 1}
    first = train(tiny_config(tmp_path, tiny_model, training={**base, "max_steps": 2}), base_dir=tmp_path,
                  reporter=console_reporter)
    assert [m["learning_rate"] for m in first.history] == pytest.approx([1e-3, 5e-4])
    second = train(tiny_config(tmp_path, tiny_model, training={**base, "max_steps": 4}), base_dir=tmp_path,
                   resume="latest", reporter=console_reporter)
    assert [m["learning_rate"] for m in second.history] == pytest.approx([5e-4, 2.5e-4])
    out = tmp_path / "out"
    two, three = (load_file(out / f"checkpoint-{k}" / "model.safetensors") for k in (2, 3))
    changed = [k for k in two if "embed_tokens" not in k and not torch.equal(two[k], three[k])]
    assert len(changed) == len([k for k in two if "embed_tokens" not in k])  # step 3 did move the weights


def test_several_iterations_log_the_mean_and_each(tmp_path, tiny_model):
    """18.9: with num_iterations > 1 the logged loss and grad_norm were the last iteration's. Now they are the means
    and each iteration is logged under loss/iteration_k, grad_norm/iteration_k."""
    cfg = tiny_config(tmp_path, tiny_model, training={"max_steps": 1, "num_iterations": 3})
    [m] = train(cfg, base_dir=tmp_path, reporter=RichReporter(quiet=True)).history
    losses = [m[f"loss/iteration_{k}"] for k in (1, 2, 3)]
    norms = [m[f"grad_norm/iteration_{k}"] for k in (1, 2, 3)]
    assert m["loss"] == pytest.approx(sum(losses) / 3) and m["grad_norm"] == pytest.approx(sum(norms) / 3)
    assert len(set(norms)) == 3  # the iterations differ: each update changed the policy
    assert "loss/iteration_4" not in m


def test_resuming_a_schedule_that_never_stepped_warns_nothing():
    """Issue 28 (found by the notebook test): steps without an update (every group's rewards equal) never step the
    scheduler, and resuming such a checkpoint printed torch's "Detected call of `lr_scheduler.step()` before
    `optimizer.step()`" (into the notebook's cell too). The resumed rate is still this run's schedule at the step."""
    import warnings

    from transformers import get_scheduler

    from grpo_rollout.config import Config
    from grpo_rollout.trainer.setup import continue_schedule

    cfg = Config()
    cfg.training.learning_rate, cfg.training.max_steps = 1e-3, 4
    weight = torch.nn.Parameter(torch.zeros(2))
    saved_optimizer = torch.optim.AdamW([weight], lr=cfg.training.learning_rate)
    saved = get_scheduler("linear", saved_optimizer, num_warmup_steps=0, num_training_steps=4).state_dict()
    optimizer = torch.optim.AdamW([weight], lr=cfg.training.learning_rate)
    scheduler = get_scheduler("linear", optimizer, num_warmup_steps=0, num_training_steps=4)
    scheduler.load_state_dict(saved)  # as restore() does, from a checkpoint after 2 steps without an update
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        continue_schedule(optimizer, scheduler, cfg, 2, lambda text: None)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(1e-3)  # the schedule never moved: its first rate


def test_a_fresh_run_into_an_earlier_runs_folder_says_so_and_a_resume_does_not(tmp_path, tiny_model):
    """A new user's trial: `train` a second time into the demo's folder mixed two runs without a word (its checkpoints
    beside the earlier ones, and --resume latest picking the earlier run's newest)."""
    import io

    from rich.console import Console

    def run(resume=None) -> str:
        out = io.StringIO()
        train(tiny_config(tmp_path, tiny_model, training={"max_steps": 1}), base_dir=tmp_path, resume=resume,
              reporter=RichReporter(Console(file=out, width=400)))
        return " ".join(out.getvalue().split())

    assert "earlier run" not in run()
    again = run()
    assert f"{tmp_path / 'out'} already holds an earlier run (its checkpoint-1)" in again
    assert "--resume latest" in again and "another training.output_dir" in again
    assert "earlier run" not in run(resume="latest")
