"""The shared-prefix layout (training.shared_prefix, issue 52.1) token by token, and the setting at its edges; the
log-probs and gradients it gives are compared with today's in tests/integration/test_shared_prefix.py."""

from __future__ import annotations

import pytest
import torch

from grpo_rollout.config import config_from_dict
from grpo_rollout.trainer.update.shared_prefix import pack_shared, share_units

PAD = 99


def test_a_group_is_one_unit_its_prompt_once():
    prompts = [[1, 2, 3]] * 2 + [[7, 8]]
    completions = [[4, 5], [6], [9]]
    b = pack_shared(prompts, completions, PAD)
    # units: [1 2 3 | 4 5 | 6] (6 tokens) and [7 8 9] (3 tokens): first-fit decreasing into rows of width 6
    assert b.input_ids.tolist() == [[1, 2, 3, 4, 5, 6], [7, 8, 9, PAD, PAD, PAD]]
    assert b.position_ids[0].tolist() == [0, 1, 2, 3, 4, 3]  # each member goes on from the prompt's length
    assert b.position_ids[1, :3].tolist() == [0, 1, 2]
    assert b.num_tokens == 9  # 3 + 2 + 1 + 3 instead of 5 + 4 + 3
    assert b.row.tolist() == [0, 0, 1]
    # the hidden state predicting each completion token: the prompt's last one, then the member's own
    assert b.completion_cols.tolist() == [[2, 3], [2, 0], [1, 0]]
    assert b.completion_valid.tolist() == [[1, 1], [1, 0], [1, 0]]
    mask = b.attention_mask
    assert mask.shape == (2, 1, 6, 6) and mask.dtype == torch.bool
    assert mask[0, 0].int().tolist() == [[1, 0, 0, 0, 0, 0],
                                         [1, 1, 0, 0, 0, 0],
                                         [1, 1, 1, 0, 0, 0],
                                         [1, 1, 1, 1, 0, 0],
                                         [1, 1, 1, 1, 1, 0],
                                         [1, 1, 1, 0, 0, 1]]  # the second member sees the prompt, not the first
    assert mask[1, 0].int().tolist() == [[1, 0, 0, 0, 0, 0],
                                         [1, 1, 0, 0, 0, 0],
                                         [1, 1, 1, 0, 0, 0],
                                         [0, 0, 0, 1, 0, 0],  # padding sees itself only (no empty softmax row)
                                         [0, 0, 0, 0, 1, 0],
                                         [0, 0, 0, 0, 0, 1]]


def test_a_prefix_into_the_completions_and_identical_sequences():
    # the members' first completion token is common too: it is forwarded once, read from the prefix
    b = pack_shared([[1, 2], [1, 2], [1, 2]], [[3, 4], [3, 5], [3, 4]], PAD)
    assert b.input_ids.tolist() == [[1, 2, 3, 4, 5, 4]]
    assert b.completion_cols.tolist() == [[1, 2], [1, 2], [1, 2]]  # token 3 predicts each one's second token
    assert b.position_ids.tolist() == [[0, 1, 2, 3, 3, 3]]
    same = pack_shared([[1, 2], [1, 2]], [[3], [3]], PAD)  # nothing of their own left: the prefix is all
    assert same.input_ids.tolist() == [[1, 2, 3]] and same.completion_cols.tolist() == [[1], [1]]


def test_only_a_prefix_worth_sharing_joins_a_unit():
    long = list(range(10, 30))
    seqs = [long + [1], long + [2], long[:2] + [3, 4]]  # the third has 2 tokens in common with 20 shared
    units = share_units(seqs)
    assert [(u.members, u.prefix) for u in units] == [([0, 1], 20), ([2], 4)]
    # an agent's later call extends its earlier one: all of the earlier call is shared
    units = share_units([long, long + [5, 6], [7] + long])
    assert [(u.members, u.prefix) for u in units] == [([0, 1], 20), ([2], 21)]
    # an empty completion and a one-token sequence
    b = pack_shared([[1, 2], [1, 2], [5]], [[], [3], []], PAD)
    assert b.completion_valid.tolist() == [[0], [1], [0]] and b.num_tokens == 4


@pytest.mark.parametrize("value, ok", [(True, True), (False, True), ("yes", True), ("sometimes", False),
                                       (2, False), (None, False)])
def test_the_setting_takes_a_bool_only(value, ok):
    cfg, problems = config_from_dict({"model": {"name_or_path": "x"}, "data": {"train": "x.jsonl"},
                                      "training": {"shared_prefix": value}})
    errors = [p for p in problems if p.is_error and p.key == "training.shared_prefix"]
    assert (not errors) == ok, problems
    if ok:
        assert cfg.training.shared_prefix is (value in (True, "yes"))


def test_off_by_default():
    cfg, _ = config_from_dict({"model": {"name_or_path": "x"}, "data": {"train": "x.jsonl"}})
    assert cfg.training.shared_prefix is False


def test_several_processes_are_refused_until_fsdp2_is_checked():
    from config_helpers import make
    from grpo_rollout.preflight.processes import check_processes

    config = make(training__shared_prefix=True, training__prompts_per_step=4)
    problems = []
    check_processes(config, problems, processes=2)
    [problem] = [p for p in problems if p.key == "training.shared_prefix"]
    assert problem.is_error and "2 training processes (FSDP2)" in problem.message
    problems = []
    check_processes(config, problems, processes=1)
    assert [p for p in problems if p.key == "training.shared_prefix"] == []
