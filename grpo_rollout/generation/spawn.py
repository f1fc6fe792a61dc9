"""``vllm.mode: spawn``: run the grpo-rollout vLLM server as a managed child process on a free loopback port.

The child gets its own session and process group (``start_new_session``: stopping the group stops vLLM's engine
processes too) and is started through :mod:`.server.orphan_guard`, which on Linux has it told to exit if the trainer
dies without cleaning up (``PR_SET_PDEATHSIG``), so no server outlives its run. No Python code runs between ``fork``
and ``exec`` (no ``preexec_fn``): the trainer has other threads running (the console spinner), and code run there
could deadlock on a lock one of them held.
"""

from __future__ import annotations

import atexit
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, List, Optional

import httpx

from .server.launch import ServerSettings, server_command
from .shm import ShmWatch


class ServerStartError(RuntimeError):
    """The spawned server exited or did not become healthy in time; the message ends with its log's last lines."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def guarded(argv: List[str]) -> List[str]:
    """``argv`` run through :mod:`.server.orphan_guard`: the program exits (SIGTERM) when this process dies."""
    guard = Path(__file__).resolve().parent / "server" / "orphan_guard.py"
    return [sys.executable, str(guard), str(os.getpid()), *argv]


def _tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _first_error(path: Path) -> str:
    """The log's first ``SomethingError: ...`` line, said with the tail: vLLM's root cause of a failed start is often
    a hundred lines above it (e.g. a worker's ``FileNotFoundError`` under "Engine core initialization failed")."""
    try:
        for line in path.read_text(errors="replace").splitlines():
            name = line.split(":", 1)[0].strip()
            if ": " in line and name.isidentifier() and name.endswith(("Error", "Exception")):
                return f"\nfirst error in the log: {line.strip()}"
    except OSError:
        pass
    return ""


class ManagedServer:
    """A vLLM server child process.

    Args:
        settings: model, dtype, lengths... (``port`` 0 = pick a free one). log_path: where its output goes.
    """

    def __init__(self, settings: ServerSettings, log_path: Path):
        if not settings.port:
            settings.port = free_port(settings.host)
        self.settings, self.log_path = settings, Path(log_path)
        self.url = f"http://{settings.host}:{settings.port}"
        self.process: Optional[subprocess.Popen] = None
        self._exit_code: Optional[int] = None
        self._shm: Optional[ShmWatch] = None
        self.shm_removed: list = []  # /dev/shm entries the server left and stop() removed
        self.killed = False  # stop() had to SIGKILL it: it did not exit within the grace period

    def start(self, timeout_s: float = 600.0, on_wait: Optional[Callable[[float], None]] = None) -> str:
        """Start the server and wait until ``/health/`` answers; return its URL.

        Raises:
            ServerStartError: the process exited, or ``timeout_s`` seconds passed (the server is stopped then).
        """
        self.launch()
        return self.wait_ready(timeout_s, on_wait)

    def launch(self) -> None:
        """Start the server process (do not wait for it).

        Raises:
            ServerStartError: the settings would expose vLLM's dev-mode routes beyond this machine with no API key.
        """
        from .server.exposure import dev_mode_exposure

        s = self.settings
        exposed = dev_mode_exposure(s.weight_transfer, s.host, s.api_key)
        if exposed:
            raise ServerStartError(f"not starting the vLLM server: {exposed}; use host 127.0.0.1 or set vllm.api_key")
        argv, env = server_command(self.settings)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("w")
        self._shm = ShmWatch()  # what is in /dev/shm before the server: anything new it leaves is removed by stop()
        self.process = subprocess.Popen(guarded(argv), env=env, stdout=log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        atexit.register(self.stop)

    def wait_ready(self, timeout_s: float = 600.0, on_wait: Optional[Callable[[float], None]] = None) -> str:
        """Wait until the launched server's ``/health/`` answers; return its URL.

        Raises:
            ServerStartError: the process exited, or ``timeout_s`` seconds passed (the server is stopped then).
        """
        start = time.monotonic()
        while True:
            if self.process is None or self.process.poll() is not None:
                code = self.exit_code()
                self.process = None
                raise ServerStartError(f"the vLLM server exited with code {code} while starting; last lines of "
                                       f"{self.log_path}:\n{_tail(self.log_path)}{_first_error(self.log_path)}")
            try:
                headers = {"Authorization": f"Bearer {self.settings.api_key}"} if self.settings.api_key else {}
                if httpx.get(self.url + "/health/", headers=headers, timeout=2).status_code == 200:
                    return self.url
            except httpx.HTTPError:
                pass
            waited = time.monotonic() - start
            if waited > timeout_s:
                self.stop()
                raise ServerStartError(f"the vLLM server did not answer within {timeout_s:.0f} s (raise "
                                       f"vllm.startup_timeout_s?); last lines of {self.log_path}:\n{_tail(self.log_path)}")
            if on_wait is not None:
                on_wait(waited)
            time.sleep(1.0)

    def exit_code(self) -> Optional[int]:
        """The server process's exit code (negative: killed by that signal), or ``None`` while it runs."""
        if self.process is None:
            return self._exit_code
        code = self.process.poll()
        if code is not None:
            self._exit_code = code
        return code

    def log_tail(self, lines: int = 25) -> str:
        """The last ``lines`` lines of the server's log."""
        return _tail(self.log_path, lines)

    def stop(self, grace_s: float = 20.0) -> None:
        """Stop the server and every process of its group within ``grace_s`` + :data:`KILL_WAIT_S` seconds
        (:func:`stop_group`), then remove the ``/dev/shm`` entries it left that no live process uses (:mod:`.shm`).
        Idempotent."""
        self.exit_code()
        proc, self.process = self.process, None
        try:
            if proc is not None:
                self.killed = stop_group(proc, grace_s) or self.killed
                self._exit_code = proc.returncode
        finally:
            if self._shm is not None:
                self.shm_removed += self._shm.remove_leftovers()


#: Seconds :func:`stop_group` waits for SIGKILLed processes to be gone (they hold their shared memory until then).
KILL_WAIT_S = 10.0


def group_members(pgid: int) -> List[int]:
    """The live processes of process group ``pgid`` (zombies left out: they hold no memory and only wait to be
    reaped). Without ``/proc``: ``[pgid]`` while the group has a member, else ``[]``."""
    if not os.path.isdir("/proc/self"):
        try:
            os.killpg(pgid, 0)
            return [pgid]
        except ProcessLookupError:
            return []
    members = []
    for pid in (d for d in os.listdir("/proc") if d.isdigit()):
        try:
            with open(f"/proc/{pid}/stat") as f:
                state, _, group = f.read().rsplit(")", 1)[1].split()[:3]  # after "pid (comm)": state ppid pgrp
        except (OSError, ValueError, IndexError):
            continue
        if int(group) == pgid and state != "Z":
            members.append(int(pid))
    return members


def _wait_gone(pgid: int, seconds: float) -> bool:
    """Wait up to ``seconds`` for group ``pgid`` to have no live member; True when it has none."""
    deadline = time.monotonic() + seconds
    while group_members(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def stop_group(proc: subprocess.Popen, grace_s: float) -> bool:
    """Stop ``proc`` (a session leader) and its whole process group; True when SIGKILL was needed.

    SIGTERM to the group, then up to ``grace_s`` seconds for every member to exit by itself: vLLM's API process
    exits first and its engine and workers unlink their shared memory (``/dev/shm/psm_*``) as they shut down, so
    they are given the rest of the grace rather than killed the moment the API process is gone (killed half-way
    they left their segments behind). Whatever is left then (a server still starting ignored SIGTERM for over 10 s)
    is SIGKILLed, and the call waits up to :data:`KILL_WAIT_S` for it to be gone, so the shared memory it held can be
    removed after. At most ``grace_s`` + :data:`KILL_WAIT_S` seconds.
    """
    deadline = time.monotonic() + grace_s
    try:  # also when the API process has exited: its engine and workers may outlive it
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        proc.poll()
        return False
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
    if proc.poll() is not None and _wait_gone(proc.pid, max(0.0, deadline - time.monotonic())):
        return False
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
    _wait_gone(proc.pid, KILL_WAIT_S)
    return True
