"""TRL's environment_factory (issue 31.1): what goes wrong is said with the class, the key and the fix — a reset that
raises or does not take the row's columns, a factory that does not load or make an environment, a method that is no
usable tool, rows naming an environment the mapping lacks."""

from __future__ import annotations

import json
import re

import pytest
from environment_factory_helpers import ENVS, env_config, messages, play

from grpo_rollout.config import to_yaml
from grpo_rollout.preflight import check_config
from grpo_rollout.rollouts.contract import RolloutError


@pytest.fixture
def envs(tmp_path):
    (tmp_path / "trl_envs.py").write_text(ENVS)
    return tmp_path / "trl_envs.py"


@pytest.mark.model
def test_a_reset_that_raises_is_named_with_its_file_and_line(tmp_path, tiny_model):
    (tmp_path / "broken.py").write_text(ENVS.replace('self.counter, self.target = 0, kwargs["target"]',
                                                     'self.counter, self.target = 0, kwargs["goal"]'))
    with pytest.raises(RolloutError, match=r"CounterEnv\.reset raised KeyError: 'goal'.*broken\.py:\d+"):
        play(tmp_path / "broken.py", tiny_model, [{"prompt": messages("Count."), "target": 3}],
                 f"{tmp_path / 'broken.py'}:CounterEnv")


def test_validate_config_names_what_is_wrong_with_a_factory(tmp_path, envs):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    (tmp_path / "bad_envs.py").write_text(ENVS + '''
class NeedsArgs:
    def __init__(self, size):
        pass
    def reset(self, **kwargs):
        pass


class Undocumented:
    def reset(self, **kwargs):
        pass
    def move(self, x):
        return x
''')
    cases = {f"{tmp_path}/bad_envs.py:CounterEnvv": "has no attribute|not found|CounterEnvv",
             f"{tmp_path}/bad_envs.py:NeedsArgs": "NeedsArgs\\(\\) raised TypeError",
             f"{tmp_path}/bad_envs.py:Undocumented": "Undocumented.move is a tool"}
    for factory, message in cases.items():
        cfg = env_config(tmp_path, tmp_path / "model", envs)
        cfg.rollout.kwargs["environment_factory"] = factory
        (tmp_path / "config.yaml").write_text(to_yaml(cfg))
        _, problems = check_config(tmp_path / "config.yaml", load_data=False)
        found = [p for p in problems if p.key.startswith("rollout.kwargs.environment_factory")]
        assert found and re.search(message, found[0].message), (factory, [str(p) for p in problems])
    # the environment's get_reward is a reward: no reward function is needed
    cfg = env_config(tmp_path, tmp_path / "model", envs)
    cfg.rewards = []
    (tmp_path / "config.yaml").write_text(to_yaml(cfg))
    _, problems = check_config(tmp_path / "config.yaml", load_data=False)
    assert "rewards" not in [p.key for p in problems], [str(p) for p in problems]
    cfg.rollout.kwargs.pop("environment_factory")  # neither tools nor an environment
    (tmp_path / "config.yaml").write_text(to_yaml(cfg))
    _, problems = check_config(tmp_path / "config.yaml", load_data=False)
    assert {"rewards", "rollout.kwargs.tools"} <= {p.key for p in problems if p.is_error}


@pytest.mark.model
def test_what_a_trial_user_broke_is_said_with_the_key_and_the_fix(tmp_path, tiny_model, envs):
    """A reset that does not take the row's columns is named with its signature (not a library file:line); a
    dataset row naming no environment of the mapping, and an environment without tools, are caught by
    validate-config."""
    (tmp_path / "odd.py").write_text('''
class Positional:
    def reset(self, word):
        pass
    def say(self, text: str) -> str:
        """Say it.

        Args:
            text: what to say
        """
        return text


class OnlyReset:
    def reset(self, **kwargs):
        pass
''')
    with pytest.raises(RolloutError, match=r"Positional\.reset\(word\) cannot be called with \(prompt, target\): "
                                           r".*accept them \(e\.g\. \*\*kwargs\)"):
        play(tmp_path / "odd.py", tiny_model, [{"prompt": messages("Count."), "target": 3}],
                 f"{tmp_path / 'odd.py'}:Positional")
    cfg = env_config(tmp_path, tiny_model, envs)
    cfg.rollout.kwargs["environment_factory"] = {"counter": f"{envs}:CounterEnv",
                                                 "quiet": f"{tmp_path}/odd.py:OnlyReset"}
    rows = [{"prompt": messages("Count to 2."), "target": 2, "environment": "counter"},
            {"prompt": messages("Count to 3."), "target": 3, "environment": "chess"}]
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "config.yaml").write_text(to_yaml(cfg))
    _, problems = check_config(tmp_path / "config.yaml")
    said = [p.message for p in problems if p.key.startswith("rollout.kwargs.environment_factory")]
    assert any("dataset row 1 has environment='chess', which it does not name" in m for m in said), said
    assert any("OnlyReset has no public methods: the model would have no tools" in m for m in said), said


def test_properties_are_not_tools_and_are_not_read():
    from grpo_rollout.integrations.trl.environment_factory import environment_tools

    class Env:
        def reset(self, **kwargs):
            pass

        @property
        def broken(self):
            raise RuntimeError("read too early")

        def move(self, x: int) -> int:
            """Move.

            Args:
                x: how far
            """
            return x

    assert list(environment_tools(Env())) == ["move"]
