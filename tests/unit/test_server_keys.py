"""Issue 51, item 14, the key's way: a spawned server gets a random key per run (no setting needed, and it never
appears on a command line other users see in ``ps``), every request the trainer makes carries it (its client, every
rank's, the NCCL weight sync's control calls), ``serve`` says which routes are open, and an attached server that
refuses weight updates is named before the run starts."""

from __future__ import annotations

import io
import os
from types import SimpleNamespace

import httpx
import pytest
import torch
from rich.console import Console

from grpo_rollout.config import Config
from grpo_rollout.generation import backend
from grpo_rollout.generation.server.access import KEY_ENV, TRUSTED_ENV
from grpo_rollout.generation.server.launch import ServerSettings, server_command


class _LM(torch.nn.Module):
    """What open_backend reads of the trainer's model: its vocabulary, context and device."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(32, 4)
        self.config = SimpleNamespace(max_position_embeddings=512)

    def get_input_embeddings(self):
        return self.emb


@pytest.fixture
def fake_spawn(monkeypatch):
    """ManagedServer replaced by one that records its settings and starts nothing."""
    from grpo_rollout.generation import spawn

    started = []

    class Server:
        def __init__(self, settings, log_path):
            self.settings, self.log_path, self.url = settings, log_path, f"http://127.0.0.1:{9000 + len(started)}"
            started.append(self)

        def launch(self):
            pass

        def wait_ready(self, timeout_s):
            return self.url

        def stop(self):
            pass

    monkeypatch.setattr(spawn, "ManagedServer", Server)
    return started


def _spawned(tmp_path, **vllm):
    config = Config()
    for key, value in vllm.items():
        setattr(config.vllm, key, value)
    return backend.open_backend(config, _LM(), None, "m", tmp_path, say=lambda text: None)


def test_a_spawned_server_gets_a_random_key_for_the_run(fake_spawn, tmp_path):
    first = _spawned(tmp_path)
    key = fake_spawn[0].settings.api_key
    assert isinstance(key, str) and len(key) >= 43 and first.api_key == key  # 256 bits, URL-safe
    assert first._headers == {"Authorization": f"Bearer {key}"} and first._http.headers["authorization"] == f"Bearer {key}"
    argv, env = server_command(fake_spawn[0].settings)
    assert env[KEY_ENV] == key and not any(key in arg for arg in argv)  # not on the command line `ps` shows
    assert _spawned(tmp_path).api_key not in (None, key)  # each run its own
    two = _spawned(tmp_path, num_servers=2)
    assert len({s.settings.api_key for s in fake_spawn[2:]}) == 1 and all(c.api_key == two.clients[0].api_key
                                                                         for c in two.clients)
    assert _spawned(tmp_path, api_key="mine").api_key == "mine" and fake_spawn[-1].settings.api_key == "mine"
    assert backend.server_key(two, Config()) == two.clients[0].api_key


def test_every_rank_gets_the_spawned_servers_key(monkeypatch, tmp_path):
    from grpo_rollout.trainer import setup

    config = Config()
    loaded = SimpleNamespace(policy=SimpleNamespace(lm=_LM()), tokenizer=None, model_path="m")
    sent = []
    main = SimpleNamespace(is_main=True, rank=0, broadcast=lambda obj: sent.append(obj) or obj)
    spawned = SimpleNamespace(url="http://127.0.0.1:9000", api_key="run-key")
    monkeypatch.setattr(setup, "open_backend", lambda *a, **k: spawned)
    setup.open_clients(config, loaded, tmp_path, main, say=print, status=None)
    assert sent == [(["http://127.0.0.1:9000"], "run-key")]
    other = SimpleNamespace(is_main=False, rank=1, broadcast=lambda obj: (["http://127.0.0.1:9000"], "run-key"))
    client, _ = setup.open_clients(config, loaded, tmp_path, other, say=print, status=None)
    assert client._headers == {"Authorization": "Bearer run-key"}


def test_the_launcher_passes_the_key_and_the_trusted_network_in_the_environment(monkeypatch):
    monkeypatch.setenv(KEY_ENV, "inherited")
    argv, env = server_command(ServerSettings(model="m"))
    assert KEY_ENV not in env and env[TRUSTED_ENV] == "0" and "--api-key" not in argv  # exactly what it was given
    argv, env = server_command(ServerSettings(model="m", api_key="k", trusted_network=True))
    assert env[KEY_ENV] == "k" and env[TRUSTED_ENV] == "1" and "k" not in argv


@pytest.mark.parametrize("api_key, env_key, trusted, said", [
    ("k", None, False, "every route but GET /health needs the API key"),
    (None, "from-env", False, "every route but GET /health needs the API key"),
    (None, None, False, "weight updates, sleep and vLLM's control routes answer 403"),
    (None, None, True, "every route answers anyone who reaches the port, weight updates"),
])
def test_serve_says_which_routes_are_open(monkeypatch, tmp_path, api_key, env_key, trusted, said):
    from grpo_rollout.cli.serve_cmd import run_serve

    if env_key:
        monkeypatch.setenv(KEY_ENV, env_key)
    else:
        monkeypatch.delenv(KEY_ENV, raising=False)
    launched = []
    monkeypatch.setattr(os, "execvpe", lambda prog, argv, env: launched.append((argv, env)))
    buffer = io.StringIO()
    assert run_serve(Console(file=buffer, width=300), None, model=str(tmp_path), host=None, port=8011,
                     max_model_len=None, api_key=api_key, extra=[], trusted_network=trusted) == 0
    text = " ".join(buffer.getvalue().split())
    assert f"Access: {'no API key' if not (api_key or env_key) else ''}" in text and said in text, text
    argv, env = launched[0]
    assert env.get(KEY_ENV) == (api_key or env_key) and env[TRUSTED_ENV] == ("1" if trusted else "0")
    assert "--api-key" not in argv


@pytest.mark.parametrize("weight_updates, refused", [("refused", True), ("key", False), ("anyone", False),
                                                     (None, False)])  # None: an older server that does not say
def test_attaching_to_a_server_that_refuses_weight_updates_says_how_to_start_it(weight_updates, refused):
    client = SimpleNamespace(url="http://127.0.0.1:8000")
    info = {} if weight_updates is None else {"weight_updates": weight_updates}
    if not refused:
        backend.check_weight_access(client, info)
        return
    with pytest.raises(backend.BackendError) as error:
        backend.check_weight_access(client, info)
    assert "http://127.0.0.1:8000" in str(error.value) and "--trusted-network" in str(error.value)
    assert "--api-key KEY" in str(error.value) and "vllm.api_key: KEY" in str(error.value)


def test_a_wrong_key_at_attach_names_vllm_api_key():
    from grpo_rollout.generation.vllm_client import ServerError

    def health():
        raise ServerError("GET /health/ to http://h:1: HTTP 401: missing or wrong API key")

    client = SimpleNamespace(url="http://h:1", health=health)
    with pytest.raises(backend.BackendError, match="set vllm.api_key to it"):
        backend.check_server(client, 32, None)


def test_the_nccl_weight_syncs_control_calls_carry_the_key():
    from grpo_rollout.generation.nccl_sync import _KeyedWeightSyncClient
    from grpo_rollout.generation.vllm_client import ServerError

    seen = []

    def answer(request):
        seen.append((request.url.path, request.headers.get("authorization")))
        return httpx.Response(403 if request.url.path == "/update_weights" else 200, json={})

    http = httpx.Client(transport=httpx.MockTransport(answer), headers={"Authorization": "Bearer k"})
    client = _KeyedWeightSyncClient("http://h:1/", http)
    client.init_weight_transfer_engine({"master_port": 1})
    client.start_weight_update()
    client.finish_weight_update("3")
    client.shutdown_weight_transfer_engine()
    with pytest.raises(ServerError, match="failed POST /update_weights: .*403"):
        client.update_weights({"names": ["w"]})
    assert [path for path, _ in seen] == ["/init_weight_transfer_engine", "/start_weight_update",
                                          "/finish_weight_update", "/shutdown_weight_transfer_engine",
                                          "/update_weights"]
    assert {auth for _, auth in seen} == {"Bearer k"}


def test_a_trusted_network_with_a_key_is_a_warning():
    from grpo_rollout.generation.server.exposure import check_server_exposure

    config = Config()
    config.vllm.trusted_network, config.vllm.api_key = True, "k"
    problems = []
    check_server_exposure(config, problems)
    assert [(p.key, p.severity) for p in problems] == [("vllm.trusted_network", "warning")]
    config.vllm.api_key, problems = None, []
    check_server_exposure(config, problems)
    assert problems == []
