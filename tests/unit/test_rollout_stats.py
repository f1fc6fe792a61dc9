"""Per-step statistics of rollout output: extras means, tool metrics, truncation flags."""

from grpo_rollout.orchestrator.stats import extras_means, tool_metrics, truncated_flags


def test_extras_means_numeric_only():
    extras = {"num_turns": [1, 2, 3, None], "done": [True, False, True, True], "text": ["a", "b", "c", "d"],
              "mixed": [1, "x", 2, 3]}
    assert extras_means(extras) == {"extras/num_turns": 2.0, "extras/done": 0.75}


def test_tool_metrics_over_the_step():
    extras = {"num_tool_calls": [2, 0, 1, 3], "num_tool_errors": [1, 0, 0, 2],
              "tool_calls/multiply": [2, 0, 1, 1], "tool_errors/multiply": [1, 0, 0, 0],
              "tool_calls/search": [0, 0, 0, 2], "tool_errors/search": [0, 0, 0, 2],
              "tool_calls/unused": [0, 0, 0, 0], "tool_errors/unused": [0, 0, 0, 0]}
    assert tool_metrics(extras) == {
        "tools/calls": 6.0, "tools/errors": 3.0, "tools/success_rate": 0.5,
        "tools/multiply/calls": 4.0, "tools/multiply/success_rate": 0.75,
        "tools/search/calls": 2.0, "tools/search/success_rate": 0.0,
        "tools/unused/calls": 0.0}


def test_tool_metrics_absent_without_tool_counts():
    assert tool_metrics({"num_turns": [1, 2]}) == {}
    assert tool_metrics({"num_tool_calls": [0, 0]}) == {"tools/calls": 0.0, "tools/errors": 0.0}


def test_truncated_flags_prefer_the_rollouts_own():
    eos = {2}
    ids = [[5, 2, 7, 8], [5, 6, 7], [5, 2]]  # a multi-turn completion holds EOS in its inserted text (row 0)
    assert truncated_flags(ids, {}, eos) == [False, True, False]
    assert truncated_flags(ids, {"truncated": [True, True, False]}, eos) == [True, True, False]
    # an extra of the wrong length or type is not trusted
    assert truncated_flags(ids, {"truncated": [True, False]}, eos) == [False, True, False]
    assert truncated_flags(ids, {"truncated": [1, 0, 0]}, eos) == [False, True, False]
