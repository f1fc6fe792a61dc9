"""How far to trust a held-out number (issue 28, item 5): a held-out set smaller than asked for, or too small, is
said before training and at the start of the run, and pass@k comes with its standard error on the console, in the
metrics and in the final panel."""

from __future__ import annotations

import json
import math

import pytest

from grpo_rollout.trainer.evaluation.held_out import eval_result, eval_summary
from grpo_rollout.orchestrator.batch import CompletionScores
from grpo_rollout.trainer.evaluation.pass_at_k import pass_at_k_with_stderr


def _warnings(problems, key):
    return [p for p in problems if p.key == key and not p.is_error]


def test_a_held_out_set_smaller_than_asked_is_a_warning(project):
    project.write_jsonl("held.jsonl", [{"prompt": f"q{i}", "answer": str(i)} for i in range(7)])
    cfg = project.baseline()
    cfg["data"]["eval"] = "held.jsonl"
    cfg["evaluation"] = {"at_start": True, "max_prompts": 24}
    [w] = _warnings(project.check(cfg), "evaluation.max_prompts")
    assert "asks for 24 held-out prompts but data.eval has only 7, so pass@k is measured on 7" in w.message
    assert "standard error is up to 0.19" in w.message and "lower evaluation.max_prompts" in w.fix
    cfg["evaluation"] = {"at_start": True}  # all 7: fewer than 30
    [w] = _warnings(project.check(cfg), "data.eval")
    assert "gives 7 held-out prompts" in w.message and "at least 30" in w.fix
    project.write_jsonl("held.jsonl", [{"prompt": f"q{i}", "answer": str(i)} for i in range(32)])
    assert not _warnings(project.check(cfg), "data.eval")
    # a new user's finding: max_prompts 4 of 32 rows was said at data.eval ("gives 4"), with a fix that missed the key
    cfg["evaluation"] = {"at_start": True, "max_prompts": 4}
    problems = project.check(cfg)
    assert not _warnings(problems, "data.eval")
    [w] = _warnings(problems, "evaluation.max_prompts")
    assert w.message.startswith("evaluates 4 of data.eval's 32 held-out prompts")
    assert w.fix == "raise evaluation.max_prompts to 30 or more (null: all)"


def test_the_issues_reasoning_gym_held_out_set_that_shrank_is_a_warning(project):
    """`reasoning_gym:products` with one-digit factors: 100 distinct questions, most used by the 200 training rows,
    so `max_prompts: 24` evaluated 7 prompts with no word."""
    cfg = project.baseline()
    task = "reasoning_gym:products"
    cfg["data"] = {"train": task, "eval": task, "task_kwargs": {"size": 200, "min_digits": 1, "max_digits": 1,
                                                                "min_terms": 2, "max_terms": 2}}
    cfg["rewards"] = [{"function": "grpo_rollout.rewards.tasks:reasoning_gym_score"}]
    cfg["evaluation"] = {"at_start": True, "max_prompts": 24}
    [w] = _warnings(project.check(cfg), "evaluation.max_prompts")
    assert w.message.startswith("asks for 24 held-out prompts but data.eval has only ")


def test_pass_at_k_has_a_standard_error_over_prompts():
    # pass@1 of the prompts: 0.5 and 0 → mean 0.25, sample std 0.354, over √2 → 0.25
    assert pass_at_k_with_stderr([[True, False], [False, False]], 1) == pytest.approx((0.25, 0.25))
    mean, se = pass_at_k_with_stderr([[True]], 1)
    assert mean == 1.0 and math.isnan(se)
    n, order = 2, [0, 1, 2, 3]
    successes = [1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0]
    whole = CompletionScores(rewards=successes, per_function={}, prompts=["p"] * 8, texts=["c"] * 8,
                             lengths=[1] * 8, truncated=[False] * 8, extras={})
    metrics = eval_result(whole, order, n, None, 1.0, []).metrics
    # per prompt pass@1: 0.5, 1, 0, 0.5 → mean 0.5, std 0.408, se 0.204
    assert metrics["eval/pass@1"] == 0.5 and metrics["eval/stderr/pass@1"] == pytest.approx(0.2041, abs=1e-4)
    assert "4 prompts, pass@1 0.500 ± 0.204, pass@2" in eval_summary(metrics)


def test_the_final_panel_shows_the_count_the_error_and_when_a_change_is_noise(tmp_path):
    from grpo_rollout.trainer.run import TrainResult

    history = [{"reward": r} for r in (0.2, 0.4, 0.6, 0.8)]
    # the issue's numbers: 0.18 → 0.43 on 7 prompts
    evals = [(0, {"eval/pass@1": 0.18, "eval/stderr/pass@1": 0.12, "eval/prompts": 7}),
             (24, {"eval/pass@1": 0.43, "eval/stderr/pass@1": 0.17, "eval/prompts": 7})]
    text = TrainResult(tmp_path, tmp_path / "checkpoint-24", 24, history, evals).summary
    assert "held-out pass@1 on 7 prompts (step 0 → 24): 0.180 ± 0.120 → 0.430 ± 0.170  ▲ +0.250" in text
    assert "the change is within twice its standard error (±0.416): on 7 held-out prompts it may be noise" in text
    evals[1][1]["eval/pass@1"] = 0.9
    assert "may be noise" not in TrainResult(tmp_path, None, 24, history, evals).summary


@pytest.mark.model
def test_the_run_says_the_held_out_set_is_small_at_its_start(tmp_path, tiny_model):
    from rich.console import Console

    from grpo_rollout.trainer import train
    from grpo_rollout.trainer.reporting.progress import RichReporter
    from tiny_model import tiny_config

    (tmp_path / "held.jsonl").write_text("".join(json.dumps({"prompt": f"Count to {i}."}) + "\n" for i in range(5)))
    cfg = tiny_config(tmp_path, tiny_model, data={"eval": str(tmp_path / "held.jsonl")},
                      evaluation={"at_start": True, "max_prompts": 24, "num_generations": 2, "temperature": 1.0},
                      training={"max_steps": 1})
    console = Console(record=True, width=200, force_terminal=False)
    result = train(cfg, base_dir=tmp_path, reporter=RichReporter(console=console))
    out = console.export_text()
    assert ("Held-out set: evaluation.max_prompts asks for 24 held-out prompts but data.eval has only 5, so pass@k is "
            "measured on 5") in out
    assert result.evaluations[0][1]["eval/prompts"] == 5 and "eval/stderr/pass@1" in result.evaluations[0][1]
    assert "Held-out evaluation before step 1: 5 prompts, pass@1 " in out
