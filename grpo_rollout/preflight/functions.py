"""Import the rollout and reward functions a config names and check their signatures against how they are called."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from ..user_code.exception_types import resolve_exception_types
from ..user_code.resolve import ImportSpecError, resolve_callable
from ..config.problems import Problem, add_error as _err, add_warning as _warn, flagged
from ..config.schema import Config
from ..rewards.calling import STANDARD_REWARD_ARGS, argument_sources, implied_rewards
from ..rollouts.contract import CONTEXT_ARGS, SAMPLING_ARGS
from ..user_code.signatures import accepts_var_kwargs, named_params, positional_only_required, required_params


def _resolve(spec: str, key: str, base_dir: Path, problems: List[Problem]) -> Optional[Callable]:
    try:
        return resolve_callable(spec, base_dir)
    except ImportSpecError as exc:
        fix = ("write `package.module:function` or `path/to/file.py:function` (relative to the current folder "
               "or the config's)")
        if str(exc).startswith("write "):  # the message is that advice already (`grpo_rollout`): show examples
            fix = ("for example `grpo_rollout.rewards.library:accuracy` or `my_rewards.py:correct` (a file relative "
                   "to the current folder or the config's)")
        _err(problems, key, spec, f"cannot import: {exc}", fix)
        return None


def _rollout_extras(fn: Optional[Callable]) -> Optional[set]:
    """Extras a rollout declares (``fn.extras``), or ``None`` when unknown until run time."""
    declared = getattr(fn, "extras", None)
    return set(declared) if declared is not None else None


def check_functions(config: Config, problems: List[Problem], base_dir: Path,
                    dataset_columns: Optional[List[str]]) -> None:
    """Import the rollout and reward functions and check they accept what they will be called with."""
    from ..rollouts import builtin_rollout

    spec = config.rollout.function
    rollout = builtin_rollout() if not spec else _resolve(spec, "rollout.function", base_dir, problems)
    if rollout is not None and spec:
        _check_rollout_signature(rollout, config, problems)
        _check_rollout_kwargs(rollout, config, base_dir, problems)
    extras = _rollout_extras(rollout) if rollout is not None else None  # unknown: already reported
    if not config.rewards and not _implies_rewards(rollout, config, base_dir):
        _err(problems, "rewards", [], "no reward function configured",
             "add `rewards: [{function: my_module:my_reward}]`", depends_on=("rewards",))  # not after "expected a list"
    for i, r in enumerate(config.rewards):
        key = f"rewards[{i}].function"
        if not r.function:  # (not reported when the entry itself was refused: it holds the defaults)
            _err(problems, key, r.function, "empty reward function", "name it as `package.module:function`",
                 depends_on=(f"rewards[{i}]",))
            continue
        fn = _resolve(r.function, key, base_dir, problems)
        if fn is None:
            continue
        _check_reward_signature(fn, i, r.function, r.kwargs, extras, dataset_columns, problems)
        _check_reward_kwargs(fn, i, r.function, dict(r.kwargs), base_dir, problems)


def _implies_rewards(rollout: Optional[Callable], config: Config, base_dir: Path) -> bool:
    """Whether the rollout adds reward functions of its own (a TRL environment's ``get_reward``); ``True`` when that
    cannot be told (what the kwargs name does not load: the rollout's own kwargs check reports it)."""
    if rollout is None:
        return True
    try:
        return bool(implied_rewards(rollout, config.rollout.kwargs, base_dir))
    except Exception:  # noqa: BLE001 - reported by the rollout's validate_kwargs hook
        return True


def _check_rollout_kwargs(fn: Callable, config: Config, base_dir: Path, problems: List[Problem]) -> None:
    """Run the rollout's own static checks of ``rollout.kwargs``, when it has them: an optional attribute
    ``fn.validate_kwargs(kwargs, base_dir) -> [(key, message, fix), ...]`` (the built-in tool-calling and environment
    rollouts check that their tools/environment import); a 4th item ``"warning"`` makes a problem a warning. A hook
    that itself fails is reported, not raised."""
    hook = getattr(fn, "validate_kwargs", None)
    if not callable(hook):
        return
    kwargs = dict(config.rollout.kwargs)
    try:
        found = list(hook(kwargs, base_dir))
    except Exception as exc:  # a user's hook: its bug must not hide the other problems
        _err(problems, "rollout.kwargs", "", f"{config.rollout.function}.validate_kwargs raised "
             f"{type(exc).__name__}: {exc}", "fix the hook, or the kwargs it could not read")
        return
    for key, message, fix, *severity in found:
        report = _warn if severity == ["warning"] else _err
        report(problems, key, kwargs.get(key.rsplit(".", 1)[-1], ""), message, fix)


def _check_reward_kwargs(fn: Callable, i: int, spec: str, kwargs: Dict[str, Any], base_dir: Path,
                         problems: List[Problem]) -> None:
    """Run a reward's own static check of its ``rewards[i].kwargs``, when it has one: an optional attribute
    ``fn.validate_kwargs(kwargs, base_dir) -> [(key, message, fix), ...]`` whose keys are the kwargs' own names
    (``math_accuracy``'s ``timeout_s`` and ``workers``); needed where the function takes ``**kwargs``, which hides a
    misspelt setting. A hook that itself fails is reported, not raised."""
    hook = getattr(fn, "validate_kwargs", None)
    if not callable(hook):
        return
    try:
        found = list(hook(kwargs, base_dir))
    except Exception as exc:  # a user's hook: its bug must not hide the other problems
        _err(problems, f"rewards[{i}].kwargs", kwargs, f"{spec}.validate_kwargs raised {type(exc).__name__}: {exc}",
             "fix the hook, or the kwargs it could not read")
        return
    for key, message, fix, *severity in found:
        report = _warn if severity == ["warning"] else _err
        report(problems, f"rewards[{i}].kwargs.{key}", kwargs.get(key, ""), message, fix)


def _check_rollout_signature(fn: Callable, config: Config, problems: List[Problem]) -> None:
    params = named_params(fn)
    name = config.rollout.function
    if positional_only_required(fn)[1:] or (not params and not positional_only_required(fn)):
        _err(problems, "rollout.function", config.rollout.function,
             f"{name} must take the prompts as its first parameter", "def rollout(prompts, **sampling_kwargs): ...")
        return
    first = (positional_only_required(fn) + params)[0]
    supplied = set(SAMPLING_ARGS) | set(config.rollout.kwargs) | set(CONTEXT_ARGS)
    if first in supplied and first not in positional_only_required(fn):
        _err(problems, "rollout.function", config.rollout.function,
             f"{name}'s first parameter `{first}` would receive the prompts, and `{first}` is also passed by name",
             f"put the prompts first: def rollout(prompts, {first}, ...)")
        return
    missing = [p for p in required_params(fn) if p != first and p not in supplied]
    for p in missing:
        _err(problems, "rollout.function", config.rollout.function,
             f"{name} requires parameter `{p}`, which is never passed",
             f"give it a default, or set `rollout.kwargs.{p}`")
    if not accepts_var_kwargs(fn):
        unknown = [k for k in list(SAMPLING_ARGS) + list(config.rollout.kwargs) if k not in params]
        if unknown:
            _err(problems, "rollout.function", config.rollout.function,
                 f"{name} does not accept {', '.join(f'`{u}`' for u in unknown)}, which it will be called with",
                 "add `**sampling_kwargs` to its parameters")


def _check_reward_signature(fn: Callable, i: int, spec: str, kwargs: Dict[str, Any], extras: Optional[set],
                            columns: Optional[List[str]], problems: List[Problem]) -> None:
    key = f"rewards[{i}].function"
    params = named_params(fn)
    if not params and not accepts_var_kwargs(fn) and not positional_only_required(fn):  # os:getcwd
        _err(problems, key, spec, f"{spec} takes no parameter that can be passed by name, so it cannot "
             f"receive the completions (a reward is called with the arguments it names: "
             f"{', '.join(STANDARD_REWARD_ARGS)}, dataset columns, ...; all of them with **kwargs)",
             "name a function with parameters, e.g. `def reward(completions, **kwargs): return [score(c) for c in "
             "completions]` (docs/rollouts.md, Reward functions)")
        return
    if not accepts_var_kwargs(fn):
        extra_cfg = [k for k in kwargs if k not in params]
        if extra_cfg:
            _err(problems, f"rewards[{i}].kwargs", kwargs,
                 f"{spec} does not accept {', '.join(f'`{k}`' for k in extra_cfg)}",
                 did_you_mean(extra_cfg, [p for p in params if p not in kwargs])
                 + "remove them or add `**kwargs` to the function")
    if positional_only_required(fn):
        _err(problems, key, spec, "positional-only parameters cannot be passed by name",
             "remove the `/` from its signature")
    _check_reward_params(fn, i, spec, kwargs, extras, columns, problems)


def _check_reward_params(fn: Callable, i: int, spec: str, kwargs: Dict[str, Any], extras: Optional[set],
                         columns: Optional[List[str]], problems: List[Problem]) -> None:
    """Each parameter reward ``i`` requires is one it will be passed: a standard argument, a dataset column (every
    column, ``data.prompt_column``'s too; ``columns`` ``None``: not loaded, ``--skip-data``), an extra the rollout
    declares (``extras`` ``None``: it declares none) or a config kwarg; else an error, or a warning where a source is
    unknown, with a did-you-mean for a name close to one of them."""
    key = f"rewards[{i}].function"
    sources = argument_sources(columns or (), extras or (), kwargs)
    for p in required_params(fn):
        if p in sources:
            continue
        close = difflib.get_close_matches(p, list(sources), n=1, cutoff=0.75)
        hint = f"; did you mean `{close[0]}` ({sources[close[0]]})?" if close else ""
        rename = f"rename the parameter to `{close[0]}`, or " if close else ""
        if columns is None:  # not loaded (or it failed to: already reported): only a likely misspelling is said
            if close:
                _warn(problems, key, spec, f"requires `{p}`, which is neither a standard argument, a config kwarg nor "
                      f"an extra the rollout declares; the dataset was not loaded, so it may be a column{hint}",
                      f"{rename}check that the dataset has a column `{p}` (validate-config without --skip-data)")
        elif extras is None:
            _warn(problems, key, spec,
                  f"requires `{p}`, which is neither a standard argument, a dataset column nor a config kwarg; "
                  f"the rollout must return it as an extra, or the first step fails{hint}",
                  f"{rename}make sure the rollout returns `{p}`, or give the parameter a default")
        else:
            _err(problems, key, spec,
                 f"requires `{p}`, which is neither a standard argument ({', '.join(STANDARD_REWARD_ARGS)}), a dataset "
                 f"column ({', '.join(columns) or 'none'}), a config kwarg, nor an extra of the rollout{hint}",
                 f"{rename}add the column `{p}` to the dataset, set `rewards[{i}].kwargs.{p}`, or give the parameter "
                 "a default")


def did_you_mean(unknown: List[str], known: List[str]) -> str:
    """``"did you mean `b` (for `a`)? "`` for each name in ``unknown`` close to one in ``known`` (difflib), else
    ``""``: the start of a fix."""
    import difflib

    pairs = [(u, difflib.get_close_matches(u, known, n=1)) for u in unknown]
    hints = [f"`{m[0]}` (for `{u}`)" for u, m in pairs if m]
    return f"did you mean {', '.join(hints)}? Otherwise " if hints else ""


def check_training_functions(config: Config, problems: List[Problem], base_dir: Path) -> None:
    """``training.advantage_function`` and ``training.loss_function`` import and can be called as the trainer calls
    them: ``fn(rewards, num_generations)``, ``fn(inputs)``."""
    import inspect

    for key, args, call, fix in (
            ("advantage_function", (None, 0), "fn(rewards, num_generations)",
             "def my_advantages(rewards, num_generations): ... return advantages  # (N,) each"),
            ("loss_function", (None,), "fn(inputs)",
             "def my_loss(inputs): ... return per_token_losses  # (B, C), from inputs.logps or inputs.ratio")):
        spec = getattr(config.training, key)
        fn = _resolve(spec, f"training.{key}", base_dir, problems) if spec else None
        if fn is None:
            continue
        try:
            inspect.signature(fn).bind(*args)
        except TypeError as exc:
            _err(problems, f"training.{key}", spec, f"cannot be called as {call}: {exc}", fix)
        except ValueError:  # no signature (a builtin): called as it is
            pass


def check_failure_errors(config: Config, problems: List[Problem], base_dir: Path) -> None:
    """Each ``rollout.failure_errors`` entry imports and names an exception class (a subclass of ``Exception``); a
    warning for ``Exception`` itself, which makes every bug a failed episode."""
    specs = config.rollout.failure_errors
    if flagged(problems, ("rollout.failure_errors",)):  # refused while loading: it holds the default
        return
    types, failed = resolve_exception_types(specs, base_dir)
    for i, spec, reason in failed:
        _err(problems, f"rollout.failure_errors[{i}]", spec, f"does not name an exception class: {reason}",
             "write a builtin's name (ConnectionError) or the class's dotted path (httpx.ConnectError, "
             "mypkg.errors:SandboxDown), or leave it out")
    if Exception in types:
        _warn(problems, "rollout.failure_errors", list(specs), "lists Exception: every error, a bug in your code "
              "included, then counts as a failed episode and is retried or dropped instead of stopping the run",
              "name the errors of your sandbox's or service's client (e.g. httpx.ConnectError)")
