"""Issue 18: GSPO with a token-summed loss, learning rate 0, repetition penalty, and ``vllm.extra_args`` against the
flags the server launcher sets; each through ``check_config`` on a written YAML, as ``validate-config`` runs it."""

from __future__ import annotations

from pathlib import Path

import pytest

from grpo_rollout.config import Config
from grpo_rollout.generation.server.managed_flags import MANAGED_FLAGS, check_server_args
from grpo_rollout.generation.server.launch import ServerSettings, server_command


ROOT = Path(__file__).resolve().parents[2]


def _at(problems, key):
    return [(p.severity, p.value) for p in problems if p.key == key]


# --- GSPO: importance_level sequence with a token-summed loss_type --------------------------------------------------

@pytest.mark.parametrize("loss_type", ["dapo", "bnpo", "dr_grpo"])
def test_gspo_with_a_token_summed_loss_is_a_warning_naming_grpo(project, loss_type):
    cfg = project.baseline()
    cfg["training"].update(importance_level="sequence", loss_type=loss_type, num_iterations=2, epsilon=3e-4,
                           epsilon_high=4e-4)
    [p] = project.check(cfg)
    assert (p.key, p.value, p.severity) == ("training.loss_type", loss_type, "warning")
    assert "each sequence counts as many times as it has trained tokens" in p.message
    assert "2507.18071" in p.message and "averages the loss over each sequence's tokens, then over the group" in p.message
    assert p.fix.startswith("set training.loss_type: grpo")


def test_gspo_with_the_papers_loss_type_is_clean(project):
    cfg = project.baseline()
    cfg["training"].update(importance_level="sequence", loss_type="grpo", num_iterations=2, epsilon=3e-4,
                           epsilon_high=4e-4)
    assert project.check(cfg) == []


def test_token_level_dapo_is_not_warned_about(project):
    cfg = project.baseline()
    cfg["training"]["loss_type"] = "dapo"
    assert project.check(cfg) == []


# --- learning rate 0 -----------------------------------------------------------------------------------------------

def _the_only_problem(project, section: str, name: str, value):
    """The one problem of the baseline config with ``section.name`` set to ``value`` (and the config, to vary)."""
    cfg = project.baseline()
    cfg[section][name] = value
    [p] = project.check(cfg)
    return p, cfg


def test_learning_rate_zero_is_allowed_with_a_warning(project):
    p, cfg = _the_only_problem(project, "training", "learning_rate", 0)
    assert (p.key, p.value, p.severity) == ("training.learning_rate", 0.0, "warning")
    assert "no weight ever changes" in p.message and "training.learning_rate" in p.fix
    cfg["training"]["learning_rate"] = -1e-6
    assert _at(project.check(cfg), "training.learning_rate") == [("error", -1e-6)]  # no warning on top


# --- repetition penalty ----------------------------------------------------------------------------------------------

def test_repetition_penalty_warns_that_sampler_correction_and_stale_check_are_off(project):
    p, cfg = _the_only_problem(project, "sampling", "repetition_penalty", 1.1)
    assert (p.key, p.value, p.severity) == ("sampling.repetition_penalty", 1.1, "warning")
    assert "turns off the sampler correction" in p.message and "the stale-weights check" in p.message
    assert "sampling.repetition_penalty: 1.0" in p.fix
    cfg["sampling"]["repetition_penalty"] = 0.0  # out of range: the error alone
    assert _at(project.check(cfg), "sampling.repetition_penalty") == [("error", 0.0)]


def test_the_warning_matches_what_the_trainer_does():
    """The warning's claim, pinned to the trainer: with a penalty, compare_with_sampler is off."""
    import inspect

    from grpo_rollout.trainer import recipe

    assert "self.compare_with_sampler = s.repetition_penalty == 1.0" in inspect.getsource(recipe)


# --- vllm.extra_args against the launcher's own flags ---------------------------------------------------------------

def test_every_flag_the_launcher_sets_is_managed():
    settings = ServerSettings(model="m", max_model_len=512, api_key="k", weight_transfer="nccl", devices="0,1")
    argv, _ = server_command(settings)
    flags = {a for a in argv if a.startswith("--")}
    # chunked prefill and tensor parallelism are the launcher's defaults that extra args may change on purpose
    assert flags - {"--no-enable-chunked-prefill", "--tensor-parallel-size"} <= set(MANAGED_FLAGS)


