"""OpenEnv environments (issue 31.3): an environment server the tests serve (written with openenv-core's own server
classes), by URL and as an app the run serves; one session per episode, the model's text turned into actions by the
user's function, step rewards summed into env_reward; faults named; the example config trains two steps."""

from __future__ import annotations

import sys

import pytest
from helpers import train_example_briefly
from transformers import AutoTokenizer

from grpo_rollout.config import to_yaml
from grpo_rollout.preflight import check_config
from grpo_rollout.integrations.openenv import openenv as oe
from grpo_rollout.rollouts.contract import RolloutError
from grpo_rollout.generation.base import GenerationResult
from grpo_rollout.rollouts.contract import EpisodeFailure
from scripted_client import ScriptedClient

SERVER = '''
from typing import Any, Optional

from openenv.core.env_server import Action, Environment, Observation, State, create_app

RESETS = []


class CountAction(Action):
    number: int


class CountObservation(Observation):
    message: str = ""


class CountEnvironment(Environment):
    """Say the numbers from 1 up to `upto`, one per turn; +0.5 per right number."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def reset(self, seed: Optional[int] = None, episode_id: Optional[str] = None, **kwargs: Any):
        RESETS.append(dict(kwargs))
        if kwargs.get("upto") == "bug":
            return undefined_name
        self.upto, self.next = int(kwargs["upto"]), 1
        return CountObservation(message=f"Count to {self.upto}, one number per turn.", done=False)

    def step(self, action: CountAction, timeout_s=None, **kwargs: Any):
        if action.number == 99:
            return len(action.number)  # a bug in the environment (issue 51.18)
        right = action.number == self.next
        self.next += right
        done = self.next > self.upto
        return CountObservation(message="next", done=done, reward=0.5 if right else 0.0)

    @property
    def state(self) -> State:
        return State(step_count=self.next)


app = create_app(CountEnvironment, CountAction, CountObservation, max_concurrent_envs=64)
'''

PLAY = '''
import re

def to_action(text):
    return {"number": int(re.search(r"\\d+", text).group())}

def shout(observation):
    return observation["message"].upper()

def raw(text):
    return {"number": text.strip()}
'''


def counting(text: str) -> tuple:
    """Like a model that counts: the number of its earlier turns plus one."""
    return str(text.count("<|im_start|>assistant")), True


@pytest.fixture
def files(tmp_path):
    (tmp_path / "count_server.py").write_text(SERVER)
    (tmp_path / "play.py").write_text(PLAY)
    yield tmp_path
    oe.close_openenv_servers()


class StampingClient(ScriptedClient):
    """Answers as ScriptedClient does, each answer stamped with weight version 3 + the turns before it."""

    async def agenerate(self, prompt_ids, n=1, **kwargs):
        result = await super().agenerate(prompt_ids, n, **kwargs)
        version = 2 + self.tokenizer.decode(prompt_ids[0]).count("<|im_start|>assistant")
        return GenerationResult(result.prompt_ids, result.completion_ids, result.logprobs, result.finish_reasons,
                                weight_version=version, weight_version_end=version)


def _play(files, tiny_model, rows, reply=counting, **kwargs):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    return oe.openenv_rollout([r.get("prompt") for r in rows], client=StampingClient(tokenizer, reply), tokenizer=tokenizer,
                              rows=rows, n=2, max_completion_length=64, max_turns=5,
                              **{"action": f"{files}/play.py:to_action", **kwargs})


@pytest.mark.model
@pytest.mark.parametrize("by", ["server", "url"])
def test_episodes_play_on_the_server_each_in_its_own_session(files, tiny_model, by):
    spec = f"{files}/count_server.py:app"
    where = {"server": spec} if by == "server" else {"url": oe.serve_app(spec)}
    rows = [{"prompt": "Let's count.", "upto": 2}, {"prompt": "Let's count.", "upto": 3}]
    out = _play(files, tiny_model, rows, **where)
    assert out["env_reward"] == [1.0, 1.0, 1.5, 1.5] and out["env_done"] == [True] * 4  # every number right
    assert out["num_turns"] == [2, 2, 3, 3]
    # issue 51.18: each model call's weight version, as the agent path keeps them (the episode's oldest and newest too)
    assert out["call_weight_versions"] == [[[3, 3], [4, 4]]] * 2 + [[[3, 3], [4, 4], [5, 5]]] * 2
    assert list(map(tuple, out["weight_versions"])) == [(3, 4)] * 2 + [(3, 5)] * 2
    assert "call_weight_versions" in oe.openenv_rollout.extras
    first = out["first_prompt"][0][-1]["content"]
    assert first == "Let's count.\n\nCount to 2, one number per turn."  # the row's prompt, then the observation
    server_module = next(m for m in sys.modules.values() if getattr(m, "__file__", None) == str(files / "count_server.py"))
    assert {"upto": 2} in server_module.RESETS and all("prompt" not in r for r in server_module.RESETS)
    shouted = _play(files, tiny_model, rows[:1], observation=f"{files}/play.py:shout", **where)
    assert shouted["first_prompt"][0][-1]["content"].endswith("COUNT TO 2, ONE NUMBER PER TURN.")


