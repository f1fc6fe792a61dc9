"""The pass-rate curriculum (data.curriculum: pass_rate): which prompts sit out their turn, checked by hand."""

from __future__ import annotations

import io

import pytest
import torch

from grpo_rollout.orchestrator.curriculum import PassRateCurriculum
from grpo_rollout.orchestrator.prompt_order import PromptOrder

ALL, NONE, MIXED = [1.0, 1.0], [0.0, 0.0], [1.0, 0.0]  # a group of 2 completions, success_reward 1.0


def _order(patience: int = 1, pause: int = 1, rows: int = 4, per_step: int = 2, lag: int = 1) -> PromptOrder:
    return PromptOrder(rows, per_step, seed=0, shuffle=False, curriculum=PassRateCurriculum(patience, pause, 1.0),
                       lag=lag)


def _see(order: PromptOrder, step: int, *groups) -> None:
    """Step ``step``'s visits (its rows, one group each in ``groups``), as the stage counts them."""
    order.count(step, [(order.indices(step), [r for group in groups for r in group])])


def _saved(position: dict) -> dict:
    buffer = io.BytesIO()
    torch.save(position, buffer)  # as a checkpoint's trainer_state.pt holds it
    buffer.seek(0)
    return torch.load(buffer, weights_only=False)


def test_a_prompt_solved_by_every_or_no_completion_sits_out_one_turn_then_comes_back():
    order = _order()
    assert order.indices(0) == [0, 1]
    _see(order, 0, ALL, MIXED)  # row 0 always solved: paused for one turn
    assert order.indices(1) == [2, 3] and order.curriculum.paused_rows() == [0]
    _see(order, 1, NONE, MIXED)  # row 2 never solved: paused too
    # epoch 1 (positions 4-7: rows 0 1 2 3): rows 0 and 2 sit out, so the step takes 1 and 3
    assert order.indices(2) == [1, 3] and order.sat_out(2) == [0, 2]
    assert order.curriculum.metrics()["curriculum/skipped"] == 2
    _see(order, 2, ALL, MIXED)
    # epoch 2: row 0's pause is over (position 8), row 1 sits out (position 9), row 2 is back (position 10)
    assert order.indices(3) == [0, 2]
    _see(order, 3, ALL, MIXED)  # row 0 solved again: one visit pauses it again; row 2 mixed: its count restarts
    assert order.position(4)["epoch"] == 2 and order.position(4)["offset"] == 3
    assert order.indices(4) == [3, 1]  # position 12 (row 0) sat out, 13 is row 1, back
    assert order.curriculum.records[0].streak == 2 and order.curriculum.records[2].streak == 0
    assert order.curriculum.metrics() == {"curriculum/groups_all_solved": 2, "curriculum/groups_none_solved": 0,
                                          "curriculum/groups_mixed": 2, "curriculum/skipped": 2,
                                          "curriculum/paused": 1}  # row 0, when step 4's draw began


def test_patience_counts_visits_in_a_row_and_a_mixed_visit_restarts_the_count():
    c = PassRateCurriculum(2, 3, 1.0)
    c.observe([0], ALL, 2)
    c.observe([0], NONE, 2)  # solved by every, then by no completion: both teach nothing
    assert c.paused_rows() == [0] and c.records[0].skips_left == 3 and c.records[0].pass_rate == 0.0
    for group in (ALL, MIXED, ALL):
        c.observe([1], group, 2)
    assert c.paused_rows() == [0] and c.records[1].streak == 1 and c.records[1].visits == 3
    # a pause of 3: row 0 sits out its next three turns (positions 0, 4, 8), then is drawn (12 and 16)
    order = PromptOrder(4, 2, seed=0, shuffle=False, curriculum=c)
    drawn = []
    for step in range(8):
        drawn.append(order.indices(step))
        order.count(step, [])
    assert drawn[:5] == [[1, 2], [3, 1], [2, 3], [1, 2], [3, 0]] and drawn[6] == [3, 0]
    assert sum(row == 0 for rows in drawn for row in rows) == 2


