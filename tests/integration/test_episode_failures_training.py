"""Issue 32.6 in training (tiny model, in-process generation): a group whose episodes fail outside the model is left
out of the step or played again, its episodes counted, the rest of the step trained; with on_error: stop the run
stops naming the failure. Issue 39.6 and 39.12: an environment's ConnectionError is such a failure, kept with its text
in failures.jsonl and named on the console; another error still stops the run; streaming leaves such a group out."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from grpo_rollout.rollouts.contract import EpisodeFailure, RolloutError
from grpo_rollout.runs.failure_records import read_failures
from grpo_rollout.trainer import train
from grpo_rollout.trainer.reporting.progress import RichReporter
from streaming_helpers import streaming_config, trained_prompts
from tiny_model import tiny_config

pytestmark = pytest.mark.model

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "flaky_sandbox" / "rollout.py"  # docs/rollouts.md shows it


def test_the_page_shows_the_example():
    text = EXAMPLE.read_text()
    assert text[text.index("from grpo_rollout import"):] in (REPO / "docs" / "rollouts.md").read_text()


def _run(tmp_path, model, on_error, module, reporter=None):
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / f"{module}.py").write_text(EXAMPLE.read_text())  # a module of its own: its own CRASHED_ONCE
    cfg = tiny_config(tmp_path, model, training={"max_steps": 2})
    cfg.data.shuffle = False  # step 1: prompts 0-3; step 2: prompts 4-7
    cfg.rollout.function = f"{tmp_path / module}.py:rollout"
    cfg.rollout.on_error = on_error
    return train(cfg, base_dir=tmp_path, reporter=reporter or RichReporter(quiet=True)).history


def test_drop_leaves_the_failing_group_out_and_retry_plays_the_flaky_one_again(tmp_path, tiny_model):
    history = _run(tmp_path / "drop", tiny_model, "drop", "flaky_drop")
    assert history[0]["episodes/failed"] == 0 and history[0]["num_tokens"] > 0
    # step 2: the call failed on "7" (one group counted failed, all 4 played again); alone, "5" failed its first
    # time and "7" again: both dropped (drop: no second attempt)
    assert history[1]["episodes/failed"] == 8 + 8 + 8 and history[1]["episodes/retried"] == 32
    assert history[1]["episodes/dropped"] == 16
    assert history[1]["completions/mean_length"] > 0
    reporter = Recording()
    history = _run(tmp_path / "retry", tiny_model, "retry", "flaky_retry", reporter)
    # "5" plays on its second attempt; "7" fails 3 times (max_retries 2) and is left out
    assert history[1]["episodes/dropped"] == 8
    assert history[1]["episodes/failed"] == 8 + 8 + 3 * 8 and history[1]["episodes/retried"] == 32 + 8 + 2 * 8
    # issue 39.6: before, these texts were on neither the console nor in any file
    records = read_failures(tmp_path / "retry" / "out" / "failures.jsonl")
    assert [(r["step"], r["prompt"], r["attempt"], r["outcome"], r["message"]) for r in records[1:]] == [
        (2, "Count to 5.", 1, "retried", "the sandbox for 'Count to 5.' crashed once")] + [
        (2, "Count to 7.", attempt, outcome, "the sandbox for 'Count to 7.' crashed")
        for attempt, outcome in ((1, "retried"), (2, "retried"), (3, "dropped"))]
    [said] = [line for line in reporter.lines if "failed outside the model with" in line]
    assert reporter.lines[-1].startswith("Epoch 1 ended: 1 of its prompts were left out")  # 10 rows, 4 a step
    assert said.startswith("Step 2: 5 attempt(s) failed outside the model with grpo_rollout.EpisodeFailure "
                           "(rollout.on_error: retry; 1 group(s) left out); the first, 4 prompts in one call, "
                           "attempt 1: the sandbox for 'Count to 7.' crashed")


def test_stop_stops_the_run_naming_the_failure(tmp_path, tiny_model):
    with pytest.raises(EpisodeFailure, match="the sandbox for 'Count to 7.' crashed|crashed once"):
        _run(tmp_path, tiny_model, "stop", "flaky_stop")


# -- issue 39.6 and 39.12 -------------------------------------------------------------------------------------------
SANDBOX_ENV = '''
class SandboxEnv:
    """A sandbox driven through a client the user does not control: for every other prompt ("Count to 1.",
    "Count to 3.", ...) its connection drops in step (or, with error="KeyError", the user's code has a bug there)."""

    def __init__(self, error="ConnectionError"):
        self.error = error

    def reset(self, row):
        self.number = int(row["prompt"].split()[-1].rstrip("."))
        return row["prompt"]

    def step(self, text):
        if self.number % 2:
            raise {"ConnectionError": ConnectionError, "KeyError": KeyError}[self.error]("sandbox connection lost")
        return None, 1.0, True
'''


class Recording(RichReporter):
    """A quiet reporter that keeps the console's lines."""

    def __init__(self):
        super().__init__(quiet=True)
        self.lines = []

    def message(self, text):
        self.lines.append(text)


def _sandbox_run(tmp_path, model, error):
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "sandbox_env.py").write_text(SANDBOX_ENV)
    cfg = tiny_config(tmp_path, model, rows=8, training={"max_steps": 2},
                      rollout={"function": "grpo_rollout.rollouts.environment:environment_rollout", "on_error": "drop",
                               "kwargs": {"env": f"{tmp_path / 'sandbox_env.py'}:SandboxEnv",
                                          "env_kwargs": {"error": error}, "max_turns": 2}})
    cfg.data.shuffle = False  # step 1: prompts 0-3 (1 and 3 fail); step 2: 4-7 (5 and 7 fail); one epoch
    reporter = Recording()
    return train(cfg, base_dir=tmp_path, reporter=reporter), reporter.lines


def test_an_environments_connection_error_is_a_failed_episode_kept_with_its_text(tmp_path, tiny_model):
    """Issue 39.12's input: under on_error: drop, the env's step raises ConnectionError("sandbox connection lost")
    for every other prompt. Before, only EpisodeFailure counted: the run stopped at step 1. Now the groups are left
    out and counted, the rest trained (39.12), every failure's text is in failures.jsonl, the console names the first
    of each kind each step and the prompts the epoch lost (39.6)."""
    result, lines = _sandbox_run(tmp_path, tiny_model, "ConnectionError")
    # issue 51.8: the environment rollout says which groups failed (1 and 3) and keeps the others: before, the step's
    # call counted as one failed group and every group was played again alone ((24, 16, 2))
    for m in result.history:
        assert (m["episodes/failed"], m["episodes/dropped"], m["episodes/prompts_dropped"]) == (16, 16, 2)
        assert m["episodes/retried"] == 0
        assert m["num_tokens"] > 0
    assert [m["episodes/epoch_prompts_dropped"] for m in result.history] == [2, 4]
    records = read_failures(tmp_path / "out" / "failures.jsonl")
    dropped = [(r["step"], r["row"], r["prompt"]) for r in records if r["outcome"] == "dropped"]
    assert dropped == [(1, 1, "Count to 1."), (1, 3, "Count to 3."), (2, 5, "Count to 5."), (2, 7, "Count to 7.")]
    assert all(r["error"] == "ConnectionError" and re.fullmatch(
        r"SandboxEnv\.step raised ConnectionError: sandbox connection lost \(at .*sandbox_env\.py:15\)",
        r["message"]) for r in records)
    said = [line for line in lines if "failed outside the model with" in line]
    assert [line.split(":")[0] for line in said] == ["Step 1", "Step 2"]  # the first of the kind, once a step
    assert "2 attempt(s) failed outside the model with ConnectionError (rollout.on_error: drop; 2 group(s) left " \
           "out)" in said[0] and "SandboxEnv.step raised ConnectionError: sandbox connection lost" in said[0]
    assert "Epoch 1 ended: 4 of its prompts were left out after their episodes failed outside the model" in lines[-1]
    assert "episodes that failed outside the model: 32; prompts left out: 4" in result.summary


def test_an_error_that_is_not_listed_still_stops_the_run_naming_the_line(tmp_path, tiny_model):
    with pytest.raises(RolloutError, match=r"SandboxEnv\.step raised KeyError: 'sandbox connection lost' \(at "
                                           r".*sandbox_env\.py:15\)"):
        _sandbox_run(tmp_path, tiny_model, "KeyError")
    assert read_failures(tmp_path / "out" / "failures.jsonl") == []


CONNECTION_LOST = '''
from grpo_rollout.rollouts import builtin_rollout

def rollout(prompts, client, **kw):
    if prompts[0] == "Count to 17.":
        raise ConnectionError("sandbox connection lost")
    return builtin_rollout()(prompts, client=client, **kw)
'''


def test_a_streamed_group_that_keeps_failing_is_left_out_under_drop(tmp_path, tiny_model, monkeypatch):
    """Issue 39.12: validate-config refused on_error: drop with streaming, and a streamed group that kept failing
    stopped the run. Now it is left out of its epoch, and the accounting says so."""
    (tmp_path / "lost.py").write_text(CONNECTION_LOST)
    cfg = streaming_config(tmp_path, tiny_model, monkeypatch, 1, rows=24, max_steps=6)  # one epoch
    cfg.data.shuffle = False  # "Count to 17." is step 5's
    cfg.rollout.function = f"{tmp_path / 'lost.py'}:rollout"
    cfg.rollout.on_error = "drop"
    reporter = Recording()
    result = train(cfg, base_dir=tmp_path, reporter=reporter)
    trained = [p for prompts in trained_prompts(tmp_path / "out").values() for p in prompts]
    assert len(trained) == 24 and "Count to 17." not in trained
    assert sum(m["episodes/prompts_dropped"] for m in result.history) == 1
    assert result.history[-1]["episodes/epoch_prompts_dropped"] == 1
    [record] = read_failures(tmp_path / "out" / "failures.jsonl")
    assert (record["prompt"], record["error"], record["outcome"]) == ("Count to 17.", "ConnectionError", "dropped")
    assert "Epoch 1 ended: 1 of its prompts were left out" in reporter.lines[-1]
