"""reasoning-gym tasks (issue 28, item 6): the answer a completion gives is read as the task expects (the issue's
inputs: cryptarithm's own ``A=1,B=2,C=3``, ``The answer is: mother``, ``Sorting gives [...]``, ``1 x 3 is 3.``), every
task gives its own answer full credit, the prompt asks for ``<answer>`` tags, and a task name or setting that does not
exist is said at its key with the names that do."""

from __future__ import annotations

import json
import random
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from typer.testing import CliRunner

from grpo_rollout.cli.main import app
from grpo_rollout.config import config_from_dict
from grpo_rollout.config.schema import REASONING_GYM_INSTRUCTION
from grpo_rollout.data import load_section
from grpo_rollout.data.reasoning_gym import task_rows
from grpo_rollout.preflight import validate
from grpo_rollout.rewards.final_answer import final_answer
from grpo_rollout.rewards.tasks import reasoning_gym_score

reasoning_gym = pytest.importorskip("reasoning_gym")

#: Tasks whose entries carry no single answer (``answer`` is None): the task's scorer checks a proposed solution
#: itself (a colouring, a move sequence, a derivation), so "the entry's own answer" does not exist to score.
NO_SINGLE_ANSWER = {
    "boxnet": "answer None: the scorer simulates the proposed box moves",
    "graph_color": "answer None: the scorer checks a proposed colouring against the edges",
    "propositional_logic": "answer None: the scorer checks that a proposed conclusion follows from the premises",
    "rubiks_cube": "answer None: the scorer applies the proposed moves to the cube",
    "rush_hour": "answer None: the scorer plays the proposed moves on the board",
}
#: ``composite`` mixes other tasks and needs them named: two, written as YAML would write them
COMPOSITE = {"datasets": [{"name": "cryptarithm", "weight": 1},
                          {"name": "family_relationships", "weight": 1, "config": {"max_family_size": 5}}]}


def _score(rows, completions):
    return reasoning_gym_score(completions, [r["task_entry"] for r in rows], [r["task"] for r in rows],
                               [r["task_kwargs"] for r in rows])


def _rows(task, size=1, seed=3, **kwargs):
    return task_rows(task, {"size": size, "seed": seed, **(COMPOSITE if task == "composite" else {}), **kwargs})


def test_every_task_gives_its_own_answer_full_credit():
    from reasoning_gym.factory import DATASETS

    without_answer, failed = set(), {}
    for task in sorted(DATASETS):
        rows = _rows(task)
        answers = [json.loads(r["task_entry"])["answer"] for r in rows]
        if any(a is None for a in answers):
            without_answer.add(task)
            continue
        for form in ("{a}", "Let me work it out: it is 7. No. <answer>{a}</answer>", "First a guess. <answer>{a}"):
            scores = _score(rows, [form.format(a=a) for a in answers])
            if scores != [1.0] * len(rows):
                failed[(task, form)] = scores
    assert not failed
    assert without_answer == set(NO_SINGLE_ANSWER)  # a new quirk of reasoning-gym shows up here, not skipped


def test_the_issues_inputs_get_full_credit():
    family = _rows("family_relationships", size=50, seed=0)[6]
    assert family["answer"] == "mother"
    assert _score([family] * 2, ["The answer is: mother", "The answer is: father"]) == [1.0, 0.0]

    sort = _rows("number_sorting", size=1, seed=0)[0]
    assert _score([sort] * 2, [f"Sorting gives {sort['answer']}", f"Sorting gives {sort['answer']}."]) == [1.0, 1.0]

    product = _rows("products", size=200, seed=0, min_terms=2, max_terms=2, min_digits=1, max_digits=1)[176]
    assert product["answer"] == "3"
    assert _score([product] * 2, ["1 x 3 is 3.", "1 x 3 = 3"]) == [1.0, 1.0]  # was 0.09: the whole text scored

    crypt = _rows("cryptarithm", size=1, seed=0)[0]
    assert crypt["answer"] == "A=7,G=0,L=5,M=6,P=3,Q=4,S=9,U=1"
    spaced = crypt["answer"].replace("=", " = ").replace(",", ", ")
    assert _score([crypt] * 3, [crypt["answer"], spaced, "7"]) == [1.0, 1.0, 0.0]  # was 0.0: only `1` was read


