"""training.save_rollouts and `grpo-rollout inspect`: what was trained, token by token."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from grpo_rollout.cli.main import app
from grpo_rollout.views.inspect import load_sample, render_html, run_tokenizer
from grpo_rollout.trainer import train
from grpo_rollout.trainer.reporting.progress import RichReporter
from grpo_rollout.runs.rollouts import save_now, saved_steps
from tiny_model import tiny_config

pytestmark = pytest.mark.slow  # and `model` on each test using the tiny model (tests/conftest.py)

CALL = '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>'
ANSWER = "<tool_response>3</tool_response>"

# A two-turn rollout with fixed tokens: a tool call the "model" wrote (trained), the tool's answer (inserted, mask 0),
# then three more "model" tokens that differ per completion (so the even-ids reward has variance).
MULTI_TURN = f'''
CALL = {CALL!r}
ANSWER = {ANSWER!r}

def rollout(prompts, tokenizer, n, **kwargs):
    call = tokenizer.encode(CALL, add_special_tokens=False)
    answer = tokenizer.encode(ANSWER, add_special_tokens=False)
    completions, masks = [], []
    for i in range(len(prompts) * n):
        tail = [(i * 7 + k) % 1000 + 10 for k in range(3)]
        completions.append(call + answer + tail)
        masks.append([1] * len(call) + [0] * len(answer) + [1] * 3)
    return {{"prompt_ids": [tokenizer.encode("SYSTEM: tools available. " + p) for p in prompts],
            "completion_ids": completions, "logprobs": None, "completion_mask": masks}}
'''


@pytest.fixture(scope="module")
def multi_turn_run(tmp_path_factory, tiny_model) -> Path:
    root = tmp_path_factory.mktemp("multi_turn")
    (root / "multi_turn.py").write_text(MULTI_TURN)
    cfg = tiny_config(root, tiny_model, training={"max_steps": 2, "save_rollouts": "every"},
                      rollout={"function": f"{root / 'multi_turn.py'}:rollout"})
    train(cfg, base_dir=root, reporter=RichReporter(quiet=True))
    return root / "out"


def test_save_now_schedule():
    assert [s for s in range(1, 8) if save_now("3", s, last=s == 7)] == [3, 6, 7]
    assert [s for s in range(1, 4) if save_now("every", s, last=False)] == [1, 2, 3]
    assert not any(save_now("off", s, last=True) for s in range(1, 4))


def test_rollout_files_hold_every_completion_and_the_prompt_seen(multi_turn_run):
    tokenizer = run_tokenizer(multi_turn_run)
    assert saved_steps(multi_turn_run) == [1, 2]
    lines = [json.loads(x) for x in (multi_turn_run / "rollouts" / "step_2.jsonl").read_text().splitlines()]
    assert len(lines) == 4 * 8
    first = lines[0]
    assert first["prompt_text"] == tokenizer.decode(first["prompt_ids"])
    assert first["prompt_text"].startswith("SYSTEM: tools available. Count to")  # not only the dataset prompt
    n_call = len(tokenizer.encode(CALL, add_special_tokens=False))
    n_answer = len(tokenizer.encode(ANSWER, add_special_tokens=False))
    assert first["completion_mask"] == "1" * n_call + "0" * n_answer + "111"
    # untrained placeholders are null; trained tokens carry the trainer's log-probs
    lps = first["trainer_logprobs"]
    assert len(lps) == n_call + n_answer + 3
    assert all(v is not None and v < 0 for v, m in zip(lps, first["completion_mask"]) if m == "1")
    assert first["sampler_logprobs"] is None  # the rollout returned none
    # group-relative advantages: each group's advantages sum to 0 and follow its rewards' order
    for g in range(4):
        group = [r for r in lines if r["group"] == g]
        assert sum(r["advantage"] for r in group) == pytest.approx(0, abs=1e-3)
        best = max(group, key=lambda r: r["reward"])
        assert best["advantage"] == max(r["advantage"] for r in group)
    assert all(r["rewards"]["even_ids"] == r["reward"] for r in lines)


def test_inspect_marks_tool_tokens_as_not_trained(multi_turn_run):
    tokenizer = run_tokenizer(multi_turn_run)
    n_call = len(tokenizer.encode(CALL, add_special_tokens=False))
    n_answer = len(tokenizer.encode(ANSWER, add_special_tokens=False))
    saved = json.loads((multi_turn_run / "rollouts" / "step_2.jsonl").read_text().splitlines()[5])
    sample = load_sample(multi_turn_run, step=2, sample=5)
    assert [t.id for t in sample.tokens] == saved["completion_ids"]  # token count equals the saved ids
    kinds = [t.kind for t in sample.tokens]
    assert kinds == ["tool call"] * n_call + ["inserted"] * n_answer + ["trained"] * 3
    assert "".join(t.text for t in sample.tokens[n_call:n_call + n_answer]) == ANSWER
    assert sample.advantage == saved["advantage"]

    result = CliRunner().invoke(app, ["inspect", str(multi_turn_run), "--step", "2", "--sample", "5"],
                                terminal_width=200)
    assert result.exit_code == 0, result.output
    assert result.output.count("not trained") == n_answer + 1  # one table row per inserted token, plus the summary
    assert f"{len(saved['completion_ids'])} completion tokens: {n_call + 3} trained, {n_answer} inserted" \
        in result.output
    assert "1 tool call(s)" in result.output

    page = multi_turn_run / "sample.html"
    result = CliRunner().invoke(app, ["inspect", str(multi_turn_run), "--sample", "5", "--html", str(page)])
    assert result.exit_code == 0, result.output
    text = page.read_text()
    assert text.count('<span class="tok ') == len(saved["completion_ids"])
    assert text.count('<span class="tok inserted"') == n_answer
    assert text.count('<span class="tok toolcall"') == n_call
    assert text == render_html(sample)  # --step defaults to the last saved step (2)


def test_inspect_errors_name_what_is_missing(multi_turn_run, tmp_path):
    result = CliRunner().invoke(app, ["inspect", str(multi_turn_run), "--step", "7"], terminal_width=200)
    assert result.exit_code == 1
    assert "step_7.jsonl does not exist (saved steps: 1-2)" in result.output
    result = CliRunner().invoke(app, ["inspect", str(multi_turn_run), "--sample", "32"], terminal_width=200)
    assert result.exit_code == 1 and "--sample must be 0-31" in result.output
    result = CliRunner().invoke(app, ["inspect", str(tmp_path)], terminal_width=200)
    assert result.exit_code == 1 and "training.save_rollouts=every" in result.output


def test_sampler_and_trainer_logprobs_are_saved_every_n_steps(tmp_path, tiny_model):
    cfg = tiny_config(tmp_path, tiny_model, training={"max_steps": 3, "save_rollouts": "2"})
    train(cfg, base_dir=tmp_path, reporter=RichReporter(quiet=True))
    out = tmp_path / "out"
    assert saved_steps(out) == [2, 3]  # every 2nd step and the last
    for line in (out / "rollouts" / "step_3.jsonl").read_text().splitlines():
        rec = json.loads(line)
        assert rec["completion_mask"] == "1" * len(rec["completion_ids"])
        for s, t, w in zip(rec["sampler_logprobs"], rec["trainer_logprobs"], rec["importance_weights"]):
            assert math.isfinite(s) and abs(s - t) < 2e-3  # same weights, same filtering (top_k 10)
            assert w == pytest.approx(1.0, abs=2e-3)  # token_truncate: exp(trainer - sampler), capped at 2


def test_inspect_of_a_folder_that_does_not_exist_says_so(tmp_path):
    """A new user's trial: it said the folder "holds no saved step", where `plot` says "no such folder"."""
    result = CliRunner().invoke(app, ["inspect", str(tmp_path / "nonexist")], terminal_width=200)
    assert result.exit_code == 1 and "nonexist: no such folder" in result.output
