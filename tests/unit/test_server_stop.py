"""Stopping a spawned server ends its whole process group within a bound (issue 28.10e), and gives vLLM's engine and
workers the grace to clean up after the API process has exited (issue 28.9: killed half-way they left their
``/dev/shm/psm_*`` segments behind). The "server" here is a small script with the same shape: a session leader (the
API process) and a child in its group (the engine)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from grpo_rollout.generation.server.launch import ServerSettings
from grpo_rollout.generation.spawn import ManagedServer, ServerStartError, group_members

DEAF = '''
import signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
signal.signal(signal.SIGINT, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c", "import signal, sys, time; "
                          "signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                          "open(sys.argv[1], 'w').write('up'); time.sleep(600)", sys.argv[1]])
time.sleep(600)
'''

CLEANS_UP = '''
import signal, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", """
import os, signal, sys, time
marker = sys.argv[1]
def shut_down(*_):
    time.sleep(1.0)  # the engine finishing its shutdown after the API process is gone
    os.remove(marker)  # e.g. unlinking its shared memory
    sys.exit(0)
signal.signal(signal.SIGTERM, shut_down)
open(marker + ".up", "w").write("up")
time.sleep(600)
""", sys.argv[1]])
time.sleep(600)  # SIGTERM ends this one at once
'''


def _server(tmp_path: Path, script: str) -> tuple:
    (tmp_path / "server.py").write_text(script)
    marker = tmp_path / "engine"
    server = ManagedServer(ServerSettings(model="unused", port=1), tmp_path / "vllm.log")
    server.process = subprocess.Popen([sys.executable, str(tmp_path / "server.py"), str(marker)],
                                      start_new_session=True)
    up = marker if script is DEAF else Path(str(marker) + ".up")
    deadline = time.monotonic() + 60
    while not up.exists() and time.monotonic() < deadline:  # the child is running
        time.sleep(0.05)
    assert up.exists()
    if script is CLEANS_UP:
        marker.write_text("segment")
    return server, server.process.pid, marker


def test_a_server_ignoring_sigterm_is_killed_with_its_whole_group(tmp_path):
    server, pgid, _ = _server(tmp_path, DEAF)
    assert len(group_members(pgid)) == 2
    server.stop(grace_s=1.0)
    assert server.killed
    assert group_members(pgid) == []  # the child that ignored SIGTERM too
    assert server.exit_code() is not None


def test_the_engine_may_finish_its_shutdown_after_the_api_process_exits(tmp_path):
    server, pgid, marker = _server(tmp_path, CLEANS_UP)
    server.stop(grace_s=20.0)
    assert not server.killed
    assert not marker.exists()  # it cleaned up; killed when the API process exited, it left this behind
    assert group_members(pgid) == []


def test_a_server_dying_at_start_names_the_first_error_of_its_log(tmp_path):
    """vLLM's root cause sat a hundred lines above the tail the error showed: here a worker that could not open a
    semaphore another run's clean-up had removed (issue 28.9)."""
    log = tmp_path / "vllm.log"
    lines = ["INFO starting", "Traceback (most recent call last):", "FileNotFoundError: [Errno 2] No such file or "
             "directory"] + [f"INFO shutting down {i}" for i in range(100)] + ["RuntimeError: Engine core "
                                                                              "initialization failed."]
    log.write_text("\n".join(lines) + "\n")
    server = ManagedServer(ServerSettings(model="unused", port=1), log)
    server.process = subprocess.Popen([sys.executable, "-c", "raise SystemExit(1)"], start_new_session=True)
    with pytest.raises(ServerStartError) as caught:
        server.wait_ready(timeout_s=60)
    message = str(caught.value)
    assert "exited with code 1 while starting" in message and "Engine core initialization failed" in message
    assert message.endswith("first error in the log: FileNotFoundError: [Errno 2] No such file or directory")
