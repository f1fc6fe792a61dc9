"""``grpo-rollout plot`` of written metrics files: several runs in one figure, panels, formats, gaps, clean errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List

import pytest

from grpo_rollout.views.plot import PlotError, default_output_path, load_run, plot_runs, save_figure
from plot_helpers import (CLIP_TITLE, KL_TITLE, REWARD_TITLE, SAMPLER_TITLE, TIME_TITLE, TOOLS_TITLE, by_title, invoke,
                          lines_by_label, same)


def write_run(folder: Path, records: List[Dict]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return folder


def synthetic(offset: float = 0.0, steps: int = 4, **extra) -> List[Dict]:
    return [{"step": s, "reward": 0.1 * s + offset, "reward_std": 0.05, "rewards/acc/mean": 0.2 * s + offset,
             "rewards/acc/std": 0.1, "kl": 0.01 * s, "completions/mean_length": 10.0 + s,
             "completions/max_length": 20, "time/generation": 1.0, "time/training": 2.0 + offset,
             **{k: v(s) if callable(v) else v for k, v in extra.items()}} for s in range(1, steps + 1)]


# -- several runs -------------------------------------------------------------------------------------------------

def test_two_runs_one_colour_each_named_in_the_legend(tmp_path):
    a = write_run(tmp_path / "baseline", synthetic())
    b = write_run(tmp_path / "lr-high", synthetic(offset=0.5))
    fig = plot_runs([a, b])
    [legend] = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == ["baseline", "lr-high"]

    axes = by_title(fig)
    [kl_a, kl_b] = axes[KL_TITLE].get_lines()
    assert kl_a.get_color() != kl_b.get_color()
    assert same(kl_a.get_ydata(), [0.01 * s for s in range(1, 5)])
    # the reward panel: reward and rewards/acc/mean for each run, each run in its colour, the metric by line style
    lines = lines_by_label(axes[REWARD_TITLE])
    assert sorted(lines) == ["baseline: reward", "baseline: rewards/acc/mean", "lr-high: reward",
                             "lr-high: rewards/acc/mean"]
    assert lines["baseline: reward"].get_color() == lines["baseline: rewards/acc/mean"].get_color()
    assert lines["baseline: reward"].get_linestyle() != lines["baseline: rewards/acc/mean"].get_linestyle()
    assert same(lines["lr-high: reward"].get_ydata(), [0.1 * s + 0.5 for s in range(1, 5)])
    assert [t.get_text() for t in axes[REWARD_TITLE].get_legend().get_texts()] == ["reward", "rewards/acc/mean"]
    # only the time metrics the runs logged
    assert [line.get_label() for line in axes[TIME_TITLE].get_lines()] == [
        "baseline: time/generation", "baseline: time/training", "lr-high: time/generation", "lr-high: time/training"]


def test_runs_with_the_same_folder_name_are_told_apart(tmp_path, monkeypatch):
    a = write_run(tmp_path / "first" / "out", synthetic())
    b = write_run(tmp_path / "second" / "out", synthetic(offset=1.0))
    fig = plot_runs([a, b])
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["first/out", "second/out"]
    monkeypatch.chdir(tmp_path)
    assert default_output_path([a, b]) == Path("runs.png")
    assert default_output_path([a]) == a / "plot.png"
    code, out = invoke("plot", a, b)
    assert code == 0, out
    assert (tmp_path / "runs.png").is_file()


def test_save_formats(tmp_path):
    from PIL import Image

    fig = plot_runs([write_run(tmp_path / "run", synthetic())])
    with Image.open(save_figure(fig, tmp_path / "small.png")) as image:
        assert image.mode == "P" and image.size == (1280, 620)  # 256-colour palette by default; 2 × 2 panels
    with Image.open(save_figure(fig, tmp_path / "full.png", palette=False)) as image:
        assert image.mode == "RGBA" and image.size == (1280, 620)
    assert save_figure(fig, tmp_path / "deep" / "er" / "fig.svg").read_text().lstrip().startswith("<?xml")


def test_panels_appear_only_for_logged_metrics(tmp_path):
    plain = write_run(tmp_path / "plain", synthetic())
    titles = [ax.get_title() for ax in plot_runs([plain]).axes]
    assert TOOLS_TITLE not in titles and SAMPLER_TITLE not in titles and CLIP_TITLE not in titles

    tools = write_run(tmp_path / "tools", synthetic(**{"tools/success_rate": lambda s: 0.25 * s,
                                                       "tools/calls": 4, "sampler/logprob_abs_diff": 0.002}))
    # a tools run next to a run without tools: the panel is there, with the one run's line
    fig = plot_runs([plain, tools])
    axes = by_title(fig)
    [line] = axes[TOOLS_TITLE].get_lines()
    assert line.get_label() == "tools: tools/success_rate"
    assert same(line.get_ydata(), [0.25, 0.5, 0.75, 1.0])
    assert axes[SAMPLER_TITLE].get_yscale() == "log"


def test_null_values_are_gaps(tmp_path):
    records = synthetic()
    records[1]["reward"] = None  # how the trainer writes NaN
    run = write_run(tmp_path / "run", records)
    line = lines_by_label(by_title(plot_runs([run]))[REWARD_TITLE])["reward"]
    assert same(line.get_ydata(), [0.1 * 1, None, 0.1 * 3, 0.1 * 4])


def test_half_written_last_line_is_ignored(tmp_path):
    run = write_run(tmp_path / "live", synthetic(steps=2))
    with (run / "metrics.jsonl").open("a") as f:
        f.write('{"step": 3, "rew')
    assert [r["step"] for r in load_run(run).records] == [1, 2]


# -- errors -------------------------------------------------------------------------------------------------------

def test_unknown_metric_exits_1_listing_the_available_ones(tmp_path):
    run = write_run(tmp_path / "run", synthetic())
    code, out = invoke("plot", run, "--metrics", "reward,rewrd")
    assert code == 1
    assert "unknown metric 'rewrd' (did you mean reward" in out
    assert "Available metrics: completions/max_length, completions/mean_length, kl, reward" in out
    assert "Traceback" not in out
    assert not (run / "plot.png").exists()


def test_missing_run_folder_exits_1_naming_it(tmp_path):
    run = write_run(tmp_path / "real", synthetic())
    missing = tmp_path / "no-such-run"
    code, out = invoke("plot", run, missing)
    assert code == 1
    assert f"{missing}: no such folder" in out and "training.output_dir" in out
    assert "Traceback" not in out


def test_folder_without_metrics_says_how_to_get_them(tmp_path):
    run = tmp_path / "wandb-only"
    run.mkdir()
    code, out = invoke("plot", run)
    assert code == 1
    assert f"{run / 'metrics.jsonl'} not found" in out and "logging.report_to includes jsonl" in out

    (run / "metrics.jsonl").write_text("")
    with pytest.raises(PlotError, match="is empty"):
        plot_runs([run])
    code, out = invoke("plot", run)
    assert code == 1 and f"{run / 'metrics.jsonl'} is empty" in out


def test_bad_lines_and_bad_output_suffix(tmp_path):
    run = write_run(tmp_path / "run", synthetic())
    with (run / "metrics.jsonl").open("a") as f:
        f.write("not json\n" + json.dumps({"step": 9, "reward": 1.0}) + "\n")
    with pytest.raises(PlotError, match=r"line 5 is not JSON"):
        load_run(run)

    good = write_run(tmp_path / "good", synthetic())
    code, out = invoke("plot", good, "-o", tmp_path / "plot.bmpx")
    assert code == 1 and "cannot write '.bmpx' files" in out and ".png" in out


def test_held_out_panel_with_one_evaluation_spans_the_runs_steps(tmp_path):
    """Issue 28: one held-out evaluation (after step 2 of 2, no at_start) drew an x-axis of 1.90-2.10 under a title
    promising a step-0 point. The axis spans the run's steps with whole-step ticks; the note only with a step 0."""
    after_2 = synthetic(steps=2)
    after_2[-1].update({"eval/pass@1": 0.5, "eval/reward": 0.4})
    ax = {a.get_title(): a for a in plot_runs([write_run(tmp_path / "end", after_2)]).axes}[
        "Held-out evaluation: pass@k and mean reward"]
    low, high = ax.get_xlim()
    assert low < 1 and high > 2 and high - low < 3
    assert [t for t in ax.get_xticks() if low <= t <= high] == [1, 2]
    assert [list(line.get_xdata()) for line in ax.get_lines()] == [[2], [2]]

    one_step = [{"step": 1, "reward": 0.2, "eval/pass@1": 0.5}]  # one step, one evaluation: still whole steps
    ax = by_title(plot_runs([write_run(tmp_path / "one", one_step)]))["Held-out evaluation: pass@k and mean reward"]
    assert all(float(t).is_integer() for t in ax.get_xticks())

    with_start = [{"step": 0, "eval/pass@1": 0.25}] + after_2
    titles = [a.get_title() for a in plot_runs([write_run(tmp_path / "start", with_start)]).axes]
    assert "Held-out evaluation: pass@k and mean reward (step 0: before training)" in titles
