"""Held-out evaluation (issue 22): pass@k, the evaluation's numbers against `grpo-rollout eval`, training left
untouched, the built-in multi-turn rollouts, and the task libraries' rewards."""

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
from grpo_rollout.preflight import validate
from grpo_rollout.trainer import train
from grpo_rollout.trainer.evaluation.eval_run import evaluate
from grpo_rollout.trainer.evaluation.pass_at_k import default_ks, mean_pass_at_k, pass_at_k
from grpo_rollout.trainer.reporting.progress import RichReporter
from tiny_model import tiny_config


# --- pass@k (Chen et al. 2021), against values worked out by hand ----------------------------------------------------

@pytest.mark.parametrize("n, c, k, expected", [
    (1, 0, 1, 0.0), (1, 1, 1, 1.0),
    (2, 1, 1, 0.5), (2, 1, 2, 1.0),
    (4, 1, 2, 1 - 3 / 6),          # 1 - C(3,2)/C(4,2)
    (5, 2, 2, 1 - 3 / 10),         # 1 - C(3,2)/C(5,2)
    (5, 2, 3, 1 - 1 / 10),         # 1 - C(3,3)/C(5,3)
    (8, 0, 4, 0.0), (8, 5, 4, 1.0),  # n - c < k: every draw of 4 holds a success
    (10, 3, 1, 0.3),               # pass@1 = c / n
])
def test_pass_at_k_by_hand(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected)


def test_pass_at_k_refuses_k_above_n():
    with pytest.raises(ValueError, match="1 <= k <= n"):
        pass_at_k(2, 1, 3)


def test_the_ks_reported_and_their_mean_over_prompts():
    assert default_ks(8) == [1, 2, 4, 8] and default_ks(6) == [1, 2, 4, 6] and default_ks(4, [3]) == [1, 2, 3, 4]
    assert mean_pass_at_k([[True, False], [False, False]], 1) == pytest.approx(0.25)


def test_k_above_num_generations_is_refused_at_validate_config(tmp_path):
    config, problems = config_from_dict({"evaluation": {"num_generations": 4, "pass_k": [8]}})
    [p] = [p for p in validate(config, tmp_path, load_data=False, known=problems) if p.key.startswith("evaluation")]
    assert (p.key, p.value) == ("evaluation.pass_k", [8])
    assert "k > num_generations (4)" in p.message and p.fix.startswith("raise evaluation.num_generations to 8")


def test_a_success_reward_that_is_not_a_reward_is_refused(tmp_path, tiny_model=None):
    (tmp_path / "r.py").write_text("def right(completions, **kw):\n    return [1.0] * len(completions)\n")
    (tmp_path / "d.jsonl").write_text('{"prompt": "a"}\n')
    config, _ = config_from_dict({"data": {"train": str(tmp_path / "d.jsonl"), "eval": str(tmp_path / "d.jsonl")},
                                  "rewards": [f"{tmp_path / 'r.py'}:right"],
                                  "evaluation": {"at_start": True, "success_reward": "rigth"}})
    [p] = [p for p in validate(config, tmp_path) if p.key == "evaluation.success_reward"]
    assert p.message == "is not one of the run's rewards (right)"


# --- the task libraries ----------------------------------------------------------------------------------------------

def test_math_accuracy_uses_math_verify():
    from grpo_rollout.rewards.tasks import math_accuracy

    got = math_accuracy([r"so $\boxed{\frac{1}{2}}$", "it is 0.75", r"\boxed{0.5}", "no idea", "x"],
                        ["0.5", "0.5", "1/2", "2", None])
    assert got == [1.0, 0.0, 1.0, 0.0, None]


def test_reasoning_gym_reward_agrees_with_the_tasks_own_scorer():
    import reasoning_gym

    from grpo_rollout.data.reasoning_gym import task_rows
    from grpo_rollout.rewards.tasks import reasoning_gym_score

    for task in ("basic_arithmetic", "chain_sum"):
        dataset = reasoning_gym.create_dataset(task, size=6, seed=5)
        rows = task_rows(task, {"size": 6, "seed": 5}, instruction="")
        assert [r["prompt"] for r in rows] == [[{"role": "user", "content": e["question"]}] for e in dataset]
        answers = [e["answer"] for e in dataset] + ["<answer>" + dataset[0]["answer"] + "</answer>", "-999999"]
        entries = [r["task_entry"] for r in rows] + [rows[0]["task_entry"]] * 2
        expected = [dataset.score_answer(a, e) for a, e in zip(answers, list(dataset) + [dataset[0]] * 2)]
        expected[-2] = dataset.score_answer(dataset[0]["answer"], dataset[0])  # the tag is stripped first
        assert reasoning_gym_score(answers, entries) == expected
        assert expected[:6] == [1.0] * 6 and expected[-1] == 0.0


