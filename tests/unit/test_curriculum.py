"""The pass-rate curriculum (data.curriculum: pass_rate): which prompts sit out their turn, checked by hand."""

from __future__ import annotations

import pytest
import torch

from grpo_rollout.trainer.rollout.curriculum import PassRateCurriculum
from grpo_rollout.trainer.rollout.prompt_order import PromptOrder

ALL, NONE, MIXED = [1.0, 1.0], [0.0, 0.0], [1.0, 0.0]  # a group of 2 completions, success_reward 1.0


def _order(patience: int = 1, pause: int = 1) -> PromptOrder:
    return PromptOrder(4, 2, seed=0, shuffle=False, curriculum=PassRateCurriculum(patience, pause, 1.0))


def _see(order: PromptOrder, rows, *groups) -> None:
    order.curriculum.observe(rows, [r for group in groups for r in group], 2)


def test_a_prompt_solved_by_every_or_no_completion_sits_out_one_turn_then_comes_back():
    order = _order()
    assert order.indices(0) == [0, 1]
    _see(order, [0, 1], ALL, MIXED)  # row 0 always solved: paused for one turn
    assert order.indices(1) == [2, 3]
    _see(order, [2, 3], NONE, MIXED)  # row 2 never solved: paused too
    assert order.curriculum.paused_rows() == [0, 2]
    # epoch 1 (positions 4-7: rows 0 1 2 3): rows 0 and 2 sit out, so the step takes 1 and 3
    assert order.indices(2) == [1, 3]
    assert order.curriculum.metrics()["curriculum/skipped"] == 2
    _see(order, [1, 3], ALL, MIXED)
    assert order.curriculum.paused_rows() == [1]
    # epoch 2: row 0's pause is over (position 8), row 1 sits out (position 9), row 2 is back (position 10)
    assert order.indices(3) == [0, 2]
    assert order.position(4) == {"epoch": 2, "offset": 3, "curriculum": order.curriculum.state()}
    _see(order, [0, 2], ALL, MIXED)  # row 0 solved again: one visit pauses it again; row 2 mixed: its count restarts
    assert order.curriculum.records[0].streak == 2 and order.curriculum.records[2].streak == 0
    assert order.indices(4) == [3, 1]  # position 12 (row 0) sat out, 13 is row 1, back
    m = order.curriculum.metrics()
    assert m == {"curriculum/groups_all_solved": 2, "curriculum/groups_none_solved": 0, "curriculum/groups_mixed": 2,
                 "curriculum/skipped": 2, "curriculum/paused": 0}


