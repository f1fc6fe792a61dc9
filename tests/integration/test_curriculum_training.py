"""The pass-rate curriculum in training (data.curriculum: pass_rate): which prompts each step trains, its metrics, and
a resumed run that draws what the uninterrupted one drew."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grpo_rollout.trainer import train
from grpo_rollout.trainer.reporting.progress import RichReporter
from tiny_model import tiny_config

pytestmark = pytest.mark.model

# "Count to i.": even i → every completion solved (reward 1); odd i → every other completion solved (a mixed group)
EVEN_SOLVED = '''
def even_solved(prompts, completion_ids, **kwargs):
    return [1.0 if int(p.split()[-1].rstrip(".")) % 2 == 0 else float(k % 2) for k, p in enumerate(prompts)]
'''


def _prompts_by_step(out: Path) -> dict:
    steps: dict = {}
    for line in (out / "completions.jsonl").read_text().splitlines():
        r = json.loads(line)
        numbers = steps.setdefault(r["step"], [])
        number = int(r["prompt"].split()[-1].rstrip("."))
        if number not in numbers:
            numbers.append(number)
    return steps


def _metrics(out: Path) -> list:
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]


def _config(tmp_path: Path, tiny_model: Path, out: str, max_steps: int):
    return tiny_config(tmp_path, tiny_model, rewards_source=EVEN_SOLVED, reward="even_solved", rows=8,
                       data={"curriculum": "pass_rate", "curriculum_patience": 1, "curriculum_pause": 1},
                       training={"max_steps": max_steps, "save_steps": 2, "output_dir": str(tmp_path / out)},
                       sampling={"num_generations": 4, "max_completion_length": 4})


def test_solved_prompts_sit_out_the_next_epoch_and_a_resumed_run_draws_the_same(tmp_path, tiny_model):
    quiet = RichReporter(quiet=True)
    train(_config(tmp_path, tiny_model, "whole", 4), base_dir=tmp_path, reporter=quiet)
    steps, metrics = _prompts_by_step(tmp_path / "whole"), _metrics(tmp_path / "whole")
    assert sorted(steps[1] + steps[2]) == list(range(8))  # epoch 0: every prompt once
    # after epoch 0 the four even prompts (always solved) are paused: epoch 1's turns go to the odd ones
    assert metrics[1]["curriculum/paused"] == 4
    assert sorted(steps[3]) == [1, 3, 5, 7]
    assert sum(m["curriculum/skipped"] for m in metrics) == 4  # each even prompt sat out its epoch-1 turn once
    assert metrics[0]["curriculum/skipped"] == metrics[1]["curriculum/skipped"] == 0
    for step, m in enumerate(metrics, start=1):
        evens = sum(i % 2 == 0 for i in steps[step])
        assert (m["curriculum/groups_all_solved"], m["curriculum/groups_mixed"]) == (evens, 4 - evens), step
        assert m["curriculum/groups_none_solved"] == 0
    # resumed from the checkpoint after step 2 (in another folder): steps 3 and 4 draw what the whole run drew
    train(_config(tmp_path, tiny_model, "resumed", 4), base_dir=tmp_path, reporter=quiet,
          resume=str(tmp_path / "whole" / "checkpoint-2"))
    resumed = _prompts_by_step(tmp_path / "resumed")
    assert [resumed[3], resumed[4]] == [steps[3], steps[4]]
    assert [m["curriculum/skipped"] for m in _metrics(tmp_path / "resumed")] == [m["curriculum/skipped"]
                                                                                 for m in metrics[2:]]
