"""Static checks of the functions a config names: imports, rollout and reward signatures, reward parameters."""

from __future__ import annotations

import math

import pytest



# --- named functions: imports ---------------------------------------------------------------------------------------

SCORING = """\
THRESHOLD = 0.5

def accuracy(completions, answer, **kwargs):
    return [float(a in c) for c, a in zip(completions, answer)]

class Scorer:
    @staticmethod
    def score(completions, **kwargs):
        return [0.0] * len(completions)
"""


def package(project, source=SCORING):
    """A package ``<unique>/scoring.py`` next to the config; returns the package name."""
    name = project.module("", prefix="pkg")
    (project.root / f"{name}.py").unlink()
    project.write(f"{name}/__init__.py", "")
    project.write(f"{name}/scoring.py", source)
    return name


@pytest.mark.parametrize("spec", ["{pkg}.scoring:accuracy", "{pkg}.scoring.accuracy", "{pkg}.scoring:Scorer.score",
                                  "{pkg}.scoring.Scorer.score", "rewards.py:accuracy", "./rewards.py:accuracy"])
def test_reward_function_spec_forms_import(project, spec):
    cfg = project.baseline()
    cfg["rewards"][0]["function"] = spec.format(pkg=package(project))
    assert project.check(cfg) == []


def test_file_relative_to_the_config_folder(project, errs):
    project.write("conf/local_rewards.py", "def accuracy(completions, **kwargs):\n    return [1.0] * len(completions)\n")
    project.write_jsonl("conf/conf_data.jsonl", [{"prompt": "hi"}])
    cfg = project.baseline()
    cfg["data"]["train"] = "conf_data.jsonl"
    cfg["rewards"][0]["function"] = "local_rewards.py:accuracy"
    assert project.check(cfg, rel="conf/config.yaml") == []  # cwd is the project root, not conf/
    assert [p.key for p in errs(project.check(cfg))] == ["data.train", "rewards[0].function"]  # config in root


@pytest.mark.parametrize("spec, needle", [
    ("{pkg}.nosuch:accuracy", "no module named `{pkg}.nosuch`"),
    ("nosuchpkg_zz9.mod:accuracy", "no module named `nosuchpkg_zz9`"),
    ("nosuchpkg_zz9.mod.accuracy", "no module named `nosuchpkg_zz9`"),
    ("{pkg}.scoring:acuracy", "`{pkg}.scoring` has no attribute `acuracy`; did you mean `accuracy`?"),
    ("{pkg}.scoring.acuracy", "has no attribute `acuracy`; did you mean `accuracy`?"),
    ("{pkg}.scoring:THRESHOLD", "is a float, not a function"),
    ("missing_file.py:accuracy", "missing_file.py"),
    ("rewards.py", "needs the function name after a colon"),
    ("accuracy", "write `package.module:function`"),
    ("{pkg}.broken:accuracy", "importing `{pkg}.broken` failed: RuntimeError: boom"),
    ("{pkg}/broken.py:accuracy", "RuntimeError: boom"),
])
def test_reward_function_that_does_not_import(project, errs, spec, needle):
    pkg = package(project)
    project.write(f"{pkg}/broken.py", "raise RuntimeError('boom')\n")
    cfg = project.baseline()
    cfg["rewards"][0]["function"] = spec.format(pkg=pkg)
    [p] = errs(project.check(cfg))
    assert (p.key, p.value) == ("rewards[0].function", spec.format(pkg=pkg))
    assert p.message.startswith("cannot import: ") and needle.format(pkg=pkg) in p.message
    if spec.startswith("missing_file"):
        assert "does not exist" in p.message


# --- rollout and reward signatures ----------------------------------------------------------------------------------

def with_rollout(project, source, **rollout):
    cfg = project.baseline()
    cfg["rollout"] = {"function": f"{project.module(source)}:rollout", **rollout}
    return cfg


ALL_SAMPLING = "n, temperature, top_p, top_k, min_p, repetition_penalty, max_completion_length, seed"


@pytest.mark.parametrize("signature, kwargs", [
    ("prompts, **sampling_kwargs", {}),
    ("prompts, *, client, tokenizer, rows, step, n, **kw", {}),   # context objects are passed when named
    (f"prompts, {ALL_SAMPLING}, client=None", {}),               # no **kwargs, but names every sampling setting
    ("prompts, env, **kw", {"env": "maze"}),                      # required, supplied by rollout.kwargs
])
def test_rollout_signature_that_fits(project, signature, kwargs):
    cfg = with_rollout(project, f"def rollout({signature}):\n    return {{}}\n", kwargs=kwargs)
    assert project.check(cfg) == []


