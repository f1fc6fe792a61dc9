"""Issue 51.9 and 51.16: ``async def`` user code that blocks its event loop (``time.sleep``, a synchronous
``requests.get``) froze the loop, so no time limit fired (``rollout.env_timeout_s: 20`` never did) and Ctrl-C could go
unheard. Now the thread waiting for the loop watches its heartbeat: past the limit it raises ``LoopBlocked`` (an
``EnvTimeout``: ``rollout.on_error`` decides) naming the function and the line the loop is stuck on, and the loop is
replaced. One test per path: an async agent (also from a worker thread and inside a running loop), a TRL ``async def
reset``, a built-in ``async def`` tool, a verifiers harness; Ctrl-C without a limit."""

from __future__ import annotations

import asyncio
import inspect
import re
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from grpo_rollout.rollouts.agent.agent_rollout import agent_rollout
from grpo_rollout.rollouts.contract import EpisodeFailure, RolloutError
from grpo_rollout.rollouts.env_timeouts import EnvTimeout, LoopBlocked

LIMIT_S = 0.5
#: the limit plus the watch's grace (0.5 s) and its look every 0.2 s, with room for a busy machine
WITHIN_S = LIMIT_S + 3.0


def line_of(fn, text: str) -> int:
    """The line number of ``fn``'s first source line containing ``text``."""
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


def where(fn, text: str) -> str:
    """The ``(at FILE:LINE in NAME)`` an error says for ``fn`` stuck on the line with ``text``, as a pattern."""
    return re.escape(f"(at {inspect.getsourcefile(fn)}:{line_of(fn, text)} in {fn.__name__})")


async def sleeps_in_async_agent(base_url, api_key, model, prompt, **row):
    await asyncio.sleep(0.05)  # the episode runs a while before it blocks
    time.sleep(60)  # blocking call: the loop is frozen


async def answers_at_once(base_url, api_key, model, prompt, **row):
    return "no call"


def _timed(call):
    start = time.monotonic()
    with pytest.raises(EnvTimeout) as caught:
        call()
    return caught.value, time.monotonic() - start


@pytest.mark.parametrize("caller", ["main", "worker thread", "event loop"])
def test_an_async_agent_that_blocks_its_loop_times_out_naming_it_and_the_line(caller):
    def play():
        return agent_rollout(["p"], client=None, tokenizer=None, n=2, agent=sleeps_in_async_agent,
                             env_timeout_s=LIMIT_S)

    def from_caller():
        if caller == "main":
            return play()
        if caller == "event loop":  # a notebook: the rollout is called inside a running event loop
            async def inside():
                return play()
            return asyncio.run(inside())
        out = {}
        thread = threading.Thread(target=lambda: out.setdefault("error", _timed(play)))
        thread.start()
        thread.join(30)
        raise out["error"][0]

    error, took = _timed(from_caller)
    assert isinstance(error, LoopBlocked) and isinstance(error, EpisodeFailure)  # rollout.on_error decides
    assert LIMIT_S <= took < WITHIN_S
    line = line_of(sleeps_in_async_agent, "async def")
    assert re.match(rf"the agent sleeps_in_async_agent \(defined at .*test_blocked_loops\.py:{line}\) did not return "
                    rf"within rollout\.env_timeout_s = 0\.5 s: its event loop was blocked "
                    + where(sleeps_in_async_agent, "time.sleep(60)"), str(error)), str(error)
    assert "async def` code must not make blocking calls" in str(error)
    # the next step runs on a fresh loop: the stuck one was abandoned, not waited for
    start = time.monotonic()
    with pytest.raises(RolloutError, match="made no chat call"):
        agent_rollout(["p"], client=None, tokenizer=None, n=1, agent=answers_at_once, env_timeout_s=LIMIT_S)
    assert time.monotonic() - start < 1.0


class BlocksInAsyncReset:
    async def reset(self, **row):
        time.sleep(60)


def test_a_trl_async_reset_that_blocks_its_loop_times_out_naming_it_and_the_line():
    from grpo_rollout.integrations.trl.environment_factory import start_environments

    error, took = _timed(lambda: start_environments({None: BlocksInAsyncReset}, [{"prompt": "p"}], 1, 2,
                                                    timeout_s=LIMIT_S))
    assert isinstance(error, LoopBlocked) and LIMIT_S <= took < WITHIN_S
    assert re.match(r"BlocksInAsyncReset\.reset did not return within rollout\.env_timeout_s = 0\.5 s: its event loop "
                    r"was blocked " + where(BlocksInAsyncReset.reset, "time.sleep"), str(error)), str(error)


async def lookup(key: str) -> str:
    """Look a key up.

    Args:
        key: what to look up
    """
    time.sleep(60)
    return key


def test_an_async_tool_that_blocks_its_loop_stops_the_episode_naming_it_and_the_line():
    """A slow tool is answered to the model (timed out); one that blocks the loop cannot be answered at all."""
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parents[1]))
    from scripted_client import ScriptedClient
    from transformers import AutoTokenizer

    from grpo_rollout.models.builtin import resolve_model_path
    from grpo_rollout.rollouts.tool_calling import tool_calling_rollout

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path("builtin:smollm2-135m-instruct"))
    client = ScriptedClient(tokenizer, lambda _: ('<tool_call>{"name": "lookup", "arguments": {"key": "a"}}'
                                                  '</tool_call>', True))
    error, took = _timed(lambda: tool_calling_rollout(["p"], client=client, tokenizer=tokenizer, n=2,
                                                      tools=[lookup], tool_timeout_s=LIMIT_S))
    assert isinstance(error, LoopBlocked) and LIMIT_S <= took < WITHIN_S
    assert re.match(rf"the tool lookup \(defined at .*:{line_of(lookup, 'async def')}\) did not return within "
                    r"rollout\.kwargs\.tool_timeout_s = 0\.5 s: its event loop was blocked "
                    + where(lookup, "time.sleep"), str(error)), str(error)


