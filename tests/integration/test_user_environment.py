"""A new user's own environment (issue 19): a "guess the secret word" game on a dataset without a prompt column,
whose reply does not fit the completion budget. Why the episode ended shows in the dry run, the saved records and
a metric; the logged prompt is what ``reset(row)`` returned, not a dataset column."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from grpo_rollout.cli.main import app
from grpo_rollout.config import to_yaml
from grpo_rollout.preflight import check_config
from grpo_rollout.trainer import train
from grpo_rollout.trainer.reporting.progress import RichReporter
from tiny_model import tiny_config

ENV = '''
class SecretWordEnv:
    """Guess the secret word; every wrong guess gets a long hint (far more tokens than the budget leaves)."""

    def reset(self, row):
        self.word = row["word"]
        return f"Guess my secret word. It has {len(self.word)} letters."

    def step(self, text):
        if self.word in text:
            return None, 1.0, True
        hint = "Not quite. " + " ".join(["Think of fruit that grows on trees in warm places."] * 4)
        return hint, 0.0, False
'''

REWARD = '''
def env_reward(env_reward, **kwargs):
    return list(env_reward)
'''


def _config(root: Path, model: Path, **training):
    (root / "word_env.py").write_text(ENV)
    cfg = tiny_config(root, model, rewards_source=REWARD, reward="env_reward",
                      rollout={"function": "grpo_rollout.rollouts.environment:environment_rollout",
                               "kwargs": {"env": str(root / "word_env.py") + ":SecretWordEnv", "max_turns": 4,
                                          "max_turn_tokens": 6}},
                      sampling={"max_completion_length": 24, "num_generations": 2},
                      training={"prompts_per_step": 2, "micro_batch_size": 4, **training})
    # the user's dataset: 30 rows with a `word` column and no `prompt` column (reset(row) makes the prompt)
    (root / "data.jsonl").write_text("".join(json.dumps({"word": w}) + "\n"
                                             for w in ["mango", "lemon", "guava"] * 10))
    return cfg


@pytest.mark.model
def test_dataset_without_prompt_column_is_valid_for_an_environment(tmp_path, tiny_model):
    cfg = _config(tmp_path, tiny_model)
    (tmp_path / "config.yaml").write_text(to_yaml(cfg))
    _, problems = check_config(tmp_path / "config.yaml")
    assert [p for p in problems if p.is_error] == []
    # the built-in single-turn rollout still needs it
    (tmp_path / "single.yaml").write_text(to_yaml(cfg).replace(
        "grpo_rollout.rollouts.environment:environment_rollout", "''"))
    _, problems = check_config(tmp_path / "single.yaml")
    assert "data.prompt_column" in [p.key for p in problems if p.is_error]


@pytest.mark.model
def test_reply_that_does_not_fit_is_named_in_dry_run_records_and_metrics(tmp_path, tiny_model):
    cfg = _config(tmp_path, tiny_model, max_steps=1, save_rollouts="every")
    (tmp_path / "config.yaml").write_text(to_yaml(cfg))
    result = CliRunner().invoke(app, ["validate-config", str(tmp_path / "config.yaml"), "--dry-run"],
                                terminal_width=250)
    assert result.exit_code == 0, result.output
    out = " ".join(result.output.replace("│", " ").split())
    assert "episode ended: budget_reply: the reply after turn 1 needs" in out, out
    assert "of max_completion_length=24 were left" in out and "raise sampling.max_completion_length to at least" in out
    assert "Guess my secret word. It has 5 letters." in out  # the prompt as the model saw it

    train(cfg, base_dir=tmp_path, reporter=RichReporter(quiet=True))
    run = tmp_path / "out"
    [metrics] = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert metrics["episodes/cut_by_budget"] == 4.0  # 2 prompts × 2 samples, every reply too long
    assert metrics["episodes/ended/budget_reply"] == 1.0 and metrics["episodes/ended/done"] == 0.0
    assert metrics["extras/num_turns"] == 1.0
    records = [json.loads(line) for line in (run / "rollouts" / "step_1.jsonl").read_text().splitlines()]
    assert {r["extras"]["end_reason"] for r in records} == {"budget_reply"}
    assert all("needs" in r["extras"]["end_detail"] and "max_completion_length=24" in r["extras"]["end_detail"]
               for r in records)
    # the logged prompt is what reset() returned (the dataset has no prompt column at all)
    completions = [json.loads(line) for line in (run / "completions.jsonl").read_text().splitlines()]
    assert {c["prompt"] for c in completions} <= {"Guess my secret word. It has 5 letters."}
    assert len(completions) == 4 and all(c["ended"] == "budget_reply" for c in completions)
    assert all(r["prompt"] == "Guess my secret word. It has 5 letters." for r in records)


TURN_TWO_BUG = '''
class TurnTwoBug:
    """Answers turn 1 with a short reply, then breaks on turn 2 (a bug only a second turn finds)."""

    def reset(self, row):
        self.turn = 0
        return "Name an animal."

    def step(self, text):
        self.turn += 1
        if self.turn >= 2:
            raise KeyError("turn-two bug")
        return "No.", 0.0, False
'''


@pytest.mark.model
def test_dry_run_plays_later_turns_with_the_training_budget(tmp_path, tiny_model):
    """Found by the new user of issue 19: the dry run's 32-token cap ended every episode after turn 1
    (``max_turn_tokens: 24`` and a reply), so an environment that breaks on turn 2 passed the dry run and failed a
    minute into training. Now an episode cut by the dry run's budget is played again with training's."""
    cfg = _config(tmp_path, tiny_model)
    (tmp_path / "bug_env.py").write_text(TURN_TWO_BUG)
    cfg.rollout.kwargs["env"] = str(tmp_path / "bug_env.py") + ":TurnTwoBug"
    cfg.rollout.kwargs["max_turn_tokens"] = 24
    cfg.sampling.max_completion_length = 128
    (tmp_path / "config.yaml").write_text(to_yaml(cfg))
    result = CliRunner().invoke(app, ["validate-config", str(tmp_path / "config.yaml"), "--dry-run"],
                                terminal_width=250)
    out = " ".join(result.output.replace("│", " ").split())
    assert result.exit_code == 1, out
    assert "the dry run's 32-token budget ended an episode before another turn" in out
    assert "turn-two bug" in out and "bug_env.py" in out


SHORT_REPLY = '''
class ShortReply:
    """Never done; answers every turn with a short reply, so episodes run to max_turns."""

    def reset(self, row):
        return "Say something."

    def step(self, text):
        return "Go on.", 0.0, False
'''


@pytest.mark.model
def test_turns_cut_by_max_turn_tokens_are_counted(tmp_path, tiny_model):
    """Found by the new user of issue 19: turns that ``max_turn_tokens`` cut (10 of 22 in one step) showed nowhere:
    ``completions/truncated_fraction`` was 0. Now each episode has a ``turns_capped`` extra and each step the
    ``episodes/turns_capped`` count (a random tiny model rarely ends a turn within 4 tokens)."""
    cfg = _config(tmp_path, tiny_model, max_steps=1, save_rollouts="every")
    (tmp_path / "short_env.py").write_text(SHORT_REPLY)
    cfg.rollout.kwargs.update(env=str(tmp_path / "short_env.py") + ":ShortReply", max_turns=3, max_turn_tokens=4)
    cfg.sampling.max_completion_length = 96
    train(cfg, base_dir=tmp_path, reporter=RichReporter(quiet=True))
    run = tmp_path / "out"
    [metrics] = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    records = [json.loads(line) for line in (run / "rollouts" / "step_1.jsonl").read_text().splitlines()]
    capped = [r["extras"]["turns_capped"] for r in records]
    assert all(0 <= c <= r["extras"]["num_turns"] for c, r in zip(capped, records))
    assert metrics["episodes/turns_capped"] == sum(capped) > 0
    assert metrics["completions/truncated_fraction"] == 0.0  # the budget itself cut nothing
