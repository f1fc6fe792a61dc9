"""``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` with ``vllm.sleep_during_training`` (issue 28.10d): vLLM's
sleep mode allocates through its own CUDA memory pool, which cannot run with expandable segments (older GPU builds
stopped at start, the reason only in vllm.log). The server is started without the option, and validate-config,
spawn and serve say so. No GPU here: the CUDA build is faked (``launch.on_cpu``), as ``test_sleep_mode.py`` does."""

from __future__ import annotations

import io
import os
from types import SimpleNamespace

import pytest
from rich.console import Console

from grpo_rollout.config import config_from_dict
from grpo_rollout.generation.server import launch
from grpo_rollout.generation.server.launch import ServerSettings, server_command
from grpo_rollout.preflight.processes import check_sleep


@pytest.fixture
def cuda_build(monkeypatch):
    monkeypatch.setattr(launch, "on_cpu", lambda: False)


@pytest.mark.parametrize("name", ["PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"])
@pytest.mark.parametrize("value, left", [("expandable_segments:True", None),
                                         ("max_split_size_mb:128, expandable_segments:True", "max_split_size_mb:128"),
                                         ("expandable_segments:False", "expandable_segments:False")])
def test_the_sleeping_server_starts_without_expandable_segments(monkeypatch, cuda_build, name, value, left):
    monkeypatch.setenv(name, value)
    _, env = server_command(ServerSettings(model="m", sleep_mode=True))
    assert env.get(name) == left
    _, env = server_command(ServerSettings(model="m", sleep_mode=False))  # no sleep mode: left alone
    assert env[name] == value
    assert os.environ[name] == value  # the trainer keeps it


def _config(mode: str = "spawn"):
    cfg, problems = config_from_dict({"model": {"name_or_path": "m"}, "data": {"train": "d.jsonl"},
                                      "rewards": [{"function": "m:f"}],
                                      "vllm": {"mode": mode, "url": "http://127.0.0.1:1", "sleep_during_training": True}})
    return cfg


def test_validate_config_says_it_before_the_server_starts(monkeypatch, cuda_build):
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    problems = []
    check_sleep(_config(), problems)
    [warning] = [p for p in problems if p.key == "vllm.sleep_during_training"]
    assert warning.severity == "warning"
    assert "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True is set" in warning.message
    assert "started without expandable_segments:True" in warning.fix
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF")
    problems = []
    check_sleep(_config(), problems)
    assert problems == []


def test_spawn_and_serve_say_what_they_leave_out(monkeypatch, cuda_build, tmp_path):
    from grpo_rollout.cli.serve_cmd import run_serve
    from grpo_rollout.generation import backend, spawn

    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    envs = []

    class Recorded:  # a ManagedServer that records its environment instead of starting
        def __init__(self, settings, log_path):
            self.settings, self.log_path, self.url = settings, log_path, "http://127.0.0.1:1"

        def launch(self):
            envs.append(server_command(self.settings)[1])

        def wait_ready(self, timeout_s):
            return self.url

    monkeypatch.setattr(spawn, "ManagedServer", Recorded)
    cpu_param = SimpleNamespace(device=SimpleNamespace(type="cpu"))  # a CPU trainer: no GPU share to plan
    model = SimpleNamespace(parameters=lambda: iter([cpu_param]), config=SimpleNamespace(max_position_embeddings=512),
                            get_input_embeddings=lambda: SimpleNamespace(num_embeddings=100))
    cfg = _config()
    said = []
    client = backend.open_backend(cfg, model, None, "m", tmp_path, say=said.append)
    client.server = None
    assert "PYTORCH_CUDA_ALLOC_CONF" not in envs[0]
    assert any("started without expandable_segments:True" in line for line in said), said

    (tmp_path / "config.json").write_text("{}")  # tmp_path is the model folder validate-config sees
    (tmp_path / "c.yaml").write_text(f"model: {{name_or_path: {tmp_path}}}\nvllm: {{mode: attach, url: "
                                     "'http://127.0.0.1:1', sleep_during_training: true}\n")
    started = []
    monkeypatch.setattr(os, "execvpe", lambda *a: started.append(a[2]))
    out = io.StringIO()
    run_serve(Console(file=out, width=300), tmp_path / "c.yaml", model=str(tmp_path), host=None, port=None,
              max_model_len=None, api_key=None, extra=[])
    assert started and "PYTORCH_CUDA_ALLOC_CONF" not in started[0]
    assert "started without expandable_segments:True" in out.getvalue()
