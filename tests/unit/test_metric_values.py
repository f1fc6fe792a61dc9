"""The numbers a step logs are what they say (issue 28, item 7): float64 rewards, one definition of std, and no
pass@k of identical greedy samples."""

from __future__ import annotations

import statistics

import pytest
import torch

from grpo_rollout.rewards.calling import RewardFunction, compute_rewards
from grpo_rollout.orchestrator.batch import CompletionScores, StepTimes
from grpo_rollout.trainer.reporting.step_metrics import step_metrics


class _NoUpdate:
    def metrics(self):
        return {}


def _metrics(rewards, per_function, g):
    n = len(rewards)
    whole = CompletionScores(rewards=rewards, per_function=per_function, prompts=["p"] * n, texts=["c"] * n,
                             lengths=[1] * n, truncated=[False] * n, extras={})
    return step_metrics(whole, torch.zeros(n), _NoUpdate(), StepTimes(0.0), g, None)[0]


@pytest.mark.parametrize("n, g", [(32, 8), (6, 3)])
def test_constant_weighted_rewards_log_exactly_their_value(n, g):
    """Rewards weighted 0.7 / 0.3, constant: the float32 mean was logged as 0.6999999284744263 and reward_std as
    6.4e-08, while the evaluation said 0.7; in float64, six of them still gave 0.6999999999999998 and 1.2e-16."""
    fns = [RewardFunction("right", lambda completions, **kw: [1.0] * len(completions), weight=0.7),
           RewardFunction("short", lambda completions, **kw: [0.0] * len(completions), weight=0.3),
           RewardFunction("tenth", lambda completions, **kw: [0.1] * len(completions), weight=0.0)]
    scored = compute_rewards(fns, prompts=["p"] * n, completions=["c"] * n, completion_ids=[[1]] * n,
                             columns={}, extras={}, step=0)
    metrics = _metrics(scored.rewards, scored.per_function, g)
    assert metrics["reward"] == 0.7 and metrics["reward_std"] == 0.0
    assert metrics["rewards/tenth/mean"] == 0.1 and metrics["rewards/tenth/std"] == 0.0
    assert metrics["reward_min"] == metrics["reward_max"] == 0.7
    assert isinstance(metrics["frac_reward_zero_std"], float) and metrics["frac_reward_zero_std"] == 1.0


def test_every_std_is_the_sample_std():
    """reward_std was the n−1 sample std while rewards/<fn>/std (and the evaluation's) were population stds (0.577 vs
    0.5 for one reward scoring [0, 0, 1, 1]); now one definition, Bessel's correction as in the advantages."""
    rewards = [0.0, 1.0, 1.0, 1.0]
    metrics = _metrics(rewards, {"acc": list(rewards)}, 2)
    assert metrics["reward_std"] == metrics["rewards/acc/std"] == statistics.stdev(rewards)
    assert metrics["frac_reward_zero_std"] == 0.5
    thirds = _metrics([0.0, 0.0, 1.0, 0.0, 0.0, 0.0], {}, 2)["frac_reward_zero_std"]
    assert thirds == 2 / 3  # float64: not float32's 0.6666666865348816


def test_greedy_evaluation_with_several_generations_is_refused(project, errs):
    cfg = project.baseline()
    cfg["data"]["eval"] = "data.jsonl"
    cfg["evaluation"] = {"at_start": True, "temperature": 0.0, "num_generations": 4}
    [p] = errs(project.check(cfg), "evaluation.num_generations")
    assert "greedy decoding (temperature 0) gives the same completion 4 times" in p.message
    assert "evaluation.num_generations: 1" in p.fix and "temperature > 0" in p.fix
    cfg["evaluation"] = {"at_start": True, "temperature": 0.0, "num_generations": 1}
    assert not errs(project.check(cfg), "evaluation.num_generations")
    cfg["evaluation"] = {"at_start": True, "temperature": 0.7, "num_generations": 4}
    assert not errs(project.check(cfg), "evaluation.num_generations")
