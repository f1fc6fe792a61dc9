"""MCP servers as tools on the tool-calling rollout (issue 31.4): a small MCP server the tests start (written with the
``mcp`` package's own server class), over stdio and over streamable HTTP; its tools listed once with their schemas,
called with the model's arguments from any thread or event loop; errors, timeouts and bad arguments answered to the
model; a server that does not start named; training with the servers started and stopped with the run."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from helpers import run_tool_calls_sync, train_example_briefly
from transformers import AutoTokenizer

from grpo_rollout.config import to_yaml
from grpo_rollout.preflight import check_config
from grpo_rollout.integrations.mcp import mcp_tools as mcp
from grpo_rollout.integrations.mcp.mcp_source import mcp_problems
from grpo_rollout.rollouts.contract import RolloutError
from grpo_rollout.rollouts.tool_calling import tool_calling_rollout
from grpo_rollout.rollouts.tool_parsing import parse_tool_calls
from scripted_client import ScriptedClient
from tiny_model import tiny_config

SERVER = '''
import sys
import time

from mcp.server.mcpserver import MCPServer

server = MCPServer("calc")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def fail(x: str) -> str:
    """Always fails."""
    raise ValueError("nope " + x)


@server.tool()
def slow(seconds: float) -> str:
    """Sleep a while."""
    time.sleep(seconds)
    return "awake"


if __name__ == "__main__":
    print("calc server starting", file=sys.stderr)
    if len(sys.argv) > 1:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
    else:
        server.run("stdio")
'''


@pytest.fixture
def stdio_server(tmp_path):
    (tmp_path / "calc_server.py").write_text(SERVER)
    yield [{"command": sys.executable, "args": [str(tmp_path / "calc_server.py")]}]
    mcp.close_mcp_servers()


def _calls(tools, text, timeout_s=10.0):
    return [(r.content, r.error) for r in run_tool_calls_sync(parse_tool_calls(text), tools, timeout_s=timeout_s)]


ADD = '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>'


@pytest.mark.parametrize("where", ["main", "worker thread", "event loop"])
def test_a_stdio_servers_tools_are_listed_once_and_called(stdio_server, where):
    def listed():
        return mcp.mcp_tools(stdio_server)

    if where == "worker thread":
        out = {}
        thread = threading.Thread(target=lambda: out.setdefault("tools", listed()))
        thread.start()
        thread.join(60)
        tools = out["tools"]
    elif where == "event loop":  # a notebook's running loop
        async def inside():
            return listed()
        tools = asyncio.run(inside())
    else:
        tools = listed()
    assert sorted(tools) == ["add", "fail", "slow"]
    schema = tools["add"].__tool_schema__["function"]
    assert schema["description"] == "Add two integers." and schema["parameters"]["required"] == ["a", "b"]
    assert mcp.mcp_tools(stdio_server)["add"] is tools["add"]  # listed once: the same connection is reused
    assert _calls(tools, ADD) == [("5", None)]
    [(content, error)] = _calls(tools, '<tool_call>{"name": "fail", "arguments": {"x": "y"}}</tool_call>')
    assert error == "exception" and content.startswith("Error: fail raised MCPToolError: Error executing tool fail")
    [(content, error)] = _calls(tools, '<tool_call>{"name": "add", "arguments": {"a": "two", "b": 3}}</tool_call>')
    assert error == "bad_arguments" and "argument 'a' must be integer" in content  # the server's schema, checked here
    started = time.monotonic()
    [(content, error)] = _calls(tools, '<tool_call>{"name": "slow", "arguments": {"seconds": 30}}</tool_call>', 0.5)
    assert error == "timeout" and time.monotonic() - started < 10
    assert _calls(tools, ADD) == [("5", None)]  # the connection still answers after a call was abandoned


def adding(text: str) -> tuple:
    """Like a model that learnt to call ``add``, then says "Done." after the tool's answer."""
    answered = "<|im_start|>tool" in text or "5<|im_end|>" in text
    return ("Done.", True) if answered else (ADD, False)


