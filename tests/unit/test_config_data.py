"""Loading a config's training data (data.train): files, functions, columns and prompt formats."""

from __future__ import annotations

import pytest



# --- the training data (data.train) ---------------------------------------------------------------------------------

def with_data(project, train, **data):
    cfg = project.baseline()
    cfg["data"] = {"train": train, **data}
    return cfg


def test_csv_and_parquet_files_load(project):
    import datasets

    project.write("rows.csv", "prompt,answer\nWhat is 1+1?,2\nWhat is 2+2?,4\n")
    datasets.Dataset.from_list([{"prompt": "What is 3+3?", "answer": "6"}]).to_parquet(str(project.root / "rows.parquet"))
    assert project.check(with_data(project, "rows.csv")) == []
    assert project.check(with_data(project, "rows.parquet")) == []


DATA_FUNCTIONS = """\
import datasets

def as_dataset():
    return datasets.Dataset.from_list([{"prompt": "What is 1+1?", "answer": "2"}])

def as_list():
    return [{"prompt": "What is 1+1?", "answer": "2"}]

def as_splits():
    return datasets.DatasetDict({"train": as_dataset(), "test": as_dataset()})

def empty():
    return []

def number():
    return 5

def broken():
    raise ValueError("no data today")
"""


@pytest.mark.parametrize("fn, split", [("as_dataset", "train"), ("as_list", "train"), ("as_splits", "test")])
def test_function_returning_rows_loads(project, fn, split):
    name = project.module(DATA_FUNCTIONS, prefix="data")
    assert project.check(with_data(project, f"{name}:{fn}", split=split)) == []
    assert project.check(with_data(project, f"{name}.{fn}", split=split)) == []
    project.write(f"{name}_file.py", DATA_FUNCTIONS)
    assert project.check(with_data(project, f"{name}_file.py:{fn}", split=split)) == []


@pytest.mark.parametrize("train, needle", [
    ("nope.jsonl", "data file `nope.jsonl` not found"),
    ("{mod}:broken", "failed: ValueError: no data today"),
    ("{mod}:number", "returned int; it must return a datasets.Dataset or a list of dicts"),
    ("{mod}:empty", "has no rows"),
    ("{mod}:as_splits", "returned splits ['train', 'test'], none named `validation`"),
    ("{mod}:missing_fn", "has no attribute `missing_fn`"),
])
def test_data_that_does_not_load(project, errs, train, needle):
    train = train.format(mod=project.module(DATA_FUNCTIONS, prefix="data"))
    # the reward needs the `answer` column: with no dataset that must not be reported as well
    [p] = errs(project.check(with_data(project, train, split="validation")))
    assert (p.key, p.value) == ("data.train", train)
    assert needle in p.message


def test_no_training_data(project, errs):
    [p] = errs(project.check(with_data(project, "")))
    assert (p.key, p.message) == ("data.train", "no training data given")


def test_missing_prompt_column(project, errs):
    [p] = errs(project.check(with_data(project, "data.jsonl", prompt_column="question")))
    assert (p.key, p.value) == ("data.prompt_column", "question")
    assert "no column `question` (columns: prompt, answer)" in p.message
    assert project.check(with_data(project, "data.jsonl", prompt_column="answer")) == []  # any string column works


@pytest.mark.parametrize("prompts, message", [
    (["fine", 5], "row 1: the prompt is int 5, neither a plain string nor a list of chat messages"),
    (["", "fine"], "row 0: the prompt is an empty string"),
    ([[{"text": "hi"}]], "row 0: message 0 has no string `role` (missing)"),  # a list, but not of messages
    ([[{"role": "user"}]], "row 0: message 0 has no string `content` (missing)"),
    ([[{"role": "user", "content": "hi"}], [{"role": "usr", "content": "hi"}]],
     "row 1: message 0 has the unknown role 'usr' (roles: system, user, assistant, tool)"),
    ([[{"role": "user", "content": "hi"}], []], "row 1: the prompt is an empty list of messages"),
])
def test_prompt_that_is_not_text_or_chat(project, errs, prompts, message):
    project.write_jsonl("bad.jsonl", [{"prompt": p, "answer": "1"} for p in prompts])
    [p] = errs(project.check(with_data(project, "bad.jsonl")))
    assert p.key == "data.prompt_column" and p.message == message


# Issue 9.2: a dataset mixing plain-string and message-list prompts passed validate-config and broke a chat reward.
def test_mixed_prompt_formats_are_rejected_naming_the_row_and_both_formats(project, errs):
    project.write_jsonl("mixed.jsonl", [{"prompt": "What is 2+3?", "answer": "5"},
                                        {"prompt": [{"role": "user", "content": "What is 4+4?"}], "answer": "8"}])
    [p] = errs(project.check(with_data(project, "mixed.jsonl")))
    assert p.key == "data.prompt_column"
    assert p.message == ("row 1's prompt is a list of chat messages but row 0's is a plain string: every prompt "
                         "must use the same format")
    # every row is checked, not only the first few
    project.write_jsonl("late.jsonl", [{"prompt": f"Q{i}", "answer": "1"} for i in range(40)] +
                        [{"prompt": [{"role": "user", "content": "Q"}], "answer": "1"}])
    [p] = errs(project.check(with_data(project, "late.jsonl")))
    assert p.message.startswith("row 40's prompt is a list of chat messages but row 0's")


def test_chat_prompts_pass(project):
    project.write_jsonl("chat.jsonl", [{"prompt": [{"role": "system", "content": "Be brief."},
                                                   {"role": "user", "content": "1+1?"}], "answer": "2"}])
    assert project.check(with_data(project, "chat.jsonl")) == []


def test_reward_needing_a_column_the_data_lacks(project, errs):
    project.write_jsonl("prompts_only.jsonl", [{"prompt": "What is 1+1?"}])
    [p] = errs(project.check(with_data(project, "prompts_only.jsonl")))
    assert p.key == "rewards[0].function" and "requires `answer`" in p.message
