"""Issue 51, item 14: ``serve --api-key`` left vLLM's routes outside /v1 open (``/invocations``, ``/scale_elastic_ep``,
``/tokenize``, ``/metrics``, ...), and without a key any local process could replace the weights and set the weight
version. The decision (server/access.py) on its own, as ASGI middleware on a small app, in front of every route of
vLLM's real app (built in-process, no engine), and the grpo-rollout routes over a scripted engine as a hostile local
process meets them."""

from __future__ import annotations

import httpx
import pytest
import torch
from safetensors.torch import save_file
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route, WebSocketRoute
from starlette.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from grpo_rollout.generation.server.access import AccessGuard, key_matches, open_without_key, refusal
from test_sleep_mode import GENERATE, scripted  # noqa: F401 - the fixture: the real routes over a scripted engine

KEY = "s3cret-key"


@pytest.mark.parametrize("header, ok", [
    (f"Bearer {KEY}", True), (f"bearer {KEY}", True), (f"BEARER {KEY}", True),
    (f"Bearer {KEY}x", False), (f"Bearer {KEY[:-1]}", False), (f"Bearer  {KEY}", False), (f"Bearer {KEY} ", False),
    (f"Basic {KEY}", False), (KEY, False), ("Bearer", False), ("Bearer ", False), ("", False), (None, False),
])
def test_the_key_is_the_bearer_token_exactly(header, ok):
    assert key_matches(header, [KEY]) is ok
    assert key_matches(header, ["other", KEY]) is ok  # any of several keys (vLLM takes a list)


@pytest.mark.parametrize("path, open_", [
    ("/generate/", True), ("/v1/chat/completions", True), ("/v1/models", True), ("/tokenize", True),
    ("/metrics", True), ("/health", True), ("/health/", True), ("/invocations", True),
    ("/update_weights/", False), ("/upload_weights/", False), ("/set_weight_version/", False), ("/sleep/", False),
    ("/wake_up/", False), ("/collective_rpc", False), ("/scale_elastic_ep", False), ("/pause", False),
    ("/update_weights", False), ("/v1/load_lora_adapter", False), ("/v1/unload_lora_adapter", False),
    ("/generate", False), ("/v1", False), ("/metricsx", False), ("//update_weights/", False), ("/", False),
])
def test_without_a_key_only_generation_and_reading_paths_are_open(path, open_):
    assert open_without_key(path) is open_
    assert (refusal(path, None, [], trusted=False) is None) is open_
    assert refusal(path, None, [], trusted=True) is None  # a trusted network: everything answers
    if not open_:
        status, reason = refusal(path, None, [], trusted=False)
        assert status == 403 and path in reason and "--api-key" in reason and "--trusted-network" in reason


@pytest.mark.parametrize("path", ["/health/", "/generate/", "/v1/models", "/metrics", "/update_weights/", "/"])
def test_with_a_key_every_path_but_health_needs_it(path):
    assert refusal(path, None, [KEY], trusted=False)[0] == 401
    assert refusal(path, "Bearer wrong", [KEY], trusted=True)[0] == 401  # a key wins over a trusted network
    assert refusal(path, f"Bearer {KEY}", [KEY], trusted=False) is None
    assert refusal("/health", None, [KEY], trusted=False) is None


def _small_app(**guard) -> TestClient:
    async def ws(socket):
        await socket.accept()
        await socket.send_text("hello")
        await socket.close()

    app = Starlette(routes=[Route("/update_weights/", lambda r: PlainTextResponse("loaded"), methods=["POST"]),
                            Route("/health", lambda r: PlainTextResponse("ok")),
                            Route("/v1/models", lambda r: PlainTextResponse("models")),
                            WebSocketRoute("/v1/realtime", ws), WebSocketRoute("/control", ws)])
    app.add_middleware(AccessGuard, **guard)
    return TestClient(app)


def test_the_guard_on_a_small_app():
    keyed = _small_app(keys=[KEY])
    assert keyed.post("/update_weights/").status_code == 401
    assert keyed.post("/update_weights/").json()["detail"].startswith("missing or wrong API key")
    assert keyed.options("/update_weights/").status_code == 401  # no method is let through
    assert keyed.get("/health").text == "ok"
    assert keyed.post("/update_weights/", headers={"Authorization": f"Bearer {KEY}"}).text == "loaded"
    with pytest.raises(WebSocketDisconnect) as closed, keyed.websocket_connect("/v1/realtime"):
        pass
    assert closed.value.code == 1008
    with keyed.websocket_connect("/v1/realtime", headers={"Authorization": f"Bearer {KEY}"}) as socket:
        assert socket.receive_text() == "hello"
    keyless = _small_app()
    answer = keyless.post("/update_weights/")
    assert answer.status_code == 403 and "--trusted-network" in answer.json()["detail"]
    assert keyless.get("/v1/models").text == "models"
    with pytest.raises(WebSocketDisconnect), keyless.websocket_connect("/control"):
        pass
    assert _small_app(trusted=True).post("/update_weights/").text == "loaded"


def test_the_guard_strips_the_root_path():
    app = Starlette(routes=[Route("/update_weights/", lambda r: PlainTextResponse("loaded"), methods=["POST"])])
    app.add_middleware(AccessGuard)
    client = TestClient(app, root_path="/proxy")
    assert client.post("/proxy/update_weights/").status_code == 403


