"""Calling reward functions (grpo_rollout.rewards.calling): dispatch, async, None scores, weights, errors."""

from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest

from grpo_rollout.rewards.calling import RewardError, RewardFunction, RewardResult, compute_rewards, unique_names

PROMPTS = ["p0", "p0", "p1", "p1"]
COMPLETIONS = ["a", "bb", "ccc", "dddd"]
COMPLETION_IDS = [[1], [2, 2], [3, 3, 3], [4, 4, 4, 4]]
COLUMNS = {"answer": ["x", "x", "y", "y"], "level": [1, 1, 2, 2]}
EXTRAS = {"turns": [1, 2, 3, 4]}


def _run(functions, columns=COLUMNS, extras=EXTRAS, step=5):
    return compute_rewards(functions, prompts=PROMPTS, completions=COMPLETIONS, completion_ids=COMPLETION_IDS,
                           columns=columns, extras=extras, step=step)


def test_sync_and_async_functions_run():
    def length(completions, **kwargs):
        return [float(len(c)) for c in completions]

    async def is_long(completions, **kwargs):
        await asyncio.sleep(0)
        return [1.0 if len(c) > 2 else 0.0 for c in completions]

    res = _run([RewardFunction("length", length), RewardFunction("is_long", is_long)])
    assert res.per_function == {"length": [1.0, 2.0, 3.0, 4.0], "is_long": [0.0, 0.0, 1.0, 1.0]}
    assert res.rewards == [1.0, 2.0, 4.0, 5.0]


def test_async_functions_run_concurrently():
    events = []

    async def slow_a(completions):
        events.append("a starts")
        await asyncio.sleep(0.05)
        events.append("a ends")
        return [1.0] * len(completions)

    async def slow_b(completions):
        events.append("b starts")
        await asyncio.sleep(0.05)
        events.append("b ends")
        return [2.0] * len(completions)

    res = _run([RewardFunction("a", slow_a), RewardFunction("b", slow_b)])
    assert res.rewards == [3.0] * 4
    # concurrent: both started before either finished (one after the other would give a, a, b, b)
    assert events[:2] == ["a starts", "b starts"], f"two async rewards did not overlap: {events}"


def test_async_callable_object():
    class Judge:
        async def __call__(self, completions):
            return [0.5] * len(completions)

    assert _run([RewardFunction("judge", Judge())]).rewards == [0.5] * 4


def test_functions_receive_only_named_parameters():
    seen = {}

    def narrow(completions, answer):
        seen["narrow"] = (completions, answer)
        return [0.0] * 4

    def wide(**kwargs):
        seen["wide"] = kwargs
        return [0.0] * 4

    _run([RewardFunction("narrow", narrow), RewardFunction("wide", wide)])
    assert seen["narrow"] == (COMPLETIONS, ["x", "x", "y", "y"])
    assert set(seen["wide"]) == {"prompts", "completions", "completion_ids", "step", "answer", "level", "turns"}
    assert seen["wide"]["prompts"] == PROMPTS
    assert seen["wide"]["completion_ids"] == COMPLETION_IDS
    assert seen["wide"]["step"] == 5


def test_columns_extras_and_config_kwargs_arrive_as_keywords():
    seen = {}

    def match(completions, *, answer, level, turns, step, scale, prompts=None):
        seen.update(answer=answer, level=level, turns=turns, step=step, scale=scale, prompts=prompts)
        return [scale * t for t in turns]

    res = _run([RewardFunction("match", match, kwargs={"scale": 0.5})], step=11)
    assert seen == {"answer": ["x", "x", "y", "y"], "level": [1, 1, 2, 2], "turns": [1, 2, 3, 4], "step": 11,
                    "scale": 0.5, "prompts": PROMPTS}
    assert res.rewards == [0.5, 1.0, 1.5, 2.0]


def test_none_scores_count_zero_in_total_and_are_left_out_of_stats():
    def sometimes(completions):
        return [1.0, None, 3.0, None]

    def always(completions):
        return [2.0, 2.0, 2.0, 4.0]

    res = _run([RewardFunction("sometimes", sometimes, weight=2.0), RewardFunction("always", always)])
    # total = 2 · sometimes (None → 0) + 1 · always
    assert res.rewards == [2 * 1.0 + 2.0, 0 + 2.0, 2 * 3.0 + 2.0, 0 + 4.0]
    s = res.per_function["sometimes"]
    assert s[0] == 1.0 and math.isnan(s[1]) and s[2] == 3.0 and math.isnan(s[3])
    stats = res.stats()
    # sometimes: values {1, 3} → mean 2, sample std √2 (the Nones are not zeros: with them mean would be 1)
    assert stats["rewards/sometimes/mean"] == pytest.approx(2.0)
    assert stats["rewards/sometimes/std"] == pytest.approx(math.sqrt(2.0))
    # always: {2, 2, 2, 4} → mean 2.5, sample var (3 · 0.25 + 2.25) / 3 = 1
    assert stats["rewards/always/mean"] == pytest.approx(2.5)
    assert stats["rewards/always/std"] == pytest.approx(1.0)


def test_all_none_scores_give_nan_stats():
    res = _run([RewardFunction("silent", lambda completions: [None] * 4)])
    assert res.rewards == [0.0] * 4
    stats = res.stats()
    assert math.isnan(stats["rewards/silent/mean"]) and math.isnan(stats["rewards/silent/std"])


