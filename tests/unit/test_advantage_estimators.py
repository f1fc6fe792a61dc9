"""Issue 32.3: RLOO's leave-one-out and REINFORCE++'s batch baseline against hand-computed values, a user's advantage
function checked, and the config keys that choose them."""

from __future__ import annotations

import math

import pytest
import torch

from grpo_rollout.trainer.update.advantages import (AdvantageError, batch_advantages, compute_advantages,
                                                    rloo_advantages, user_advantages)

# two groups of G = 4: one with signal, one all equal
REWARDS = torch.tensor([1.0, 0.0, 0.0, 1.0, 3.0, 3.0, 3.0, 3.0], dtype=torch.float64)


def test_rloo_subtracts_the_mean_of_the_other_completions():
    adv = rloo_advantages(REWARDS, 4)
    # completion 0: 1 - (0 + 0 + 1) / 3 = 2/3; completion 1: 0 - (1 + 0 + 1) / 3 = -2/3; the equal group: 0
    assert adv.tolist() == pytest.approx([2 / 3, -2 / 3, -2 / 3, 2 / 3, 0, 0, 0, 0], abs=1e-12)
    assert torch.equal(rloo_advantages(torch.full((8,), 0.1), 8), torch.zeros(8))  # exactly 0, in float32 too
    with pytest.raises(ValueError, match="num_generations >= 2"):
        rloo_advantages(torch.tensor([1.0]), 1)


def test_reinforce_pp_uses_the_batch_mean_and_std():
    adv = batch_advantages(REWARDS)
    # batch mean 14/8 = 1.75; squared deviations 0.5625, 3.0625, 3.0625, 0.5625, 4 × 1.5625 → 13.5; unbiased var 13.5/7
    s = math.sqrt(13.5 / 7) + 1e-4
    expected = [-0.75 / s, -1.75 / s, -1.75 / s, -0.75 / s] + [1.25 / s] * 4
    assert adv.tolist() == pytest.approx(expected, rel=1e-12)
    assert adv[4].item() == pytest.approx(0.90004, abs=1e-5)  # the equal group still gets its reward vs the batch
    assert torch.equal(batch_advantages(torch.full((4,), 2.0)), torch.zeros(4))


def test_compute_advantages_dispatches_by_name():
    assert compute_advantages(REWARDS, 4, "rloo").tolist() == rloo_advantages(REWARDS, 4).tolist()
    assert compute_advantages(REWARDS, 4, "reinforce_pp").tolist() == batch_advantages(REWARDS).tolist()
    assert compute_advantages(REWARDS, 4, "grpo", "none").tolist() == pytest.approx(
        [0.5, -0.5, -0.5, 0.5, 0, 0, 0, 0])
    with pytest.raises(ValueError, match="grpo, rloo, reinforce_pp"):
        compute_advantages(REWARDS, 4, "ppo")


def _fns():
    def halves(rewards, num_generations):
        return (rewards - 0.5).tolist()

    def short(rewards, num_generations):
        return [0.0]

    def broken(rewards, num_generations):
        raise KeyError("group")

    def nan(rewards, num_generations):
        return rewards * float("nan")

    return halves, short, broken, nan


def test_a_users_function_is_called_with_the_rewards_and_checked():
    halves, short, broken, nan = _fns()
    out = user_advantages(halves, REWARDS.float(), 4)
    assert out.dtype == torch.float32 and out.tolist() == [0.5, -0.5, -0.5, 0.5, 2.5, 2.5, 2.5, 2.5]
    assert compute_advantages(REWARDS.float(), 4, function=halves).tolist() == out.tolist()
    with pytest.raises(AdvantageError, match=r"halves|short.*returned 1 advantages for 8 completions"):
        user_advantages(short, REWARDS, 4)
    with pytest.raises(AdvantageError, match=r"broken raised KeyError: 'group' \(at .*test_advantage_estimators.py:\d+"):
        user_advantages(broken, REWARDS, 4)
    with pytest.raises(AdvantageError, match="returned nan for completion 0; advantages must be finite"):
        user_advantages(nan, REWARDS, 4)


def test_scale_rewards_with_another_baseline_and_two_choices_are_errors(project, errs):
    def check(**training):
        cfg = project.baseline()
        cfg["training"].update(training)
        return project.check(cfg, load_data=False)

    problems = errs(check(advantage="rloo", scale_rewards="batch"))
    assert [p.key for p in problems] == ["training.scale_rewards"]
    assert "applies to advantage: grpo only" in problems[0].message and "remove" in problems[0].fix
    project.write("mine.py", "def adv(rewards, num_generations):\n    return rewards\n")
    assert [p.key for p in errs(check(advantage="rloo", advantage_function="mine.py:adv"))] == ["training.advantage"]
    assert not errs(check(advantage="reinforce_pp")) and not errs(check(advantage="grpo", scale_rewards="none"))
    assert not errs(check(advantage_function="mine.py:adv"))
    project.write("bad.py", "def adv(rewards):\n    return rewards\n")
    problems = errs(check(advantage_function="bad.py:adv"), "training.advantage_function")
    assert problems and "cannot be called as fn(rewards, num_generations)" in problems[0].message


def test_turn_credit_with_another_baseline_is_an_error(project, errs):
    """Found in review: credit: turn computed the configured advantages and then threw them away."""
    cfg = project.baseline()
    cfg["training"].update(credit="turn", advantage="rloo")
    assert [p.key for p in errs(project.check(cfg, load_data=False))] == ["training.advantage"]
    cfg["training"].update(advantage="grpo", scale_rewards="none")
    assert [p.key for p in errs(project.check(cfg, load_data=False))] == ["training.scale_rewards"]
    cfg["training"]["scale_rewards"] = "group"
    assert not errs(project.check(cfg, load_data=False))
