"""Held-out evaluation (issue 22) in a run: equal to `grpo-rollout eval`, training untouched, multi-turn, LoRA."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from grpo_rollout.cli.main import app
from grpo_rollout.config import config_from_dict
from grpo_rollout.trainer import train
from grpo_rollout.trainer.evaluation.eval_run import evaluate
from grpo_rollout.trainer.reporting.progress import RichReporter
from tiny_model import tiny_config


# --- in a run, on the tiny model -------------------------------------------------------------------------------------

HELD_OUT = [{"prompt": f"Count to {i}.", "answer": str(i)} for i in range(100, 106)]


def _eval_config(root: Path, model: Path, **evaluation):
    (root / "held_out.jsonl").write_text("".join(json.dumps(r) + "\n" for r in HELD_OUT))
    settings = {"num_generations": 4, "temperature": 1.0, "success_threshold": 0.5, **evaluation}
    return tiny_config(root, model, data={"eval": str(root / "held_out.jsonl")}, evaluation=settings,
                       training={"max_steps": 2})


@pytest.mark.model
def test_evaluation_at_step_0_equals_grpo_rollout_eval(tmp_path, tiny_model):
    cfg = _eval_config(tmp_path, tiny_model, at_start=True)
    result = train(cfg, base_dir=tmp_path, reporter=RichReporter(quiet=True))
    rows = [json.loads(x) for x in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    at_start = rows[0]
    assert at_start["step"] == 0 and result.evaluations[0][0] == 0
    alone = evaluate(cfg, tmp_path, reporter=RichReporter(quiet=True))
    for key in ("eval/pass@1", "eval/pass@2", "eval/pass@4", "eval/mean@4", "eval/reward",
                "eval/rewards/even_ids/mean", "eval/completions/mean_length", "eval/prompts"):
        assert alone.metrics[key] == pytest.approx(at_start[key], abs=1e-9), key
    assert 0.0 < at_start["eval/reward"] < 1.0 and at_start["eval/prompts"] == 6
    records = [json.loads(x) for x in (tmp_path / "out" / "eval" / "step_0.jsonl").read_text().splitlines()]
    assert [r["index"] for r in records] == list(range(6)) and all(len(r["completions"]) == 4 for r in records)
    assert records == [json.loads(json.dumps(r)) for r in alone.records]  # per prompt, the same completions


@pytest.mark.model
def test_evaluating_every_step_leaves_training_unchanged(tmp_path, tiny_model):
    final = {}
    for name, evaluation in (("plain", {}), ("evaluated", {"every_steps": 1, "at_start": True})):
        root = tmp_path / name
        root.mkdir()
        result = train(_eval_config(root, tiny_model, **evaluation), base_dir=root, reporter=RichReporter(quiet=True))
        final[name] = (load_file(str(result.checkpoint / "model.safetensors")), result)
    plain, evaluated = final["plain"][0], final["evaluated"][0]
    assert plain.keys() == evaluated.keys()
    assert all(torch.equal(plain[k], evaluated[k]) for k in plain)
    assert [s for s, _ in final["evaluated"][1].evaluations] == [0, 1, 2]
    assert [m["reward"] for m in final["plain"][1].history] == [m["reward"] for m in final["evaluated"][1].history]
    assert "eval/pass@1" in final["evaluated"][1].history[-1] and "eval/pass@1" not in final["plain"][1].history[-1]


@pytest.mark.model
def test_eval_command_prints_the_metrics_as_json(tmp_path, tiny_model, monkeypatch):
    import yaml

    from grpo_rollout.config import to_yaml

    cfg = _eval_config(tmp_path, tiny_model, temperature=0.5, num_generations=2)
    (tmp_path / "config.yaml").write_text(to_yaml(cfg))
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["eval", "config.yaml", "--json"])
    assert result.exit_code == 0, result.output
    metrics = json.loads(result.stdout)
    assert metrics["eval/prompts"] == 6 and set(metrics) >= {"eval/pass@1", "eval/pass@2", "eval/mean@2"}
    assert metrics["eval/pass@1"] <= metrics["eval/pass@2"]  # one of two tries succeeds at least as often
    assert not math.isnan(metrics["eval/reward"]) and yaml.safe_load(to_yaml(cfg))["evaluation"]["temperature"] == 0.5


@pytest.mark.model
def test_evaluation_runs_a_multi_turn_environment_and_logs_its_metrics(tmp_path, tiny_model):
    """The built-in environment rollout (examples/guess_number) through the evaluation: its episodes are played
    and their metrics (turns, how episodes ended) are logged under eval/."""
    repo = Path(__file__).resolve().parents[2]
    env = repo / "examples" / "guess_number" / "env.py"
    config, problems = config_from_dict({
        "model": {"name_or_path": str(tiny_model)},
        "data": {"train": f"{env}:dataset", "eval": f"{env}:dataset"},
        "rollout": {"function": "grpo_rollout.rollouts.environment:environment_rollout",
                    "kwargs": {"env": f"{env}:GuessNumberEnv", "env_kwargs": {"low": 1, "high": 10, "max_guesses": 3},
                               "max_turns": 3, "max_turn_tokens": 4}},
        "rewards": ["grpo_rollout.rewards.tools:env_reward"],
        "sampling": {"max_completion_length": 96, "max_prompt_length": 256, "seed": 0},
        "training": {"output_dir": str(tmp_path / "out")},
        "evaluation": {"num_generations": 2, "temperature": 1.0, "max_prompts": 3, "success_threshold": 0.5},
        "vllm": {"mode": "off"},
    })
    assert not [p for p in problems if p.is_error]
    result = evaluate(config, repo, reporter=RichReporter(quiet=True))
    m = result.metrics
    assert m["eval/prompts"] == 3 and "eval/rewards/env_reward/mean" in m
    assert m["eval/extras/num_turns"] >= 1.0  # episodes were played turn by turn
    assert any(k.startswith("eval/episodes/ended/") for k in m)
    assert all(len(r["completions"]) == 2 for r in result.records)


@pytest.mark.model
def test_eval_of_a_lora_checkpoint_equals_the_runs_last_evaluation(tmp_path, tiny_model):
    """LoRA (adapters on the frozen base): `grpo-rollout eval --checkpoint latest` loads the adapters and gives the
    numbers the run's at_end evaluation logged."""
    cfg = _eval_config(tmp_path, tiny_model, at_end=True, temperature=0.0, num_generations=1)
    cfg.model.lora.r, cfg.model.lora.alpha = 4, 8.0
    cfg.training.learning_rate = 5e-2  # the adapters must move for the check to mean something
    result = train(cfg, base_dir=tmp_path, reporter=RichReporter(quiet=True))
    [(done, logged)] = result.evaluations
    from rich.console import Console

    console = Console(record=True, width=400)  # a long TMPDIR path must not wrap
    alone = evaluate(cfg, tmp_path, checkpoint="latest", reporter=RichReporter(console))
    base = evaluate(cfg, tmp_path, reporter=RichReporter(quiet=True))
    assert done == 2 and alone.metrics == pytest.approx(logged)
    said = console.export_text()  # issue 28: it said "Resuming from …"
    assert f"Evaluating the checkpoint {tmp_path / 'out' / 'checkpoint-2'}" in said and "Resuming" not in said
    assert [r["completions"] for r in alone.records] != [r["completions"] for r in base.records]  # adapters applied


