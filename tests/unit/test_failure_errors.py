"""Issue 39.12: an environment's own client error (a connection or timeout error of Python or httpx, or a type
``rollout.failure_errors`` names) is a failed episode under ``rollout.on_error``; any other error is a bug and stops
the run; validate-config checks each entry; a streamed group that keeps failing is left out, not a stopped run.
Issue 39.6: every failed attempt's text and prompt in failures.jsonl, the first of each kind on the console, the prompts
an epoch lost."""

from __future__ import annotations

import json
import socket
import time
from types import SimpleNamespace

import httpx

import pytest

from grpo_rollout import EpisodeFailure
from grpo_rollout.config.schema import FAILURE_ERRORS
from grpo_rollout.generation.vllm_client import ServerError
from grpo_rollout.rewards.calling import RewardError
from grpo_rollout.rollouts.contract import RolloutError
from grpo_rollout.runs.failure_records import read_failures
from grpo_rollout.orchestrator.failure_report import MOST_KINDS, EpochLosses
from grpo_rollout.orchestrator.failures import failure_cause
from grpo_rollout.orchestrator.stream import GroupStream
from grpo_rollout.user_code.exception_types import resolve_exception_types
from test_episode_failures import N, _batch, _failures, _groups


def _wrapped(exc, wrapper=RolloutError):
    """``exc`` as the trainer sees it: wrapped by call_env / call_rollout / compute_rewards, naming the method."""
    try:
        try:
            raise exc
        except Exception as inner:
            raise wrapper(f"SandboxEnv.step raised {type(inner).__name__}: {inner} (at sandbox.py:9)") from inner
    except wrapper as outer:
        return outer


def test_the_default_failure_errors_are_connection_and_timeout_errors_and_a_bug_is_not_one():
    types, failed = resolve_exception_types(FAILURE_ERRORS)
    assert failed == []
    counted = [ConnectionError("sandbox connection lost"), ConnectionResetError(), TimeoutError(), socket.timeout(),
               httpx.ConnectError("refused"), httpx.ReadTimeout("slow"), httpx.RemoteProtocolError("hung up"),
               EpisodeFailure("sandbox crashed")]
    for exc in counted:
        assert failure_cause(_wrapped(exc), types) is exc, exc
        assert failure_cause(_wrapped(exc, RewardError), types) is exc, exc  # a reward's judge server likewise
    bugs = [KeyError("session"), ValueError("bad"), httpx.UnsupportedProtocol("no scheme: sandbox:8000"),
            httpx.LocalProtocolError("bad header")]
    for exc in bugs:
        assert failure_cause(_wrapped(exc), types) is None, exc
    # the run's own generation server failing is not an episode's failure, whatever caused it
    server = ServerError("POST /generate/ failed: connection refused")
    server.__cause__ = httpx.ConnectError("refused")
    assert failure_cause(server, types) is None
    assert failure_cause(RolloutError("`completion_ids` has 3 entries; expected 4"), types) is None  # no cause
    # only what the user's code raised counts, not what it was raised from
    assert failure_cause(_wrapped(_wrapped(ConnectionError(), KeyError)), types) is None


def test_a_connection_error_in_every_other_group_is_dropped_and_a_bug_stops_the_step():
    """The issue's input at the stage: under drop, a step whose sandbox connection drops for every other group (the
    env's ConnectionError, wrapped as the environment rollout wraps it) trains the rest; before, only EpisodeFailure
    counted and the ConnectionError stopped the run. A KeyError still does."""
    for error, stops in ((ConnectionError("sandbox connection lost"), False), (KeyError("sandbox_id"), True)):
        failures = _failures("drop")

        def play_one(group, attempt):
            if group % 2:
                raise _wrapped(error)
            return _batch(group)

        play_all = lambda: play_one(1, 0)  # noqa: E731 - the step's call holds group 1
        if stops:
            with pytest.raises(RolloutError, match=r"raised KeyError: 'sandbox_id' \(at sandbox.py:9\)"):
                failures.play_step(0, play_all, play_one, _groups(4))
            continue
        batch = failures.play_step(0, play_all, play_one, _groups(4))
        assert batch.num_groups == 2
        assert failures.metrics() == {"episodes/failed": 2 * N + N, "episodes/retried": 4 * N,
                                      "episodes/dropped": 2 * N, "episodes/prompts_dropped": 2}


