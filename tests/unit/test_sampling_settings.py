"""One sampling-settings type from the config to the request (generation/sampling_settings.py): the trainer's step
settings, the rollout contract's names, a turn's request, the server's /generate/ body, each client's keywords."""

from __future__ import annotations

import inspect
from dataclasses import fields

from grpo_rollout.config.schema import SamplingConfig
from grpo_rollout.generation.base import GenerationClient
from grpo_rollout.generation.sampling_settings import SamplingSettings
from grpo_rollout.generation.server.generate_route import GenerateRequest
from grpo_rollout.generation.transformers_client import TransformersClient
from grpo_rollout.generation.vllm_client import VllmClient
from grpo_rollout.rollouts.contract import SAMPLING_ARGS
from grpo_rollout.rollouts.episodes import Sampling

NAMES = [f.name for f in fields(SamplingSettings)]


def test_a_steps_settings_are_the_configs_with_the_seed_advanced_by_the_step():
    config = SamplingConfig(num_generations=4, temperature=0.7, top_k=20, max_completion_length=64, seed=10)
    settings = SamplingSettings.from_config(config, step=3)
    assert (settings.n, settings.temperature, settings.top_k, settings.max_tokens, settings.seed) == \
        (4, 0.7, 20, 64, 13)
    assert SamplingSettings.from_config(SamplingConfig(), step=3).seed is None
    defaults = SamplingSettings()
    assert [getattr(defaults, name) for name in NAMES if name not in ("n", "max_tokens", "stop")] == \
        [getattr(SamplingConfig(), name) for name in NAMES if name not in ("n", "max_tokens", "stop")]


def test_a_rollout_receives_them_under_the_contracts_names_and_they_read_back():
    settings = SamplingSettings(n=3, temperature=0.5, max_tokens=9, seed=2)
    kwargs = settings.rollout_kwargs()
    assert list(kwargs) == list(SAMPLING_ARGS) and kwargs["max_completion_length"] == 9
    assert SamplingSettings.from_rollout_kwargs(kwargs) == settings
    assert SamplingSettings.from_rollout_kwargs({"n": 2}, stop=["</a>"]) == SamplingSettings(n=2, stop=("</a>",))


def test_a_request_is_the_generate_bodys_fields_and_every_clients_keywords():
    body = {"prompts": [[1, 2, 3]], **SamplingSettings(n=2, seed=4, stop=("x",)).request_kwargs(max_tokens=5)}
    request = GenerateRequest.model_validate(body)  # unknown keys would be refused (extra="forbid")
    assert set(GenerateRequest.model_fields) == {"prompts", *NAMES}
    assert (request.n, request.max_tokens, request.seed, request.stop) == (2, 5, 4, ["x"])
    for client in (GenerationClient, TransformersClient, VllmClient):
        params = inspect.signature(client.generate).parameters
        assert set(NAMES) <= set(params), client.__name__
        assert {name: params[name].default for name in NAMES} == \
            {name: getattr(SamplingSettings(), name) for name in NAMES}, client.__name__


def test_an_episodes_turns_send_the_settings_without_their_cap_and_seed_each_turn_apart():
    sampling = Sampling(temperature=0.9, seed=5, max_turn_tokens=8)
    assert set(sampling.request_kwargs(max_tokens=3)) == set(NAMES) and sampling.request_kwargs()["n"] == 1
    seeds = {sampling.request_seed(sample, turn, part) for sample in range(4) for turn in range(3) for part in range(2)}
    assert len(seeds) == 4 * 3 * 2 and Sampling().request_seed(0, 0, 0) is None
