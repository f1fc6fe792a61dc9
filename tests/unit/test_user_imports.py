"""Loading user files named in a config (grpo_rollout.user_code.resolve): one module per file, sys.path left as found,
imports of neighbouring files working (issue 18, item 10)."""

from __future__ import annotations

import sys

import pytest

from grpo_rollout.user_code.resolve import module_name_for, resolve_callable


def _reward(folder, value):
    folder.mkdir(parents=True)
    path = folder / "r.py"
    path.write_text(f"def reward(completions, **kwargs):\n    return [{value}] * len(completions)\n")
    return path


def test_files_with_the_same_last_three_path_parts_are_two_modules(tmp_path):
    """a/x/y/r.py and b/x/y/r.py used to share the module name built from `x_y_r`: the second resolved to the
    first's function."""
    first, second = _reward(tmp_path / "a/x/y", 1.0), _reward(tmp_path / "b/x/y", 2.0)
    one, two = resolve_callable(f"{first}:reward"), resolve_callable(f"{second}:reward")
    assert one(["c"]) == [1.0] and two(["c"]) == [2.0]
    assert module_name_for(first) != module_name_for(second)
    assert one.__module__ == module_name_for(first) and sys.modules[two.__module__].__file__ == str(second)
    assert resolve_callable(f"{first}:reward") is one  # loaded once per file


def test_resolving_user_files_and_modules_leaves_sys_path_as_it_was(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = _reward(tmp_path / "deep/er", 1.0)
    (tmp_path / "pkg_issue18").mkdir()
    (tmp_path / "pkg_issue18/__init__.py").write_text("")
    (tmp_path / "pkg_issue18/scores.py").write_text("def reward(completions):\n    return [3.0] * len(completions)\n")
    before = list(sys.path)
    assert resolve_callable(f"{path}:reward")(["c"]) == [1.0]
    assert resolve_callable("pkg_issue18.scores:reward")(["c"]) == [3.0]  # found in the current folder
    assert sys.path == before


def test_a_user_file_that_imports_a_sibling_module_still_works(tmp_path):
    folder = tmp_path / "task"
    folder.mkdir()
    (folder / "helper_issue18.py").write_text("BONUS = 0.5\n\ndef score(text):\n    return len(text) + BONUS\n")
    (folder / "rewards.py").write_text("import helper_issue18\nfrom helper_issue18 import score\n\n"
                                       "def reward(completions, **kwargs):\n"
                                       "    return [score(c) + helper_issue18.BONUS for c in completions]\n")
    before = list(sys.path)
    reward = resolve_callable(f"{folder / 'rewards.py'}:reward")
    assert reward(["ab", "abcd"]) == [3.0, 5.0]
    assert sys.path == before


def test_a_failing_user_file_leaves_sys_path_and_sys_modules_clean(tmp_path):

    from grpo_rollout.user_code.resolve import ImportSpecError

    path = tmp_path / "bad.py"
    path.write_text("raise RuntimeError('boom')\n")
    before = list(sys.path)
    with pytest.raises(ImportSpecError, match="RuntimeError: boom"):
        resolve_callable(f"{path}:reward")
    assert sys.path == before and module_name_for(path) not in sys.modules


def test_messages_name_a_user_file_by_its_path_not_its_internal_module(tmp_path, monkeypatch):
    """A typo in a verifiers env_args named `grpo_rollout_user_env_261d7d0989a4.load_environment`."""
    from grpo_rollout.user_code.signatures import describe

    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "env.py").write_text("def load_environment(max_turns=2):\n    return None\n")
    monkeypatch.chdir(tmp_path)
    fn = resolve_callable("examples/env.py:load_environment", tmp_path)
    assert describe(fn) == "examples/env.py:load_environment"
    monkeypatch.chdir(tmp_path / "examples")
    assert describe(fn) == "env.py:load_environment"
    monkeypatch.chdir("/")
    assert describe(fn) == f"{tmp_path}/examples/env.py:load_environment"  # outside the current folder: whole
    assert describe(module_name_for) == "grpo_rollout.user_code.resolve.module_name_for"