def test_failures_jsonl_keeps_every_text_and_the_console_the_first_of_each_kind(tmp_path):
    failures = _failures("retry", max_retries=1, output_dir=tmp_path, num_rows=8, prompts_per_step=4)

    def play_one(group, attempt):
        if group == 1:
            raise _wrapped(ConnectionError(f"sandbox connection lost (attempt {attempt})"))
        if group == 2 and attempt == 0:
            raise _wrapped(httpx.ReadTimeout("the sandbox took 30 s"))
        if group == 3:
            raise EpisodeFailure("the sandbox for 'Count to 3.' crashed")
        return _batch(group)

    lines = []
    failures.play_step(0, lambda: play_one(1, 0), play_one, _groups(4))
    metrics = failures.metrics(0, lines.append)
    assert metrics["episodes/prompts_dropped"] == 2 and metrics["episodes/epoch_prompts_dropped"] == 2
    records = read_failures(tmp_path / "failures.jsonl")
    assert [(r["row"], r["attempt"], r["error"], r["outcome"]) for r in records] == [
        (None, 1, "ConnectionError", "played alone"),
        (1, 1, "ConnectionError", "retried"), (1, 2, "ConnectionError", "dropped"),
        (2, 1, "httpx.ReadTimeout", "retried"),
        (3, 1, "grpo_rollout.EpisodeFailure", "retried"), (3, 2, "grpo_rollout.EpisodeFailure", "dropped")]
    assert all(r["step"] == 1 and r["rank"] == 0 for r in records)
    assert records[0]["prompt"] == ["Count to 0.", "Count to 1.", "Count to 2.", "Count to 3."]
    assert records[2]["prompt"] == "Count to 1." and records[2]["message"] == (
        "SandboxEnv.step raised ConnectionError: sandbox connection lost (attempt 1) (at sandbox.py:9)")
    assert records[5]["message"] == "the sandbox for 'Count to 3.' crashed"
    # one line per kind: the first failure's text and prompt, the counts, where the rest is
    assert len(lines) == 3
    assert lines[0].startswith("Step 1: 3 attempt(s) failed outside the model with ConnectionError "
                               "(rollout.on_error: retry; 1 group(s) left out); the first, 4 prompts in one call, "
                               "attempt 1: SandboxEnv.step raised ConnectionError: sandbox connection lost (attempt 0)")
    assert "httpx.ReadTimeout" in lines[1] and "prompt 'Count to 2.'" in lines[1] and "0 group(s) left out" in lines[1]
    assert "with grpo_rollout.EpisodeFailure" in lines[2] and lines[2].endswith(f"every failure's text: {tmp_path / 'failures.jsonl'}")
    # the next step: its own records, its own lines; at the epoch's end (8 rows, 4 a step) the prompts it lost
    failures.play_step(1, lambda: play_one(3, 1), play_one, _groups(4))
    lines.clear()
    assert failures.metrics(1, lines.append)["episodes/epoch_prompts_dropped"] == 2 + 2
    assert [r["step"] for r in read_failures(tmp_path / "failures.jsonl")].count(2) == 6
    assert lines[-1] == ("Epoch 1 ended: 4 of its prompts were left out after their episodes failed outside the "
                         "model (rollout.on_error); they were not trained in it")


def test_the_console_names_a_few_kinds_a_step_and_counts_the_rest(tmp_path):
    failures = _failures("drop", errors=FAILURE_ERRORS + ("ValueError", "KeyError", "LookupError"),
                         output_dir=tmp_path, num_rows=100)
    kinds = [ConnectionError, TimeoutError, ValueError, KeyError, IndexError]

    def play_one(group, attempt):
        if group < len(kinds):
            raise _wrapped(kinds[group]("down"))
        return _batch(group)

    lines = []
    failures.play_step(0, lambda: play_one(0, 0), play_one, _groups(6))
    failures.metrics(0, lines.append)
    assert len(lines) == MOST_KINDS + 1 and lines[-1].startswith("Step 1: … and 2 more failed attempt(s) of 2 other ")
    assert len(read_failures(tmp_path / "failures.jsonl")) == 6


