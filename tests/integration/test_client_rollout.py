"""The generation-client example of docs/rollouts.md (examples/client_rollout/rollout.py): it is what the page shows,
both rollouts keep the contract, and the async one trains."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from grpo_rollout.generation.transformers_client import TransformersClient
from grpo_rollout.models.pretrained import load_model_and_tokenizer
from grpo_rollout.rollouts.rollout_call import call_rollout
from grpo_rollout.generation.sampling_settings import SamplingSettings
from grpo_rollout.rollouts.contract import RolloutContext
from grpo_rollout.trainer import train
from grpo_rollout.trainer.reporting.progress import RichReporter
from tiny_model import tiny_config

pytestmark = pytest.mark.slow  # and `model` on each test using the tiny model (tests/conftest.py)

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "client_rollout" / "rollout.py"


def _example():
    spec = importlib.util.spec_from_file_location("client_rollout_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_shows_the_example_file():
    text = EXAMPLE.read_text()
    assert text[text.index("import asyncio"):] in (REPO / "docs" / "rollouts.md").read_text()


@pytest.mark.parametrize("name", ["rollout", "async_rollout"])
def test_both_rollouts_keep_the_contract(tiny_model, name):
    example = _example()
    lm, tokenizer, _ = load_model_and_tokenizer(str(tiny_model), "float32")
    client = TransformersClient(lm.eval(), tokenizer, 64)
    sampling = {"n": 3, "temperature": 1.0, "top_p": 1.0, "top_k": -1, "min_p": 0.0, "repetition_penalty": 1.0,
                "max_completion_length": 6, "seed": 0}
    out = call_rollout(getattr(example, name), ["Count to 3.", [{"role": "user", "content": "Hi"}]],
                       SamplingSettings.from_rollout_kwargs(sampling), {},
                       RolloutContext(client=client), lm.config.vocab_size)
    assert len(out) == 6 and out.num_prompts == 2
    assert out.prompt_ids[0] == client.encode_prompt("Count to 3.") and out.prompt_ids[3] != out.prompt_ids[0]
    reasons = out.extras["finish_reason"]
    assert reasons == ["length" if len(c) == 6 and c[-1] != tokenizer.eos_token_id else "stop"
                       for c in out.completion_ids]
    assert example.stopped(finish_reason=reasons) == [float(r == "stop") for r in reasons]


def test_async_rollout_trains(tmp_path, tiny_model):
    cfg = tiny_config(tmp_path, tiny_model, training={"max_steps": 2},
                      rollout={"function": f"{EXAMPLE}:async_rollout"})
    result = train(cfg, base_dir=tmp_path, reporter=RichReporter(quiet=True))
    assert result.steps == 2
    assert result.history[0]["sampler/logprob_abs_diff"] < 1e-4  # its log-probs are the sampler's
