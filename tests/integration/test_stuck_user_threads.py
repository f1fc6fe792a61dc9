"""Issue 51.15: user code that hangs on a thread pool's thread (an agent's own ``ThreadPoolExecutor``, an OpenEnv
environment behind the app the run serves, whose server runs ``reset``/``step`` on its pool) left the process alive
after ``EnvTimeout`` or Ctrl-C ("Interrupted." printed) until it was killed: the interpreter's exit joins every pool
worker. Now ``grpo-rollout`` ends within seconds after the error or the interrupt, its clean-up done, and names the
user function left running."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grpo_rollout.config import to_yaml
from helpers import wait_until
from tiny_model import tiny_config

pytestmark = pytest.mark.model

AGENT = '''
import time
from concurrent.futures import ThreadPoolExecutor


def hang_in_pool():
    time.sleep(10 ** 6)


def agent(base_url, api_key, model, prompt, **row):
    pool = ThreadPoolExecutor(1)
    return pool.submit(hang_in_pool).result()
'''

OPENENV = '''
import time
from pathlib import Path
from typing import Any, Optional

from openenv.core.env_server import Action, Environment, Observation, State, create_app


class Say(Action):
    text: str


class Heard(Observation):
    message: str = ""


class HangingEnvironment(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def reset(self, seed: Optional[int] = None, episode_id: Optional[str] = None, **kwargs: Any):
        Path(__file__).with_name("stuck").write_text("yes")
        time.sleep(10 ** 6)

    def step(self, action, timeout_s=None, **kwargs: Any):
        return Heard(message="ok", done=True)

    @property
    def state(self) -> State:
        return State(step_count=0)


app = create_app(HangingEnvironment, Say, Heard, max_concurrent_envs=64)


def to_action(text):
    return {"text": text}
'''


def _start(root: Path, tiny_model: Path, rollout: dict) -> subprocess.Popen:
    cfg = tiny_config(root, tiny_model, rollout=rollout, sampling={"num_generations": 2, "max_completion_length": 4},
                      training={"max_steps": 2, "prompts_per_step": 1, "micro_batch_size": 2})
    (root / "config.yaml").write_text(to_yaml(cfg))
    return subprocess.Popen([sys.executable, "-m", "grpo_rollout", "train", "config.yaml"], cwd=root,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _ended_within(proc: subprocess.Popen, seconds: float) -> str:
    try:
        out, _ = proc.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(f"still running {seconds} s later: {proc.communicate()[0]}")
    return out


def test_after_env_timeout_a_process_with_a_user_pool_thread_stuck_exits_naming_it(tmp_path, tiny_model):
    (tmp_path / "pool_agent.py").write_text(AGENT)
    proc = _start(tmp_path, tiny_model, {"function": "grpo_rollout.rollouts.agent:agent_rollout",
                                         "kwargs": {"agent": f"{tmp_path / 'pool_agent.py'}:agent"},
                                         "env_timeout_s": 1})
    out = _ended_within(proc, 120)  # the interpreter's exit used to join the stuck worker for good
    assert proc.returncode == 1, out
    flat = " ".join(out.replace("│", " ").split())
    assert "EnvTimeout" in flat and "the agent agent" in flat and "rollout.env_timeout_s = 1 s" in flat
    line = AGENT.splitlines().index("    time.sleep(10 ** 6)") + 1
    assert re.search(rf"Exiting without waiting for user code still running: hang_in_pool at .*pool_agent\.py:{line} "
                     r"\(thread ThreadPoolExecutor-\d+_\d+, a thread pool's worker\)", flat), out
    assert "Traceback" not in out


def test_after_ctrl_c_a_process_with_a_served_openenv_reset_stuck_exits_naming_it(tmp_path, tiny_model):
    pytest.importorskip("openenv.core")
    (tmp_path / "hanging_env.py").write_text(OPENENV)
    proc = _start(tmp_path, tiny_model, {"function": "grpo_rollout.integrations.openenv.openenv:openenv_rollout",
                                         "kwargs": {"server": f"{tmp_path / 'hanging_env.py'}:app",
                                                    "action": f"{tmp_path / 'hanging_env.py'}:to_action"}})
    assert wait_until(lambda: (tmp_path / "stuck").exists() or proc.poll() is not None, 120), "never reached reset"
    assert proc.poll() is None, proc.communicate()[0]
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    sent = time.monotonic()
    out = _ended_within(proc, 60)
    assert time.monotonic() - sent < 10, out  # measured: 3.3 s, 2 of them the exit's grace for stuck threads
    assert proc.returncode == 130 and "Interrupted." in out, out
    flat = " ".join(out.split())
    line = OPENENV.splitlines().index("        time.sleep(10 ** 6)") + 1
    assert re.search(rf"Exiting without waiting for user code still running: reset at .*hanging_env\.py:{line} "
                     r"\(thread ThreadPoolExecutor-\d+_\d+, a thread pool's worker\)", flat), out
    assert "Exception ignored" not in out and "Traceback" not in out
