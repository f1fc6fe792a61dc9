"""Settings that the rest of the config makes do nothing, or that clash with a built-in: validate-config's warnings and
errors for them (a CISPO bound without loss_type cispo, a curriculum setting without the curriculum, a reward named
like the overlong penalty, ...)."""

from __future__ import annotations

import pytest

from grpo_rollout.config.algorithm_checks import check_algorithm, check_unused_settings
from grpo_rollout.config.schema import RewardConfig
from config_helpers import make, run


# --- settings that change nothing under the rest of the config --------------------------------------------------

@pytest.mark.parametrize("settings, key, needs", [
    (dict(training__cispo_epsilon_high=2.0), "training.cispo_epsilon_high", "training.loss_type: cispo"),
    (dict(training__sapo_tau_negative=2.0, training__loss_type="cispo"), "training.sapo_tau_negative",
     "training.loss_type: sapo"),
    (dict(training__turn_discount=0.9), "training.turn_discount", "training.credit: turn"),
    (dict(training__overlong_penalty=0.5), "training.overlong_penalty", "training.overlong_buffer > 0"),
    (dict(rollout__max_retries=5, rollout__on_error="drop"), "rollout.max_retries", "rollout.on_error: retry"),
    (dict(data__curriculum_patience=3), "data.curriculum_patience", "data.curriculum: pass_rate"),
    (dict(data__curriculum_success_reward=0.5), "data.curriculum_success_reward", "data.curriculum: pass_rate"),
])
def test_a_setting_that_changes_nothing_is_a_warning(settings, key, needs):
    [p] = run(check_unused_settings, make(**settings))
    assert (p.key, p.severity) == (key, "warning")
    assert p.message == f"changes nothing without {needs}" and p.fix.startswith(f"set {needs}")
    used = {"training.loss_type: cispo": dict(training__loss_type="cispo"),
            "training.loss_type: sapo": dict(training__loss_type="sapo"),
            "training.credit: turn": dict(training__credit="turn", rollout__function="env.py:play"),
            "training.overlong_buffer > 0": dict(training__overlong_buffer=4),
            "rollout.on_error: retry": dict(rollout__on_error="retry"),
            "data.curriculum: pass_rate": dict(data__curriculum="pass_rate")}[needs]
    assert run(check_unused_settings, make(**{**settings, **used})) == []


def test_cispo_bounds_with_a_loss_function_of_yours_change_nothing():
    [p] = run(check_unused_settings, make(training__loss_type="cispo", training__cispo_epsilon_high=2.0,
                                          training__loss_function="loss.py:mine"))
    assert p.key == "training.cispo_epsilon_high"
    assert p.message == "changes nothing without training.loss_type: cispo (and no training.loss_function)"


def test_turn_credit_with_a_single_turn_rollout_is_a_warning():
    [p] = run(check_unused_settings, make(training__credit="turn"))
    assert p.key == "training.credit" and "the built-in single-turn sampling" in p.message
    assert run(check_unused_settings, make(training__credit="turn",
                                           rollout__function="grpo_rollout.rollouts:tool_calling_rollout")) == []


def test_a_reward_named_like_the_overlong_penalty_is_an_error():
    config = make(training__overlong_buffer=4)
    config.rewards = [RewardConfig(function="rewards.py:overlong_penalty")]
    [p] = run(check_algorithm, config)
    assert (p.key, p.severity) == ("rewards[0].function", "error") and "rename your function" in p.fix
    config.training.overlong_buffer = 0
    assert run(check_algorithm, config) == []


# --- the run's length -----------------------------------------------------------------------------------------------

def test_max_steps_next_to_num_epochs_is_a_warning_and_null_says_what_to_do():
    """From a trial user: num_epochs replaced max_steps without a word, and `training.max_steps=null` said only
    "expected int, got NoneType"."""
    from grpo_rollout.config import config_from_dict

    [p] = run(check_unused_settings, make(training__num_epochs=2.0, training__max_steps=7))
    assert p.key == "training.max_steps" and "replaced by training.num_epochs (2)" in p.message
    assert run(check_unused_settings, make(training__num_epochs=2.0)) == []
    _, problems = config_from_dict({"training": {"max_steps": None}})
    [p] = [p for p in problems if p.key == "training.max_steps"]
    assert p.message == "expected int, got null" and "set training.num_epochs" in p.fix
    # from a second trial user: a max_steps in the file cannot be left out on the command line; null unsets it there
    config, problems = config_from_dict({"training": {"max_steps": None, "num_epochs": 2}})
    assert not [p for p in problems if p.key.startswith("training.")] and config.training.num_epochs == 2
    assert run(check_unused_settings, config) == []  # the default max_steps: no warning
