"""How a streamed run reads on the console (issue 39, fault 10): the start-up line with the bound, the step's
staleness as mean/max against the bound, the wait for rollouts (not a generation time), the trainer's busy and the
servers' idle share, the sampler/trainer gap of fresh and stale samples, and the final panel's verdict."""

from __future__ import annotations

import math

import torch
from rich.console import Console

from grpo_rollout.config.training_section import TrainingConfig
from grpo_rollout.runs import names as rn
from grpo_rollout.orchestrator.stream_stats import SequenceGaps, StreamStats
from grpo_rollout.trainer.reporting.progress import RichReporter
from grpo_rollout.trainer.reporting.streaming_view import startup_lines, verdict
from grpo_rollout.trainer.run import TrainResult

# a streamed step as the recipe logs it: 4 groups, 2 of them one version behind, the trainer waited 0.3 s of 2.5 s
STEP = {rn.REWARD: 0.5, rn.TIME_GENERATION: 0.3, rn.TIME_TRAINING: 2.0, rn.TIME_STEP: 2.5,
        rn.STALENESS_MEAN: 0.5, rn.STALENESS_MAX: 1, rn.GROUPS_DROPPED_STALE: 0, rn.GROUPS_IN_FLIGHT: 6,
        rn.BUFFER_GROUPS: 2, rn.TIME_WAITING_FOR_ROLLOUTS: 0.3, rn.ROLLOUTS_IDLE_SHARE: 0.05,
        rn.TRAINER_BUSY_SHARE: 0.88, rn.GROUPS_SKIPPED_STALE: 0, rn.SAMPLER_LOGPROB_ABS_DIFF: 6.0e-2,
        rn.SAMPLER_LOGPROB_ABS_DIFF_FRESH: 5.0e-6, rn.SAMPLER_LOGPROB_ABS_DIFF_STALE: 1.2e-1}


def _console_of_a_streamed_run(t: TrainingConfig) -> str:
    console = Console(record=True, width=400, force_terminal=False)
    reporter = RichReporter(console=console)
    reporter.streaming(t.staleness(), startup_lines(t, 1))
    reporter.start(total_steps=4, first_step=0)
    reporter.step(1, STEP, log=True)
    reporter.stop()
    return console.export_text()


def test_a_streamed_run_says_its_bound_at_start_and_each_step_shows_staleness_wait_shares_and_both_gaps():
    text = _console_of_a_streamed_run(TrainingConfig(max_staleness=2, prompts_per_step=4))
    start, _, header, row, dim = text.splitlines()[:5]
    assert "Streaming rollouts: training.max_staleness 2" in start and "up to 8 groups in flight" in start
    assert "wait s" in header and "gen s" not in header  # the column is the trainer's wait, not a generation time
    at = header.index("wait s")
    assert row[at - 2:at + 6].strip() == "0.3"
    assert "stale 0.5/1≤2" in dim and "wait 0.3 s" in dim and "trainer busy 88%" in dim and "servers idle 5%" in dim
    assert "|Δlogp| sampler-trainer=6.00e-02 (fresh 5.00e-06, stale 1.20e-01 from older weights)" in dim


def test_the_async_generation_alias_says_what_it_means_and_its_bound():
    text = _console_of_a_streamed_run(TrainingConfig(async_generation=True, prompts_per_step=4))
    assert "training.async_generation streams rollouts with training.max_staleness: 1" in text
    assert "Streaming rollouts: training.max_staleness 1" in text and "stale 0.5/1≤1" in text


def test_a_synchronous_run_keeps_its_generation_column_and_plain_gap():
    console = Console(record=True, width=400, force_terminal=False)
    reporter = RichReporter(console=console)
    reporter.start(total_steps=1, first_step=0)
    reporter.step(1, {rn.REWARD: 0.5, rn.TIME_GENERATION: 9.6, rn.SAMPLER_LOGPROB_ABS_DIFF: 5e-6}, log=True)
    reporter.stop()
    text = console.export_text()
    assert "gen s" in text and "wait s" not in text and "stale" not in text
    assert "sampler-trainer=5.00e-06" in text and "fresh" not in text


