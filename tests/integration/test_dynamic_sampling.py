"""DAPO dynamic sampling (training.dynamic_sampling) and epochs over the data (training.num_epochs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console

from grpo_rollout.trainer import train
from grpo_rollout.trainer.run import steps_for_epochs
from grpo_rollout.trainer.reporting.progress import RichReporter
from tiny_model import tiny_config

pytestmark = pytest.mark.slow  # and `model` on each test using the tiny model (tests/conftest.py)

# "Count to i.": even i → the same reward for every completion (no signal); odd i → the share of even token ids.
HALF_CONSTANT = '''
def half_constant(prompts, completion_ids, **kwargs):
    out = []
    for prompt, ids in zip(prompts, completion_ids):
        i = int(prompt.split()[-1].rstrip("."))
        out.append(0.5 if i % 2 == 0 else sum(t % 2 == 0 for t in ids) / max(len(ids), 1))
    return out

def constant(completion_ids, **kwargs):
    return [1.0 for _ in completion_ids]
'''


def _recording() -> tuple:
    console = Console(record=True, width=300, force_terminal=False)
    return console, RichReporter(console=console)


def _groups(run_dir: Path, step: int) -> list:
    rows = [json.loads(x) for x in (run_dir / "rollouts" / f"step_{step}.jsonl").read_text().splitlines()]
    return [[r for r in rows if r["group"] == g] for g in sorted({r["group"] for r in rows})]


def test_every_trained_group_has_reward_variance(tmp_path, tiny_model):
    cfg = tiny_config(tmp_path, tiny_model, rewards_source=HALF_CONSTANT, reward="half_constant", rows=20,
                      training={"max_steps": 3, "save_rollouts": "every",
                                "dynamic_sampling": {"enabled": True, "max_rounds": 6}})
    result = train(cfg, base_dir=tmp_path, reporter=RichReporter(quiet=True))
    for step, metrics in enumerate(result.history, start=1):
        groups = _groups(tmp_path / "out", step)
        assert len(groups) == 4 == metrics["dynamic_sampling/groups_trained"]  # filled to prompts_per_step
        for group in groups:
            rewards = [r["reward"] for r in group]
            assert max(rewards) > min(rewards)  # no group without signal was trained
            assert int(group[0]["prompt"].split()[-1].rstrip(".")) % 2 == 1
        assert metrics["dynamic_sampling/filled"] == 1.0 and metrics["frac_reward_zero_std"] == 0.0
    # about half of each round's prompts are even: groups were dropped and extra rollout calls were made
    assert sum(m["dynamic_sampling/groups_dropped"] for m in result.history) >= 3
    assert max(m["dynamic_sampling/rounds"] for m in result.history) >= 2


def test_max_rounds_reached_still_trains_and_says_so(tmp_path, tiny_model):
    console, reporter = _recording()
    cfg = tiny_config(tmp_path, tiny_model, rewards_source=HALF_CONSTANT, reward="half_constant", rows=20,
                      training={"max_steps": 2, "save_rollouts": "every",
                                "dynamic_sampling": {"enabled": True, "max_rounds": 1}})
    result = train(cfg, base_dir=tmp_path, reporter=reporter)
    assert result.steps == 2
    text = console.export_text()
    for step, metrics in enumerate(result.history, start=1):
        odd = sum(int(p.split()[-1].rstrip(".")) % 2 for p in {r["prompt"] for g in _groups(tmp_path / "out", step)
                                                                for r in g})
        assert metrics["dynamic_sampling/rounds"] == 1
        assert metrics["dynamic_sampling/groups_trained"] == odd < 4  # only the groups with signal
        assert metrics["dynamic_sampling/filled"] == 0.0
        assert f"Step {step}: dynamic sampling reached training.dynamic_sampling.max_rounds = 1" in text
        assert f"{odd} of 4 groups" in text


def test_a_step_without_signal_makes_no_update(tmp_path, tiny_model):
    """Issue 18.6b: every group uniform after every round used to still move every weight through AdamW's momentum
    (grad norm 0.0, weights changed by up to 6.7e-4 at lr 1e-3) and report groups_trained 4. Now the optimizer and
    the schedule do not step, the counts say nothing was trained, and the console says so."""
    import torch
    from safetensors.torch import load_file

    console, reporter = _recording()
    cfg = tiny_config(tmp_path, tiny_model, rewards_source=HALF_CONSTANT, reward="constant",
                      training={"max_steps": 2, "learning_rate": 1e-3, "warmup_steps": 0, "lr_scheduler": "linear",
                                "dynamic_sampling": {"enabled": True, "max_rounds": 2}})
    result = train(cfg, base_dir=tmp_path, reporter=reporter)
    first, second = result.history
    assert first["dynamic_sampling/rounds"] == 2 and first["dynamic_sampling/groups_dropped"] == 8
    assert first["dynamic_sampling/groups_trained"] == 0 and first["frac_reward_zero_std"] == 1.0
    assert first["no_signal_skipped"] == 1 and first["grad_norm"] == 0.0
    assert first["learning_rate"] == second["learning_rate"] == 1e-3  # the schedule did not move either
    before, after = load_file(tiny_model / "model.safetensors"), load_file(result.checkpoint / "model.safetensors")
    assert all(torch.equal(before[k], after[k]) for k in before)
    text = console.export_text()
    assert "no group with reward variance, so no update" in text
    assert ("Step 1: every group's rewards were equal (all advantages 0, no KL or entropy term): no update this step"
            in text)


def test_refills_never_repeat_a_prompt_of_the_same_step(tmp_path, tiny_model):
    """Issue 18.6a: with 6 prompts of which 1-2 had reward variance, refills drew prompts already kept (step 1 trained
    prompts [2, 1, 2, 1]) while reporting filled 1.0. Here 8 prompts (2 steps an epoch, so a step's own draw has no
    repeat), 4 with variance: each trained prompt is distinct, and filled says whether all 4 were found."""
    cfg = tiny_config(tmp_path, tiny_model, rewards_source=HALF_CONSTANT, reward="half_constant", rows=8,
                      training={"max_steps": 3, "save_rollouts": "every",
                                "dynamic_sampling": {"enabled": True, "max_rounds": 6}})
    result = train(cfg, base_dir=tmp_path, reporter=RichReporter(quiet=True))
    assert result.steps == 3 and len(result.history) == 3  # the loop below checks every step asked for
    for step, metrics in enumerate(result.history, start=1):
        prompts = [g[0]["prompt"] for g in _groups(tmp_path / "out", step)]
        assert len(prompts) == len(set(prompts)) == metrics["dynamic_sampling/groups_trained"], prompts
        assert {int(p.split()[-1].rstrip(".")) for p in prompts} <= {1, 3, 5, 7}  # only the prompts with signal
        assert metrics["dynamic_sampling/filled"] == float(len(prompts) == 4)


def test_refill_indices_skip_what_the_step_drew():
    from grpo_rollout.orchestrator.dynamic_sampling import refill_indices

    first = refill_indices(step=2, round_=1, num_rows=6, prompts_per_step=4, seed=0, drawn=[0, 1, 2, 3])
    assert sorted(first) == [4, 5]  # only two rows left unused
    assert refill_indices(2, 2, 6, 4, 0, drawn=[0, 1, 2, 3, 4, 5]) == []
    many = refill_indices(0, 1, 100, 4, 0, drawn=[])
    assert len(set(many)) == 4 and many == refill_indices(0, 1, 100, 4, 0, drawn=[])  # deterministic
    assert refill_indices(0, 2, 100, 4, 0, drawn=[]) != many  # another order per round


def test_steps_for_epochs():
    assert steps_for_epochs(1, 10, 4) == 3 and steps_for_epochs(2, 10, 4) == 5 and steps_for_epochs(3, 8, 4) == 6
    assert steps_for_epochs(0.5, 10, 4) == 2 and steps_for_epochs(0.01, 10, 4) == 1


def test_num_epochs_sets_the_length_and_resume_keeps_the_order(tmp_path, tiny_model):
    full, part = tmp_path / "full", tmp_path / "part"
    full.mkdir(), part.mkdir()
    console, reporter = _recording()
    cfg = tiny_config(full, tiny_model, training={"num_epochs": 2, "max_steps": 99})
    result = train(cfg, base_dir=full, reporter=reporter)
    assert result.steps == 5  # ceil(2 × 10 rows / 4 prompts per step), max_steps ignored
    assert "[epoch 0.40/2.00 · 1/5 " in console.export_text()  # the bar shows epochs and steps

    def prompts(run_dir: Path) -> list:
        lines = [json.loads(x) for x in (run_dir / "out" / "completions.jsonl").read_text().splitlines()]
        return [line["prompt"] for line in lines][::8]  # one per group (8 completions each)

    order = prompts(full)
    assert len(order) == 20 and sorted(order[:10]) == sorted(order[10:]) == sorted(f"Count to {i}." for i in range(10))
    cfg = tiny_config(part, tiny_model, training={"num_epochs": 2, "save_steps": 2})
    cfg.training.max_steps = 2  # stop early (as if interrupted), then resume the 2-epoch run
    cfg.training.num_epochs = None
    train(cfg, base_dir=part, reporter=RichReporter(quiet=True))
    cfg.training.num_epochs = 2
    resumed = train(cfg, base_dir=part, resume="latest", reporter=RichReporter(quiet=True))
    assert resumed.steps == 5 and prompts(part) == order
