"""math-verify as a reward (issue 28, items 1 and 2): the same score in every thread, and a completion that hangs
math-verify scored 0 within the stated bound, counted and named."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path

import pytest

from grpo_rollout.config import config_from_dict
from grpo_rollout.rewards.calling import RewardFunction, compute_rewards
from grpo_rollout.rewards.scores import RewardScores
from grpo_rollout.rewards.tasks import math_accuracy
from grpo_rollout.trainer import train
from grpo_rollout.trainer.reporting.progress import RichReporter

# the inputs
GOOD, GOLD = r"The answer is \boxed{\frac{1}{3}}", r"\frac{1}{3}"
# 0.8 s to parse, then math-verify's own 5 s alarm on the main thread; with no bound it runs for minutes
HANGS = r"\boxed{\dfrac{5^{\left(5^{\left(5^{\left(5^5\right)}\right)} - 4\right)} - 5}{16}}"


def _in_thread(fn):
    box = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            box["error"] = exc

    t = threading.Thread(target=run)
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def test_math_accuracy_scores_alike_on_the_main_thread_a_worker_thread_and_to_thread():
    assert math_accuracy([GOOD], [GOLD]) == [1.0]
    assert _in_thread(lambda: math_accuracy([GOOD], [GOLD])) == [1.0]

    async def reward_in_to_thread():  # an async reward handing the work to a thread
        return await asyncio.to_thread(math_accuracy, [GOOD, "The answer is 4"], [GOLD, "\\frac{1}{3}"])

    assert asyncio.run(reward_in_to_thread()) == [1.0, 0.0]


def test_math_accuracy_inside_a_running_event_loop_through_compute_rewards():
    """A notebook's `train()`: compute_rewards runs the rewards on a helper thread while a loop runs here."""
    fns = [RewardFunction("math_accuracy", math_accuracy)]

    async def cell():
        asyncio.get_running_loop()
        return compute_rewards(fns, prompts=["p", "p"], completions=[GOOD, "no idea"], completion_ids=[[1], [2]],
                               columns={"answer": [GOLD, GOLD]}, extras={}, step=0)

    result = asyncio.run(cell())
    assert result.per_function["math_accuracy"] == [1.0, 0.0]
    assert result.stats()["rewards/math_accuracy/timeouts"] == 0


@pytest.mark.parametrize("where", ["main", "thread"])
def test_a_completion_that_hangs_math_verify_scores_0_within_the_bound_and_is_counted(where):
    def score():
        return math_accuracy([GOOD, HANGS, "7", "no answer to check", GOOD], [GOLD, "1", "7", None, GOLD], timeout_s=1.0)

    start = time.monotonic()
    scores = score() if where == "main" else _in_thread(score)
    elapsed = time.monotonic() - start
    assert list(scores) == [1.0, 0.0, 1.0, None, 1.0]
    assert isinstance(scores, RewardScores) and scores.timed_out == [1] and scores.limit_s == 1.0
    # unbounded, this completion keeps math-verify busy for minutes (measured: > 120 s); bounded, ~1 s + a new worker
    assert elapsed < 60, elapsed


def test_correct_answers_next_to_hanging_ones_keep_their_score():
    """A new user's input: 95 × `\\boxed{4}` and 5 towers of powers, workers 2, timeout_s 1 scored 67 (28 correct
    answers given 0 as "timeouts"): each fresh worker spent its second importing math-verify."""
    tower = r"\boxed{5^{5^{5^{5^5}}}}"
    completions = [r"\boxed{4}"] * 20
    for i in (3, 12):
        completions.insert(i, tower)
    scores = math_accuracy(completions, ["4"] * 22, timeout_s=1.0, workers=2)
    assert sum(scores) == 20.0 and scores.timed_out == [3, 12]


@pytest.mark.parametrize("kwargs, fragment", [
    ({"workers": 0}, "workers must be a whole number >= 1, got 0"),  # waited for ever
    ({"timeout_s": 0}, "timeout_s must be a number of seconds > 0, got 0"),  # meant: no bound
    ({"timeout_s": -1}, "timeout_s must be a number of seconds > 0, got -1"),
    ({"timeout_s": "abc"}, "timeout_s must be a number of seconds > 0, got 'abc'"),
    ({"workers": 2.5}, "workers must be a whole number >= 1, got 2.5"),  # a TypeError deep inside
])
def test_settings_that_would_hang_or_remove_the_bound_are_refused(kwargs, fragment):
    with pytest.raises(ValueError, match=fragment):
        math_accuracy([GOOD], [GOLD], **kwargs)


def test_validate_config_checks_math_accuracys_kwargs(project, errs):
    project.write_jsonl("math.jsonl", [{"prompt": "1+1?", "answer": "2"}])
    cfg = project.baseline()
    cfg["data"]["train"] = "math.jsonl"
    cfg["rewards"] = [{"function": "grpo_rollout.rewards.tasks:math_accuracy",
                       "kwargs": {"timeout": 2, "workers": 0, "timeout_s": 0}}]
    problems = {p.key: p for p in errs(project.check(cfg))}
    assert "is not a setting of math_accuracy (timeout_s, workers)" in problems["rewards[0].kwargs.timeout"].message
    assert problems["rewards[0].kwargs.timeout"].fix == "did you mean `timeout_s`?"
    assert "must be a whole number >= 1, got 0" in problems["rewards[0].kwargs.workers"].message
    assert "must be a number of seconds > 0, got 0" in problems["rewards[0].kwargs.timeout_s"].message
    cfg["rewards"][0]["kwargs"] = {"timeout_s": 2, "workers": 1}
    assert not errs(project.check(cfg))


