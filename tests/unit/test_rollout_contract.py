"""The rollout contract: check_rollout_output (grpo_rollout.rollouts.contract) accepts and rejects results."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from grpo_rollout.rollouts.contract import RolloutError, RolloutOutput, check_rollout_output
from contract_helpers import N, P, VOCAB


def _valid(**overrides):
    """A valid result for P = 2 prompts × n = 3 completions."""
    result = {
        "prompt_ids": [[1, 2, 3], [4, 5]],
        "completion_ids": [[10, 11], [12], [], [13, 14, 15], [16], [17, 18]],
        "logprobs": [[-0.1, -0.2], [-1.5], [], [-0.3, 0.0, -2.0], [-0.5], [-0.6, -0.7]],
    }
    result.update(overrides)
    return result


# --- accepted results -----------------------------------------------------------------------------------------------

def test_valid_result_prompt_ids_per_prompt_repeated_per_completion():
    out = check_rollout_output(_valid(), P, N, VOCAB)
    assert isinstance(out, RolloutOutput)
    assert len(out) == 6 and out.num_prompts == 2 and out.num_generations == 3
    assert out.prompt_ids == [[1, 2, 3]] * 3 + [[4, 5]] * 3
    assert out.completion_ids == [[10, 11], [12], [], [13, 14, 15], [16], [17, 18]]
    assert out.logprobs == [[-0.1, -0.2], [-1.5], [], [-0.3, 0.0, -2.0], [-0.5], [-0.6, -0.7]]
    assert out.completion_mask == [[1, 1], [1], [], [1, 1, 1], [1], [1, 1]]  # default: every token trained
    assert out.extras == {}


def test_prompt_ids_per_completion_kept():
    per_completion = [[1], [1, 2], [1, 2, 3], [4], [4, 5], [4, 5, 6]]
    out = check_rollout_output(_valid(prompt_ids=per_completion), P, N, VOCAB)
    assert out.prompt_ids == per_completion


def test_logprobs_none_or_missing_allowed():
    assert check_rollout_output(_valid(logprobs=None), P, N).logprobs is None
    result = _valid()
    del result["logprobs"]
    assert check_rollout_output(result, P, N).logprobs is None


def test_completion_mask_kept():
    mask = [[1, 0], [1], [], [0, 0, 1], [True], [1.0, 0]]
    out = check_rollout_output(_valid(completion_mask=mask), P, N)
    assert out.completion_mask == [[1, 0], [1], [], [0, 0, 1], [1], [1, 0]]
    assert all(type(x) is int for row in out.completion_mask for x in row)


def test_extras_per_completion_per_prompt_and_scalar():
    out = check_rollout_output(_valid(
        answers=["a", "b", "c", "d", "e", "f"],  # one per completion: kept
        env_id=["env0", "env1"],                   # one per prompt: repeated n times
        turns=4,                                   # scalar: broadcast
        note="hello",                              # a string is a scalar, not a list of characters
        scores=np.array([0.5, 1.5]),               # numpy, one per prompt
    ), P, N)
    assert out.extras["answers"] == ["a", "b", "c", "d", "e", "f"]
    assert out.extras["env_id"] == ["env0"] * 3 + ["env1"] * 3
    assert out.extras["turns"] == [4] * 6
    assert out.extras["note"] == ["hello"] * 6
    assert out.extras["scores"] == [0.5] * 3 + [1.5] * 3
    assert set(out.extras) == {"answers", "env_id", "turns", "note", "scores"}


def test_numpy_arrays_accepted():
    out = check_rollout_output({
        "prompt_ids": np.array([[1, 2], [3, 4]]),
        "completion_ids": np.array([[5, 6], [7, 8], [9, 10], [11, 12], [13, 14], [15, 16]]),
        "logprobs": np.full((6, 2), -0.25, dtype=np.float32),
        "completion_mask": np.array([[1, 0]] * 6),
    }, P, N, VOCAB)
    assert out.prompt_ids == [[1, 2]] * 3 + [[3, 4]] * 3
    assert out.completion_ids[5] == [15, 16] and type(out.completion_ids[5][0]) is int
    assert out.logprobs == [[-0.25, -0.25]] * 6
    assert out.completion_mask == [[1, 0]] * 6


def test_torch_tensors_accepted():
    out = check_rollout_output({
        "prompt_ids": [torch.tensor([1, 2, 3]), torch.tensor([4])],
        "completion_ids": [torch.tensor([10 + i, 20 + i]) for i in range(6)],
        "logprobs": torch.full((6, 2), -0.5),
        "rewards_hint": torch.arange(6),
    }, P, N, VOCAB)
    assert out.prompt_ids == [[1, 2, 3]] * 3 + [[4]] * 3
    assert out.completion_ids[2] == [12, 22]
    assert out.logprobs == [[-0.5, -0.5]] * 6
    assert out.extras["rewards_hint"] == [0, 1, 2, 3, 4, 5]


def test_single_generation_prompt_ids_per_prompt():
    out = check_rollout_output({"prompt_ids": [[1], [2]], "completion_ids": [[3], [4]], "logprobs": None}, 2, 1)
    assert out.prompt_ids == [[1], [2]]


# --- rejected results -----------------------------------------------------------------------------------------------

def test_not_a_dict():
    with pytest.raises(RolloutError, match="returned list.*must return a dict"):
        check_rollout_output([[1, 2]], P, N)


@pytest.mark.parametrize("key", ["completion_ids", "prompt_ids"])
def test_missing_required_key(key):
    result = _valid()
    del result[key]
    with pytest.raises(RolloutError, match=f"no `{key}`"):
        check_rollout_output(result, P, N)


def test_wrong_number_of_completions():
    result = _valid(completion_ids=[[10]] * 5, logprobs=None)
    with pytest.raises(RolloutError, match=r"`completion_ids` has 5 entries; expected 6"):
        check_rollout_output(result, P, N)


def test_wrong_number_of_prompt_ids():
    with pytest.raises(RolloutError, match=r"`prompt_ids` has 3 entries; expected 2 or 6"):
        check_rollout_output(_valid(prompt_ids=[[1], [2], [3]]), P, N)


def test_empty_prompt_ids_rejected():
    with pytest.raises(RolloutError, match=r"`prompt_ids\[1\]` is empty"):
        check_rollout_output(_valid(prompt_ids=[[1], []]), P, N)


def test_logprobs_length_mismatch_names_sample_and_sizes():
    logprobs = _valid()["logprobs"]
    logprobs[3] = [-0.3, -0.1]  # completion 3 has 3 tokens
    with pytest.raises(RolloutError, match=r"`logprobs\[3\]` has 2 values but completion_ids\[3\] has 3 tokens"):
        check_rollout_output(_valid(logprobs=logprobs), P, N)


def test_logprobs_wrong_number_of_rows():
    with pytest.raises(RolloutError, match=r"`logprobs` must have one list per completion \(6\), got 2"):
        check_rollout_output(_valid(logprobs=[[-0.1], [-0.2]]), P, N)


def test_positive_logprob_rejected():
    logprobs = _valid()["logprobs"]
    logprobs[4] = [0.5]
    with pytest.raises(RolloutError, match=r"`logprobs\[4\]\[0\]` = 0.5; log-probabilities are floats <= 0"):
        check_rollout_output(_valid(logprobs=logprobs), P, N)


# Issue 9.6: -inf is a placeholder a masked (tool/env) token may carry; on a trained token it cannot be right.
def test_minus_inf_logprob_only_on_masked_tokens():
    logprobs = _valid()["logprobs"]
    logprobs[3] = [-0.3, float("-inf"), -2.0]
    out = check_rollout_output(_valid(logprobs=logprobs, completion_mask=[[1, 1], [1], [], [1, 0, 1], [1], [1, 1]]),
                               P, N)
    assert out.logprobs[3][1] == float("-inf")
    with pytest.raises(RolloutError, match=r"`logprobs\[3\]\[1\]` = -inf on a trained token \(completion_mask 1\)"):
        check_rollout_output(_valid(logprobs=logprobs), P, N)


@pytest.mark.parametrize("bad", [float("nan"), "x", None])
def test_non_float_logprob_rejected(bad):
    logprobs = _valid()["logprobs"]
    logprobs[0] = [-0.1, bad]
    with pytest.raises(RolloutError, match=r"`logprobs\[0\]\[1\]`"):
        check_rollout_output(_valid(logprobs=logprobs), P, N)


@pytest.mark.parametrize("bad", [2, -1, 0.5])
def test_mask_values_must_be_0_or_1(bad):
    mask = [[1, 1], [1], [], [1, bad, 1], [1], [1, 1]]
    with pytest.raises(RolloutError, match=r"`completion_mask\[3\]\[1\]` = .*0 \(tool/env token\) or 1"):
        check_rollout_output(_valid(completion_mask=mask), P, N)


def test_mask_length_mismatch():
    mask = [[1, 1], [1], [], [1, 1, 1], [1, 1], [1, 1]]
    with pytest.raises(RolloutError, match=r"`completion_mask\[4\]` has 2 values but completion_ids\[4\] has 1 tokens"):
        check_rollout_output(_valid(completion_mask=mask), P, N)


def test_token_out_of_vocabulary():
    comp = _valid()["completion_ids"]
    comp[5] = [17, 50]
    with pytest.raises(RolloutError, match=r"`completion_ids\[5\]\[1\]` = 50 is outside the vocabulary \[0, 50\)"):
        check_rollout_output(_valid(completion_ids=comp), P, N, vocab_size=VOCAB)
    # no vocab size given: only negative ids are rejected
    assert check_rollout_output(_valid(completion_ids=comp), P, N).completion_ids[5] == [17, 50]
    comp[5] = [17, -1]
    with pytest.raises(RolloutError, match=r"`completion_ids\[5\]\[1\]` = -1 is outside"):
        check_rollout_output(_valid(completion_ids=comp), P, N)


def test_prompt_token_out_of_vocabulary():
    with pytest.raises(RolloutError, match=r"`prompt_ids\[1\]\[0\]` = 99"):
        check_rollout_output(_valid(prompt_ids=[[1], [99]]), P, N, vocab_size=VOCAB)


@pytest.mark.parametrize("bad", [1.0, "12", True, None])
def test_non_int_token_rejected(bad):
    comp = _valid()["completion_ids"]
    comp[1] = [bad]
    with pytest.raises(RolloutError, match=r"`completion_ids\[1\]\[0\]` is .*token ids must be ints"):
        check_rollout_output(_valid(completion_ids=comp), P, N)


def test_completion_not_a_list():
    comp = _valid()["completion_ids"]
    comp[2] = "hello"
    with pytest.raises(RolloutError, match=r"`completion_ids\[2\]` must be a list of token ids, got str"):
        check_rollout_output(_valid(completion_ids=comp, logprobs=None), P, N)


def test_extra_of_wrong_length():
    with pytest.raises(RolloutError, match=r"extra `answers` has 4 values; expected 6 .* or 2"):
        check_rollout_output(_valid(answers=["a", "b", "c", "d"]), P, N)


def test_the_built_in_rollouts_sample_with_the_configs_defaults_when_called_directly():
    """The sampling settings are defined once (issue 29.1): a built-in rollout's keyword defaults and the multi-turn
    ``Sampling`` are the schema's ``sampling.*`` defaults, every setting the contract passes."""
    import dataclasses
    import inspect

    from grpo_rollout.config.schema import SamplingConfig
    from grpo_rollout.rollouts.contract import SAMPLING_ARGS
    from grpo_rollout.rollouts.environment import environment_rollout
    from grpo_rollout.rollouts.episodes import Sampling
    from grpo_rollout.rollouts.single_turn import single_turn
    from grpo_rollout.rollouts.tool_calling import tool_calling_rollout

    config = SamplingConfig.model_fields
    for rollout in (single_turn, tool_calling_rollout, environment_rollout):
        params = inspect.signature(rollout).parameters
        assert {arg: params[arg].default for arg in SAMPLING_ARGS if arg != "n"} == \
            {arg: config[key].default for arg, key in SAMPLING_ARGS.items() if arg != "n"}, rollout.__name__
    fields = {f.name: f.default for f in dataclasses.fields(Sampling)}
    shared = [name for name in fields if name in config]
    assert len(shared) == 6 and all(fields[name] == config[name].default for name in shared)
