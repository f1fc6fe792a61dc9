"""Issue 40's acceptance for the weight version carried in the returned data: a user rollout that calls
``client.generate`` from a ``ThreadPoolExecutor`` of its own, streaming with ``training.max_staleness: 1`` against the
simulated server (benchmarks/simulated_server.py, which stamps each answer with the weights it holds), logs the
versions that really sampled: the rollout files carry the server's stamps and ``sampler/weight_version_lag`` reads 1
at the steps trained on an older version (before issue 39 a worker thread recorded nothing, the stage took the
trainer's own version and the lag read 0)."""

from __future__ import annotations

import json

import pytest

from grpo_rollout.trainer import train
from grpo_rollout.trainer.reporting.progress import RichReporter
from streaming_helpers import streaming_config, user_module

pytestmark = pytest.mark.model

OWN_POOL = '''
from concurrent.futures import ThreadPoolExecutor

POOL = ThreadPoolExecutor(2)
STAMPS = []  # (first prompt, the version each answer carries) as the simulated server stamped them

def rollout(prompts, client, n, max_completion_length, seed, **kw):
    ids = client.encode_prompts(prompts)
    result = POOL.submit(client.generate, ids, n=n, max_tokens=max_completion_length, seed=seed).result()
    STAMPS.append((prompts[0], result.weight_version))
    return {"prompt_ids": ids, "completion_ids": result.completion_ids, "logprobs": result.logprobs}
'''


def test_a_rollout_generating_from_its_own_thread_pool_logs_the_versions_that_sampled(tmp_path, tiny_model,
                                                                                        monkeypatch):
    (tmp_path / "own_pool.py").write_text(OWN_POOL)
    cfg = streaming_config(tmp_path, tiny_model, monkeypatch, 1, max_steps=4, save_rollouts="every")
    cfg.rollout.function = f"{tmp_path / 'own_pool.py'}:rollout"
    result = train(cfg, base_dir=tmp_path, reporter=RichReporter(quiet=True))
    assert result.steps == 4
    lags = [m["sampler/weight_version_lag"] for m in result.history]
    assert max(lags) >= 1 and set(lags) <= {0, 1}  # it ran ahead, at most max_staleness behind
    stamps = dict(user_module(tmp_path / "own_pool.py").STAMPS)  # the version each prompt's answer really carried
    for step, m in enumerate(result.history, start=1):  # the initial sync makes the trainer's version at step s be s
        rows = [json.loads(x) for x in (tmp_path / "out" / "rollouts" / f"step_{step}.jsonl").read_text().splitlines()]
        assert all(row["weight_versions"] == [stamps[row["prompt"]]] * 2 for row in rows), step  # (oldest, newest)
        versions = {stamps[row["prompt"]] for row in rows}
        assert versions <= {step - 1, step} and m["sampler/weight_version_lag"] == step - min(versions), step
