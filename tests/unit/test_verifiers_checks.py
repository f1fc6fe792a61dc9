"""Checks of a verifiers 0.4 source and rollout before anything plays (issue 41.2, and a new user's trial): the
taskset found and exporting a ``vf.Taskset``, ``data.task_kwargs`` against its config's fields, the rollout that plays
its rows, the legacy verifiers 0.2 settings, an endless taskset; which verifiers errors fail an episode."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from grpo_rollout.preflight import check_config
from grpo_rollout.rollouts.contract import EpisodeFailure, RolloutError

REPO = Path(__file__).resolve().parents[2]
ROLLOUT = "grpo_rollout.integrations.verifiers.verifiers:verifiers_rollout"
TASKSET = '''
import itertools
import verifiers.v1 as vf


class WordsConfig(vf.TasksetConfig):
    num_tasks: int = 4
    endless: bool = False


class Words(vf.Taskset[vf.Task, WordsConfig]):
    def load(self):
        for i in (itertools.count() if self.config.endless else range(self.config.num_tasks)):
            yield vf.Task(vf.TaskData(prompt=f"Say word {i}."), self.config.task)


__all__ = ["Words"]
'''


def _problems(tmp_path: Path, **changes):
    """validate-config's problems for a config training words_taskset.py (written to ``tmp_path``), with ``changes``
    (dotted keys) applied."""
    (tmp_path / "words_taskset.py").write_text(TASKSET)
    (tmp_path / "no_taskset.py").write_text("X = 1\n__all__ = ['X']\n")
    config = {"model": {"name_or_path": str(tmp_path)}, "data": {"train": "verifiers:words_taskset.py"},
              "rollout": {"function": ROLLOUT}, "sampling": {"num_generations": 2},
              "training": {"output_dir": str(tmp_path / "out"), "prompts_per_step": 2, "micro_batch_size": 4}}
    (tmp_path / "config.json").write_text("{}")
    for key, value in changes.items():
        section, name = key.split("__")
        config.setdefault(section, {})[name] = value
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(config))
    _, problems = check_config(tmp_path / "run.yaml")
    return [(p.key, p.message, p.fix) for p in problems if p.is_error or p.key.startswith("rollout")]


def test_a_valid_taskset_config_has_no_problems(tmp_path):
    assert _problems(tmp_path) == []


@pytest.mark.parametrize("changes, key, fragments", [
    ({"data__task_kwargs": {"num_taks": 4}}, "data.task_kwargs.num_taks",
     ["is not a field of WordsConfig", "did you mean `num_tasks`?", "num_tasks, endless"]),
    ({"data__task_kwargs": {"num_tasks": "lots"}}, "data.task_kwargs.num_tasks",
     ["WordsConfig refuses it: Input should be a valid integer"]),
    ({"data__train": "verifiers:word-taskset"}, "data.train", ["no taskset `word-taskset` is installed"]),
    ({"data__train": "verifiers:no_taskset.py"}, "data.train", ["exports no Taskset subclass", "__all__"]),
    ({"data__train": "verifiers:missing.py"}, "data.train", ["`missing.py` is not a file or folder"]),
    ({"rollout__function": ""}, "rollout.function", ["does not play the verifiers taskset", ROLLOUT]),
    ({"data__train": "data.jsonl", "rollout__function": ROLLOUT}, "rollout.function",
     ["plays verifiers tasksets, and data.train names none"]),
    ({"data__task_kwargs": {"endless": True}}, "data.train", ["yielded more than 1,000 tasks", "endless"]),
])
def test_each_problem_of_a_taskset_source_is_named_at_its_key(tmp_path, monkeypatch, changes, key, fragments):
    monkeypatch.setattr("grpo_rollout.data.verifiers_tasks.MAX_TASKS", 1000)  # an endless load() is found sooner
    (tmp_path / "data.jsonl").write_text('{"prompt": "hi"}\n')
    said = [p for p in _problems(tmp_path, **changes) if p[0] == key]
    assert said, _problems(tmp_path, **changes)
    assert all(f in " ".join(said[0]) for f in fragments), said


@pytest.mark.parametrize("kind, status, failed", [("ProviderError", 502, True), ("ProviderError", 400, False),
                                                  ("SandboxError", None, True), ("TaskError", None, False)])
def test_which_verifiers_errors_fail_the_episode(kind, status, failed):
    """Transient kinds fail the episode (rollout.on_error); a 4xx the endpoint answered, or a task's or harness's own
    error, is a fault that stops the run."""
    from types import SimpleNamespace

    from grpo_rollout.integrations.verifiers.verifiers import VerifiersEpisodeError, _raise_errors

    error = SimpleNamespace(type=kind, message="it went wrong", status_code=status, traceback=None)
    episode = SimpleNamespace(errors=[error], traces=[], ok=False, is_timeout=False)
    with pytest.raises(EpisodeFailure if failed else VerifiersEpisodeError, match=f"{kind}: it went wrong"):
        _raise_errors(episode)


def test_rows_from_elsewhere_and_the_legacy_settings_are_refused(tmp_path):
    from grpo_rollout.data.verifiers_tasks import TasksetNotFound, task_rows
    from grpo_rollout.integrations.verifiers.verifiers import validate_kwargs, verifiers_rollout

    with pytest.raises(RolloutError, match=r"\(no verifiers_task column\): name the taskset in data.train: verifiers:"):
        verifiers_rollout(["hi"], client=None, tokenizer=None, n=1, rows=[{"prompt": "hi"}])
    problems = validate_kwargs({"env": "examples/verifiers_sums/env.py:load_environment", "env_args": {}})
    assert [p[0] for p in problems] == ["rollout.kwargs.env", "rollout.kwargs.env_args"]
    assert "vf.Environment" in problems[0][1] and "data.train: verifiers:" in problems[0][2]
    [(key, _, fix)] = validate_kwargs({"env": "my-env"})  # the spelling: the id goes with the data
    assert key == "rollout.kwargs.env" and fix == "data.train: verifiers:my-env"
    assert validate_kwargs({"harness": "null", "runtime": "subprocess", "max_turn_tokens": 30}) == []
    assert [p[0] for p in validate_kwargs({"harness": 3, "max_turns": 2, "max_turn_token": 9})] == [
        "rollout.kwargs.max_turns", "rollout.kwargs.max_turn_token", "rollout.kwargs.harness"]
    [(_, said, hint)] = validate_kwargs({"max_turn_token": 9})  # named as this rollout's, not the agent rollout's
    assert said == "verifiers_rollout has no setting `max_turn_token`" and "max_turn_tokens" in hint
    [(key, said, _)] = validate_kwargs({"harness": "bashh"})  # verifiers' own list of its harnesses
    assert key == "rollout.kwargs.harness" and "harness 'bashh' not found" in said and "null" in said
    with pytest.raises(TasksetNotFound, match="no_such.py"):
        task_rows("no_such.py", {}, tmp_path)


def test_the_example_config_validates_and_a_missing_taskset_is_named(tmp_path, monkeypatch):
    from grpo_rollout.preflight import check_config

    monkeypatch.chdir(REPO)
    _, problems = check_config(REPO / "configs" / "verifiers_sums.yaml")
    assert not problems, [str(p) for p in problems]
    from grpo_rollout.data import DatasetError, load_train_dataset

    with pytest.raises(DatasetError, match="no-such-taskset"):
        load_train_dataset("verifiers:no-such-taskset")
