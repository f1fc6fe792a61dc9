"""The pass-rate curriculum in training (data.curriculum: pass_rate): which prompts each step trains, its metrics, and
a resumed run that draws what the uninterrupted one drew."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

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
    # after epoch 0 the four even prompts (always solved) are paused when step 3 is drawn: epoch 1's turns go to the
    # odd ones (step 2's draw saw only step 1's evens paused)
    assert metrics[1]["curriculum/paused"] == sum(i % 2 == 0 for i in steps[1]) and metrics[2]["curriculum/paused"] == 4
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


DRAWS_RECORDED = '''
import json, os, sys
sys.path.insert(0, sys.argv[2])
import torch.distributed as dist
from simulated_server import SimulatedServer, use_simulated_server
from grpo_rollout.config import load_config
from grpo_rollout.trainer import train
from grpo_rollout.trainer.reporting.progress import RichReporter
from grpo_rollout.orchestrator.prompt_order import PromptOrder

draw_next = PromptOrder._draw_next

def recorded(self):  # every draw of this rank, to compare with the other rank's
    draw_next(self)
    step = self._next_step - 1
    with open(f"draws_{os.environ['RANK']}.jsonl", "a") as f:
        f.write(json.dumps([step, self._draws[step][1]]) + "\\n")

PromptOrder._draw_next = recorded
use_simulated_server(setattr, lambda loaded: SimulatedServer(loaded.tokenizer, lambda: 0.02, 49152))
dist.init_process_group("gloo")
loaded = load_config(sys.argv[1])
train(loaded.config, base_dir=loaded.base_dir, reporter=RichReporter(quiet=True))
dist.destroy_process_group()
'''


@pytest.mark.multiproc
def test_two_processes_streaming_with_the_curriculum_draw_the_same_steps(tmp_path, tiny_model, monkeypatch):
    """training.max_staleness 1 on two processes: each process's stream draws steps ahead at its own pace, each draw
    applying the visits counted 3 steps before it; both must draw every step alike (each takes its share of the same
    rows). Over 6 steps (3 epochs of 8 prompts) the always-solved even prompts sit out turns, so the odd ones train
    more often than without the curriculum (12 times in all: 24 groups, 3 turns each)."""
    import yaml

    from streaming_helpers import BENCHMARKS, streaming_config, trained_prompts
    from test_distributed import _torchrun

    cfg = streaming_config(tmp_path, tiny_model, monkeypatch, 1, rows=8, max_steps=6)
    (tmp_path / "task_rewards.py").write_text(EVEN_SOLVED)
    cfg.rewards[0].function = f"{tmp_path / 'task_rewards.py'}:even_solved"
    cfg.data.curriculum, cfg.data.curriculum_patience = "pass_rate", 1
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg.model_dump(), sort_keys=False))
    (tmp_path / "driver.py").write_text(DRAWS_RECORDED)
    proc = _torchrun([str(tmp_path / "driver.py"), str(tmp_path / "config.yaml"), str(BENCHMARKS)], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    draws = [dict(json.loads(x) for x in (tmp_path / f"draws_{r}.jsonl").read_text().splitlines()) for r in (0, 1)]
    common = sorted(set(draws[0]) & set(draws[1]))
    assert common[:6] == list(range(6)) and all(draws[0][s] == draws[1][s] for s in common)
    trained = [int(p.split()[-1].rstrip(".")) for prompts in trained_prompts(tmp_path / "out").values()
               for p in prompts]
    assert len(trained) == 24 and sum(i % 2 == 1 for i in trained) > 12


def test_a_resumed_stream_takes_the_saved_draws(tmp_path, tiny_model, monkeypatch):
    """A stream had drawn steps ahead when the checkpoint was saved: the resumed run takes those draws from the
    checkpoint (the positions left to train map to the same rows) and draws only the steps after them."""
    from grpo_rollout.trainer.checkpoint import STATE_FILE
    from grpo_rollout.orchestrator.prompt_order import PromptOrder
    from streaming_helpers import streaming_config

    drawn = []
    draw_next = PromptOrder._draw_next

    def recorded(self):
        draw_next(self)
        drawn.append(self._next_step - 1)

    monkeypatch.setattr(PromptOrder, "_draw_next", recorded)
    cfg = streaming_config(tmp_path, tiny_model, monkeypatch, 1, rows=8, max_steps=4, save_steps=2)
    (tmp_path / "task_rewards.py").write_text(EVEN_SOLVED)
    cfg.rewards[0].function = f"{tmp_path / 'task_rewards.py'}:even_solved"
    cfg.data.curriculum, cfg.data.curriculum_patience = "pass_rate", 1
    train(cfg, base_dir=tmp_path, reporter=RichReporter(quiet=True))
    state = torch.load(tmp_path / "out" / "checkpoint-2" / STATE_FILE, weights_only=False)
    saved = state["data_position"]["curriculum"]
    first_new = saved["next"][0]
    assert first_new > 2 and sorted(saved["draws"]) == list(range(first_new))  # drawn ahead of training
    drawn.clear()
    cfg.training.output_dir = str(tmp_path / "resumed")
    result = train(cfg, base_dir=tmp_path, reporter=RichReporter(quiet=True),
                   resume=str(tmp_path / "out" / "checkpoint-2"))
    assert result.steps == 4 and drawn and min(drawn) == first_new  # the saved draws were not drawn again
