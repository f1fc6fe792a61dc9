"""Issue 41.1: an episode made of several sequences (a context edit). Its earlier sequences (``segments``) pass the
contract's checks, travel with their completion through group selection, and are trained with its advantage."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from grpo_rollout.orchestrator.batch import ScoredBatch
from grpo_rollout.rollouts.contract import RolloutError, RolloutOutput, check_rollout_output
from grpo_rollout.rollouts.segments import Segment
from grpo_rollout.trainer.update.no_signal import moving_tokens


def _result(segments, logprobs=True):
    """Two prompts, two completions each; completion 1 has an earlier sequence."""
    out = {"prompt_ids": [[1, 2], [3]], "completion_ids": [[4], [5, 6], [7], [8]],
           "completion_mask": [[1], [0, 1], [1], [1]], "segments": segments}
    if logprobs:
        out["logprobs"] = [[-0.1], [-math.inf, -0.2], [-0.3], [-0.4]]
    return out


EDIT = {"prompt_ids": [9, 9], "completion_ids": [10, 11, 12], "logprobs": [-0.5, -math.inf, -0.6],
        "completion_mask": [1, 0, 1]}


def test_a_completion_keeps_its_earlier_sequences():
    out = check_rollout_output(_result([None, [EDIT], [], None]), 2, 2, vocab_size=20)
    assert out.segments == [[], [Segment([9, 9], [10, 11, 12], [-0.5, -math.inf, -0.6], [1, 0, 1])], [], []]
    assert out.trained_tokens() == [1, 3, 1, 1]
    assert "segments" not in out.extras
    # without log-probs from the rollout, a segment's are not kept (the trainer computes them)
    plain = check_rollout_output(_result([None, [EDIT], None, None], logprobs=False), 2, 2)
    assert plain.segments[1][0].logprobs is None and plain.logprobs is None
    # none at all is no segments
    assert check_rollout_output(_result([None, [], None, []]), 2, 2).segments is None


@pytest.mark.parametrize("segments, fragment", [
    ([None, [EDIT]], "`segments` must have one entry per completion (4), got 2"),
    ([None, EDIT, None, None], "`segments[1]` must be a list of segments or None, got dict"),
    ([None, [[1, 2]], None, None], "`segments[1][0]` must be a dict with prompt_ids, completion_ids"),
    ([None, [dict(EDIT, logprobs=None)], None, None], "`segments[1][0]` has no logprobs but the rollout returned"),
    ([None, [dict(EDIT, completion_ids=[10, 99])], None, None],
     "`segments[1][0].completion_ids[0][1]` = 99 is outside the vocabulary [0, 20)"),
    ([None, [dict(EDIT, logprobs=[-0.5, -0.1])], None, None],
     "`segments[1][0].logprobs[0]` has 2 values but completion_ids[0] has 3 tokens"),
    ([None, [dict(EDIT, logprobs=[-math.inf, -0.1, -0.6])], None, None],
     "`segments[1][0].logprobs[0][0]` = -inf on a trained token"),
    ([None, [dict(EDIT, completion_mask=[1, 2, 1])], None, None], "`segments[1][0].completion_mask[0][1]` = 2"),
])
def test_malformed_segments_are_named(segments, fragment):
    with pytest.raises(RolloutError) as err:
        check_rollout_output(_result(segments), 2, 2, vocab_size=20)
    assert fragment in str(err.value)


def test_groups_selected_and_joined_keep_each_completions_segments():
    out = check_rollout_output(_result([None, [EDIT], [EDIT, EDIT], None]), 2, 2)
    swapped = out.select_groups([1, 0])
    assert [len(s) for s in swapped.segments] == [2, 0, 0, 1]
    plain = check_rollout_output(_result(None), 2, 2)
    joined = RolloutOutput.concat([plain, out])
    assert [len(s) for s in joined.segments] == [0, 0, 0, 0, 0, 1, 2, 0]
    assert RolloutOutput.concat([plain, plain]).segments is None


def _batch(out, advantages, truncated=None, token_advantages=None):
    scores = SimpleNamespace(truncated=truncated or [False] * len(out))
    return ScoredBatch(out, scores, 0.0, advantages=torch.tensor(advantages), token_advantages=token_advantages)


def test_earlier_sequences_train_after_the_completions_with_their_episodes_advantage():
    out = check_rollout_output(_result([[EDIT], None, [EDIT, dict(EDIT, prompt_ids=[2])], None]), 2, 2)
    rows = _batch(out, [0.5, -0.5, 1.0, -1.0]).training_rows(mask_truncated=False)
    assert rows.owners == [0, 1, 2, 3, 0, 2, 2]
    assert rows.prompt_ids[4:] == [[9, 9], [9, 9], [2]]
    assert rows.advantages.tolist() == [0.5, -0.5, 1.0, -1.0, 0.5, 1.0, 1.0]
    assert rows.masks[4] == [1, 0, 1] and rows.logprobs[4] == EDIT["logprobs"]
    # a truncated episode is masked whole with training.mask_truncated_completions, its earlier sequences too
    cut = _batch(out, [0.5, -0.5, 1.0, -1.0], truncated=[False, False, True, False]).training_rows(True)
    assert cut.masks[2] == [0] and cut.masks[5:] == [[0, 0, 0], [0, 0, 0]] and cut.masks[4] == [1, 0, 1]
    # per-token advantages (training.credit: turn): an earlier sequence gets its episode's mean on every token
    turns = _batch(out, [0.5, -0.5, 1.0, -1.0], token_advantages=[[0.5], [0.0, -0.5], [1.0], [-1.0]])
    assert turns.training_rows(False).advantages[4:] == [[0.5] * 3, [1.0] * 3, [1.0] * 3]


def test_an_episode_whose_last_sequence_trains_nothing_still_has_signal():
    masked_last = dict(_result([[EDIT], None, None, None]), completion_mask=[[0], [0, 1], [1], [1]],
                       logprobs=[[-math.inf], [-math.inf, -0.2], [-0.3], [-0.4]])
    out = check_rollout_output(masked_last, 2, 2)
    assert moving_tokens(_batch(out, [0.5, 0.0, 0.0, 0.0]).training_rows(False)) == 2