def test_no_prompt_is_lost_from_an_epoch_each_turn_is_drawn_or_counted_as_sat_out():
    num_rows, per_step, g = 10, 3, 4
    order = PromptOrder(num_rows, per_step, seed=5, shuffle=True, curriculum=PassRateCurriculum(1, 2, 0.5))
    generator = torch.Generator().manual_seed(0)
    drawn, skipped = [], 0
    for step in range(12):
        rows = order.indices(step)
        drawn += rows
        order.count(step, [(rows, torch.randint(0, 2, (len(rows) * g,), generator=generator).float().tolist())])
        skipped += order.curriculum.metrics()["curriculum/skipped"]
    end = order.position(12)
    positions = end["epoch"] * num_rows + end["offset"]
    assert positions == len(drawn) + skipped > len(drawn)  # every position of the order: drawn or sat out
    # each whole epoch's turns are its ten rows, each once, drawn or sat out
    epochs = [PromptOrder(num_rows, num_rows, seed=5).indices(e) for e in range(positions // num_rows)]
    assert all(sorted(epoch) == list(range(num_rows)) for epoch in epochs)


def _run(order: PromptOrder, steps: range) -> list:
    out = []
    for step in steps:
        rows = order.indices(step)
        out.append(rows)
        _see(order, step, *[ALL if r % 3 == 0 else MIXED for r in rows])
    return out


def test_a_resumed_order_draws_what_the_uninterrupted_one_draws():
    expected = _run(_order(), range(8))
    first = _order()
    _run(first, range(3))
    resumed = _order()
    resumed.continue_from(3, _saved(first.position(3)))
    assert _run(resumed, range(3, 8)) == expected[3:]
    # with fewer prompts per step the order goes on from the saved position
    fewer = _order(per_step=1)
    fewer.continue_from(3, _saved(first.position(3)))
    assert [r for rows in _run(fewer, range(3, 13)) for r in rows] == [r for rows in expected[3:] for r in rows]
    # a checkpoint saved without a curriculum resumes with every prompt new
    fresh = _order()
    fresh.continue_from(1, {"epoch": 0, "offset": 2})
    assert fresh.indices(1) == [2, 3] and fresh.curriculum.records == {}


def test_a_step_interrupted_after_its_draw_and_count_is_drawn_and_counted_again_as_before():
    """Ctrl-C during step 4 (after its draw and its visits' count, before the update) saves the position before it:
    the resumed run takes step 4's draw as it was, and its count replaces the first one."""
    whole = _order()
    expected = _run(whole, range(6))
    order = _order()
    _run(order, range(4))  # step 4 (index 3) drawn and counted, then interrupted
    resumed = _order()
    resumed.continue_from(3, _saved(order.position(3)))
    assert _run(resumed, range(3, 6)) == expected[3:]
    assert resumed.curriculum.records == whole.curriculum.records


def test_steps_are_drawn_in_order_once_the_visits_they_apply_are_counted():
    order = _order()
    with pytest.raises(RuntimeError, match="step 3 cannot be drawn before the visits of step 2 are counted"):
        order.indices(2)
    assert order.indices(0) == order.indices(0) == [0, 1]  # drawn once: asking again changes nothing
    assert not order.ready(1)
    order.count(0, [])
    assert order.ready(1) and order.indices(1) == [2, 3]


def test_a_stream_drawing_ahead_draws_what_one_drawing_just_in_time_draws():
    """Streamed rollouts (lag 3 = max_staleness 1 + 2): a rank whose stream runs ahead and one that draws each step
    just in time draw the same rows, because a draw applies the visits of the step 3 before it, whenever it runs."""
    visits = {s: [ALL if (r + s) % 3 else MIXED for r in range(2)] for s in range(10)}
    ahead, just_in_time = _order(lag=3, rows=5), _order(lag=3, rows=5)
    drawn_ahead, drawn_late = {}, {}
    for step in range(10):
        while ahead.ready(len(drawn_ahead)) and len(drawn_ahead) < 10:  # as far as the counted visits allow
            drawn_ahead[len(drawn_ahead)] = ahead.indices(len(drawn_ahead))
        drawn_late[step] = just_in_time.indices(step)
        for order in (ahead, just_in_time):
            order.count(step, [(order.indices(step), [r for group in visits[step] for r in group])])
    assert len(drawn_ahead) == 10 and drawn_ahead == drawn_late
    assert ahead.curriculum.metrics()["curriculum/skipped"] > 0  # the curriculum acted
    assert not _order(lag=3).ready(3) and _order(lag=3).ready(2)


def test_rewards_must_match_the_groups():
    with pytest.raises(ValueError, match="3 rewards for 2 groups of 2"):
        PassRateCurriculum(1, 1, 1.0).observe([0, 1], [1.0, 0.0, 1.0], 2)


def test_dynamic_sampling_refills_skip_the_prompts_that_sat_out_or_are_paused():
    """From a trial user: a draw used up the paused prompts' last turn to sit out, so paused_rows() was empty and
    dynamic sampling's refill rolled out all 10 prompts, the 7 that "sat out" among them. Every prompt always solved,
    10 rows, 4 per step, patience 1, pause 1."""
    from types import SimpleNamespace

    from grpo_rollout.orchestrator.dynamic_sampling import refill_indices
    from grpo_rollout.orchestrator.stage import RolloutStage

    order = _order(rows=10, per_step=4)
    stage = SimpleNamespace(prompt_order=order, curriculum=order.curriculum)
    refills, skipped = [], []
    for step in range(5):
        order.indices(step)
        refills.append(refill_indices(step, 1, 10, 4, 0, RolloutStage.drawn(stage, step)))
        skipped.append(order.curriculum.metrics()["curriculum/skipped"])
        _see(order, step, *[ALL] * 4)
    assert order.indices(4) == [6, 7, 8, 9]
    # step 2 (rows 8 9 0 1) found every other row sitting out; step 3 (2 3 4 5) leaves 6 and 7 to refill from
    assert refills == [[7, 6, 9, 4], [8, 9], [], [6, 7], []]
    assert skipped == [0, 0, 10, 0, 10]


def test_a_step_does_not_take_a_row_twice_when_it_has_enough_rows():
    """From a trial user: with the other prompts sitting out, a draw past an epoch's end took rows 8 and 9 twice in
    one step (its second turn came before the first visit's result). Now that turn is passed over (counted as
    skipped); a dataset smaller than a step still repeats rows, as without a curriculum."""
    order = _order(rows=10, per_step=4)
    for step in range(2):
        _see(order, step, *[ALL] * 4)
    assert order.indices(2) == [8, 9, 0, 1]  # positions 8 9, rows 0-7 sit out, 8 9 passed over, then 0 1
    assert _order(rows=3, per_step=4).indices(0) == [0, 1, 2, 0]
