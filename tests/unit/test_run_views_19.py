"""Seeing an environment run and reading its messages (issue 19, items 5 and 6): the plot's multi-turn panels and
its reward band, console inspect's extras, "no step finished" for runs that died before their first step, and the
messages for a missing prompt key, a long key in the problem table and the --help flags."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from rich.console import Console
from typer.testing import CliRunner

from grpo_rollout.cli.main import app
from grpo_rollout.cli.render import problems_table
from grpo_rollout.config.problems import Problem
from grpo_rollout.views.plot import PlotError, plot_runs

ENV_TITLES = ["Multi-turn: sampled turns per episode (mean)",
              "Multi-turn: how episodes ended (share of the step's episodes)",
              "Multi-turn: episodes cut by the token budget"]


def _env_run(folder: Path) -> Path:
    folder.mkdir(parents=True)
    records = [{"step": s, "reward": r, "reward_std": 0.5, "reward_min": 0.0, "reward_max": mx,
                "rewards/env_reward/mean": r, "extras/num_turns": 1.0 + s / 2, "episodes/cut_by_budget": 4.0 - s,
                "episodes/ended/done": s / 4, "episodes/ended/max_turns": 0.0,
                "episodes/ended/budget_turn": 0.0, "episodes/ended/budget_reply": 1 - s / 4}
               for s, r, mx in [(1, 0.1, 1.0), (2, 0.3, 1.0), (3, 0.9, 1.0), (4, 0.25, 0.5)]]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return folder


def test_environment_run_gets_multi_turn_panels_and_a_clipped_band(tmp_path):
    fig = plot_runs([_env_run(tmp_path / "env")])
    axes = {ax.get_title(): ax for ax in fig.axes}
    for title in ENV_TITLES:
        assert title in axes
    [turns] = axes[ENV_TITLES[0]].get_lines()
    assert list(turns.get_ydata()) == [1.5, 2.0, 2.5, 3.0]
    ended = {line.get_label(): list(line.get_ydata()) for line in axes[ENV_TITLES[1]].get_lines()}
    assert ended["episodes/ended/budget_reply"] == [0.75, 0.5, 0.25, 0.0]
    assert ended["episodes/ended/done"] == [0.25, 0.5, 0.75, 1.0]
    [cuts] = axes[ENV_TITLES[2]].get_lines()
    assert list(cuts.get_ydata()) == [3.0, 2.0, 1.0, 0.0]
    reward_ax = axes["Reward: mean ± std, and each reward function's mean"]
    # rewards in [0, 1]: the band stays in the step's observed range (0.1 - 0.5 would be below 0; 0.9 + 0.5 above 1)
    [band] = reward_ax.collections
    ys = band.get_paths()[0].vertices[:, 1]
    assert min(ys) == pytest.approx(0.0) and max(ys) == pytest.approx(1.0)
    lines = {line.get_label(): line for line in reward_ax.get_lines()}
    # `reward` equals env_reward's mean: it is drawn on top, thicker, and env_reward dashed, so both show
    assert lines["reward"].get_zorder() > lines["rewards/env_reward/mean"].get_zorder()
    assert lines["reward"].get_linewidth() > lines["rewards/env_reward/mean"].get_linewidth()
    assert lines["rewards/env_reward/mean"].get_linestyle() == "--"


def _died_before_first_step(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(yaml.safe_dump({
        "model": {"name_or_path": "builtin:smollm2-135m-instruct"},
        "training": {"save_rollouts": "every"}, "logging": {"report_to": ["jsonl"]}}))
    return folder


def test_plot_and_inspect_of_a_run_that_died_before_its_first_step(tmp_path):
    run = _died_before_first_step(tmp_path / "run")
    with pytest.raises(PlotError) as info:
        plot_runs([run])
    assert "no step of this run finished" in str(info.value) and "report_to=[jsonl]" not in str(info.value)
    result = CliRunner().invoke(app, ["inspect", str(run)], terminal_width=250)
    assert result.exit_code == 1
    out = " ".join(result.output.split())
    assert "no step of this run finished" in out and "train with training.save_rollouts=every" not in out
    # an empty metrics.jsonl reads the same
    (run / "metrics.jsonl").write_text("")
    with pytest.raises(PlotError, match="no step of this run finished"):
        plot_runs([run])


def test_console_inspect_shows_the_extras(tmp_path):
    from grpo_rollout.views.inspect import InspectedSample, console_renderables

    sample = InspectedSample(tmp_path, 1, 0, 0, "p", "p", 3, [], 0.5, 1.0, {"env_reward": 1.0},
                             {"end_reason": "budget_reply", "env_reward": 1.0})
    console = Console(record=True, width=200)
    for renderable in console_renderables(sample):
        console.print(renderable)
    text = console.export_text()
    assert "extras" in text and "end_reason: budget_reply" in text and "env_reward: 1.0" in text


def test_row_without_the_prompt_key_names_the_row_and_its_keys(project, errs):
    rows = [{"prompt": f"What is {i}+1?", "answer": str(i + 1)} for i in range(20)]
    rows[17] = {"promt": "What is 17+1?", "answer": "18"}
    project.write_jsonl("data.jsonl", rows)
    [problem] = errs(project.check(project.baseline()), "data.prompt_column")
    assert problem.message == ("row 17 has no `prompt` key (it has `answer`, `promt`; `promt` looks like a "
                               "misspelling of `prompt`)")


def test_problem_table_keeps_long_keys_whole():
    console = Console(record=True, width=80)
    console.print(problems_table([Problem("sampling.max_completion_length", 5000, "too long for the model " * 3,
                                          "lower it")]))
    assert "sampling.max_completion_length" in console.export_text()


def test_help_shows_flags_without_a_type():
    result = CliRunner().invoke(app, ["--help"], terminal_width=120)
    assert "--version" in result.output and "<bool>" not in result.output
    result = CliRunner().invoke(app, ["validate-config", "--help"], terminal_width=120)
    assert "--dry-run" in result.output and "<bool>" not in result.output