# --- vLLM's own app: every route it serves ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def vllm_app():
    """A factory of vLLM's real API app (dev mode: its control routes too), with the grpo-rollout plugin."""
    from unittest import mock

    from vllm.entrypoints.launchers.app import build_app
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    from grpo_rollout.generation.server.access import KEY_ENV, TRUSTED_ENV

    def make(*flags: str, trusted: bool = False, env_key: str = ""):
        args = make_arg_parser(FlexibleArgumentParser()).parse_args(["--model", "m", *flags])
        env = {"VLLM_PLUGINS": "grpo_rollout", "VLLM_SERVER_DEV_MODE": "1", TRUSTED_ENV: "1" if trusted else "0",
               KEY_ENV: env_key}
        with mock.patch.dict("os.environ", env):
            app = build_app(args, ("generate",))
        return app, TestClient(app, raise_server_exceptions=False)

    return make


def _requests(app):
    """``(method, path)`` of every route of ``app``, as served (path parameters filled in)."""
    for route in app.routes:
        path = route.path.replace("{response_id}", "r1")
        for method in sorted(getattr(route, "methods", None) or {"GET"}):
            yield method, path


def _guard_refused(answer: httpx.Response) -> bool:
    """Refused by a guard (vLLM's 401, or the access guard's 401/403), not by the route itself."""
    return answer.status_code == 401 or (answer.status_code == 403 and "is refused" in answer.text)


def test_every_route_of_vllms_app_needs_the_key(vllm_app):
    app, client = vllm_app("--api-key", KEY)
    served = list(_requests(app))
    paths = {path for _, path in served}
    assert {"/invocations", "/scale_elastic_ep", "/tokenize", "/metrics", "/collective_rpc", "/pause",
            "/update_weights/", "/health/", "/health"} <= paths  # the app is the one the issue found open
    for method, path in served:
        kwargs = {} if method in ("GET", "HEAD") else {"json": {}}
        if path == "/health":
            assert client.request(method, path).status_code != 401
            continue
        assert client.request(method, path, **kwargs).status_code == 401, (method, path)
        assert client.request(method, path, headers={"Authorization": "Bearer nope"}, **kwargs).status_code == 401
    auth = {"Authorization": f"Bearer {KEY}"}
    for path in ["/tokenize", "/scale_elastic_ep", "/collective_rpc", "/update_weights/", "/generate/"]:
        assert not _guard_refused(client.post(path, json={}, headers=auth)), path
    assert client.get("/metrics", headers=auth).status_code == 200


def test_the_key_may_come_from_vllms_environment_variable(vllm_app):
    _, client = vllm_app(env_key=KEY)  # VLLM_API_KEY, as vLLM reads it
    assert client.post("/scale_elastic_ep", json={}).status_code == 401
    assert client.post("/tokenize", json={}).status_code == 401
    assert not _guard_refused(client.post("/tokenize", json={}, headers={"Authorization": f"Bearer {KEY}"}))


def test_without_a_key_vllms_control_routes_are_refused(vllm_app):
    app, client = vllm_app()
    refused = set()
    for method, path in _requests(app):
        answer = client.request(method, path, **({} if method in ("GET", "HEAD") else {"json": {}}))
        assert answer.status_code != 401, (method, path)
        if _guard_refused(answer):
            refused.add((method, path))
        assert _guard_refused(answer) is not open_without_key(path), (method, path, answer.text)
    assert {"/update_weights/", "/upload_weights/", "/set_weight_version/", "/sleep/", "/wake_up/", "/pause",
            "/resume", "/collective_rpc", "/scale_elastic_ep", "/reset_prefix_cache", "/sleep", "/wake_up",
            "/update_weights", "/init_weight_transfer_engine", "/update_weight_version",
            "/abort_requests"} <= {path for _, path in refused}
    _, client = vllm_app(trusted=True)
    for method, path in refused:
        assert not _guard_refused(client.request(method, path, json={})), (method, path)


# --- a hostile local process against the grpo-rollout routes ----------------------------------------------------------

def test_a_local_process_cannot_change_the_weights_of_a_keyless_server(scripted, tmp_path):  # noqa: F811
    server = scripted(trusted=False)
    save_file({"w": torch.zeros(2)}, str(tmp_path / "model.safetensors"))
    attempts = {"/update_weights/": {"json": {"path": str(tmp_path), "version": 999}},
                "/upload_weights/?version=999": {"content": b"x", "headers": {"x-sha256": "0" * 64}},
                "/set_weight_version/": {"json": {"version": 999}}, "/sleep/": {}, "/wake_up/": {}}
    for path, kwargs in attempts.items():
        answer = server.post(path, **kwargs)
        assert answer.status_code == 403 and "--trusted-network" in answer.json()["detail"], path
    health = httpx.get(server.url + "/health/", timeout=10).json()
    assert health["weight_version"] == 0 and health["weight_updates"] == "refused" and not health["asleep"]
    assert server.engine.events == []  # nothing was loaded, paused or put to sleep
    assert server.post("/generate/", json=GENERATE).status_code == 200  # generation stays open


def test_a_trusted_network_or_the_key_lets_the_weights_change(scripted):  # noqa: F811
    trusted = scripted(trusted=True)
    assert trusted.post("/set_weight_version/", json={"version": 999}).json() == {"weight_version": 999}
    assert httpx.get(trusted.url + "/health/", timeout=10).json()["weight_updates"] == "anyone"
    keyed = scripted(api_keys=[KEY], trusted=False)
    assert keyed.post("/set_weight_version/", json={"version": 7}).status_code == 401
    assert keyed.post("/generate/", json=GENERATE).status_code == 401
    auth = {"Authorization": f"Bearer {KEY}"}
    assert keyed.post("/set_weight_version/", json={"version": 7}, headers=auth).json() == {"weight_version": 7}
    assert httpx.get(keyed.url + "/health/", headers=auth, timeout=10).json()["weight_updates"] == "key"
