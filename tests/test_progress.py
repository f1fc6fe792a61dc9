"""The per-step rows the progress reporter prints."""

from rich.console import Console

from grpo_rollout.trainer.progress import RichReporter


def _printed(metrics) -> str:
    console = Console(record=True, width=200, force_terminal=False)
    reporter = RichReporter(console=console)
    reporter.start(total_steps=3, first_step=0)
    reporter.step(1, metrics, log=True, sample="Done.")
    reporter.stop()
    return console.export_text()


def test_row_shows_rewards_turns_and_tool_use():
    text = _printed({"reward": 0.75, "rewards/correct/mean": 0.5, "extras/num_turns": 1.5, "tools/calls": 6.0,
                     "tools/success_rate": 0.5, "sampler/logprob_abs_diff": 2e-6})
    assert "0.750" in text and "correct=0.500" in text
    assert "turns=1.50" in text and "tool calls=6 ok=50%" in text and "sampler-trainer=2.00e-06" in text
    assert "sample: Done." in text


def test_single_turn_row_has_no_tool_columns():
    text = _printed({"reward": 0.25, "rewards/correct/mean": 0.25})
    assert "correct=0.250" in text and "turns=" not in text and "tool calls" not in text


def test_tool_calls_without_any_call_show_no_rate():
    assert "tool calls=0 ok=-" in _printed({"reward": 0.0, "tools/calls": 0.0})
