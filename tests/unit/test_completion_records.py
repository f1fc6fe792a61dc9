"""One ``CompletionRecord`` per completion, and the four per-completion shapes built from it (issue 29.1): the
training sample (console, ``completions.jsonl``), the evaluation record, the token record of ``rollouts/step_<k>.jsonl``
(the dry run's is run by tests/integration/test_dry_run*.py). The shapes are the files' formats, written out here by
hand."""

import json

import torch

from grpo_rollout.runs import names as rn
from grpo_rollout.runs.completion import CompletionRecord, group_columns
from grpo_rollout.runs.rollouts import RolloutRecord, token_record
from grpo_rollout.orchestrator.batch import CompletionScores
from grpo_rollout.trainer.evaluation.held_out import eval_result


def _scores() -> CompletionScores:
    """Two groups of two: the second group's completions come from a part without the multi-turn extras."""
    return CompletionScores(rewards=[1.0, 0.0, 0.5, 0.25], per_function={"fmt": [1.0, 0.0, 0.5, 0.125]},
                            timed_out={}, time_limits={}, prompts=["p0", "p0", "p1", "p1"],
                            texts=["a", "b", "c", "d"], lengths=[3, 4, 5, 6], truncated=[False, True, False, False],
                            extras={rn.NUM_TURNS_EXTRA: [2, 3, None, None], rn.END_REASON_EXTRA: ["done", "budget",
                                                                                                 None, None],
                                    "score": [0.1, 0.2, 0.3, 0.4]},
                            weight_versions=[(2, 3), (2, 3), (3, 3), (3, 3)])


def test_records_hold_each_completions_values_in_order():
    """(and the weight versions that sampled each, issue 30: selected and merged with the completions)"""
    records = _scores().records(torch.tensor([0.7, -0.7, 0.5, -0.5]).tolist())
    assert records[1] == CompletionRecord(prompt="p0", completion="b", reward=0.0, rewards={"fmt": 0.0},
                                          advantage=-0.699999988079071, truncated=True,
                                          extras={rn.NUM_TURNS_EXTRA: 3, rn.END_REASON_EXTRA: "budget", "score": 0.2},
                                          weight_versions=(2, 3))
    assert [r.advantage for r in _scores().records()] == [None] * 4
    picked = CompletionScores.merge([_scores().select([2]), _scores().select([0]), _old_scores()])
    assert picked.weight_versions == [(3, 3), (2, 3), None] and picked.records()[2].weight_versions is None


def _old_scores() -> CompletionScores:
    """A part without weight versions (shared weights: the transformers client)."""
    return CompletionScores(rewards=[0.0], per_function={"fmt": [0.0]}, prompts=["q"], texts=["e"], lengths=[1],
                            truncated=[False], extras={})


def test_the_training_sample_row_is_completions_jsonl_format():
    [first, _, third, _] = _scores().records([0.75, -0.75, 0.5, -0.5])
    assert first.sample_row() == {"prompt": "p0", "completion": "a", "reward": 1.0, "rewards/fmt": 1.0,
                                  "advantage": 0.75, "truncated": False, "turns": 2, "ended": "done"}
    # a completion whose part had no such extras shows them as None, as the merged columns say
    assert third.sample_row() == {"prompt": "p1", "completion": "c", "reward": 0.5, "rewards/fmt": 0.5,
                                  "advantage": 0.5, "truncated": False, "turns": None, "ended": None}


def test_group_columns_are_the_evaluation_records_shape():
    records = _scores().records()
    assert group_columns(records[2:]) == {"prompt": "p1", "completions": ["c", "d"], "reward": [0.5, 0.25],
                                          "rewards/fmt": [0.5, 0.125]}
    result = eval_result(_scores(), [7, 3], 2, None, 0.5, [])
    assert result.records == [
        {"index": 3, "prompt": "p1", "completions": ["c", "d"], "reward": [0.5, 0.25], "rewards/fmt": [0.5, 0.125],
         "success": [True, False], "pass@1": 0.5, "pass@2": 1.0},
        {"index": 7, "prompt": "p0", "completions": ["a", "b"], "reward": [1.0, 0.0], "rewards/fmt": [1.0, 0.0],
         "success": [True, False], "pass@1": 0.5, "pass@2": 1.0}]


def test_a_token_record_line_takes_the_records_values_and_rounds_the_advantage():
    record = _scores().records([0.123456, 0.0, 0.0, 0.0])[0]
    tokens = token_record([5, 6], [7, 8, 9], [1, 0, 1], [-0.5, -0.25, -1.0], [-0.51, -0.3, -1.1], None)
    line = RolloutRecord.of(record, tokens, step=3, index=0, group=0, prompt_text="<p0>")
    assert json.loads(line.to_json()) == {
        "step": 3, "index": 0, "group": 0, "prompt": "p0", "prompt_text": "<p0>", "prompt_ids": [5, 6],
        "completion_ids": [7, 8, 9], "completion_mask": "101", "sampler_logprobs": [-0.5, None, -1.0],
        "trainer_logprobs": [-0.51, -0.3, -1.1], "importance_weights": None, "advantage": 0.1235, "reward": 1.0,
        "rewards": {"fmt": 1.0}, "extras": {rn.NUM_TURNS_EXTRA: 2, rn.END_REASON_EXTRA: "done", "score": 0.1},
        "weight_versions": [2, 3]}


def test_completions_with_no_trained_token_are_one_note_naming_the_first_across_ranks():
    """Issue 39.3: the counts travel with select and merge (every rank's, gathered); a part that did not count them
    (None) is not taken for untrained."""
    first, second = _scores(), _scores()
    first.trained_tokens, second.trained_tokens = [3, 4, 5, 6], [3, 0, 0, 6]
    whole = CompletionScores.merge([first.select([0, 1]), second.select([0, 1, 2]), _old_scores()])
    assert whole.trained_tokens == [3, 4, 3, 0, 0, None] and whole.untrained() == [3, 4]
    [note] = whole.untrained_notes(num_generations=2)
    assert note.startswith("completion 3 (group 1, sample 1) has no token to train on (and 1 more this step): its "
                           "completion_mask is 0 on all its 4 tokens")
    assert _scores().untrained_notes(2) == [] and first.untrained_notes(2) == []