def test_the_gap_of_fresh_and_stale_samples_is_measured_apart_and_merged_over_ranks():
    # two sequences of 2 and 3 trained tokens; the second is stale (its group sampled one version back)
    trainer = torch.tensor([[-1.0, -2.0, 0.0], [-1.0, -1.0, -1.0]])
    sampler = torch.tensor([[-1.0, -2.5, -math.inf], [-1.5, -0.5, -2.0]])  # -inf: a placeholder off the mask
    mask = torch.tensor([[True, True, False], [True, True, True]])
    gaps = SequenceGaps()
    assert gaps.add(trainer, sampler, mask) == 0.5 + 2.0  # every trained token's |Δlogp|, as the step's total
    assert gaps.sums == [0.5, 2.0] and gaps.tokens == [2, 3]
    one = StreamStats([0, 1]).with_gaps(gaps, group_size=1)
    assert (one.gap_fresh, one.gap_stale) == ((0.5, 2), (2.0, 3))
    other = StreamStats([0]).with_gaps(SequenceGaps([0.25], [3]), group_size=1)  # another rank: one fresh group
    metrics = StreamStats.merge([one, other]).metrics(step_s=2.0)
    assert metrics[rn.SAMPLER_LOGPROB_ABS_DIFF_FRESH] == 0.75 / 5
    assert metrics[rn.SAMPLER_LOGPROB_ABS_DIFF_STALE] == 2.0 / 3
    assert metrics[rn.TRAINER_BUSY_SHARE] == 1.0  # it waited 0 s of 2 s
    fresh_only = StreamStats([0], waited_s=1.5).with_gaps(SequenceGaps([0.1], [2]), group_size=1).metrics(step_s=2.0)
    assert rn.SAMPLER_LOGPROB_ABS_DIFF_STALE not in fresh_only and fresh_only[rn.TRAINER_BUSY_SHARE] == 0.25


def _history(wait_s, step_s=2.5, steps=4, first_wait_s=9.6):
    """A streamed run's history: the first step waits for the first groups, later ones ``wait_s`` of ``step_s``."""
    return [{**STEP, rn.STEP: i + 1, rn.TIME_STEP: step_s + (first_wait_s if i == 0 else wait_s),
             rn.TIME_GENERATION: first_wait_s if i == 0 else wait_s,
             rn.TIME_WAITING_FOR_ROLLOUTS: first_wait_s if i == 0 else wait_s} for i in range(steps)]


def test_the_verdict_names_the_bottleneck():
    assert verdict(_history(0.05)).startswith("the trainer is the bottleneck (the trainer waited for rollouts 2% "
                                              "of the time, the servers idled 5%): streaming cannot help here")
    assert verdict(_history(7.5)).startswith("rollouts are the bottleneck (the trainer waited for rollouts 75%")
    assert verdict(_history(1.0)).startswith("streaming overlaps rollouts and training (the trainer waited for "
                                             "rollouts 29%")
    assert verdict([{rn.REWARD: 0.5, rn.TIME_STEP: 2.0}]) is None  # not streamed


def test_the_final_panel_of_a_streamed_run_says_wait_not_generation_and_gives_its_verdict(tmp_path):
    text = TrainResult(tmp_path, tmp_path / "checkpoint-4", 4, _history(0.05)).summary
    assert "(waiting for rollouts 2.4, training 2.0" in text and "(generation" not in text
    assert "streaming: staleness mean 0.50, max 1; groups dropped stale 0, left out 0" in text
    assert "verdict: the trainer is the bottleneck" in text
    plain = TrainResult(tmp_path, tmp_path / "checkpoint-1", 1, [{rn.REWARD: 0.5, rn.TIME_STEP: 2.0,
                                                                   rn.TIME_GENERATION: 1.0}]).summary
    assert "(generation 1.0" in plain and "verdict" not in plain
