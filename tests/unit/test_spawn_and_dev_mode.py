"""Issue 18, item 10: spawn without preexec_fn (the server dies with its parent), dev mode refused beyond loopback."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from grpo_rollout.config import Config
from helpers import wait_until


# --- item 10: spawn without preexec_fn; dev mode beyond loopback ----------------------------------------------------

CHILD = "import time; time.sleep(120)"
PARENT = f'''
import subprocess, sys
from grpo_rollout.generation.spawn import guarded
child = subprocess.Popen(guarded([sys.executable, "-c", {CHILD!r}]), start_new_session=True)
print(child.pid, flush=True)
sys.stdin.readline()  # the test ends the parent by closing stdin; the child must follow
'''


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_the_guarded_server_dies_with_its_parent():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                              text=True)
    child = int(parent.stdout.readline())
    assert os.getpgid(child) == child  # its own session/group, so stopping the group stops vLLM's engine too
    parent.stdin.close()
    parent.wait(timeout=30)
    if not wait_until(lambda: not _alive(child), timeout_s=30):
        os.kill(child, 9)
        pytest.fail("the child outlived its parent")


def test_spawn_uses_no_preexec_fn(monkeypatch, tmp_path):
    from grpo_rollout.generation import spawn
    from grpo_rollout.generation.server.launch import ServerSettings

    seen = {}

    def fake_popen(argv, **kwargs):
        seen.update(kwargs, argv=argv)
        raise RuntimeError("stop here")

    monkeypatch.setattr(spawn.subprocess, "Popen", fake_popen)
    with pytest.raises(RuntimeError, match="stop here"):
        spawn.ManagedServer(ServerSettings(model=str(tmp_path), port=1), tmp_path / "log").launch()
    assert "preexec_fn" not in seen and seen["start_new_session"] is True
    assert seen["argv"][1].endswith("orphan_guard.py") and seen["argv"][2] == str(os.getpid())


@pytest.mark.parametrize("host, api_key, severity", [
    ("0.0.0.0", None, "error"), ("10.1.2.3", None, "error"), ("0.0.0.0", "k", None),  # the key guards dev routes
    ("127.0.0.1", None, None), ("localhost", None, None),
])
def test_nccl_dev_mode_beyond_loopback(host, api_key, severity):
    from grpo_rollout.generation.server.exposure import check_server_exposure

    cfg = Config()
    cfg.vllm.weight_transfer, cfg.vllm.host, cfg.vllm.api_key = "nccl", host, api_key
    problems = []
    check_server_exposure(cfg, problems)
    assert [p.severity for p in problems] == ([severity] if severity else [])
    if severity == "error":
        assert problems[0].key == "vllm.api_key" and host in problems[0].message
        assert "vllm.host: 127.0.0.1" in problems[0].fix and "vllm.api_key" in problems[0].fix
    cfg.vllm.weight_transfer = "auto"  # no dev mode: nothing to say
    problems = []
    check_server_exposure(cfg, problems)
    assert problems == []


def test_serve_and_spawn_refuse_dev_mode_beyond_loopback_without_a_key(monkeypatch, tmp_path):
    import io

    from rich.console import Console

    from grpo_rollout.cli.serve_cmd import run_serve
    from grpo_rollout.generation.server.launch import ServerSettings
    from grpo_rollout.generation.spawn import ManagedServer, ServerStartError

    (tmp_path / "config.json").write_text("{}")  # tmp_path is the model folder validate-config sees
    (tmp_path / "c.yaml").write_text(f"model: {{name_or_path: {tmp_path}}}\nvllm: {{weight_transfer: nccl}}\n")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # nccl's own CUDA check passes
    monkeypatch.setattr(os, "execvpe", lambda *a: pytest.fail("the server was started"))
    buffer = io.StringIO()
    code = run_serve(Console(file=buffer, width=300), tmp_path / "c.yaml", model=str(tmp_path), host="0.0.0.0",
                     port=8011, max_model_len=None, api_key=None, extra=[])
    text = buffer.getvalue()  # the config's host is loopback; the --host flag is what exposes it
    assert code == 1 and "Not starting" in text and "host 0.0.0.0" in text and "--api-key" in text, text
    settings = ServerSettings(model=str(tmp_path), host="0.0.0.0", port=1, weight_transfer="nccl")
    with pytest.raises(ServerStartError, match="dev mode.*host 0.0.0.0"):
        ManagedServer(settings, tmp_path / "log").launch()