@pytest.mark.parametrize("text, answer", [
    ("<answer>2</answer> then <answer> 3 </answer> and more", "3"),  # the last pair, stripped
    ("reasoning... <answer>42", "42"),                               # a `</answer>` stop string was cut off
    ("<answer></answer>", ""),
    (r"so $\boxed{\frac{1}{3}}$.", r"\frac{1}{3}"),
    ("The answer is: mother", "mother"), ("the answer is mother.", "mother"), ("Final answer: 3", "3"),
    ("**Answer:** 3", "3"), ("The answer is:\n1 2\n3 4", "1 2\n3 4"),
    ("The answer is: The cat sat.", "The cat sat."),                 # a sentence keeps its period
    ("1 x 3 is 3.", "3"), ("5 - 3 = 2", "2"), ("Sorting gives [1, 2, 3]", "[1, 2, 3]"), ("x equals -1,000", "-1,000"),
    ("A=1,B=2,C=3", "A=1,B=2,C=3"), ("A = 1, B = 2, C = 3", "A = 1, B = 2, C = 3"),  # no `=` before the verb
    ("5-3=2", "5-3=2"), ("It is 3 apples", "It is 3 apples"), ("  mother \n", "mother"), ("", ""),
    # a new user's finding: a bare `3.` scored 0.5 on basic_arithmetic, and a heading then the number 0.07
    ("3.", "3"), ("-4.", "-4"), ("**3**", "3"), ("It is 3 apples.", "It is 3 apples."),
    ("Final Answer\n3", "3"), ("## Final Answer\n\n-12", "-12"),
])
def test_the_final_answer_rules(text, answer):
    assert final_answer(text) == answer


