"""Issue 32.5: turn-level credit (DeepSeekMath's process supervision, §4.1.3, with a discount) against hand-computed
values for a scripted 3-turn group, down to every token's advantage."""

from __future__ import annotations

import math
import re
from types import SimpleNamespace

import pytest
import torch

from grpo_rollout.orchestrator.batch import ScoredBatch
from grpo_rollout.trainer.update.surrogates import clip_surrogate, per_token
from grpo_rollout.trainer.update.turn_credit import (group_turn_advantages, token_advantages, turn_rewards_of,
                                                     with_turn_credit)

# a group of two 3-turn episodes: A is rewarded 1 after its 2nd turn, B never
TURNS = [[0.0, 1.0, 0.0], [0.0, 0.0, 0.0]]
S = math.sqrt(1 / 6) + 1e-4  # R = (0, 1, 0, 0, 0, 0): mean 1/6, unbiased std sqrt(1/6)
LOW, HIGH = (0 - 1 / 6) / S, (1 - 1 / 6) / S  # each 0 and the 1, normalised


def test_each_turn_gets_the_normalised_return_from_it_on():
    a, b = group_turn_advantages(TURNS, gamma=1.0)
    assert a == pytest.approx([LOW + HIGH + LOW, HIGH + LOW, LOW])  # 1.2244, 1.6326, -0.4082
    assert b == pytest.approx([3 * LOW, 2 * LOW, LOW])
    a, _ = group_turn_advantages(TURNS, gamma=0.5)
    assert a == pytest.approx([LOW + 0.5 * (HIGH + 0.5 * LOW), HIGH + 0.5 * LOW, LOW])
    assert group_turn_advantages([[1.0, 1.0], [1.0]], 1.0) == [[0.0, 0.0], [0.0]]  # nothing to tell apart


def test_the_last_turn_takes_what_the_episode_reward_holds_beyond_the_turn_rewards():
    assert turn_rewards_of(1.5, [0.0, 1.0, None], 3) == [0.0, 1.0, 0.5]  # reward 1.5 = env's 1 + a judge's 0.5
    assert turn_rewards_of(2.0, None, 2) == [None, 2.0]  # a rollout without turn rewards: all at the end


def test_turns_without_a_reward_are_not_counted_as_zeros():
    """Found in review: unscored turns counted as rewards of 0 gave two episodes with the same outcome opposite
    advantages by their number of turns; now each turn of an episode without turn rewards gets its normalised
    outcome, GRPO's episode credit."""
    short, long = group_turn_advantages([[1.0], [None, None, 0.0]], gamma=1.0)
    s = math.sqrt(0.5) + 1e-4
    assert short == pytest.approx([0.5 / s]) and long == pytest.approx([-0.5 / s] * 3)
    assert group_turn_advantages([[1.0], [None, None, 1.0]], 1.0) == [[0.0], [0.0, 0.0, 0.0]]


@pytest.mark.parametrize("starts, rewards, fragment", [
    ([3, 5], None, "turn_starts` must be increasing completion-token indices from 0"),
    ([0, 4, 4], None, "increasing"),
    (None, None, None),
    ([0, 4], 0.3, "turn_rewards` must hold at most one finite number"),
    ([0, 4], [0.0, 1.0, 2.0], "at most one finite number (or None) per turn (2 turns)"),
    ([0, 4], [float("nan")], "finite"),
])
def test_malformed_turn_extras_are_named(starts, rewards, fragment):
    from grpo_rollout.rollouts.contract import RolloutError
    from grpo_rollout.trainer.update.turn_credit import checked_extras

    if fragment is None:
        assert checked_extras(starts, rewards, 5, "completion 3") == ([0], None)
        return
    with pytest.raises(RolloutError, match=r"completion 3: .*" + re.escape(fragment)):
        checked_extras(starts, rewards, 5, "completion 3")
    assert checked_extras([0, 4, 9], [1.0], 6, "c")[0] == [0, 4]  # a turn starting past a cut completion is gone


def test_every_token_of_a_turn_gets_its_advantage():
    assert token_advantages([1.0, 2.0, 3.0], [0, 3, 7], 9) == [1.0] * 3 + [2.0] * 4 + [3.0] * 2


class FakeRollout(SimpleNamespace):
    def __len__(self):
        return len(self.completion_ids)


class OneRank:
    def gather(self, value):
        return [value]

    def agree(self, error):
        if error is not None:
            raise error


def test_a_batch_gets_per_token_advantages_and_their_trained_mean():
    rollout = FakeRollout(extras={"turn_starts": [[0, 3, 7], [0, 2, 5]], "turn_rewards": TURNS},
                          completion_ids=[[1] * 9, [1] * 6],
                          completion_mask=[[1, 1, 1, 0, 1, 1, 1, 1, 0], [1, 0, 1, 1, 0, 1]])
    batch = ScoredBatch(rollout, SimpleNamespace(rewards=[1.0, 0.0]), 0.0)
    out = with_turn_credit(batch, OneRank(), num_generations=2, gamma=1.0)
    a1, a2, a3 = LOW + HIGH + LOW, HIGH + LOW, LOW
    assert out.token_advantages[0] == pytest.approx([a1] * 3 + [a2] * 4 + [a3] * 2)
    assert out.token_advantages[1] == pytest.approx([3 * LOW] * 2 + [2 * LOW] * 3 + [LOW])
    trained = [a1, a1, a1, a2, a2, a2, a3]  # mask 0 at tokens 3 and 8
    assert out.advantages.tolist()[0] == pytest.approx(sum(trained) / 7, rel=1e-6)
    assert out.step_advantages.tolist() == pytest.approx(out.advantages.tolist())


def test_the_loss_takes_advantages_per_token():
    ratio = torch.ones(2, 3)
    per_seq = clip_surrogate(ratio, torch.tensor([1.0, -1.0]), 0.2).loss
    per_tok = clip_surrogate(ratio, torch.tensor([[1.0, 2.0, 3.0], [-1.0, 0.0, 1.0]]), 0.2).loss
    assert per_seq.tolist() == [[-1.0] * 3, [1.0] * 3]
    assert per_tok.tolist() == [[-1.0, -2.0, -3.0], [1.0, 0.0, -1.0]]
    assert per_token(torch.zeros(4)).shape == (4, 1) and per_token(torch.zeros(4, 2)).shape == (4, 2)