@pytest.mark.model
def test_faults_name_the_server_or_the_function(files, tiny_model):
    with pytest.raises(RolloutError, match=r"the OpenEnv server at http://127\.0\.0\.1:9 did not take the session.*"
                                           r"rollout\.kwargs\.url"):
        _play(files, tiny_model, [{"prompt": "x", "upto": 2}], url="http://127.0.0.1:9")
    (files / "broken_play.py").write_text(PLAY.replace("int(re.search", "int(re.searchh"))
    with pytest.raises(RolloutError, match=r"the action function .*to_action.* raised AttributeError.*"
                                           r"broken_play\.py:\d+"):
        _play(files, tiny_model, [{"prompt": "x", "upto": 2}], server=f"{files}/count_server.py:app",
              action=f"{files}/broken_play.py:to_action")
    # found by a trial user: an action of the wrong type was blamed on the server; a full server on the url
    (files / "odd_play.py").write_text("def to_action(text):\n    return 12345\n")
    with pytest.raises(RolloutError, match=r"the action function .*to_action returned an int \('12345'\); it must "
                                           r"return the action as a dict"):
        _play(files, tiny_model, [{"prompt": "x", "upto": 2}], server=f"{files}/count_server.py:app",
              action=f"{files}/odd_play.py:to_action")
    (files / "small_server.py").write_text(SERVER.replace("max_concurrent_envs=64", "max_concurrent_envs=1"))
    with pytest.raises(RolloutError, match=r"(refused reset|did not take the session): .*at capacity.*"
                                           r"max_concurrent_envs >= prompts_per_step × num_generations"):
        _play(files, tiny_model, [{"prompt": "x", "upto": 2}], server=f"{files}/small_server.py:app")
    with pytest.raises(RolloutError, match="either rollout.kwargs.url"):
        _play(files, tiny_model, [{"prompt": "x", "upto": 2}])


def test_validate_config_checks_the_settings(files):
    from tiny_model import tiny_config

    (files / "model").mkdir()
    (files / "model" / "config.json").write_text("{}")

    cfg = tiny_config(files, files / "model", rollout={"function": "grpo_rollout.integrations.openenv.openenv:openenv_rollout",
                                                       "kwargs": {"server": f"{files}/count_server.py:appp",
                                                                  "max_turn": 3}})
    (files / "config.yaml").write_text(to_yaml(cfg))
    _, problems = check_config(files / "config.yaml", load_data=False)
    found = {p.key: p for p in problems if p.key.startswith("rollout.kwargs")}
    assert "did you mean `max_turns`" in found["rollout.kwargs.max_turn"].fix
    assert "no action function" in found["rollout.kwargs.action"].message
    assert "appp" in found["rollout.kwargs.server"].message
    for server, url, key, message in [(f"{files}/count_server.py:CountEnvironment", None, "rollout.kwargs.server",
                                       "is an ABCMeta, not an OpenEnv app"),
                                      (None, "127.0.0.1:8000", "rollout.kwargs.url", "must start with http://")]:
        cfg.rollout.kwargs = {"action": f"{files}/play.py:to_action", **({"server": server} if server else {}),
                              **({"url": url} if url else {})}
        (files / "config.yaml").write_text(to_yaml(cfg))
        _, problems = check_config(files / "config.yaml", load_data=False)
        [p] = [p for p in problems if p.key == key]
        assert message in p.message and p.is_error, (p.message, p.severity)


@pytest.mark.model
def test_the_example_trains_two_steps(tmp_path, tiny_model, monkeypatch):
    result = train_example_briefly("openenv_guess", tiny_model, tmp_path / "run", monkeypatch,
                                   max_completion_length=48)
    assert result.steps == 2
    for m in result.history:
        assert m["reward"] == pytest.approx(m["extras/env_reward"]) and m["extras/num_turns"] >= 1
    assert oe._SERVED == {}  # the app the run served stopped with it


@pytest.mark.model
def test_a_bug_in_the_environment_names_its_line_and_a_bad_action_is_the_models_error(files, tiny_model):
    """Issue 51.18: a NameError/TypeError in the environment's reset/step was an EpisodeFailure without file:line
    (retried under on_error as if the server had gone), and an action that does not fit the environment's action
    stopped the run without naming the field."""
    server = f"{files}/count_server.py:app"
    for row, method, kind in [({"prompt": "x", "upto": "bug"}, "reset", "NameError: name 'undefined_name'"),
                              ({"prompt": "x", "upto": 2}, "step", "TypeError: object of type 'int' has no len")]:
        with pytest.raises(RolloutError, match=rf"the OpenEnv environment's {method} raised {kind}.* \(at "
                                               r".*count_server\.py:\d+\): a bug in the environment's code") as raised:
            _play(files, tiny_model, [row], reply=lambda text: ("99", True), server=server,
                  action=f"{files}/play.py:raw")
        assert not isinstance(raised.value, EpisodeFailure)  # a bug stops the run, as the agent path's own errors do
    assert "at http://x raised in step: boom (EXECUTION_ERROR): a bug in the environment's code; its traceback is " \
           "in the server's log" in str(oe.environment_bug("http://x", "step", "boom", "EXECUTION_ERROR"))

    def wordy(text):  # "one" first (not a number: the action's field refuses it), then the numbers
        turns = text.count("<|im_start|>assistant")
        return ("one" if turns == 1 else str(turns - 1)), True

    out = _play(files, tiny_model, [{"prompt": "Let's count.", "upto": 2}], reply=wordy, server=server,
                action=f"{files}/play.py:raw")
    assert out["env_reward"] == [1.0, 1.0] and out["num_turns"] == [3, 3] and out["env_done"] == [True, True]
    assert out["turn_rewards"] == [[None, 0.5, 0.5]] * 2  # the refused action's turn: no reward
    answered = AutoTokenizer.from_pretrained(tiny_model).decode(out["completion_ids"][0])
    assert "Error: the action {'number': 'one'} does not fit the environment's action: field 'number' must be " \
           'integer, got "one"' in answered