@pytest.mark.model
def test_a_failing_evaluation_still_logs_its_step(tmp_path, tiny_model):
    from grpo_rollout.rewards.calling import RewardError

    source = "def needs_level(completion_ids, level, **kw):\n    return [float(v) for v in level]\n"
    (tmp_path / "held_out.jsonl").write_text('{"prompt": "Count to 3."}\n')
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps({"prompt": f"Count to {i}.", "level": 1}) + "\n"
                                                 for i in range(8)))
    cfg = tiny_config(tmp_path, tiny_model, rewards_source=source, reward="needs_level",
                      data={"train": str(tmp_path / "rows.jsonl"), "eval": str(tmp_path / "held_out.jsonl")},
                      evaluation={"at_end": True}, training={"max_steps": 1})
    with pytest.raises(RewardError):
        train(cfg, base_dir=tmp_path, reporter=RichReporter(quiet=True), check=False)
    [row] = [json.loads(x) for x in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert row["step"] == 1 and "reward" in row  # the step trained and was logged before the evaluation failed
    assert (tmp_path / "out" / "checkpoint-1").is_dir()


def test_eval_of_a_folder_that_is_no_checkpoint_says_so_before_loading(project, monkeypatch):
    """A new user's finding: `eval --checkpoint out/nope` loaded the model first, then said it was no checkpoint."""
    cfg = project.baseline()
    cfg["data"]["eval"] = "data.jsonl"
    cfg["evaluation"] = {"at_start": True}
    project.write_config(cfg)
    (project.root / "out" / "nope").mkdir(parents=True)
    result = CliRunner().invoke(app, ["eval", "config.yaml", "--checkpoint", "out/nope"], env={"COLUMNS": "200"})
    assert result.exit_code == 1 and "out/nope is not a checkpoint (no trainer_state.pt)" in result.output
    assert "Loading" not in result.output and "Traceback" not in result.output
