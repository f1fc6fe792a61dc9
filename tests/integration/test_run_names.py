"""The names a run logs and the names the default plot panels draw are the same (grpo_rollout.runs.names): a real
2-step run on the tiny model, with a multi-turn tool rollout and a KL term, logs every key a default panel wants."""

from __future__ import annotations

import json

import pytest

from grpo_rollout.runs import names as rn
from grpo_rollout.views.plot_panels import DEFAULT_PANELS, REWARD_RANGE, Fixed
from grpo_rollout.trainer import train
from grpo_rollout.trainer.reporting.progress import RichReporter
from tiny_model import tiny_config

pytestmark = pytest.mark.model

# A rollout that reports what the built-in tool and environment rollouts report (turns, tool calls and errors, why
# each episode ended, turns cut by max_turn_tokens) and the sampler's log-probs, so every panel has its keys.
TOOL_LIKE = '''
REASONS = ["done", "max_turns", "budget_turn", "budget_reply"]

def rollout(prompts, tokenizer, n, **kwargs):
    total = len(prompts) * n
    completions = [[(i * 7 + k) % 1000 + 10 for k in range(4)] for i in range(total)]
    return {"prompt_ids": [tokenizer.encode(p) for p in prompts], "completion_ids": completions,
            "logprobs": [[-1.5] * 4 for _ in range(total)], "completion_mask": [[1, 1, 0, 1]] * total,
            "num_turns": [1 + i % 3 for i in range(total)], "num_tool_calls": [i % 2 for i in range(total)],
            "num_tool_errors": [0] * total, "end_reason": [REASONS[i % 4] for i in range(total)],
            "turns_capped": [i % 2 for i in range(total)]}
'''


def test_every_default_panel_key_is_logged_by_a_real_run(tmp_path, tiny_model):
    (tmp_path / "tool_like.py").write_text(TOOL_LIKE)
    cfg = tiny_config(tmp_path, tiny_model, training={"max_steps": 2, "beta": 0.04, "save_rollouts": "off"},
                      rollout={"function": f"{tmp_path / 'tool_like.py'}:rollout"},
                      data={"eval": str(tmp_path / "data.jsonl")},  # the held-out panel's keys: eval at the end
                      evaluation={"at_end": True, "max_prompts": 2, "num_generations": 2, "temperature": 1.0})
    train(cfg, base_dir=tmp_path, reporter=RichReporter(quiet=True))
    lines = (tmp_path / "out" / rn.METRICS_FILE).read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert [r[rn.STEP] for r in records] == [1, 2]
    logged = [k for r in records for k in r]
    for panel in (p for p in DEFAULT_PANELS if p.only_when is None):  # the others: tests/integration/test_streaming.py
        chosen = panel.choose(logged)
        assert chosen, f"panel {panel.title!r} finds none of its keys in {sorted(set(logged))}"
        if isinstance(panel.choose, Fixed):
            missing = [k for k in panel.choose.wanted if k not in logged]
            assert not missing, f"panel {panel.title!r} draws {missing}, which the run did not log"
        if panel.band is not None:
            assert set(panel.band) <= set(logged), panel.title
    assert set(REWARD_RANGE) <= set(logged)
    assert rn.reward_fn("even_ids") in DEFAULT_PANELS[0].choose(logged)
    assert {rn.ended(reason) for reason in ("done", "max_turns", "budget_turn", "budget_reply")} <= set(logged)