def test_dtype_in_extra_args_contradicting_model_dtype_is_an_error(project):
    cfg = project.baseline()
    cfg["vllm"]["extra_args"] = ["--enable-prefix-caching", "--dtype", "float16"]
    [p] = project.check(cfg)
    assert (p.key, p.value, p.severity) == ("vllm.extra_args[1]", "--dtype float16", "error")
    assert "model.dtype = float32" in p.message
    assert p.fix.startswith("remove `--dtype` from vllm.extra_args and set model.dtype: float16 instead")


@pytest.mark.parametrize("args, key, needle, fix", [
    (["--dtype=half"], "vllm.extra_args[0]", "model.dtype = float32", "set model.dtype: float16"),
    (["--max_model_len", "4096"], "vllm.extra_args[0]", "sampling.max_prompt_length + sampling.max_completion_length",
     "set vllm.max_model_len: 4096"),
    (["--port", "9000"], "vllm.extra_args[0]", "spawn mode picks a free port itself", "spawn mode serves on 127.0.0.1"),
    (["--host", "0.0.0.0"], "vllm.extra_args[0]", "vllm.host = 127.0.0.1", "spawn mode serves on 127.0.0.1"),
    (["--api-key", "abc"], "vllm.extra_args[0]", "vllm.api_key is unset", "set vllm.api_key: abc"),
    (["--logprobs-mode", "raw_logprobs"], "vllm.extra_args[0]", "'processed_logprobs'", "grpo-rollout needs"),
    (["--model", "other/model"], "vllm.extra_args[0]", "model.name_or_path", "the model being trained"),
    (["-O3", "--no-enforce-eager"], "vllm.extra_args[1]", "vllm.enforce_eager = true", "set vllm.enforce_eager: false"),
    (["--dtype"], "vllm.extra_args[0]", "has no value", "remove `--dtype`"),
])
def test_extra_args_that_contradict_a_managed_setting(args, key, needle, fix):
    config = Config()
    config.model.name_or_path = "my/model"
    config.vllm.extra_args = args
    problems = []
    check_server_args(config, problems)
    [p] = problems
    assert (p.key, p.severity) == (key, "error")
    assert needle in p.message and fix in p.fix


def test_extra_args_that_repeat_a_managed_setting_warn_and_others_pass():
    config = Config()
    config.vllm.mode = "attach"
    config.vllm.extra_args = ["--dtype", "float32", "--port=8000", "--enable-prefix-caching", "--seed", "3"]
    problems = []
    check_server_args(config, problems)
    assert [(p.key, p.value, p.severity) for p in problems] == [
        ("vllm.extra_args[0]", "--dtype float32", "warning"), ("vllm.extra_args[2]", "--port 8000", "warning")]
    assert problems[0].message == "repeats what the launcher already sets (model.dtype = float32)"


def test_extra_args_check_skips_a_key_that_already_has_an_error(project):
    cfg = project.baseline()
    cfg["model"]["dtype"] = "float8"  # not allowed: that error alone, not also a contradiction with it
    cfg["vllm"]["extra_args"] = ["--dtype", "float16"]
    assert [(p.key, p.severity) for p in project.check(cfg)] == [("model.dtype", "error")]


# --- the multi-turn budget (found by the new user of issue 19) ------------------------------------------------------

def test_turns_that_cannot_fit_the_budget_warn(project):
    """``max_completion_length: 40`` with 3 turns × 24 tokens passed silently, though docs/multi_turn.md's rule of
    thumb says the budget must hold them."""
    cfg = project.baseline()
    cfg["rollout"] = {"function": "grpo_rollout.rollouts.environment:environment_rollout",
                      "kwargs": {"env": str(ROOT / "examples/guess_number/env.py") + ":GuessNumberEnv",
                                 "max_turns": 3, "max_turn_tokens": 24}}
    cfg["sampling"]["max_completion_length"] = 40
    [p] = [p for p in project.check(cfg) if p.key == "sampling.max_completion_length"]
    assert p.severity == "warning" and "3 × 24 = 72 sampled tokens" in p.message
    assert "at least 72" in p.fix
    cfg["sampling"]["max_completion_length"] = 128
    assert [p for p in project.check(cfg) if p.key == "sampling.max_completion_length"] == []
