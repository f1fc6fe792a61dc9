"""TRL's ``environment_factory`` on the tool-calling rollout (issue 31.1): TRL-shaped environments (written here in
TRL's shape, not copied) play their episodes with their methods as tools, score them with ``get_reward``, reach
reward functions as ``environments``; several environments chosen by a dataset column; validate-config's checks; and
training runs, also streaming and with the user's code called from a worker thread and inside a running event loop.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import threading
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from grpo_rollout.preflight import check_config
from grpo_rollout.config import to_yaml
from grpo_rollout.rewards.calling import implied_rewards
from grpo_rollout.rollouts.contract import RolloutError
from grpo_rollout.rollouts.tool_calling import tool_calling_rollout
from grpo_rollout.trainer import train
from grpo_rollout.trainer.reporting.progress import RichReporter
from scripted_client import ScriptedClient
from tiny_model import tiny_config

ENVS = '''
import asyncio

MADE = []


class CounterEnv:
    def __init__(self):
        self.counter = 0
        MADE.append(self)

    def reset(self, **kwargs):
        self.reset_with = dict(kwargs)
        self.counter, self.target = 0, kwargs["target"]
        return " Reach " + str(self.target) + "."

    def increment(self, step: int) -> str:
        """Add to the counter.

        Args:
            step: how much to add
        """
        self.counter += step
        return "counter=" + str(self.counter)

    def get_reward(self) -> float:
        return 1.0 if self.counter == self.target else 0.0

    def _helper(self):
        return "not a tool"


class NotesEnv:
    def reset(self, **kwargs):
        self.reset_with = dict(kwargs)
        self.notes = {}

    def write(self, name: str, text: str) -> str:
        """Save a note.

        Args:
            name: the note's name
            text: what to write
        """
        self.notes[name] = text
        return "saved"

    async def get_reward(self) -> float:
        await asyncio.sleep(0)
        return float(len(self.notes))


def counter_value(environments, **kwargs):
    # a TRL-shaped reward function: it reads the environments
    return [float(getattr(e, "counter", -1)) for e in environments]
'''


def counter_or_notes(text: str) -> tuple:
    """Like a model that learnt the task: a call of the tool the prompt asks for, then "Done." after its answer."""
    if "counter=" in text or "saved" in text.split("<|im_start|>user")[-1]:
        return "Done.", True
    target = re.findall(r"Reach (\d+)\.", text)
    if target:
        return f'<tool_call>{{"name": "increment", "arguments": {{"step": {target[-1]}}}}}</tool_call>', False
    return '<tool_call>{"name": "write", "arguments": {"name": "a", "text": "b"}}</tool_call>', False


@pytest.fixture
def envs(tmp_path):
    (tmp_path / "trl_envs.py").write_text(ENVS)
    return tmp_path / "trl_envs.py"


def _messages(text):
    return [{"role": "user", "content": text}]


def _rollout(envs_file, tiny_model, rows, factory, where="main"):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    kwargs = dict(client=ScriptedClient(tokenizer, counter_or_notes), tokenizer=tokenizer, n=2, rows=rows, max_completion_length=96,
                  environment_factory=factory, tool_prompt="system")
    prompts = [r["prompt"] for r in rows]
    if where == "main":
        return tool_calling_rollout(prompts, **kwargs)
    if where == "event loop":  # a notebook: the user's code runs inside a running event loop
        async def inside():
            return tool_calling_rollout(prompts, **kwargs)
        return asyncio.run(inside())
    out = {}
    thread = threading.Thread(target=lambda: out.setdefault("r", tool_calling_rollout(prompts, **kwargs)))
    thread.start()
    thread.join(60)
    return out["r"]


def _user_module(path: Path):
    return next(m for m in sys.modules.values() if getattr(m, "__file__", None) == str(path))


@pytest.mark.model
@pytest.mark.parametrize("where", ["main", "worker thread", "event loop"])
def test_a_trl_environment_plays_its_episode_with_its_methods_as_tools(envs, tiny_model, where):
    rows = [{"prompt": _messages("Count."), "target": 3}, {"prompt": _messages("Count."), "target": 5}]
    out = _rollout(envs, tiny_model, rows, f"{envs}:CounterEnv", where)
    made = out["environments"]
    assert len(made) == 4 and [e.target for e in made] == [3, 3, 5, 5]  # one per episode, reset with its row
    assert made[0].reset_with == rows[0] and made[0] is not made[1]
    assert [e.counter for e in made] == [3, 3, 5, 5]  # the model's calls reached each episode's own instance
    assert out["tool_calls/increment"] == [1, 1, 1, 1] and out["num_tool_errors"] == [0, 0, 0, 0]
    # reset's text is appended to the last user message (TRL's rule); that is the prompt logged
    assert [p[-1]["content"] for p in out["first_prompt"]] == ["Count. Reach 3."] * 2 + ["Count. Reach 5."] * 2
    assert "helper" not in json.dumps(out["tool_results"])
    [(name, reward)] = [(r.name, r.fn) for r in implied_rewards(tool_calling_rollout,
                                                                 {"environment_factory": f"{envs}:CounterEnv"})]
    assert name == "CounterEnv" and reward(environments=made) == [1.0] * 4
    made[0].counter = 2
    assert reward(environments=made) == [0.0, 1.0, 1.0, 1.0]


@pytest.mark.model
def test_several_environments_chosen_by_the_environment_column(envs, tiny_model):
    rows = [{"prompt": _messages("Count."), "target": 2, "environment": "counter"},
            {"prompt": _messages("Take notes."), "target": 0, "environment": "notes"}]
    factory = {"counter": f"{envs}:CounterEnv", "notes": f"{envs}:NotesEnv"}
    out = _rollout(envs, tiny_model, rows, factory)
    counter, _, notes, _ = out["environments"]
    assert type(counter).__name__ == "CounterEnv" and type(notes).__name__ == "NotesEnv"
    assert notes.reset_with == {"prompt": rows[1]["prompt"], "target": 0}  # `environment` is not passed to reset
    assert notes.notes == {"a": "b"} and counter.counter == 2
    assert out["tool_calls/write"] == [0, 0, 1, 1] and out["tool_calls/increment"] == [1, 1, 0, 0]
    rewards = {r.name: r.fn for r in implied_rewards(tool_calling_rollout, {"environment_factory": factory})}
    assert rewards["CounterEnv"](environments=out["environments"]) == [1.0, 1.0, None, None]
    assert asyncio.run(rewards["NotesEnv"](environments=out["environments"])) == [None, None, 1.0, 1.0]
    with pytest.raises(RolloutError, match="dataset row 1 has environment='chess'.*counter, notes"):
        _rollout(envs, tiny_model, [rows[0], {**rows[1], "environment": "chess"}], factory)


@pytest.mark.model
def test_a_reset_that_raises_is_named_with_its_file_and_line(tmp_path, tiny_model):
    (tmp_path / "broken.py").write_text(ENVS.replace('self.counter, self.target = 0, kwargs["target"]',
                                                     'self.counter, self.target = 0, kwargs["goal"]'))
    with pytest.raises(RolloutError, match=r"CounterEnv\.reset raised KeyError: 'goal'.*broken\.py:\d+"):
        _rollout(tmp_path / "broken.py", tiny_model, [{"prompt": _messages("Count."), "target": 3}],
                 f"{tmp_path / 'broken.py'}:CounterEnv")


def _config(root: Path, model: Path, envs: Path, **training):
    cfg = tiny_config(root, model, rewards_source=ENVS, reward="counter_value",
                      rollout={"function": "grpo_rollout.rollouts.tool_calling:tool_calling_rollout",
                               "kwargs": {"environment_factory": f"{envs}:CounterEnv", "max_turns": 2,
                                          "max_turn_tokens": 8}},
                      sampling={"max_completion_length": 24, "num_generations": 4},
                      training={"prompts_per_step": 2, "micro_batch_size": 8, **training})
    rows = [{"prompt": _messages(f"Count to {i}."), "target": i} for i in range(2, 12)]
    (root / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return cfg


@pytest.mark.model
def test_trains_with_the_environments_reward_logged_and_nothing_of_the_objects_saved(tmp_path, tiny_model, envs):
    cfg = _config(tmp_path, tiny_model, envs, max_steps=2, save_rollouts="every")
    result = train(cfg, base_dir=tmp_path, reporter=RichReporter(quiet=True))
    assert result.steps == 2
    for m in result.history:  # get_reward is a reward function of weight 1 named after the class, beside the user's
        assert "rewards/CounterEnv/mean" in m and m["rewards/counter_value/mean"] >= 0
        assert m["reward"] == pytest.approx(m["rewards/CounterEnv/mean"] + m["rewards/counter_value/mean"])
    saved = (tmp_path / "out" / "rollouts" / "step_2.jsonl").read_text()
    assert "environments" not in saved and "object at 0x" not in saved
    prompt = json.loads(saved.splitlines()[0])["prompt"][-1]["content"]  # as reset left it
    assert re.fullmatch(r"Count to (\d+)\. Reach \1\.", prompt), prompt


@pytest.mark.model
def test_streaming_rollouts_keep_each_groups_environments(tmp_path, tiny_model, envs, monkeypatch):
    from streaming_helpers import use_simulated_server, SimulatedServer, lognormal_latency

    use_simulated_server(monkeypatch.setattr,
                         lambda loaded: SimulatedServer(loaded.tokenizer, lognormal_latency(0.02, seed=3), 49152))
    cfg = _config(tmp_path, tiny_model, envs, max_steps=3, max_staleness=2)
    cfg.vllm.mode, cfg.vllm.url, cfg.vllm.max_logprob_mismatch = "attach", "http://simulated", None
    result = train(cfg, base_dir=tmp_path, reporter=RichReporter(quiet=True))
    assert result.steps == 3 and all("rewards/CounterEnv/mean" in m for m in result.history)
    played = [e for e in _user_module(envs).MADE if hasattr(e, "target")]  # (validate-config made one, unreset)
    assert len(played) >= 3 * 2 * 4 and len({e.target for e in played}) >= 6  # each group its rows' environments


def test_validate_config_names_what_is_wrong_with_a_factory(tmp_path, envs):
    (tmp_path / "model").mkdir()
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
        cfg = _config(tmp_path, tmp_path / "model", envs)
        cfg.rollout.kwargs["environment_factory"] = factory
        (tmp_path / "config.yaml").write_text(to_yaml(cfg))
        _, problems = check_config(tmp_path / "config.yaml", load_data=False)
        found = [p for p in problems if p.key.startswith("rollout.kwargs.environment_factory")]
        assert found and re.search(message, found[0].message), (factory, [str(p) for p in problems])
    # the environment's get_reward is a reward: no reward function is needed
    cfg = _config(tmp_path, tmp_path / "model", envs)
    cfg.rewards = []
    (tmp_path / "config.yaml").write_text(to_yaml(cfg))
    _, problems = check_config(tmp_path / "config.yaml", load_data=False)
    assert "rewards" not in [p.key for p in problems], [str(p) for p in problems]
    cfg.rollout.kwargs.pop("environment_factory")  # neither tools nor an environment
    (tmp_path / "config.yaml").write_text(to_yaml(cfg))
    _, problems = check_config(tmp_path / "config.yaml", load_data=False)
    assert {"rewards", "rollout.kwargs.tools"} <= {p.key for p in problems if p.is_error}


@pytest.mark.multiproc
@pytest.mark.model
def test_two_processes_each_play_their_own_environments(tmp_path, tiny_model, envs):
    """Under torchrun each process makes, plays and scores its own groups' environments; the objects never travel
    between processes (only their scores do), so an environment that cannot be pickled trains too."""
    import yaml

    from test_distributed import _torchrun

    (tmp_path / "trl_envs.py").write_text(ENVS.replace("        MADE.append(self)", "        MADE.append(self)\n"
                                                       "        self.lock = threading.Lock()  # not picklable")
                                          .replace("import asyncio", "import asyncio\nimport threading"))
    cfg = _config(tmp_path, tiny_model, envs, max_steps=2, prompts_per_step=2, micro_batch_size=4)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg.model_dump(), sort_keys=False))
    proc = _torchrun(["-m", "grpo_rollout", "train", str(tmp_path / "config.yaml")], cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    metrics = [json.loads(x) for x in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2]
    assert all("rewards/CounterEnv/mean" in m and "rewards/counter_value/mean" in m for m in metrics)