TASKSET = '''
import time

import verifiers.v1 as vf


class Data(vf.TaskData):
    pass


class Ask(vf.Task[Data]):
    @vf.reward(weight=1.0)
    async def scored(self, task, trace) -> float:
        return 1.0


class Asks(vf.Taskset[Ask, vf.TasksetConfig]):
    def load(self):
        yield Ask(Data(prompt="Hi?"), self.config.task)


class Blocks(vf.Harness[vf.HarnessConfig]):
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    async def launch(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data, **kw):
        time.sleep(60)


__all__ = ["Asks", "Blocks"]
'''


def test_a_verifiers_harness_that_blocks_its_loop_times_out_naming_the_line(tmp_path):
    pytest.importorskip("verifiers.v1")
    from grpo_rollout.data.verifiers_tasks import task_rows
    from grpo_rollout.integrations.verifiers.verifiers import verifiers_rollout

    (tmp_path / "blocking_taskset.py").write_text(TASKSET)
    rows = task_rows(str(tmp_path / "blocking_taskset.py"), {}, None)
    error, took = _timed(lambda: verifiers_rollout([r["prompt"] for r in rows], client=None, tokenizer=None, n=1,
                                                   rows=rows, env_timeout_s=LIMIT_S))
    assert isinstance(error, LoopBlocked) and LIMIT_S <= took < WITHIN_S
    line = TASKSET.splitlines().index("        time.sleep(60)") + 1
    assert re.search(rf"within rollout\.env_timeout_s = 0\.5 s: its event loop was blocked \(at "
                     rf".*blocking_taskset\.py:{line} in launch\)", str(error)), str(error)


CTRL_C = textwrap.dedent('''
    import asyncio, os, signal, threading, time
    from grpo_rollout.rollouts.agent.agent_rollout import agent_rollout

    async def stuck(base_url, api_key, model, prompt, **row):
        time.sleep(600)

    threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()
    start = time.monotonic()
    try:
        agent_rollout(["p"], client=None, tokenizer=None, n=1, agent=stuck, env_timeout_s=None)  # no limit at all
    except KeyboardInterrupt:
        print(f"interrupted after {time.monotonic() - start:.1f} s", flush=True)
''')


def test_ctrl_c_ends_a_wait_on_a_blocked_loop_and_the_process_exits():
    """No time limit (``env_timeout_s: null``): the first Ctrl-C still ends the wait, in a plain script (Python's own
    SIGINT handler), and the process exits without waiting for the loop's thread."""
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", CTRL_C], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"interrupted after (1|2|3)\.\d s", proc.stdout), proc.stdout + proc.stderr
    assert time.monotonic() - start < 30 and "Traceback" not in proc.stderr


POOL_STUCK_AT_EXIT = textwrap.dedent('''
    import sys, threading, time
    from concurrent.futures import ThreadPoolExecutor

    def hang_forever():
        time.sleep(10 ** 6)

    def user_call():  # on a daemon thread, as an abandoned user call is: its pool's workers are daemons too
        ThreadPoolExecutor(1).submit(hang_forever)
        ThreadPoolExecutor(1).submit(lambda: None)  # an idle worker: the exit ends it, nothing to say

    thread = threading.Thread(target=user_call, daemon=True)
    thread.start()
    thread.join()
    sys.argv = ["grpo-rollout", "validate-config", "no-such-config.yaml"]  # any command that fails
    from grpo_rollout.cli.main import main
    main()
''')


def test_a_failed_command_exits_at_once_naming_user_code_stuck_on_a_pool_thread():
    """Issue 51.15 without a model (tests/integration/test_stuck_user_threads.py has train's EnvTimeout and Ctrl-C):
    the interpreter's exit joins every thread pool worker, daemon or not, so one stuck in user code kept a failed
    command's process alive for good."""
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", POOL_STUCK_AT_EXIT], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    line = POOL_STUCK_AT_EXIT.splitlines().index("    time.sleep(10 ** 6)") + 1
    assert re.fullmatch(rf"Exiting without waiting for user code still running: hang_forever at <string>:{line} "
                        r"\(thread ThreadPoolExecutor-0_0, a thread pool's worker\)\n", proc.stderr), proc.stderr
    assert time.monotonic() - start < 30


@pytest.mark.parametrize("kind", [KeyboardInterrupt, SystemExit])
def test_an_interrupt_raised_in_async_user_code_reaches_the_caller(kind):
    """A reward function raising KeyboardInterrupt (what Ctrl-C does mid-step) ended the loop's thread before its
    waiter was told: `grpo-rollout train` hung instead of exiting 130 (test_resume_hint.py). It reaches the caller at
    once, on a fresh loop and on a shared one, and the shared loop is replaced for the next call."""
    from grpo_rollout.user_code.coroutines import SharedLoop, run_coroutine

    async def raising():
        raise kind()

    async def five():
        return 5

    start = time.monotonic()
    with pytest.raises(kind):
        run_coroutine(raising())
    loop = SharedLoop("test-interrupt")
    with pytest.raises(kind):
        loop.run(raising())
    assert time.monotonic() - start < 2.0  # no cancel grace for a loop that is gone
    assert loop.run(five()) == 5
    loop.close()