def test_patience_counts_visits_in_a_row_and_a_mixed_visit_restarts_the_count():
    order = _order(patience=2, pause=3)
    c = order.curriculum
    _see(order, [0], ALL)
    _see(order, [0], NONE)  # solved by every, then by no completion: both teach nothing
    assert c.paused_rows() == [0] and c.records[0].skips_left == 3 and c.records[0].pass_rate == 0.0
    _see(order, [1], ALL)
    _see(order, [1], MIXED)
    _see(order, [1], ALL)
    assert c.paused_rows() == [0] and c.records[1].streak == 1 and c.records[1].visits == 3
    # a pause of 3: row 0 sits out its next three turns (positions 0, 4, 8), then is drawn (12 and 16)
    drawn = [order.indices(step) for step in range(8)]
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
        rewards = torch.randint(0, 2, (len(rows) * g,), generator=generator).float().tolist()
        order.curriculum.observe(rows, rewards, g)
        skipped += order.curriculum.metrics()["curriculum/skipped"]
    end = order.position(12)
    positions = end["epoch"] * num_rows + end["offset"]
    assert positions == len(drawn) + skipped > len(drawn)  # every position of the order: drawn or sat out
    # each whole epoch's turns are its ten rows, each once, drawn or sat out
    epochs = [PromptOrder(num_rows, num_rows, seed=5).indices(e) for e in range(positions // num_rows)]
    assert all(sorted(epoch) == list(range(num_rows)) for epoch in epochs)


def test_a_resumed_order_draws_what_the_uninterrupted_one_draws():
    def run(order: PromptOrder, steps: range):
        out = []
        for step in steps:
            rows = order.indices(step)
            out.append(rows)
            _see(order, rows, *[ALL if r % 3 == 0 else MIXED for r in rows])
        return out

    whole = _order()
    expected = run(whole, range(8))
    first = _order()
    run(first, range(3))
    saved = first.position(3)
    for per_step in (2, 1):  # resumed with the same prompts per step, or fewer (the order goes on from the position)
        resumed = PromptOrder(4, per_step, seed=0, shuffle=False, curriculum=PassRateCurriculum(1, 1, 1.0))
        resumed.continue_from(3, torch.load(_saved(saved), weights_only=False))
        got = run(resumed, range(3, 3 + 5 * 2 // per_step))
        assert [r for rows in got for r in rows] == [r for rows in expected[3:] for r in rows]
    # a checkpoint saved without a curriculum resumes with every prompt new
    fresh = _order()
    fresh.continue_from(1, {"epoch": 0, "offset": 2})
    assert fresh.indices(1) == [2, 3] and fresh.curriculum.records == {}


def test_a_step_interrupted_after_its_draw_is_saved_as_not_drawn():
    """Ctrl-C during step 4 saves the position before it: the record as it was before the draw (its skips) and
    before the step's visits were counted, so the resumed run draws step 4 again as it was drawn."""
    order = _order()
    for step, groups in ((0, (ALL, MIXED)), (1, (NONE, MIXED)), (2, (ALL, MIXED))):
        _see(order, order.indices(step), *groups)
    before = order.position(3)
    drawn = order.indices(3)
    _see(order, drawn, ALL, ALL)  # counted, then interrupted before the update
    assert order.position(3) == before
    assert order.position(4)["curriculum"] != before["curriculum"]  # after the step: its skips and visits count
    resumed = _order()
    resumed.continue_from(3, before)
    assert resumed.indices(3) == drawn == [0, 2]
    with pytest.raises(RuntimeError, match="position before step 2 is not known"):
        order.position(1)


def _saved(position: dict):
    import io

    buffer = io.BytesIO()
    torch.save(position, buffer)  # as a checkpoint's trainer_state.pt holds it
    buffer.seek(0)
    return buffer


def test_steps_are_drawn_in_order():
    order = _order()
    with pytest.raises(RuntimeError, match="draws step 3 before step 1"):
        order.indices(2)
    assert order.indices(0) == order.indices(0) == [0, 1]  # drawn once: asking again changes nothing
    assert order.curriculum.metrics()["curriculum/skipped"] == 0


def test_without_a_curriculum_the_order_is_the_step_function_it_was():
    plain = PromptOrder(7, 3, seed=11, shuffle=True)
    assert plain.indices(5) == [PromptOrder(7, 1, seed=11).indices(p)[0] for p in range(15, 18)]
    assert plain.position(5) == {"epoch": 2, "offset": 1}


def test_rewards_must_match_the_groups():
    with pytest.raises(ValueError, match="3 rewards for 2 groups of 2"):
        PassRateCurriculum(1, 1, 1.0).observe([0, 1], [1.0, 0.0, 1.0], 2)


def test_streaming_is_refused_with_a_fix():
    from grpo_rollout.config import config_from_dict
    from grpo_rollout.config.algorithm_checks import check_algorithm

    config, problems = config_from_dict({"data": {"train": "x.jsonl", "curriculum": "pass_rate"},
                                         "rewards": ["m:f"], "training": {"max_staleness": 1}})
    check_algorithm(config, problems)  # validate-config's check
    [problem] = [p for p in problems if p.key == "data.curriculum"]
    assert problem.is_error and "max_staleness: 0" in problem.fix and "(training.max_staleness 1)" in problem.message
    # from a trial user: async_generation (max_staleness' alias) was named as "max_staleness 1", and the fix
    # "max_staleness: 0" then clashed with async_generation
    config, problems = config_from_dict({"data": {"train": "x.jsonl", "curriculum": "pass_rate"},
                                         "rewards": ["m:f"], "training": {"async_generation": True}})
    check_algorithm(config, problems)
    [problem] = [p for p in problems if p.key == "data.curriculum"]
    assert "(training.async_generation true)" in problem.message and "use async_generation: false" in problem.fix


def test_dynamic_sampling_refills_skip_the_prompts_that_sat_out_or_are_paused():
    """From a trial user: a draw used up the paused prompts' last turn to sit out, so paused_rows() was empty and
    dynamic sampling's refill rolled out all 10 prompts, the 7 that "sat out" among them. Every prompt always solved,
    10 rows, 4 per step, patience 1, pause 1."""
    from types import SimpleNamespace

    from grpo_rollout.trainer.rollout.dynamic_sampling import refill_indices
    from grpo_rollout.trainer.rollout.stage import RolloutStage

    curriculum = PassRateCurriculum(1, 1, 1.0)
    order = PromptOrder(10, 4, seed=0, shuffle=False, curriculum=curriculum)
    stage = SimpleNamespace(prompt_order=order, curriculum=curriculum)
    refills, skipped = [], []
    for step in range(5):
        rows = order.indices(step)
        refills.append(refill_indices(step, 1, 10, 4, 0, RolloutStage.drawn(stage, step)))
        skipped.append(curriculum.metrics()["curriculum/skipped"])
        _see(order, rows, *[ALL] * 4)
    assert order.indices(4) == [6, 7, 8, 9]
    # step 2 (rows 8 9 0 1) found every other row sitting out; step 3 (2 3 4 5) leaves 6 and 7 to refill from
    assert refills == [[7, 6, 9, 4], [8, 9], [], [6, 7], []]
    assert skipped == [0, 0, 10, 0, 10]


def test_a_step_does_not_take_a_row_twice_when_it_has_enough_rows():
    """From a trial user: with the other prompts sitting out, a draw past an epoch's end took rows 8 and 9 twice in
    one step (its second turn came before the first visit's result). Now that turn is passed over (counted as
    skipped); a dataset smaller than a step still repeats rows, as without a curriculum."""
    order = PromptOrder(10, 4, seed=0, shuffle=False, curriculum=PassRateCurriculum(1, 1, 1.0))
    for step in range(2):
        _see(order, order.indices(step), *[ALL] * 4)
    assert order.indices(2) == [8, 9, 0, 1]  # positions 8 9, rows 0-7 sit out, 8 9 passed over, then 0 1
    small = PromptOrder(3, 4, seed=0, shuffle=False, curriculum=PassRateCurriculum(1, 1, 1.0))
    assert small.indices(0) == [0, 1, 2, 0]