def test_weights_apply():
    res = _run([RewardFunction("one", lambda completions: [1.0, 0.0, 1.0, 0.0], weight=0.25),
                RewardFunction("len", lambda completion_ids: [float(len(c)) for c in completion_ids], weight=-1.0)])
    assert res.rewards == pytest.approx([0.25 - 1, -2.0, 0.25 - 3, -4.0])
    assert res.per_function["len"] == [1.0, 2.0, 3.0, 4.0]  # unweighted


def test_numpy_scores_and_ints_accepted():
    res = _run([RewardFunction("np", lambda completions: np.array([1, 2, 3, 4], dtype=np.float32)),
                RewardFunction("ints", lambda completions: (0, 1, 0, 1))])
    assert res.rewards == [1.0, 3.0, 3.0, 5.0]


def test_wrong_length_names_function():
    def short(completions):
        return [1.0] * 3

    line = short.__code__.co_firstlineno
    with pytest.raises(RewardError) as info:
        _run([RewardFunction("ok", lambda completions: [0.0] * 4), RewardFunction("short", short)])
    message = str(info.value)
    assert f"`short` (defined at {__file__}:{line}) returned 3 scores for 4 completions" in message
    assert "one score (a float, or None for no opinion) per completion" in message  # and the fix
    assert "return [score(c) for c in completions]" in message


@pytest.mark.parametrize("scores, pattern", [
    (1.0, r"`bad` returned float; it must return a list"),
    ({"a": 1}, r"`bad` returned dict"),
    ([1.0, "high", 0.0, 0.0], r"`bad` returned 'high' for completion 1; expected a finite float or None"),
    ([1.0, 0.0, float("nan"), 0.0], r"`bad` returned nan for completion 2"),
    ([1.0, 0.0, 0.0, float("-inf")], r"`bad` returned -inf for completion 3; expected a finite float or None"),
])
def test_wrong_type_names_function(scores, pattern):
    with pytest.raises(RewardError, match=pattern):
        _run([RewardFunction("bad", lambda completions: scores)])


def test_sys_exit_in_a_reward_is_an_error_naming_it():
    import sys

    def quits(completions):
        sys.exit(3)

    line = quits.__code__.co_firstlineno + 1
    with pytest.raises(RewardError, match=rf"`quits` \(.*quits\) raised SystemExit: 3 \(at .*test_reward_calling.py:{line}\)"):
        _run([RewardFunction("quits", quits)])


def test_weighted_sum_that_overflows_is_an_error():
    big = RewardFunction("big", lambda completions: [1e308] * 4, weight=2.0)
    with pytest.raises(RewardError, match=r"completion 0 is inf \(big=1e\+308\).*scale them down"):
        _run([big])


def test_raising_sync_function_names_function():
    def crashes(completions):
        raise ZeroDivisionError("division by zero")

    with pytest.raises(RewardError, match=r"`crashes` \(.*crashes\) raised ZeroDivisionError: division by zero"):
        _run([RewardFunction("crashes", crashes)])


def test_raising_async_function_names_function():
    async def async_crashes(completions):
        await asyncio.sleep(0)
        raise RuntimeError("judge offline")

    with pytest.raises(RewardError, match=r"`async_crashes` .*raised RuntimeError: judge offline"):
        _run([RewardFunction("fine", lambda completions: [0.0] * 4), RewardFunction("async_crashes", async_crashes)])


def test_unique_names_suffixes_duplicates():
    def accuracy(**kw):
        return []

    def fmt(**kw):
        return []

    class Scorer:
        def __call__(self, **kw):
            return []

    assert unique_names([accuracy, fmt, accuracy, accuracy, Scorer(), Scorer()]) == [
        "accuracy", "fmt", "accuracy_2", "accuracy_3", "Scorer", "Scorer_2"]
    assert unique_names([]) == []


def test_reward_result_stats_keys():
    res = RewardResult(rewards=[1.0, 2.0], per_function={"a": [1.0, 2.0], "b": [float("nan"), 4.0]})
    assert res.stats() == {"rewards/a/mean": 1.5, "rewards/a/std": math.sqrt(0.5), "rewards/b/mean": 4.0,
                           "rewards/b/std": 0.0}


def test_rewards_are_computed_from_inside_a_running_event_loop():
    """`train()` from a notebook calls compute_rewards while an event loop runs in the thread; `asyncio.run` used to
    refuse there ("cannot be called from a running event loop") at the first reward."""
    def length(completions, **kwargs):
        return [float(len(c)) for c in completions]

    async def is_long(completions, **kwargs):
        await asyncio.sleep(0)
        return [1.0 if len(c) > 2 else 0.0 for c in completions]

    async def notebook_cell():
        asyncio.get_running_loop()  # a loop is running here, as in Jupyter
        return _run([RewardFunction("length", length), RewardFunction("is_long", is_long)])

    res = asyncio.run(notebook_cell())
    assert res.per_function == {"length": [1.0, 2.0, 3.0, 4.0], "is_long": [0.0, 0.0, 1.0, 1.0]}
    assert res.rewards == [1.0, 2.0, 4.0, 5.0]


def test_a_reward_error_inside_a_running_event_loop_is_still_a_reward_error():
    def broken(completions):
        raise KeyError("answer")

    async def notebook_cell():
        return _run([RewardFunction("broken", broken)])

    with pytest.raises(RewardError, match="reward function `broken`.*raised KeyError"):
        asyncio.run(notebook_cell())