def test_the_rows_settings_score_and_a_scorer_that_raises_scores_zero():
    rows = _rows("word_ladder", size=2, min_word_length=5, max_word_length=5)
    entry = json.loads(rows[0]["task_entry"])
    with pytest.raises(KeyError):  # the task's scorer with its default settings knows only 4-letter words
        reasoning_gym.get_score_answer_fn("word_ladder")(entry["answer"], entry)
    assert _score(rows, [r["answer"] for r in rows]) == [1.0, 1.0]
    factors = _rows("prime_factorization", size=1, seed=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert _score(factors * 2, ["2 × 433.", "2 × x"]) == [0.0, 0.0]  # reasoning-gym's scorer raises ValueError
    said = [str(w.message) for w in caught if "prime_factorization" in str(w.message)]
    assert len(said) <= 1 and all("raised ValueError" in s and "scores 0.0" in s for s in said)


def test_scoring_leaves_the_global_random_states_alone():
    row = _rows("codeio", size=27, seed=0)[26]  # making this entry runs code that draws from numpy's global state
    np.random.seed(0)
    random.seed(0)
    assert _score([row], [row["answer"]]) == [1.0]  # made again, its answer differs: the row's own copy scores
    assert np.random.rand() == np.random.RandomState(0).rand() and random.random() == random.Random(0).random()


def test_rows_without_the_settings_columns_score_with_the_tasks_defaults():
    rows = _rows("basic_arithmetic", size=2)
    assert reasoning_gym_score([r["answer"] for r in rows], [r["task_entry"] for r in rows]) == [1.0, 1.0]


def test_the_reward_scores_in_a_worker_thread():
    rows = _rows("arc_agi", size=2)
    with ThreadPoolExecutor(2) as pool:
        got = list(pool.map(lambda r: _score([r], [r["answer"]])[0], rows * 2))
    assert got == [1.0] * 4


def test_the_prompt_asks_for_answer_tags_in_training_and_held_out_rows():
    def prompts(**data):
        config, problems = config_from_dict({"data": {"train": "reasoning_gym:chain_sum", "task_kwargs": {"size": 4},
                                                      "eval": "reasoning_gym:chain_sum", **data}})
        assert not problems
        return [[p[0]["content"] for p in load_section(config.data, held_out=h)["prompt"]] for h in (False, True)]

    for rows in prompts():
        assert rows and all(p.endswith(" " + REASONING_GYM_INSTRUCTION) for p in rows)
    for rows in prompts(task_instruction="Reply with only the number."):
        assert all(p.endswith("= Reply with only the number.") and "<answer>" not in p for p in rows)
    questions = [e["question"] for e in reasoning_gym.create_dataset("chain_sum", size=4, seed=0)]
    assert prompts(task_instruction="")[0] == questions
    crypt = _rows("cryptarithm", size=1)[0]["prompt"][0]["content"]  # after a question of several lines: its own line
    assert crypt.endswith("(without quotes)\n" + REASONING_GYM_INSTRUCTION)


# --- a task or setting that does not exist ----------------------------------------------------------------------------

def _problems(tmp_path, **data):
    config, problems = config_from_dict({"data": {"train": "reasoning_gym:basic_arithmetic",
                                                  "task_kwargs": {"size": 8}, **data}})
    return {p.key: p for p in validate(config, tmp_path, known=problems) if p.key.startswith("data")}


def test_an_unknown_task_gets_a_did_you_mean(tmp_path):
    found = _problems(tmp_path, train="reasoning_gym:basic_arithmetc")
    assert found["data.train"].message == "reasoning-gym has no task `basic_arithmetc`"
    assert found["data.train"].fix.startswith("did you mean `reasoning_gym:basic_arithmetic`? `grpo-rollout tasks`")
    found = _problems(tmp_path, train="reasoning_gym:sorting")
    assert all(f"`reasoning_gym:{t}`" in found["data.train"].fix for t in ("number_sorting", "word_sorting"))
    found = _problems(tmp_path, train="reasoning_gym:zzzz")
    assert found["data.train"].fix == f"pick one: `grpo-rollout tasks` lists all {len(reasoning_gym.factory.DATASETS)}"


def test_an_unknown_or_refused_setting_is_said_at_its_key(tmp_path):
    found = _problems(tmp_path, task_kwargs={"size": 8, "min_term": 2}, eval="reasoning_gym:basic_arithmetic")
    assert list(found) == ["data.task_kwargs.min_term"]  # data.eval, the same task, is not reported again
    p = found["data.task_kwargs.min_term"]
    assert (p.value, p.message) == (2, "is not a setting of reasoning-gym's `basic_arithmetic`")
    assert p.fix.startswith("did you mean `min_terms`? Its settings: min_terms, max_terms,")
    p = _problems(tmp_path, task_kwargs={"min_terms": 0})["data.task_kwargs.min_terms"]
    assert p.message == "reasoning-gym's `basic_arithmetic` refuses this setting: min_terms must be positive"
    found = _problems(tmp_path, eval="reasoning_gym:family_relationships", task_kwargs={"min_terms": 2})
    assert found["data.task_kwargs.min_terms"].message == ("is not a setting of reasoning-gym's "
                                                           "`family_relationships`")


@pytest.mark.parametrize("task_kwargs, key, message", [
    ({"size": -5}, "size", "must be a whole number >= 1 (the number of rows), got -5"),
    ({"size": 0}, "size", "must be a whole number >= 1 (the number of rows), got 0"),
    ({"seed": "abc"}, "seed", "must be a whole number (the rows' seed), got 'abc'"),
])
def test_a_bad_size_or_seed_is_said_at_its_key_once(tmp_path, task_kwargs, key, message):
    """A new user's finding: `size: -5` read "`reasoning_gym:basic_arithmetic` has no rows" at data.train and again
    at data.eval, with the fix "fix the path/name"; `seed: abc` a TypeError from the held-out rows' seed."""
    found = _problems(tmp_path, task_kwargs=task_kwargs, eval="reasoning_gym:basic_arithmetic")
    assert list(found) == [f"data.task_kwargs.{key}"] and found[f"data.task_kwargs.{key}"].message == message


def test_validate_config_prints_them_without_a_traceback(tmp_path):
    (tmp_path / "c.yaml").write_text("data:\n  train: reasoning_gym:family_relationship\n"
                                     "  task_kwargs: {max_family_sise: 5}\n")
    result = CliRunner().invoke(app, ["validate-config", str(tmp_path / "c.yaml"), "-q"],
                                env={"COLUMNS": "200"})
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "reasoning-gym has no task `family_relationship`" in result.output
    assert "reasoning_gym:family_relationships" in result.output


def test_the_tasks_command_lists_every_task_and_shows_one():
    runner = CliRunner()
    listed = runner.invoke(app, ["tasks"], env={"COLUMNS": "200"})
    assert listed.exit_code == 0
    assert all(name in listed.output for name in reasoning_gym.factory.DATASETS)
    one = runner.invoke(app, ["tasks", "cryptarithm"], env={"COLUMNS": "200"})
    assert one.exit_code == 0 and "allow_leading_zero" in one.output and REASONING_GYM_INSTRUCTION in one.output
    assert "answer: A=7,G=0,L=5,M=6,P=3,Q=4,S=9,U=1" in one.output
    wrong = runner.invoke(app, ["tasks", "cryptarythm"], env={"COLUMNS": "200"})
    assert wrong.exit_code == 1 and "did you mean `cryptarithm`?" in wrong.output
