"""How a CPU server's model process is laid out: a server on every core runs the model in vLLM's engine-core process
(no worker process of its own: one interpreter fewer to import torch and vLLM at each start); a server given a share
of the cores (several servers) keeps its worker, bound to that share; a binding the user set is left as it is."""

from __future__ import annotations

import os

import pytest

from grpo_rollout.generation.server import launch
from grpo_rollout.generation.server.launch import ServerSettings, server_command

ALL = ",".join(map(str, sorted(os.sched_getaffinity(0))))


@pytest.fixture(autouse=True)
def cpu_build(monkeypatch):
    monkeypatch.setattr(launch, "on_cpu", lambda: True)
    for name in ("VLLM_ENABLE_V1_MULTIPROCESSING", "VLLM_CPU_OMP_THREADS_BIND", "VLLM_CPU_NUM_OF_RESERVED_CPU"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("cores", [None, ALL])
def test_a_server_on_every_core_runs_the_model_in_its_engine_process(cores):
    _, env = server_command(ServerSettings(model="m", cpu_cores=cores))
    assert env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    assert "VLLM_CPU_OMP_THREADS_BIND" not in env


def test_a_server_on_a_share_of_the_cores_keeps_its_bound_worker(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    _, env = server_command(ServerSettings(model="m", cpu_cores="2,3"))
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "2,3" and env["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "0"
    assert "VLLM_ENABLE_V1_MULTIPROCESSING" not in env


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