def test_reasoning_gym_held_out_rows_never_repeat_training_ones():
    from grpo_rollout.data import load_train_dataset

    train_rows = load_train_dataset("reasoning_gym:basic_arithmetic", task_kwargs={"size": 200, "seed": 1})
    held = load_train_dataset("reasoning_gym:basic_arithmetic", task_kwargs={"size": 200, "seed": 1}, held_out=True)
    assert len(train_rows) == 200 and len(held) > 150
    questions = lambda ds: {p[0]["content"] for p in ds["prompt"]}  # noqa: E731
    assert not questions(train_rows) & questions(held)
    assert set(held.column_names) == {"prompt", "answer", "task", "task_entry", "task_kwargs"}


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
    repo = Path(__file__).resolve().parents[1]
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


# --- the final panel and the plot ------------------------------------------------------------------------------------

def _summary(history, evaluations, tmp_path):
    from grpo_rollout.trainer.run import TrainResult

    return TrainResult(tmp_path, tmp_path / "checkpoint-4", 4, history, evaluations).summary


def test_the_final_panel_shows_held_out_change_and_warns_of_reward_hacking(tmp_path):
    rising = [{"reward": r} for r in (0.2, 0.4, 0.6, 0.8)]
    text = _summary(rising, [(0, {"eval/pass@1": 0.5}), (4, {"eval/pass@1": 0.25})], tmp_path)
    assert "held-out pass@1 (step 0 → 4): 0.500 → 0.250  ▼ -0.250" in text
    assert "the training reward rose while held-out success fell" in text
    text = _summary(rising, [(0, {"eval/pass@1": 0.5}), (4, {"eval/pass@1": 0.75})], tmp_path)
    assert "0.500 → 0.750  ▲ +0.250" in text and "reward hacking" not in text
    assert "held-out" not in _summary(rising, [], tmp_path)


def test_plot_draws_the_held_out_panel(tmp_path):
    import json as _json

    from grpo_rollout.views.plot import plot_runs

    rows = [{"step": 0, "eval/pass@1": 0.4, "eval/pass@2": 0.5, "eval/reward": 0.3}] + [
        {"step": s, "reward": 0.1 * s} for s in (1, 2)] + [{"step": 3, "reward": 0.3, "eval/pass@1": 0.6,
                                                            "eval/pass@2": 0.7, "eval/reward": 0.5}]
    (tmp_path / "metrics.jsonl").write_text("".join(_json.dumps(r) + "\n" for r in rows))
    figure = plot_runs([tmp_path])
    [ax] = [ax for ax in figure.axes if ax.get_title().startswith("Held-out evaluation")]
    assert [line.get_label() for line in ax.get_lines()] == ["eval/pass@1", "eval/pass@2", "eval/reward"]
    assert list(ax.get_lines()[0].get_xdata()) == [0, 3]


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

    console = Console(record=True, width=200)
    alone = evaluate(cfg, tmp_path, checkpoint="latest", reporter=RichReporter(console))
    base = evaluate(cfg, tmp_path, reporter=RichReporter(quiet=True))
    assert done == 2 and alone.metrics == pytest.approx(logged)
    said = console.export_text()  # issue 28: it said "Resuming from …"
    assert f"Evaluating the checkpoint {tmp_path / 'out' / 'checkpoint-2'}" in said and "Resuming" not in said
    assert [r["completions"] for r in alone.records] != [r["completions"] for r in base.records]  # adapters applied


# --- found by a new user trying to break the evaluation ---------------------------------------------------------------

def test_held_out_rows_without_a_column_a_reward_takes_are_refused(project, errs):
    # validate-config passed, and the run trained every step, then failed at its evaluation
    project.write_jsonl("no_answer.jsonl", [{"prompt": "What is 1+1?"}])
    cfg = project.baseline()
    cfg["data"]["eval"] = "no_answer.jsonl"
    cfg["evaluation"] = {"at_end": True}
    [p] = errs(project.check(cfg))
    assert (p.key, p.value) == ("data.eval", "no_answer.jsonl")
    assert p.message.startswith("has no column `answer`, which the reward `accuracy` takes from the training rows")


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


def test_a_k_below_1_gets_a_fix_that_makes_sense(tmp_path):
    config, problems = config_from_dict({"evaluation": {"pass_k": [0]}})
    [p] = [p for p in validate(config, tmp_path, load_data=False, known=problems) if p.key == "evaluation.pass_k"]
    assert p.fix == "use k's from 1 to 1"


def test_reasoning_gym_held_out_rows_are_distinct():
    from grpo_rollout.data.reasoning_gym import task_rows

    held = task_rows("basic_arithmetic", {"size": 400, "seed": 0, "min_terms": 2, "max_terms": 2, "min_digits": 1,
                                          "max_digits": 1}, held_out=True)
    questions = [r["prompt"][0]["content"] for r in held]
    assert len(questions) == len(set(questions)) > 100


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