def test_an_epoch_counts_the_prompts_it_lost():
    epochs = EpochLosses(num_rows=10, prompts_per_step=4)  # 2.5 steps an epoch, as the progress bar counts
    assert [epochs.add(done, lost) for done, lost in ((1, 1), (2, 2), (3, 0), (4, 0), (5, 1))] == [
        (1, None), (3, "Epoch 1 ended: 3 of its prompts were left out after their episodes failed outside the "
                      "model (rollout.on_error); they were not trained in it"), (0, None), (0, None),
        (1, "Epoch 2 ended: 1 of its prompts were left out after their episodes failed outside the model "
            "(rollout.on_error); they were not trained in it")]  # step 5 ends epoch 2 (20 prompts)


def test_a_streamed_group_that_keeps_failing_is_left_out_and_the_stream_goes_on():
    """Before, a stream could not leave a group out: the group's last failure stopped the run (and validate-config
    refused on_error: drop with streaming)."""
    failures = _failures("drop")

    def roll(position, step, row, attempt):
        def play(retry):
            if row == 1:
                raise _wrapped(ConnectionError("sandbox connection lost"))
            return SimpleNamespace(rollout=SimpleNamespace(weight_version=None), row=row)
        return failures.play_group(play, row, f"Count to {row}.", most_in_a_row=2)

    stream = GroupStream(roll, lambda p: (p // 2, p), groups_per_step=2, max_staleness=1, max_inflight=4)
    taken = []
    for version in range(3):
        groups, _ = stream.take(version)
        taken.append(sorted(g.row for g in groups))
        stream.commit()
    rows = sum(taken, [])  # groups are taken as they finish: on a busy machine 8 may come before 6
    assert len(rows) == len(set(rows)) == 6 and 1 not in rows  # every prompt at most once, row 1 left out
    deadline = time.monotonic() + 30  # row 1's last attempt may still be ending on its thread
    while stream.state()["first_unused"] < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    state = stream.state()
    stream.close()
    assert failures.metrics()["episodes/prompts_dropped"] == 1
    # row 1 counts as used (a resumed run does not roll it again): every position before the frontier was trained
    # or left out, and the trained ones past it are listed
    assert state["first_unused"] >= 2 and set(range(state["first_unused"])) <= set(rows) | {1}
    assert state["used"] == sorted(r for r in rows if r >= state["first_unused"])


def test_a_stream_whose_groups_all_fail_stops():
    failures = _failures("retry", max_retries=1)

    def play(retry):
        raise EpisodeFailure("the sandbox is down")

    assert failures.play_group(play, 0, "Count to 0.", most_in_a_row=2) is None
    with pytest.raises(EpisodeFailure, match=r"2 streamed groups in a row failed \(rollout.on_error: retry, "
                                             r"max_retries: 1\); the last failure: the sandbox is down"):
        failures.play_group(play, 1, "Count to 1.", most_in_a_row=2)


def test_a_run_stopped_by_its_failures_keeps_their_texts(tmp_path):
    """A step whose groups all fail (every reset hangs, under drop) stops the run; before, failures.jsonl was never
    written (the records waited for the step's metrics) and the message quoted max_retries, which drop does not use."""
    failures = _failures("drop", output_dir=tmp_path, num_rows=4, prompts_per_step=2)

    def play(*args):
        raise EpisodeFailure("HangingEnv.reset did not return within rollout.env_timeout_s = 3 s")

    with pytest.raises(EpisodeFailure, match=r"step 1: every group failed \(rollout.on_error: drop\); the last "
                                             r"failure: HangingEnv.reset did not return"):
        failures.play_step(0, play, lambda group, attempt: play(), _groups(2))
    records = read_failures(tmp_path / "failures.jsonl")
    assert [(r["step"], r["row"], r["outcome"]) for r in records] == [(1, None, "played alone"), (1, 0, "dropped"),
                                                                        (1, 1, "dropped")]
    assert records[1]["message"] == "HangingEnv.reset did not return within rollout.env_timeout_s = 3 s"
    streamed = _failures("retry", max_retries=0, output_dir=tmp_path / "stream")
    assert streamed.play_group(lambda retry: play(), 0, "Count to 0.", most_in_a_row=2) is None
    with pytest.raises(EpisodeFailure, match="2 streamed groups in a row failed"):
        streamed.play_group(lambda retry: play(), 1, "Count to 1.", most_in_a_row=2)
    assert [(r["row"], r["outcome"]) for r in read_failures(tmp_path / "stream" / "failures.jsonl")] == [
        (0, "dropped"), (1, "dropped")]


def test_validate_config_checks_each_failure_error(project, errs):
    cfg = project.baseline()
    cfg["rollout"] = {"on_error": "drop", "failure_errors": ["ConnectionError", "httpx.ConectError", "SandboxDown",
                                                             "json.dumps", "rewards.py:accuracy"]}
    problems = errs(project.check(cfg, load_data=False))
    assert [p.key for p in problems] == [f"rollout.failure_errors[{i}]" for i in (1, 2, 3, 4)]
    assert "has no attribute `ConectError`; did you mean `ConnectError`?" in problems[0].message
    assert "`SandboxDown` is not a builtin name; write its module too" in problems[1].message
    assert "not an exception class" in problems[2].message and "httpx.ConnectError" in problems[2].fix
    # a class of the user's own, by file path; Exception itself is a warning (every bug would be dropped)
    project.write("sandbox_errors.py", "class SandboxDown(Exception):\n    pass\n")
    cfg["rollout"]["failure_errors"] = ["sandbox_errors.py:SandboxDown", "Exception"]
    problems = project.check(cfg, load_data=False)
    assert errs(problems) == [] and [p.key for p in problems] == ["rollout.failure_errors"]
    assert "every error, a bug in your code included" in problems[0].message
    # the default, and streaming with drop: accepted (before: "cannot leave a group out of a streamed step")
    cfg["rollout"] = {"on_error": "drop"}
    cfg["training"]["max_staleness"] = 1
    cfg["vllm"] = {"mode": "attach", "url": "http://127.0.0.1:9"}
    assert errs(project.check(cfg, load_data=False)) == []
    # set without on_error retry or drop, it changes nothing
    cfg["rollout"] = {"failure_errors": ["ConnectionError"]}
    assert any(p.key == "rollout.failure_errors" and "changes nothing without rollout.on_error: retry or drop"
               in p.message for p in project.check(cfg, load_data=False))


def test_failure_records_are_json(tmp_path):
    failures = _failures("drop", output_dir=tmp_path)
    prompt = [{"role": "user", "content": "Count to 1."}]

    def play(retry):
        raise _wrapped(TimeoutError("timed out"))

    failures.play_group(play, 1, prompt, most_in_a_row=5)
    failures.metrics(4, lambda line: None)
    [line] = (tmp_path / "failures.jsonl").read_text().splitlines()
    assert json.loads(line) == {"step": 5, "rank": 0, "row": 1, "prompt": prompt, "attempt": 1,
                                "error": "TimeoutError", "outcome": "dropped",
                                "message": "SandboxEnv.step raised TimeoutError: timed out (at sandbox.py:9)"}


def test_a_resumed_run_drops_the_failures_of_the_steps_it_trains_again(tmp_path):
    from grpo_rollout.runs.failure_records import append_failures
    from grpo_rollout.runs.metrics_writer import MetricsLogger

    append_failures(tmp_path / "failures.jsonl", [{"step": s, "message": f"lost in step {s}"} for s in (1, 2, 3)])
    MetricsLogger(tmp_path, ["jsonl"]).truncate_after(2)
    assert [r["step"] for r in read_failures(tmp_path / "failures.jsonl")] == [1, 2]
