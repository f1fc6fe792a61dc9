"""``grpo-rollout plot`` of a real tiny training run: panels, lines, plotted values = metrics.jsonl, ``--metrics``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List

import pytest

from grpo_rollout.views.plot import plot_runs
from tiny_model import tiny_config
from plot_helpers import (CLIP_TITLE, ENTROPY_TITLE, KL_TITLE, LENGTH_TITLE, MEMORY_TITLE, REWARD_TITLE, SAMPLER_TITLE,
                          TIME_KEYS, TIME_TITLE, TRUNC_TITLE, by_title, invoke, lines_by_label, same)


def read_metrics(run_dir: Path) -> List[Dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


# -- a real run ---------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def trained_run(tmp_path_factory, tiny_model) -> Path:
    """A 3-step run of the tiny random model (transformers generation), logging metrics.jsonl."""
    from grpo_rollout.trainer import train
    from grpo_rollout.trainer.reporting.progress import RichReporter

    root = tmp_path_factory.mktemp("run")
    cfg = tiny_config(root, tiny_model, training={"max_steps": 3, "save_steps": 100})
    train(cfg, base_dir=root, reporter=RichReporter(quiet=True))
    return root / "out"


@pytest.mark.model
def test_plot_of_a_real_run(trained_run):
    import matplotlib.image

    records = read_metrics(trained_run)
    assert [r["step"] for r in records] == [1, 2, 3]

    code, out = invoke("plot", trained_run)
    assert code == 0, out
    png = trained_run / "plot.png"
    assert f"wrote {png}" in out
    image = matplotlib.image.imread(png)
    fig = plot_runs([trained_run])
    width, height = fig.get_size_inches() * 100
    assert image.shape == (round(height), round(width), 4)
    assert image[..., :3].std() > 0.05  # not a blank canvas

    # no tools in this run: that panel is left out, the others are there in order
    assert list(by_title(fig)) == [REWARD_TITLE, LENGTH_TITLE, TRUNC_TITLE, KL_TITLE, ENTROPY_TITLE,
                                   CLIP_TITLE, SAMPLER_TITLE, MEMORY_TITLE, TIME_TITLE]
    # every title fits over its own panel (the entropy one ran past it into the next column: a new user's trial)
    renderer = fig.canvas.get_renderer()
    fig.draw(renderer)
    for name, ax in by_title(fig).items():
        assert ax.title.get_window_extent(renderer).width <= ax.get_window_extent(renderer).width, name
    assert sorted(lines_by_label(by_title(fig)[ENTROPY_TITLE])) == ["entropy", "entropy/seq_max", "entropy/seq_min"]
    axes = by_title(fig)
    assert all(ax.get_xlabel() == "step" for ax in fig.axes)
    steps = [1, 2, 3]
    column = lambda key: [r[key] for r in records]  # noqa: E731

    reward = axes[REWARD_TITLE]
    assert reward.get_ylabel() == "reward"
    assert sorted(lines_by_label(reward)) == ["reward", "rewards/even_ids/mean"]
    for key, line in lines_by_label(reward).items():
        assert list(line.get_xdata()) == steps
        assert same(line.get_ydata(), column(key)), key
    # the ± std band spans reward - reward_std .. reward + reward_std, clipped to the step's observed rewards
    [band] = reward.collections
    ys = band.get_paths()[0].vertices[:, 1]
    lows = [max(r["reward"] - r["reward_std"], r["reward_min"]) for r in records]
    highs = [min(r["reward"] + r["reward_std"], r["reward_max"]) for r in records]
    assert min(ys) == pytest.approx(min(lows)) and max(ys) == pytest.approx(max(highs))
    assert [t.get_text() for t in reward.get_legend().get_texts()] == [
        "reward", "reward ± reward_std", "rewards/even_ids/mean"]

    length = axes[LENGTH_TITLE]
    assert "length" in length.get_ylabel()
    assert sorted(lines_by_label(length)) == ["completions/max_length", "completions/mean_length"]
    for key, line in lines_by_label(length).items():
        assert same(line.get_ydata(), column(key)), key
    assert max(column("completions/max_length")) <= 8  # the config's max_completion_length

    for title, key in [(TRUNC_TITLE, "completions/truncated_fraction"), (KL_TITLE, "kl"),
                       (CLIP_TITLE, "clip_ratio/region"), (SAMPLER_TITLE, "sampler/logprob_abs_diff")]:
        ax = axes[title]
        assert ax.get_ylabel().startswith(key)
        [line] = ax.get_lines()
        assert same(line.get_ydata(), column(key)), key
    # beta = 0: the KL is 0 at every step and the panel says why
    assert column("kl") == [0.0, 0.0, 0.0]
    assert any("training.beta" in t.get_text() for t in axes[KL_TITLE].texts)
    # transformers generation and training agree to float rounding: tiny positive values, on a log scale
    assert all(0 < v < 1e-3 for v in column("sampler/logprob_abs_diff"))
    assert axes[SAMPLER_TITLE].get_yscale() == "log"

    time = axes[TIME_TITLE]
    assert [line.get_label() for line in time.get_lines()] == TIME_KEYS
    for line in time.get_lines():
        assert same(line.get_ydata(), column(line.get_label()))
    assert all(v > 0 for v in column("time/training"))


@pytest.mark.model
def test_metrics_option_plots_exactly_those_keys(trained_run, tmp_path):
    records = read_metrics(trained_run)
    fig = plot_runs([trained_run], metrics=["grad_norm", "loss"])
    assert [(ax.get_title(), ax.get_ylabel()) for ax in fig.axes] == [("grad_norm", "grad_norm"), ("loss", "loss")]
    for ax in fig.axes:
        [line] = ax.get_lines()
        assert same(line.get_ydata(), [r[ax.get_title()] for r in records])

    out_file = tmp_path / "sub" / "two.png"
    code, out = invoke("plot", trained_run, "--metrics", "grad_norm, loss", "-o", out_file)
    assert code == 0, out
    assert out_file.stat().st_size > 1000 and f"wrote {out_file}" in out