@pytest.mark.parametrize("signature, needle", [
    ("prompts, env, **kw", "requires parameter `env`, which is never passed"),
    ("prompts, n, temperature", "does not accept `top_p`, `top_k`, `min_p`"),
    ("", "must take the prompts as its first parameter"),
    # a new user's: passed validate-config, then the dry run failed with "got multiple values for argument 'client'"
    ("client, **kw", "first parameter `client` would receive the prompts"),
    ("n, prompts, **kw", "first parameter `n` would receive the prompts"),
])
def test_rollout_signature_that_does_not_fit(project, errs, signature, needle):
    cfg = with_rollout(project, f"def rollout({signature}):\n    return {{}}\n")
    [p] = errs(project.check(cfg))
    assert p.key == "rollout.function" and needle in p.message
    if "does not accept" in needle:
        assert "**sampling_kwargs" in p.fix


HOOKED_ROLLOUT = (
    "def rollout(prompts, **kw):\n    return {}\n\n"
    "def validate_kwargs(kwargs, base_dir):\n"
    "    assert base_dir.is_dir()\n"
    "    return [('rollout.kwargs.level', f\"level {kwargs['level']} is not a maze level\", 'use 1 to 3')] "
    "if kwargs.get('level', 1) > 3 else []\n\n"
    "rollout.validate_kwargs = validate_kwargs\n")


def test_rollout_validate_kwargs_hook_reports_its_problems(project, errs):
    assert project.check(with_rollout(project, HOOKED_ROLLOUT, kwargs={"level": 2})) == []
    [p] = errs(project.check(with_rollout(project, HOOKED_ROLLOUT, kwargs={"level": 7})))
    assert (p.key, p.value, p.message, p.fix) == ("rollout.kwargs.level", 7, "level 7 is not a maze level", "use 1 to 3")


def test_rollout_validate_kwargs_hook_can_warn(project):
    source = HOOKED_ROLLOUT + ("rollout.validate_kwargs = lambda kwargs, base_dir: "
                               "[('rollout.kwargs.level', 'unusual level', 'fine if meant', 'warning')]\n")
    [p] = project.check(with_rollout(project, source, kwargs={"level": 2}))
    assert (p.key, p.severity, p.message) == ("rollout.kwargs.level", "warning", "unusual level")


def test_rollout_validate_kwargs_hook_that_raises_is_reported(project, errs):
    source = HOOKED_ROLLOUT + "rollout.validate_kwargs = lambda kwargs, base_dir: kwargs['missing']\n"
    [p] = errs(project.check(with_rollout(project, source)))
    assert p.key == "rollout.kwargs" and "validate_kwargs raised KeyError" in p.message


@pytest.mark.parametrize("function, kwargs, key, needle", [
    ("tool_calling:tool_calling_rollout", {"tools": ["no_such_module:f"]}, "rollout.kwargs.tools", "no_such_module"),
    ("tool_calling:tool_calling_rollout", {}, "rollout.kwargs.tools", "no tools configured"),
    ("tool_calling:tool_calling_rollout", {"tools": ["json:dumps"], "tool_prompt": "xml"},
     "rollout.kwargs.tool_prompt", "must be auto, template or system"),
    ("environment:environment_rollout", {"env": "json:JSONDecoder"}, "rollout.kwargs.env", "reset(row) and step(text)"),
    ("environment:environment_rollout", {"env": "json:dumps", "max_turns": 0}, "rollout.kwargs.max_turns", ">= 1"),
])
def test_builtin_multi_turn_rollouts_check_their_kwargs(project, errs, function, kwargs, key, needle):
    cfg = project.baseline()
    cfg["rollout"] = {"function": f"grpo_rollout.rollouts.{function}", "kwargs": kwargs}
    found = errs(project.check(cfg))
    assert key in [p.key for p in found], [str(p) for p in found]
    assert any(needle in p.message for p in found if p.key == key)


PLAIN_ROLLOUT = "def rollout(prompts, **kw):\n    return {}\n"
NEEDS_FOO = "def needs_foo(completions, foo, **kwargs):\n    return [foo] * len(completions)\n"


def with_reward(project, source, fn, **reward):
    cfg = project.baseline()
    cfg["rewards"] = [{"function": f"{project.module(source)}:{fn}", **reward}]
    return cfg


def test_reward_param_nobody_supplies_is_an_error_with_the_builtin_rollout(project):
    [p] = project.check(with_reward(project, NEEDS_FOO, "needs_foo"))
    assert (p.key, p.severity) == ("rewards[0].function", "error")
    assert "requires `foo`" in p.message and "a dataset column (prompt, answer)" in p.message


def test_reward_param_is_a_warning_with_a_rollout_that_declares_no_extras(project):
    cfg = with_reward(project, NEEDS_FOO, "needs_foo")
    cfg["rollout"] = {"function": f"{project.module(PLAIN_ROLLOUT)}:rollout"}
    [p] = project.check(cfg)
    assert (p.key, p.severity) == ("rewards[0].function", "warning") and "requires `foo`" in p.message


def test_reward_param_from_a_declared_rollout_extra_passes(project):
    cfg = with_reward(project, NEEDS_FOO, "needs_foo")
    source = PLAIN_ROLLOUT + "\nrollout.extras = ('foo',)\n"
    cfg["rollout"] = {"function": f"{project.module(source)}:rollout"}
    assert project.check(cfg) == []


