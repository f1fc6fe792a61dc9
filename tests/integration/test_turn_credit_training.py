"""Issue 32.5 in training: a scripted 3-turn environment whose turn rewards are known trains with
training.credit: turn on the tiny model; the records of the step (rollouts/step_1.jsonl) keep the turn rewards and
starts, and each completion's logged advantage is the hand-computed mean of its trained tokens' turn advantages."""

from __future__ import annotations

import json
import math

import pytest

from grpo_rollout.trainer import train
from grpo_rollout.trainer.reporting.progress import RichReporter
from tiny_model import tiny_config

pytestmark = pytest.mark.model

ENV = '''
class ThreeTurns:
    """Three turns; after the 2nd, reward 1 when the reply has an even number of characters."""

    def reset(self, row):
        self.turn = 0
        return "Say something."

    def step(self, text):
        self.turn += 1
        if self.turn == 3:
            return None, 0.0, True
        return "Again.", (float(len(text) % 2 == 0) if self.turn == 2 else None), False
'''


def _expected(records, g, gamma):
    """Each record's advantage by the formulas of trainer/update/turn_credit.py, from its saved extras."""
    out = []
    for first in range(0, len(records), g):
        group = records[first:first + g]
        turns = []
        for r in group:
            rewards = list(r["extras"]["turn_rewards"])  # None: the environment gave no reward after that turn
            rewards[-1] = (rewards[-1] or 0.0) + r["reward"] - sum(x for x in rewards if x is not None)
            turns.append(rewards)
        given = [x for t in turns for x in t if x is not None]
        mean = sum(given) / len(given)
        std = math.sqrt(sum((x - mean) ** 2 for x in given) / (len(given) - 1))
        for r, t in zip(group, turns):
            norm = [0.0 if x is None or max(given) == min(given) else (x - mean) / (std + 1e-4) for x in t]
            returns = [sum(gamma ** (j - k) * norm[j] for j in range(k, len(t))) for k in range(len(t))]
            starts = r["extras"]["turn_starts"] + [len(r["completion_mask"])]
            trained = [returns[k] for k in range(len(t)) for p in range(starts[k], starts[k + 1])
                       if r["completion_mask"][p] == "1"]
            out.append(sum(trained) / len(trained))
    return out


def test_turn_credit_trains_and_each_advantage_is_the_hand_computed_one(tmp_path, tiny_model):
    (tmp_path / "three.py").write_text(ENV)
    cfg = tiny_config(tmp_path, tiny_model, training={"max_steps": 2, "credit": "turn", "turn_discount": 0.9,
                                                      "save_rollouts": "every"})
    cfg.rollout.function = "grpo_rollout.rollouts.environment:environment_rollout"
    cfg.rollout.kwargs = {"env": f"{tmp_path / 'three.py'}:ThreeTurns", "max_turns": 3, "max_turn_tokens": 4}
    cfg.rewards[0].function = "grpo_rollout.rewards.tools:env_reward"
    cfg.sampling.max_completion_length = 96
    history = train(cfg, base_dir=tmp_path, reporter=RichReporter(quiet=True)).history
    assert len(history) == 2
    records = [json.loads(x) for x in (tmp_path / "out" / "rollouts" / "step_1.jsonl").read_text().splitlines()]
    assert all(len(r["extras"]["turn_starts"]) == 3 == len(r["extras"]["turn_rewards"]) for r in records)
    assert {r["extras"]["turn_rewards"][1] for r in records} == {0.0, 1.0}  # the group's turns differ
    assert {r["extras"]["turn_rewards"][0] for r in records} == {None}  # no reward after the first turn
    assert [r["advantage"] for r in records] == pytest.approx(_expected(records, 8, 0.9), abs=1e-4)  # 4 decimals


RANKS = '''
from types import SimpleNamespace
from grpo_rollout.orchestrator.batch import ScoredBatch
from grpo_rollout.distributed import Dist
from grpo_rollout.trainer.update.turn_credit import with_turn_credit

class Rollout(SimpleNamespace):
    def __len__(self):
        return len(self.completion_ids)

dist = Dist.from_env(device="cpu", timeout_s=60)
starts = [[0, 2], [0, 2]] if dist.rank == 0 else [[0, 2], [3]]  # rank 1's 2nd completion: not from 0
rollout = Rollout(extras={"turn_starts": starts}, completion_ids=[[1] * 4] * 2, completion_mask=[[1] * 4] * 2)
try:
    with_turn_credit(ScoredBatch(rollout, SimpleNamespace(rewards=[1.0, 0.0]), 0.0), dist, 2, 1.0)
    said = "nothing raised"
except Exception as exc:
    said = f"{type(exc).__name__}: {exc}"
open(f"rank{dist.rank}.txt", "w").write(said)  # a file each: their prints could mix in torchrun's output
dist.close()
'''


@pytest.mark.multiproc
def test_malformed_turn_starts_on_one_rank_stop_every_rank(tmp_path):
    """Found in review of issue 32.5: a malformed ``turn_starts`` on one of two processes raised there only, after the
    ranks last agreed, and the other failed in the next gather with gloo's read error (or waited there while the first
    lived on); now both raise, naming the rank and the completion."""
    from test_distributed import _torchrun

    (tmp_path / "ranks.py").write_text(RANKS)
    proc = _torchrun([str(tmp_path / "ranks.py")], cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    message = "RankError: rank 1: RolloutError: completion 1: `turn_starts` must be increasing completion-token indices"
    for rank in (0, 1):
        said = (tmp_path / f"rank{rank}.txt").read_text()
        assert said.startswith(message), (rank, said)
