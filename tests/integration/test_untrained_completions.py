"""Issue 39.3, for every rollout (tiny model, in-process generation): a completion with no token to train on (its
completion_mask all 0, as a verifiers turn re-tokenized on the tiny model was) is said once a step on the console,
naming the first such completion, and counted in completions/untrained; before, the step logged num_tokens 0 and
nothing else."""

from __future__ import annotations

import pytest

from grpo_rollout.trainer import train
from grpo_rollout.trainer.reporting.progress import RichReporter
from tiny_model import tiny_config

pytestmark = pytest.mark.model

MASKING_ROLLOUT = '''
from grpo_rollout.rollouts.single_turn import single_turn


def rollout(prompts, *, client, masked=(), **sampling):
    out = single_turn(prompts, client=client, **sampling)
    out["completion_mask"] = [[0 if i in masked else 1] * len(ids) for i, ids in enumerate(out["completion_ids"])]
    return out
'''


def test_a_completion_with_no_trained_token_is_named_once_a_step_and_counted(tmp_path, tiny_model):
    said = []

    class Recording(RichReporter):
        def message(self, text: str) -> None:
            said.append(text)

    (tmp_path / "masking.py").write_text(MASKING_ROLLOUT)
    cfg = tiny_config(tmp_path, tiny_model, training={"max_steps": 1, "prompts_per_step": 2, "micro_batch_size": 8},
                      sampling={"num_generations": 4})
    cfg.rollout.function = f"{tmp_path / 'masking.py'}:rollout"
    cfg.rollout.kwargs = {"masked": [5, 6]}  # group 1, samples 1 and 2
    history = train(cfg, base_dir=tmp_path, reporter=Recording(quiet=True)).history
    assert history[0]["completions/untrained"] == 2
    notes = [t for t in said if "no token to train on" in t]
    assert len(notes) == 1, said  # once a step, however many
    assert notes[0].startswith("Step 1: completion 5 (group 1, sample 1) has no token to train on (and 1 more this "
                               "step): its completion_mask is 0 on all its ")