@pytest.mark.model
def test_the_rollout_shows_the_servers_tools_and_plays_their_answers(stdio_server, tiny_model):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    out = tool_calling_rollout(["Add 2 and 3."], client=ScriptedClient(tokenizer, adding), tokenizer=tokenizer, n=2,
                               max_completion_length=96, mcp_servers=stdio_server, tool_prompt="system")
    assert out["tool_calls/add"] == [1, 1] and out["num_tool_errors"] == [0, 0]
    assert [r[0]["content"] for r in out["tool_results"]] == ["5", "5"]
    prompt = tokenizer.decode(out["prompt_ids"][0])
    assert "- add(a: integer, b: integer): Add two integers." in prompt  # the server's schema, shown to the model


def test_a_server_that_does_not_start_is_named_with_its_output(tmp_path):
    (tmp_path / "broken.py").write_text("import sys\nprint('missing API key', file=sys.stderr)\nsys.exit(3)\n")
    specs = [{"command": sys.executable, "args": [str(tmp_path / "broken.py")]}]
    with pytest.raises(RolloutError, match=r"the MCP server `.*broken\.py` failed to start.*it wrote: missing API "
                                           r"key \(all its output: .*grpo-rollout-mcp-.*\.log\)"):
        mcp.mcp_tools(specs)
    with pytest.raises(RolloutError, match=r"mcp_servers\[0\] needs either `command`"):
        mcp.mcp_tools([{"command": "python", "url": "http://x"}])
    with pytest.raises(RolloutError, match=r"mcp_servers\[0\] has no setting `arg`"):
        mcp.mcp_tools([{"command": "python", "arg": ["x"]}])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_streamable_http_server_by_url(tmp_path):
    (tmp_path / "calc_server.py").write_text(SERVER)
    port = _free_port()
    proc = subprocess.Popen([sys.executable, str(tmp_path / "calc_server.py"), str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                httpx.get(url, timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.2)
        tools = mcp.mcp_tools([{"url": url}])
        assert _calls(tools, ADD) == [("5", None)]
    finally:
        mcp.close_mcp_servers()
        proc.terminate()
        proc.wait(10)


def _config(root: Path, model: Path, servers, **training):
    cfg = tiny_config(root, model, rollout={"function": "grpo_rollout.rollouts.tool_calling:tool_calling_rollout",
                                            "kwargs": {"mcp_servers": servers, "max_turns": 2,
                                                       "max_turn_tokens": 8}},
                      sampling={"max_completion_length": 24, "num_generations": 4},
                      training={"prompts_per_step": 2, "micro_batch_size": 8, **training})
    return cfg


@pytest.mark.model
def test_the_example_trains_with_its_server_started_and_stopped_with_the_run(tmp_path, tiny_model, monkeypatch):
    """configs/mcp_multiply.yaml, two steps on the tiny model: the run starts examples/mcp_multiply/server.py,
    calls its tool and stops it at the end."""
    result = train_example_briefly("mcp_multiply", tiny_model, tmp_path / "run", monkeypatch,
                                   max_completion_length=32)
    assert result.steps == 2
    for m in result.history:
        assert "extras/tool_calls/multiply" in m and "rewards/correct_answer/mean" in m
    assert mcp._HOSTS == {}  # the server was stopped with the run


def test_validate_config_names_a_server_that_does_not_start(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    cfg = _config(tmp_path, tmp_path / "model", [{"command": sys.executable, "args": [str(tmp_path / "nope.py")]}])
    (tmp_path / "config.yaml").write_text(to_yaml(cfg))
    _, problems = check_config(tmp_path / "config.yaml", load_data=False)
    [p] = [p for p in problems if p.key == "rollout.kwargs.mcp_servers[0]"]  # the entry that failed
    assert "nope.py` failed to start" in p.message and "speak MCP over stdin/stdout" in p.fix


def test_validate_config_says_how_to_install_a_missing_package(monkeypatch):
    from grpo_rollout.integrations.openenv import openenv as oe

    monkeypatch.setitem(sys.modules, "mcp", None)  # as if not installed: importing it raises ImportError
    monkeypatch.setitem(sys.modules, "openenv", None)
    monkeypatch.setitem(sys.modules, "openenv.core", None)
    [(key, message, fix)] = mcp_problems([{"url": "http://127.0.0.1:9/mcp"}])
    assert key == "rollout.kwargs.mcp_servers" and "mcp is not installed" in message and "pip install mcp" in fix
    [(key, message, fix)] = [p for p in oe.validate_kwargs({"url": "http://x", "action": "a:b"})
                             if p[0] == "rollout.function"]
    assert "openenv-core is not installed" in message and "pip install openenv-core" in fix


def _alive(pid: int) -> bool:
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/status").exists() and "zombie" not in Path(f"/proc/{pid}/status").read_text()


def test_a_server_that_hangs_at_start_is_named_and_stopped(tmp_path):
    """Found by a trial user: the server was left running after validate-config gave up, named by nothing."""
    from helpers import wait_until

    (tmp_path / "hangs.py").write_text("import os, time, pathlib\npathlib.Path(__file__).with_suffix('.pid')"
                                       ".write_text(str(os.getpid()))\ntime.sleep(600)\n")
    with pytest.raises(RolloutError, match=r"the MCP server `python .*hangs\.py` did not start or list its tools "
                                           r"within 2 s \(its startup_timeout_s\)"):
        mcp.mcp_tools([{"command": "python", "args": [str(tmp_path / "hangs.py")], "startup_timeout_s": 2}])
    pid = int((tmp_path / "hangs.pid").read_text())
    assert wait_until(lambda: not _alive(pid), 10), "the hanging server was left running"


@pytest.mark.model
def test_a_server_that_dies_mid_run_stops_the_run_naming_it(tmp_path, tiny_model):
    (tmp_path / "dies.py").write_text(SERVER.replace('''def fail(x: str) -> str:
    """Always fails."""
    raise ValueError("nope " + x)''', '''def fail(x: str) -> str:
    """Ends the server."""
    import os
    os._exit(1)'''))
    specs = [{"command": sys.executable, "args": [str(tmp_path / "dies.py")]}]
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    dying = '<tool_call>{"name": "fail", "arguments": {"x": "y"}}</tool_call>'
    try:
        with pytest.raises(mcp.MCPServerGone, match=r"the MCP server `.*dies\.py` stopped during the run \(calling "
                                                     r"fail\)"):
            tool_calling_rollout(["Stop it."], client=ScriptedClient(tokenizer, lambda text: (dying, False)),
                                 tokenizer=tokenizer, n=1, max_completion_length=96, mcp_servers=specs)
        # an EpisodeFailure (rollout.on_error retry plays the group again): the next call starts the server again
        assert _calls(mcp.mcp_tools(specs), ADD) == [("5", None)]
    finally:
        mcp.close_mcp_servers()


def test_entries_are_checked_and_relative_paths_found_in_the_configs_folder(tmp_path, monkeypatch):
    problems = mcp_problems([{"command": "python", "args": ["s.py"], "env": {"N": 5}},
                                        {"url": "127.0.0.1:8000/mcp"}])
    assert [p[0] for p in problems] == ["rollout.kwargs.mcp_servers[0]", "rollout.kwargs.mcp_servers[1]"]
    assert "`env` must map names to strings, got N: 5 (quote the value" in problems[0][1]
    assert "`url` must start with http:// or https://" in problems[1][1]
    (tmp_path / "calc_server.py").write_text(SERVER)
    monkeypatch.chdir("/")  # the server file is not in the current folder, but in the config's
    try:
        assert mcp_problems([{"command": "python", "args": ["calc_server.py"]}], base_dir=tmp_path) == []
    finally:
        mcp.close_mcp_servers()
