"""Issue 39.8, without a model: every user call of an episode outside the model (an environment's reset, step and
get_reward; a verifiers taskset's episode is an agent's, tests/integration/test_verifiers_taskset.py) is bounded by rollout.env_timeout_s, and a call stuck
for good leaves no thread the interpreter's exit would wait for; the CLI's first Ctrl-C ends a command whatever
thread is stuck."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from grpo_rollout.rollouts.contract import EpisodeFailure, RolloutError
from grpo_rollout.rollouts.env_timeouts import EnvTimeout
from grpo_rollout.rollouts.environment import call_env
from grpo_rollout.integrations.trl.environment_factory import environment_rewards, start_environments

HERE = r".*test_env_timeouts\.py:\d+"


class SleepyEnv:
    def reset(self, **row):
        time.sleep(10 ** 6)

    def get_reward(self):
        time.sleep(10 ** 6)


class AsyncSleepyEnv:
    async def reset(self, **row):
        await asyncio.Event().wait()

    async def get_reward(self):
        await asyncio.sleep(10 ** 6)

    async def step(self, text):
        sys.exit(2)


def _threads_the_exit_waits_for(before=()):
    """The threads besides the main one that the interpreter's exit would join (non-daemon), less those alive in
    ``before`` (threads an earlier test of this process left, e.g. a library's executor): a stuck call must add none."""
    return [t.name for t in threading.enumerate()
            if not t.daemon and t is not threading.main_thread() and t not in before]


@pytest.mark.parametrize("env", [SleepyEnv(), AsyncSleepyEnv()])
def test_a_reset_that_never_returns_fails_the_episode_naming_class_method_line_and_key(env):
    before, start = set(threading.enumerate()), time.monotonic()
    with pytest.raises(EnvTimeout) as caught:
        asyncio.run(call_env(env, "reset", kwargs={"target": 3}, timeout_s=0.3))
    assert time.monotonic() - start < 3  # asyncio.run did not wait for the thread still sleeping
    name = type(env).__name__
    assert caught.match(rf"{name}\.reset did not return within rollout\.env_timeout_s = 0\.3 s \(at {HERE} in "
                        r"reset\).*raise rollout\.env_timeout_s")
    assert isinstance(caught.value, EpisodeFailure) and isinstance(caught.value, TimeoutError)  # rollout.on_error
    assert _threads_the_exit_waits_for(before) == []


def test_a_plain_method_sees_the_callers_context_variables():
    """As under asyncio.to_thread before: e.g. the weight versions a rollout records (generation/version_stamps.py)."""
    import contextvars

    seen = contextvars.ContextVar("seen", default="unset")

    class Env:
        def reset(self, **row):
            return seen.get()

    async def main():
        seen.set("the caller's")
        return await call_env(Env(), "reset", timeout_s=5)

    assert asyncio.run(main()) == "the caller's"


def test_sys_exit_in_an_async_step_is_still_the_environments_error():
    with pytest.raises(RolloutError, match=r"AsyncSleepyEnv\.step raised SystemExit: 2"):
        asyncio.run(call_env(AsyncSleepyEnv(), "step", ("hi",), timeout_s=5))


@pytest.mark.parametrize("where", ["main", "worker thread", "event loop"])
def test_environment_factory_resets_are_bounded_from_any_thread_or_loop(where):
    call = lambda: start_environments({None: SleepyEnv}, [{"prompt": "p"}], 1, 2, timeout_s=0.3)  # noqa: E731
    out = {}

    def record():
        try:
            call()
        except EnvTimeout as exc:
            out["error"] = exc

    async def inside_a_loop():  # a notebook: the rollout is called inside a running event loop
        record()

    before, start = set(threading.enumerate()), time.monotonic()
    if where == "worker thread":
        thread = threading.Thread(target=record)
        thread.start()
        thread.join(10)
    else:
        asyncio.run(inside_a_loop()) if where == "event loop" else record()
    assert time.monotonic() - start < 5
    assert "SleepyEnv.reset did not return within rollout.env_timeout_s = 0.3 s" in str(out["error"])
    assert _threads_the_exit_waits_for(before) == []


@pytest.mark.parametrize("cls", [SleepyEnv, AsyncSleepyEnv])
def test_get_reward_is_bounded_too(cls):
    [(name, reward)] = environment_rewards(cls, env_timeout_s=0.3)
    with pytest.raises(EnvTimeout, match=rf"{cls.__name__}\.get_reward did not return within rollout\.env_timeout_s "
                                         rf"= 0\.3 s \(at {HERE} in get_reward\)"):
        asyncio.run(reward(environments=[cls(), cls()]))


def test_the_trainers_timeout_reaches_get_reward_through_the_rollouts_hook():
    from grpo_rollout.rewards.calling import implied_rewards
    from grpo_rollout.rollouts.tool_calling import tool_calling_rollout

    [rf] = implied_rewards(tool_calling_rollout, {"environment_factory": SleepyEnv}, env_timeout_s=0.2)
    with pytest.raises(EnvTimeout, match=r"= 0\.2 s"):
        asyncio.run(rf.fn(environments=[SleepyEnv()]))


def test_the_key_written_under_rollout_kwargs_is_pointed_to_its_place():
    from grpo_rollout.rollouts.kwargs_checks import unknown_settings
    from grpo_rollout.rollouts.tool_calling import tool_calling_rollout

    [(key, _, fix)] = unknown_settings(tool_calling_rollout, {"env_timeout_s": 5})
    assert key == "rollout.kwargs.env_timeout_s" and "rollout.env_timeout_s" in fix


STUCK_IN_ASYNCIO_RUN = textwrap.dedent('''
    import asyncio, os, signal, sys, threading, time
    from grpo_rollout.cli.interrupts import exit_leaving_stuck_threads, interrupts_raise

    async def stuck():
        time.sleep(60)  # plain code stuck inside asyncio.run, as a rollout calling a hanging reset is

    threading.Thread(target=time.sleep, args=(60,)).start()  # not a daemon: the exit would wait for it
    threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()
    start = time.monotonic()
    try:
        with interrupts_raise():
            asyncio.run(stuck())
    except KeyboardInterrupt:
        print(f"interrupted after {time.monotonic() - start:.1f} s", flush=True)
    exit_leaving_stuck_threads(130, grace_s=0.5)
''')


def test_the_first_ctrl_c_ends_a_command_stuck_in_asyncio_run_and_the_process_exits():
    """asyncio.run's own SIGINT handler only cancels its task, which cannot end while plain code is stuck in it (the
    first Ctrl-C did nothing for 45 s); then a non-daemon thread kept the process alive after "Interrupted."."""
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", STUCK_IN_ASYNCIO_RUN], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 130, proc.stdout + proc.stderr
    assert "interrupted after 1." in proc.stdout and time.monotonic() - start < 15
    assert "Exception ignored" not in proc.stderr and "Traceback" not in proc.stderr
