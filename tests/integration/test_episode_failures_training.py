"""Issue 32.6 in training (tiny model, in-process generation): a group whose episodes fail outside the model is left
out of the step or played again, its episodes counted, the rest of the step trained; with on_error: stop the run
stops naming the failure."""

from __future__ import annotations

from pathlib import Path

import pytest

from grpo_rollout.rollouts.contract import EpisodeFailure
from grpo_rollout.trainer import train
from grpo_rollout.trainer.reporting.progress import RichReporter
from tiny_model import tiny_config

pytestmark = pytest.mark.model

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "flaky_sandbox" / "rollout.py"  # docs/rollouts.md shows it


def test_the_page_shows_the_example():
    text = EXAMPLE.read_text()
    assert text[text.index("from grpo_rollout import"):] in (REPO / "docs" / "rollouts.md").read_text()


def _run(tmp_path, model, on_error, module):
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / f"{module}.py").write_text(EXAMPLE.read_text())  # a module of its own: its own CRASHED_ONCE
    cfg = tiny_config(tmp_path, model, training={"max_steps": 2})
    cfg.data.shuffle = False  # step 1: prompts 0-3; step 2: prompts 4-7
    cfg.rollout.function = f"{tmp_path / module}.py:rollout"
    cfg.rollout.on_error = on_error
    return train(cfg, base_dir=tmp_path, reporter=RichReporter(quiet=True)).history


def test_drop_leaves_the_failing_group_out_and_retry_plays_the_flaky_one_again(tmp_path, tiny_model):
    history = _run(tmp_path / "drop", tiny_model, "drop", "flaky_drop")
    assert history[0]["episodes/failed"] == 0 and history[0]["num_tokens"] > 0
    # step 2: the call failed on "7" (one group counted failed, all 4 played again); alone, "5" failed its first
    # time and "7" again: both dropped (drop: no second attempt)
    assert history[1]["episodes/failed"] == 8 + 8 + 8 and history[1]["episodes/retried"] == 32
    assert history[1]["episodes/dropped"] == 16
    assert history[1]["completions/mean_length"] > 0
    history = _run(tmp_path / "retry", tiny_model, "retry", "flaky_retry")
    # "5" plays on its second attempt; "7" fails 3 times (max_retries 2) and is left out
    assert history[1]["episodes/dropped"] == 8
    assert history[1]["episodes/failed"] == 8 + 8 + 3 * 8 and history[1]["episodes/retried"] == 32 + 8 + 2 * 8


def test_stop_stops_the_run_naming_the_failure(tmp_path, tiny_model):
    with pytest.raises(EpisodeFailure, match="the sandbox for 'Count to 7.' crashed|crashed once"):
        _run(tmp_path, tiny_model, "stop", "flaky_stop")
