"""Group-relative advantages (grpo_rollout.trainer.update.objective) against hand-computed numbers."""

from __future__ import annotations

import math

import pytest
import torch

from grpo_rollout.trainer.update.advantages import group_advantages, zero_std_fraction

# Two groups of G = 4.
REWARDS = [1.0, 0.0, 0.0, 0.0,
           0.0, 0.5, 1.0, 0.5]


def test_group_mode_hand_computed():
    adv = group_advantages(torch.tensor(REWARDS, dtype=torch.float64), 4, "group")
    # group 0: mean 0.25, deviations (0.75, -0.25, -0.25, -0.25),
    #          unbiased var = (0.5625 + 3 · 0.0625) / 3 = 0.25 → std 0.5 → divide by 0.5 + 1e-4 = 0.5001
    # group 1: mean 0.5, deviations (-0.5, 0, 0.5, 0), unbiased var = 0.5 / 3 → std sqrt(1/6) = 0.408248...
    s1 = math.sqrt(1 / 6) + 1e-4
    expected = [0.75 / 0.5001, -0.25 / 0.5001, -0.25 / 0.5001, -0.25 / 0.5001,
                -0.5 / s1, 0.0, 0.5 / s1, 0.0]
    assert adv.tolist() == pytest.approx(expected, rel=1e-12, abs=1e-15)
    # distinguishes the unbiased std + 1e-4 from the population std (0.4330) and from no epsilon (0.75 / 0.5 = 1.5)
    assert adv[0].item() == pytest.approx(1.49970006, rel=1e-8)


def test_group_mode_float32():
    adv = group_advantages(torch.tensor(REWARDS), 4)  # "group" is the default
    assert adv.dtype == torch.float32
    assert adv[:4].tolist() == pytest.approx([1.4997, -0.4999, -0.4999, -0.4999], abs=1e-4)


def test_batch_mode_hand_computed():
    adv = group_advantages(torch.tensor(REWARDS, dtype=torch.float64), 4, "batch")
    # centred by the group mean (0.25 and 0.5) but scaled by the std of all 8 rewards:
    # batch mean 3/8 = 0.375; squared deviations 0.390625, 3 · 0.140625, 0.140625, 0.015625, 0.390625, 0.015625
    # → sum 1.375, unbiased var 1.375 / 7 = 0.196428..., std 0.443203...
    s = math.sqrt(1.375 / 7) + 1e-4
    expected = [0.75 / s, -0.25 / s, -0.25 / s, -0.25 / s, -0.5 / s, 0.0, 0.5 / s, 0.0]
    assert adv.tolist() == pytest.approx(expected, rel=1e-12, abs=1e-15)


def test_none_mode_only_centres():
    adv = group_advantages(torch.tensor(REWARDS, dtype=torch.float64), 4, "none")
    assert adv.tolist() == pytest.approx([0.75, -0.25, -0.25, -0.25, -0.5, 0.0, 0.5, 0.0], abs=1e-15)


@pytest.mark.parametrize("scale_rewards", ["group", "batch", "none"])
@pytest.mark.parametrize("value", [0.1, 0.7, 1 / 3, 0.9, 0.0, -2.5])
@pytest.mark.parametrize("g", [2, 3, 7, 8, 16])
def test_equal_group_gets_exactly_zero(scale_rewards, value, g):
    # the float32 mean of G equal values is not always that value (e.g. 8 × 0.1)
    rewards = torch.tensor([value] * g + [float(i) for i in range(g)])
    adv = group_advantages(rewards, g, scale_rewards)
    assert torch.equal(adv[:g], torch.zeros(g))
    assert (adv[g:] != 0).any()
    assert torch.isfinite(adv).all()


@pytest.mark.parametrize("scale_rewards", ["group", "batch", "none"])
def test_whole_batch_equal_gives_zeros(scale_rewards):
    adv = group_advantages(torch.full((12,), 0.1), 4, scale_rewards)
    assert torch.equal(adv, torch.zeros(12))


def test_groups_are_consecutive_blocks():
    # completion i belongs to group i // G: swapping groups swaps their advantages
    a = group_advantages(torch.tensor([0.0, 1.0, 5.0, 5.0, 7.0, 9.0]), 2, "none")
    assert a.tolist() == pytest.approx([-0.5, 0.5, 0.0, 0.0, -1.0, 1.0])


@pytest.mark.parametrize("rewards, g, scale", [
    (torch.zeros(7), 4, "group"),          # 7 is not a multiple of 4
    (torch.zeros(2, 4), 4, "group"),       # not 1-D
    (torch.zeros(8), 4, "std"),            # unknown mode
    (torch.zeros(8), 4, "Group"),          # modes are case-sensitive
    (torch.zeros(8), 0, "group"),          # no group size
])
def test_invalid_inputs_raise(rewards, g, scale):
    with pytest.raises(ValueError):
        group_advantages(rewards, g, scale)


def test_zero_std_fraction():
    rewards = torch.tensor([1.0, 1.0, 1.0, 1.0,
                            0.0, 1.0, 0.0, 1.0,
                            0.1, 0.1, 0.1, 0.1,
                            0.0, 0.0, 0.0, 0.5])
    assert zero_std_fraction(rewards, 4) == 0.5
    assert zero_std_fraction(torch.tensor([0.0, 1.0]), 2) == 0.0
    assert zero_std_fraction(torch.tensor([3.0, 3.0]), 2) == 1.0
