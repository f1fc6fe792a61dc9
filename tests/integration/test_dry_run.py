"""validate-config --dry-run: the rollout and rewards run once on two prompts, in seconds, before any training."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from grpo_rollout.cli.main import app
from grpo_rollout.config import to_yaml
from tiny_model import tiny_config

pytestmark = pytest.mark.model

ROLLOUTS = '''
from grpo_rollout.rollouts.single_turn import single_turn

def short_by_one(prompts, client, **kw):
    out = single_turn(prompts, client=client, **kw)
    out["completion_ids"] = out["completion_ids"][:-1]
    return out

def with_extra(prompts, client, **kw):
    out = single_turn(prompts, client=client, **kw)
    out["n_chars"] = [len(p) for p in prompts]
    return out
'''

REWARDS = '''
from tiny_rewards_base import *  # noqa

def even_ids(completion_ids, **kwargs):
    return [sum(t % 2 == 0 for t in ids) / max(len(ids), 1) for ids in completion_ids]

def broken(completions, **kwargs):
    return [len(c) / 0 for c in completions]

def never_called_a_tool(completions, **kwargs):
    return [0.0 for _ in completions]
'''


def _invoke(root: Path, model: Path, rollout: str = "", reward: str = "even_ids", **rollout_kwargs):
    cfg = tiny_config(root, model, rewards_source=REWARDS.replace("from tiny_rewards_base import *  # noqa\n", ""),
                      reward=reward)
    (root / "user_rollouts.py").write_text(ROLLOUTS)
    if rollout:
        cfg.rollout.function = f"user_rollouts.py:{rollout}"
    cfg.rollout.kwargs = rollout_kwargs
    (root / "config.yaml").write_text(to_yaml(cfg))
    return CliRunner().invoke(app, ["validate-config", str(root / "config.yaml"), "--dry-run"], terminal_width=200)


def test_good_rollout_prints_a_sample_with_rewards(tmp_path, tiny_model):
    result = _invoke(tmp_path, tiny_model, rollout="with_extra")
    assert result.exit_code == 0, result.output
    out = result.output
    assert "Dry run: rollout and rewards work" in out
    # 2 prompts × 2 completions (issue 28: all 8 of num_generations, 16 completions, took 2-3 minutes)
    assert "2 prompts → 4 completions (sampling.num_generations 8 capped at 2) via transformers" in out
    assert "vllm.mode is" not in out  # the config says off: no note about a server
    assert "Count to 0." in out and "even_ids = " in out and "n_chars = 11" in out
    assert "completion (8 tokens, 8 trained)" in out  # max_completion_length 8 (below the dry run's 32)
    assert not (tmp_path / "out").exists()  # the run folder is not touched
    assert "No learning signal" not in out  # even_ids varies within a group


def test_rewards_without_a_signal_are_said_with_what_to_change(tmp_path, tiny_model):
    """Issue 51.10: every completion scored 0.00 and the dry run said nothing; training then never updated."""
    result = _invoke(tmp_path, tiny_model, reward="never_called_a_tool")
    assert result.exit_code == 0, result.output  # the functions work: a warning, not a failure
    out = " ".join(result.output.split())
    assert ("No learning signal: every completion scored 0.000, so every advantage is 0 and a step would not change "
            "the weights. With 2 completions a prompt this may be chance (training samples 8)") in out
    assert "a reward that varies between them" in out and "sampling.num_generations" in out


def test_the_cap_reaches_sampling_settings_repeated_in_rollout_kwargs(tmp_path, tiny_model):
    """`n` and `max_tokens` in rollout.kwargs (allowed when they agree with sampling) override what the rollout is
    called with: the dry run sets them to its own 2 completions of at most 8 tokens too."""
    result = _invoke(tmp_path, tiny_model, rollout="with_extra", n=8, max_completion_length=8)
    assert result.exit_code == 0, result.output
    assert "2 prompts → 4 completions (sampling.num_generations 8 capped at 2)" in result.output


def test_rollout_breaking_the_contract_exits_1_naming_the_key(tmp_path, tiny_model):
    result = _invoke(tmp_path, tiny_model, rollout="short_by_one")
    assert result.exit_code == 1
    assert "Dry run failed: RolloutError" in result.output
    assert "completion_ids" in result.output and "short_by_one" in result.output
    assert "Traceback" not in result.output


def test_reward_raising_names_the_user_file_and_line(tmp_path, tiny_model):
    result = _invoke(tmp_path, tiny_model, reward="broken")
    assert result.exit_code == 1
    assert "Dry run failed: RewardError" in result.output and "ZeroDivisionError" in result.output
    line = REWARDS.replace("from tiny_rewards_base import *  # noqa\n", "").splitlines().index(
        "    return [len(c) / 0 for c in completions]") + 1
    assert f"task_rewards.py:{line})" in result.output.replace("\n", "").replace("│", "").replace(" ", "")


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("vllm, said", [
    ({"mode": "attach"}, "is not reachable"),
    ({"mode": "spawn"}, "vllm.mode is spawn: the dry run generates with transformers here instead of starting a "
                        "server"),
])
def test_without_a_server_answering_the_dry_run_generates_with_transformers(tmp_path, tiny_model, vllm, said):
    """An attached server that does not answer, or spawn mode (a dry run starts no server): transformers in this
    process, said in a status line, and the rollout still runs."""
    from grpo_rollout.trainer.dry_run import dry_run

    url = f"http://127.0.0.1:{_closed_port()}"
    cfg = tiny_config(tmp_path, tiny_model, vllm={**vllm, "url": url} if vllm["mode"] == "attach" else vllm)
    lines: list = []
    result = dry_run(cfg, tmp_path, say=lines.append)
    assert result.backend == "transformers" and result.num_completions == 4, result
    assert [line for line in lines if said in line], lines
    assert cfg.vllm.mode == vllm["mode"]  # the caller's config is left as it was


def test_the_overlong_penalty_of_a_dry_run_measures_against_trainings_limit(tmp_path, tiny_model):
    """Found by a trial user: the dry run's 32-token cap was taken for the limit, so a 32-token completion under a
    128-token limit with a 16-token buffer showed the full penalty (-1) instead of none."""
    from grpo_rollout.trainer.dry_run import dry_run

    cfg = tiny_config(tmp_path, tiny_model, training={"overlong_buffer": 16})
    cfg.sampling.max_completion_length = 128
    result = dry_run(cfg, tmp_path)
    assert result.max_completion_length == 32 and result.sample.rewards["overlong_penalty"] == 0.0