def test_a_script_without_a_main_guard_is_not_run_again_by_the_workers(tmp_path):
    """multiprocessing's spawn/forkserver workers import the main script first: a training script without the
    `if __name__ == "__main__":` guard started a second run inside the scoring worker (its model loaded again)."""
    import subprocess
    import sys

    script = tmp_path / "no_guard.py"
    script.write_text("from grpo_rollout.rewards.tasks import math_accuracy\n"
                      "print('TOP LEVEL RAN', flush=True)\n"
                      "print('SCORES', list(math_accuracy(['\\\\boxed{2}'], ['2'])), flush=True)\n")
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.count("TOP LEVEL RAN") == 1 and "SCORES [1.0]" in run.stdout
    assert "Traceback" not in run.stderr


def test_timeouts_are_counted_per_function_and_named():
    from grpo_rollout.orchestrator.batch import CompletionScores

    fns = [RewardFunction("math_accuracy", math_accuracy, kwargs={"timeout_s": 1.0})]
    result = compute_rewards(fns, prompts=["p"] * 4, completions=[GOOD, HANGS, "x", HANGS],
                             completion_ids=[[1]] * 4, columns={"answer": [GOLD, "1", "2", "3"]}, extras={}, step=3)
    assert result.timed_out == {"math_accuracy": [False, True, False, True]}
    assert result.stats()["rewards/math_accuracy/timeouts"] == 2
    scores = CompletionScores(rewards=result.rewards, per_function=result.per_function, timed_out=result.timed_out,
                              time_limits=result.time_limits, prompts=["p"] * 4, texts=[GOOD, HANGS, "x", HANGS],
                              lengths=[1] * 4, truncated=[False] * 4, extras={})
    notes = scores.timeout_notes(num_generations=2)
    assert len(notes) == 2
    assert notes[0].startswith("reward `math_accuracy` could not score completion 1 (group 0, sample 1) within its 1 s "
                               "and gave it 0: '\\\\boxed{\\\\dfrac{5^")
    assert "completion 3 (group 1, sample 1)" in notes[1]
    # merged over ranks and selected by group, the flags travel with their completions
    merged = CompletionScores.merge([scores.select([2, 3]), scores.select([0, 1])])
    assert merged.timed_out == {"math_accuracy": [False, True, False, True]}
    assert merged.stats()["rewards/math_accuracy/timeouts"] == 2


def test_a_plain_list_reward_reports_no_timeouts_key():
    fns = [RewardFunction("plain", lambda completions, **kw: [1.0] * len(completions))]
    result = compute_rewards(fns, prompts=["p"], completions=["c"], completion_ids=[[1]], columns={}, extras={},
                             step=0)
    assert "rewards/plain/timeouts" not in result.stats()


# --- in training: the thread cases that stopped runs ----------------------------------------------------------------

def math_config(root: Path, model: Path, **training):
    rows = [{"prompt": f"What is {i} + {i}? Put it in \\boxed{{}}.", "answer": str(2 * i)} for i in range(8)]
    (root / "math.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg, problems = config_from_dict({
        "model": {"name_or_path": str(model)},
        "data": {"train": str(root / "math.jsonl"), "eval": str(root / "math.jsonl")},
        "rewards": [{"function": "grpo_rollout.rewards.tasks:math_accuracy"}],
        "sampling": {"num_generations": 4, "max_completion_length": 8, "seed": 0},
        "training": {"output_dir": str(root / "out"), "prompts_per_step": 2, "micro_batch_size": 8,
                     "max_steps": 2, **training},
        "evaluation": {"at_start": True, "num_generations": 2, "temperature": 1.0, "max_prompts": 2},
        "logging": {"report_to": ["jsonl"]},
        "vllm": {"mode": "off"},
    })
    assert not [p for p in problems if p.is_error], problems
    return cfg


@pytest.mark.model
def test_math_accuracy_trains_from_inside_a_running_event_loop(tmp_path, tiny_model):
    """`train()` in a notebook: the evaluation before step 1 stopped (rewards ran on a helper thread)."""
    async def cell():
        asyncio.get_running_loop()
        return train(math_config(tmp_path, tiny_model), base_dir=tmp_path, reporter=RichReporter(quiet=True))

    result = asyncio.run(cell())
    assert result.steps == 2 and result.evaluations[0][0] == 0
    assert result.evaluations[0][1]["eval/rewards/math_accuracy/timeouts"] == 0


def test_a_reward_file_named_by_path_can_score_in_bounded_workers(tmp_path):
    """`run_bounded` for a user's own scorer: a reward file named by path is loaded under a name of grpo-rollout's
    own, which a worker cannot import by name; it loads the file."""
    from grpo_rollout.rewards.bounded import run_bounded
    from grpo_rollout.user_code.resolve import resolve_callable

    (tmp_path / "my_reward.py").write_text("import time\n\n"
                                          "def score(text):\n"
                                          "    if text == 'hang':\n"
                                          "        time.sleep(60)\n"
                                          "    return float(len(text))\n")
    score = resolve_callable(f"{tmp_path / 'my_reward.py'}:score", tmp_path)
    done = run_bounded(score, [("ab",), ("hang",), ("abcd",)], timeout_s=1.0, workers=1)
    assert done.values == [2.0, None, 4.0] and done.timed_out == [1]
    with pytest.raises(ValueError, match="not the main script, a lambda or a nested function"):
        run_bounded(lambda text: 0.0, [("x",)], timeout_s=1.0)