def test_reward_params_from_kwargs_columns_and_standard_args_pass(project):
    source = NEEDS_FOO + "def standard(prompts, completions, completion_ids, step, answer):\n    return []\n"
    cfg = with_reward(project, source, "needs_foo", kwargs={"foo": 1.0})
    assert project.check(cfg) == []
    assert project.check(with_reward(project, source, "standard")) == []


def test_reward_kwargs_it_does_not_accept(project, errs):
    source = "def strict(completions, answer):\n    return []\n"
    [p] = errs(project.check(with_reward(project, source, "strict", kwargs={"scale": 2})))
    assert (p.key, p.value) == ("rewards[0].kwargs", {"scale": 2}) and "does not accept `scale`" in p.message


def test_reward_with_positional_only_params(project, errs):
    source = "def posonly(completions, /, answer):\n    return []\n"
    [p] = errs(project.check(with_reward(project, source, "posonly")))
    assert p.key == "rewards[0].function" and "positional-only" in p.message


@pytest.mark.parametrize("rewards, key, message", [
    ([], "rewards", "no reward function configured"),
    ([{"function": ""}], "rewards[0].function", "empty reward function"),
    ([{"function": "rewards.py:accuracy", "weight": math.nan}], "rewards[0].weight", "must be a finite number"),
])
def test_bad_reward_entries(project, errs, rewards, key, message):
    cfg = project.baseline()
    cfg["rewards"] = rewards
    [p] = errs(project.check(cfg))
    assert (p.key, p.message) == (key, message)


def test_skipping_the_data_does_not_flag_reward_params_that_name_columns(project):
    # `validate-config --skip-data`: the columns are unknown, so `answer` must not be reported missing
    assert project.check(project.baseline(), load_data=False) == []


# --- reward parameters: did you mean (issue 12) ---------------------------------------------------------------------

NEEDS_NUM_TOKENZ = "def brevity(completions, num_tokenz, **kwargs):\n    return [0.0] * len(completions)\n"


def test_reward_param_close_to_a_rollout_extra_gets_a_suggestion(project, errs):
    cfg = with_reward(project, NEEDS_NUM_TOKENZ, "brevity")
    rollout = project.module(PLAIN_ROLLOUT + "rollout.extras = ('num_tokens',)\n")
    cfg["rollout"] = {"function": f"{rollout}:rollout"}
    [p] = errs(project.check(cfg))
    assert p.key == "rewards[0].function" and "requires `num_tokenz`" in p.message
    assert p.message.endswith("did you mean `num_tokens` (an extra of the rollout)?")
    assert p.fix.startswith("rename the parameter to `num_tokens`, or ")


def test_reward_param_close_to_a_dataset_column_gets_a_suggestion(project, errs):
    source = "def exact(completions, answr, **kwargs):\n    return [0.0] * len(completions)\n"
    [p] = errs(project.check(with_reward(project, source, "exact")))
    assert "did you mean `answer` (a dataset column)?" in p.message


def test_reward_param_suggestion_also_in_the_warning_without_declared_extras(project):
    source = "def count(completion, **kwargs):\n    return [0.0] * len(completion)\n"
    cfg = with_reward(project, source, "count")
    cfg["rollout"] = {"function": f"{project.module(PLAIN_ROLLOUT)}:rollout"}
    [p] = project.check(cfg)
    assert p.severity == "warning" and "did you mean `completions` (a standard argument)?" in p.message


def test_reward_param_unlike_anything_gets_no_suggestion(project):
    [p] = project.check(with_reward(project, NEEDS_FOO, "needs_foo"))
    assert "requires `foo`" in p.message and "did you mean" not in p.message and "rename" not in p.fix


def test_a_name_without_a_function_says_so_once(project, errs):
    """A new user's `rollout.function=grpo_rollout`: the problem and the fix said the same sentence."""
    cfg = project.baseline()
    cfg["rollout"] = {"function": "grpo_rollout"}
    [p] = errs(project.check(cfg))
    assert p.key == "rollout.function" and p.message.startswith("cannot import: write `package.module:function`")
    assert p.fix.startswith("for example `grpo_rollout.rewards.library:accuracy`")


def test_a_reward_that_takes_no_parameters_is_refused(project, errs):
    """The user's `rewards: [{function: os:getcwd}]` passed validate-config; it cannot receive the completions."""
    cfg = project.baseline()
    cfg["rewards"] = [{"function": "os:getcwd"}]
    [p] = [p for p in errs(project.check(cfg)) if p.key == "rewards[0].function"]
    assert p.value == "os:getcwd" and "os:getcwd takes no parameter" in p.message and "completions" in p.message
    assert "def reward(completions, **kwargs)" in p.fix
    module = project.module("def star(*args):\n    return []\n\ndef anything(**kwargs):\n    return []\n")
    cfg["rewards"] = [{"function": f"{module}:star"}]
    assert [p.key for p in errs(project.check(cfg)) if "takes no parameter" in p.message] == ["rewards[0].function"]
    cfg["rewards"] = [{"function": f"{module}:anything"}]
    assert project.check(cfg) == []
