"""TRL's ``environment_factory`` on the tool-calling rollout (issue 31.1): TRL-shaped environments (written here in
TRL's shape, not copied) play their episodes with their methods as tools, score them with ``get_reward``, reach
reward functions as ``environments``; several environments chosen by a dataset column; and training runs, also streaming and with the user's code called from a worker thread and inside a running event loop.
"""

from __future__ import annotations

import asyncio
import json
import re

import pytest
from environment_factory_helpers import ENVS, env_config, messages, play, user_module

from grpo_rollout.rewards.calling import implied_rewards
from grpo_rollout.rollouts.contract import RolloutError
from grpo_rollout.rollouts.tool_calling import tool_calling_rollout
from grpo_rollout.trainer import train
from grpo_rollout.trainer.reporting.progress import RichReporter


@pytest.fixture
def envs(tmp_path):
    (tmp_path / "trl_envs.py").write_text(ENVS)
    return tmp_path / "trl_envs.py"


@pytest.mark.model
@pytest.mark.parametrize("where", ["main", "worker thread", "event loop"])
def test_a_trl_environment_plays_its_episode_with_its_methods_as_tools(envs, tiny_model, where):
    rows = [{"prompt": messages("Count."), "target": 3}, {"prompt": messages("Count."), "target": 5}]
    out = play(envs, tiny_model, rows, f"{envs}:CounterEnv", where)
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
    # an async reward function (each get_reward on a daemon thread, within rollout.env_timeout_s)
    assert name == "CounterEnv" and asyncio.run(reward(environments=made)) == [1.0] * 4
    made[0].counter = 2
    assert asyncio.run(reward(environments=made)) == [0.0, 1.0, 1.0, 1.0]


@pytest.mark.model
def test_several_environments_chosen_by_the_environment_column(envs, tiny_model):
    rows = [{"prompt": messages("Count."), "target": 2, "environment": "counter"},
            {"prompt": messages("Take notes."), "target": 0, "environment": "notes"}]
    factory = {"counter": f"{envs}:CounterEnv", "notes": f"{envs}:NotesEnv"}
    out = play(envs, tiny_model, rows, factory)
    counter, _, notes, _ = out["environments"]
    assert type(counter).__name__ == "CounterEnv" and type(notes).__name__ == "NotesEnv"
    assert notes.reset_with == {"prompt": rows[1]["prompt"], "target": 0}  # `environment` is not passed to reset
    assert notes.notes == {"a": "b"} and counter.counter == 2
    assert out["tool_calls/write"] == [0, 0, 1, 1] and out["tool_calls/increment"] == [1, 1, 0, 0]
    rewards = {r.name: r.fn for r in implied_rewards(tool_calling_rollout, {"environment_factory": factory})}
    assert asyncio.run(rewards["CounterEnv"](environments=out["environments"])) == [1.0, 1.0, None, None]
    assert asyncio.run(rewards["NotesEnv"](environments=out["environments"])) == [None, None, 1.0, 1.0]
    with pytest.raises(RolloutError, match="the row of prompt .*Take notes.* has environment='chess'.*counter, notes"):
        play(envs, tiny_model, [rows[0], {**rows[1], "environment": "chess"}], factory)


@pytest.mark.model
def test_trains_with_the_environments_reward_logged_and_nothing_of_the_objects_saved(tmp_path, tiny_model, envs):
    cfg = env_config(tmp_path, tiny_model, envs, max_steps=2, save_rollouts="every")
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
    cfg = env_config(tmp_path, tiny_model, envs, max_steps=3, max_staleness=2)
    cfg.vllm.mode, cfg.vllm.url, cfg.vllm.max_logprob_mismatch = "attach", "http://simulated", None
    result = train(cfg, base_dir=tmp_path, reporter=RichReporter(quiet=True))
    assert result.steps == 3 and all("rewards/CounterEnv/mean" in m for m in result.history)
    played = [e for e in user_module(envs).MADE if hasattr(e, "target")]  # (validate-config made one, unreset)
    assert len(played) >= 3 * 2 * 4 and len({e.target for e in played}) >= 6  # each group its rows' environments


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
    cfg = env_config(tmp_path, tiny_model, envs, max_steps=2, prompts_per_step=2, micro_batch_size=4)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg.model_dump(), sort_keys=False))
    proc = _torchrun(["-m", "grpo_rollout", "train", str(tmp_path / "config.yaml")], cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    metrics = [json.loads(x) for x in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2]
    assert all("rewards/CounterEnv/mean" in m and "rewards/counter_value/mean" in m for m in metrics)


