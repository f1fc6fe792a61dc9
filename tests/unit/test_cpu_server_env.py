"""How a CPU server's model process is laid out: a server runs the model in vLLM's engine-core process (no worker
process of its own: one interpreter fewer to import torch and vLLM at each start); a server given a share of the
cores (several servers) is pinned to that share by orphan_guard, OpenMP on as many threads; a binding the user set
is left as it is."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from grpo_rollout.generation.server import launch
from grpo_rollout.generation.server.launch import ServerSettings, server_command
from grpo_rollout.generation.server.orphan_guard import PINNED_CORES_ENV
from grpo_rollout.generation.spawn import guarded

ALL = ",".join(map(str, sorted(os.sched_getaffinity(0))))


@pytest.fixture(autouse=True)
def cpu_build(monkeypatch):
    monkeypatch.setattr(launch, "on_cpu", lambda: True)
    for name in ("VLLM_ENABLE_V1_MULTIPROCESSING", "VLLM_CPU_OMP_THREADS_BIND", "VLLM_CPU_NUM_OF_RESERVED_CPU",
                 PINNED_CORES_ENV):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("cores", [None, ALL])
def test_a_server_on_every_core_runs_the_model_in_its_engine_process(cores):
    _, env = server_command(ServerSettings(model="m", cpu_cores=cores))
    assert env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    assert "VLLM_CPU_OMP_THREADS_BIND" not in env and PINNED_CORES_ENV not in env


def test_a_server_on_a_share_of_the_cores_is_pinned_to_it(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    _, env = server_command(ServerSettings(model="m", cpu_cores="2,3"))
    assert env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    assert env[PINNED_CORES_ENV] == "2,3" and env["OMP_NUM_THREADS"] == "2"
    assert "VLLM_CPU_OMP_THREADS_BIND" not in env
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")  # the user's own worker process: bound to the share
    _, env = server_command(ServerSettings(model="m", cpu_cores="2,3"))
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "2,3" and env["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "0"
    assert env[PINNED_CORES_ENV] == "2,3"


def test_the_guard_pins_the_program_it_becomes_and_does_not_pass_the_setting_on():
    """A real process started as spawn mode starts a server: its affinity is the share, the variable is gone."""
    one = min(os.sched_getaffinity(0))
    code = "import os; print(sorted(os.sched_getaffinity(0)), os.environ.get(%r))" % PINNED_CORES_ENV
    out = subprocess.run(guarded([sys.executable, "-c", code]), env=dict(os.environ, **{PINNED_CORES_ENV: str(one)}),
                         capture_output=True, text=True, check=True).stdout
    assert out.split() == [f"[{one}]", "None"]
    out = subprocess.run(guarded([sys.executable, "-c", code]), capture_output=True, text=True, check=True).stdout
    assert out.strip() == f"{sorted(os.sched_getaffinity(0))} None"  # not asked: every core, as the parent


def test_the_users_own_binding_and_process_setting_are_kept(monkeypatch):
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0")
    _, env = server_command(ServerSettings(model="m", cpu_cores=ALL))
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "0" and "VLLM_ENABLE_V1_MULTIPROCESSING" not in env
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND")
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")
    _, env = server_command(ServerSettings(model="m"))
    assert env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "1"


def test_a_cuda_build_is_left_alone(monkeypatch):
    monkeypatch.setattr(launch, "on_cpu", lambda: False)
    _, env = server_command(ServerSettings(model="m"))
    assert "VLLM_ENABLE_V1_MULTIPROCESSING" not in env
