"""Held-out evaluation's parts (issue 22): pass@k, config checks, task libraries, the final panel and the plot."""

from __future__ import annotations

import pytest

from grpo_rollout.config import config_from_dict
from grpo_rollout.preflight import validate
from grpo_rollout.trainer.evaluation.pass_at_k import default_ks, mean_pass_at_k, pass_at_k


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
