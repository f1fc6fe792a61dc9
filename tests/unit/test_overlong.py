"""Issue 32.4: DAPO's soft overlong punishment (arXiv:2503.14476, §3.4) against hand-computed values, the reward
function the trainer adds for it, and validate-config's check of the buffer."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from grpo_rollout.rewards.overlong import OVERLONG_REWARD, overlong_reward, overlong_scores


def test_the_penalty_falls_linearly_over_the_buffer():
    # L_max 20, buffer 8: free up to 12 tokens, then -1/8 per token, -1 at (and past) the limit
    assert overlong_scores([5, 12, 13, 16, 20, 21], 20, 8) == pytest.approx([0, 0, -1 / 8, -0.5, -1, -1])


def test_the_reward_function_is_added_only_when_asked_for_with_its_weight():
    def config(buffer, penalty=1.0):
        return SimpleNamespace(training=SimpleNamespace(overlong_buffer=buffer, overlong_penalty=penalty),
                               sampling=SimpleNamespace(max_completion_length=8))

    assert overlong_reward(config(0)) == []
    [fn] = overlong_reward(config(4, 0.5))
    assert (fn.name, fn.weight) == (OVERLONG_REWARD, 0.5)
    assert fn.fn(completion_ids=[[1] * 3, [1] * 6, [1] * 8], completions=["a", "b", "c"]) == [0.0, -0.5, -1.0]


def test_a_buffer_as_long_as_the_completions_is_an_error(project, errs):
    cfg = project.baseline()  # max_completion_length 64
    cfg["training"]["overlong_buffer"] = 64
    [p] = errs(project.check(cfg, load_data=False), "training.overlong_buffer")
    assert "not below sampling.max_completion_length (64)" in p.message and "e.g. 16" in p.fix
    cfg["training"]["overlong_buffer"] = 16
    assert not errs(project.check(cfg, load_data=False), "training.overlong_buffer")
