"""A data file that cannot be read says why, naming the file (a new user's trial: an empty .jsonl gave
"StopIteration: StopIteration", a malformed one only "An error occurred while generating the dataset", and a .txt
file "no module named `data`")."""

from __future__ import annotations

import pytest

from grpo_rollout.data import DatasetError, load_train_dataset


@pytest.mark.parametrize("name, text, message", [
    ("empty.jsonl", "", "data file `empty.jsonl` is empty; it needs one row per prompt"),
    ("blank.jsonl", "\n  \n", "data file `blank.jsonl` is empty"),
    ("bad.jsonl", '{"prompt": "a"}\n{bad json\n', "JSON parse error: Missing a name for object member. in row 1"),
    ("data.txt", "What is 1 + 1?\n", "data file `data.txt`: .txt is not a format it reads; convert it to .jsonl"),
])
def test_an_unreadable_data_file_is_named_with_the_reason(tmp_path, name, text, message):
    (tmp_path / name).write_text(text)
    with pytest.raises(DatasetError) as info:
        load_train_dataset(name, base_dir=tmp_path)
    assert message in str(info.value)


def test_validate_config_gives_the_reason_and_a_whole_fix(tmp_path):
    from grpo_rollout.preflight import check_config

    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "c.yaml").write_text(
        "model: {name_or_path: org/model}\ndata: {train: empty.jsonl}\n"
        "rewards: [{function: grpo_rollout.rewards.library:accuracy}]\n")
    _, problems = check_config(tmp_path / "c.yaml")
    [p] = [p for p in problems if p.key == "data.train"]
    assert "is empty" in p.message and p.fix.startswith("name a .jsonl/.json/.csv/.parquet file")
