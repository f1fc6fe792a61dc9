"""Issue 39.11: a step whose rewards are all equal (every advantage 0) and whose loss has no term with a gradient
without advantages makes no forward or backward pass and leaves the weights, AdamW's state and the schedule
bit-identical; a KL term or an entropy bonus still trains. On one and on two processes."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from rich.console import Console

from grpo_rollout.trainer import train
from grpo_rollout.trainer.recipe import GRPORecipe
from grpo_rollout.trainer.reporting.progress import RichReporter
from grpo_rollout.trainer.update.logprobs import CompletionLogprobs
from tiny_model import tiny_config

pytestmark = pytest.mark.slow  # and `model` on each test using the tiny model (tests/conftest.py)

# step 0 (the reward's `step`): the share of even token ids, which varies; later steps: every completion 1.0
FIRST_STEP_ONLY = '''
def first_step_only(completion_ids, step, **kwargs):
    if step == 0:
        return [sum(t % 2 == 0 for t in ids) / max(len(ids), 1) for ids in completion_ids]
    return [1.0 for _ in completion_ids]
'''


def _watch(monkeypatch) -> list:
    """Per call of :meth:`GRPORecipe.update`: the policy forward passes it made (the update's log-prob calls) and
    the weights, AdamW's state and the schedule's state before and after."""
    seen = []
    forwards = [0]
    real_logprobs, real_update = CompletionLogprobs.forward, GRPORecipe.update

    def counting(*args, **kwargs):
        forwards[0] += 1
        return real_logprobs(*args, **kwargs)

    def state(recipe):
        return ({k: v.detach().clone() for k, v in recipe.policy.state_dict().items()},
                copy.deepcopy(recipe.optimizer.state_dict()), copy.deepcopy(recipe.scheduler.state_dict()))

    def update(recipe, *args, **kwargs):
        before, forwards[0] = state(recipe), 0
        result = real_update(recipe, *args, **kwargs)
        seen.append({"forwards": forwards[0], "before": before, "after": state(recipe)})
        return result

    monkeypatch.setattr(CompletionLogprobs, "forward", counting)
    monkeypatch.setattr(GRPORecipe, "update", update)
    return seen


def _same(a, b) -> bool:
    """Bitwise equal nested state (tensors with torch.equal)."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def test_a_step_without_signal_skips_the_forward_and_changes_nothing(tmp_path, tiny_model, monkeypatch):
    """Before: step 2's update made its policy forward and backward passes (3-11 s of a 64-token step here, 60-109 s
    on SmolLM2) for a gradient of exactly 0; now none, and every state is bit-identical."""
    seen = _watch(monkeypatch)
    console = Console(record=True, width=300, force_terminal=False)
    cfg = tiny_config(tmp_path, tiny_model, rewards_source=FIRST_STEP_ONLY, reward="first_step_only",
                      training={"max_steps": 2, "lr_scheduler": "linear", "warmup_steps": 0, "weight_decay": 0.1,
                                "save_rollouts": "every"})
    first, second = train(cfg, base_dir=tmp_path, reporter=RichReporter(console=console)).history
    assert first["no_signal_skipped"] == 0 and seen[0]["forwards"] > 0  # step 1 trained (AdamW now has moments)
    assert not _same(seen[0]["before"][0], seen[0]["after"][0])
    assert second["no_signal_skipped"] == 1 and second["frac_reward_zero_std"] == 1.0
    assert seen[1]["forwards"] == 0
    for before, after, what in zip(seen[1]["before"], seen[1]["after"], ("weights", "AdamW state", "schedule")):
        assert _same(before, after), what
    assert second["loss"] == second["grad_norm"] == second["kl"] == second["clip_ratio/region"] == 0.0
    assert second["tokens/forward"] == 0 and second["num_tokens"] > 0 and math.isnan(second["entropy"])
    assert second["learning_rate"] < first["learning_rate"]  # the rate step 1 moved the schedule to
    assert "Step 2: every group's rewards were equal (all advantages 0, no KL or entropy term): no update this step, " \
           "its forward and backward passes skipped" in console.export_text()
    rows = (tmp_path / "out" / "rollouts" / "step_2.jsonl").read_text().splitlines()
    assert len(rows) == 32 and all('"trainer_logprobs": null' in row for row in rows)


@pytest.mark.parametrize("term", [{"beta": 0.1}, {"entropy_coef": 0.01}])
def test_a_kl_term_or_an_entropy_bonus_still_updates(tmp_path, tiny_model, monkeypatch, term):
    """Every reward equal, but the loss has a term without advantages: the update runs. Before, an entropy bonus was
    ignored (no update: `no_signal_skipped 1`)."""
    seen = _watch(monkeypatch)
    cfg = tiny_config(tmp_path, tiny_model, rewards_source=FIRST_STEP_ONLY, reward="first_step_only",
                      training={"max_steps": 2, **term})
    second = train(cfg, base_dir=tmp_path, reporter=RichReporter(quiet=True)).history[1]
    assert second["no_signal_skipped"] == 0 and second["frac_reward_zero_std"] == 1.0 and seen[1]["forwards"] > 0
    assert second["grad_norm"] > 0 and not _same(seen[1]["before"][0], seen[1]["after"][0])


RANKS = '''
from types import SimpleNamespace
import torch
from grpo_rollout.orchestrator.batch import ScoredBatch
from grpo_rollout.distributed import Dist
from grpo_rollout.trainer.update.no_signal import step_has_signal

class Rollout(SimpleNamespace):
    def __len__(self):
        return len(self.completion_ids)

dist = Dist.from_env(device="cpu", timeout_s=60)
training = SimpleNamespace(beta=0.0, entropy_coef=0.0, loss_function="", mask_truncated_completions=False)
rollout = Rollout(completion_ids=[[5, 6]] * 2, completion_mask=[[1, 1]] * 2, prompt_ids=[[1]] * 2, logprobs=None,
                  segments=None)
said = []
for moving_rank in (None, 1):  # every group flat on both ranks; then rank 1's only with an advantage
    advantages = [0.5, -0.5] if dist.rank == moving_rank else [0.0, 0.0]
    batch = ScoredBatch(rollout, SimpleNamespace(truncated=[False, False]), 0.0, advantages=torch.tensor(advantages))
    said.append(step_has_signal(batch, training, dist))
open(f"rank{dist.rank}.txt", "w").write(repr(said))
dist.close()
'''


@pytest.mark.multiproc
def test_every_rank_takes_the_same_decision(tmp_path):
    """Two processes, each with only its own groups: one rank with signal means both update (a rank that skipped
    alone would leave the other waiting in FSDP's gradient all-reduce)."""
    from test_distributed import _torchrun

    (tmp_path / "ranks.py").write_text(RANKS)
    proc = _torchrun([str(tmp_path / "ranks.py")], cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [(tmp_path / f"rank{r}.txt").read_text() for r in (0, 1)] == ["[False, True]"] * 2


# every completion 0.0, but at step index 3 (the 4th step): the share of even token ids, which varies
FOURTH_STEP_ONLY = '''
def fourth_step_only(completion_ids, step, **kwargs):
    if step == 3:
        return [sum(t % 2 == 0 for t in ids) / max(len(ids), 1) for ids in completion_ids]
    return [0.0 for _ in completion_ids]
'''


def test_a_run_without_signal_says_so_counts_its_updates_and_writes_no_unchanged_weights(tmp_path, tiny_model):
    """Issue 51.10: three steps whose rewards never varied. Before: not a word until the panel's "model saved to:
    checkpoint-3", and every checkpoint wrote the unchanged model. Now the console warns at the third flat step, the
    panel says "0 of 3 steps updated the weights", checkpoint-1 writes the weights once (every checkpoint loads with
    from_pretrained) and checkpoints 2 and 3 link its files; the run resumes, trains step 4, and the flat step 5's
    checkpoint links step 4's weights instead of writing them again."""
    from grpo_rollout.trainer.update.no_signal import FLAT_STEPS_WARNED

    assert FLAT_STEPS_WARNED == 3  # the run below is exactly that long
    sections = dict(rewards_source=FOURTH_STEP_ONLY, reward="fourth_step_only", sampling={"num_generations": 4},
                    training={"max_steps": 3, "save_steps": 1, "prompts_per_step": 2,
                              "micro_batch_size": 8})
    console = Console(record=True, width=400, force_terminal=False)
    result = train(tiny_config(tmp_path, tiny_model, **sections), base_dir=tmp_path,
                   reporter=RichReporter(console=console))
    text = console.export_text()
    assert "No learning signal in steps 1-3: every group's rewards were equal in 3 steps in a row" in text
    assert text.count("No learning signal in steps") == 1
    assert "0 of 3 steps updated the weights (3 without learning signal: every group's rewards were equal)" in text
    assert f"model saved to: {result.checkpoint}" in text
    assert "checkpoint-3: the weights are unchanged since checkpoint-2; its files are linked" in text
    out = tmp_path / "out"
    inodes = {(out / f"checkpoint-{k}" / "model.safetensors").stat().st_ino for k in (1, 2, 3)}
    assert len(inodes) == 1  # written once, linked twice
    console = Console(record=True, width=400, force_terminal=False)
    resumed = train(tiny_config(tmp_path, tiny_model, **{**sections, "training": {**sections["training"],
                                                                                  "max_steps": 5}}),
                    base_dir=tmp_path, resume="latest", reporter=RichReporter(console=console))
    text = console.export_text()
    assert "Resuming from" in text
    assert [m["no_signal_skipped"] for m in resumed.history] == [0, 1]
    assert "1 of 2 steps of this session updated the weights (1 without learning signal" in text
    assert "checkpoint-5: the weights are unchanged since checkpoint-4; its files are linked" in text
    four, five = (out / "checkpoint-4" / "model.safetensors").stat(), (out / "checkpoint-5" / "model.safetensors").stat()
    assert four.st_ino == five.st_ino and f"model saved to: {out / 'checkpoint-5'}" in text
    # the same as a run that never stopped: the resumed step 4 started from the base model's weights
    (tmp_path / "whole").mkdir()
    whole = train(tiny_config(tmp_path / "whole", tiny_model, **{**sections, "training": {
        **sections["training"], "max_steps": 5, "save_steps": 0}}), base_dir=tmp_path / "whole",
        reporter=RichReporter(quiet=True))
    for key in ("reward", "loss", "grad_norm"):
        assert resumed.history[0][key] == pytest.approx(whole.history[3][key], rel=1e-6), key
