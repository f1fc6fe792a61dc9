"""The value checks of a config: every key's range and allowed set (the schema's fields, checked by pydantic), the
rules across keys of a section (its model validators), and the loggers installed (:func:`check_values`)."""

from __future__ import annotations

import importlib.util
from typing import Annotated, Any, Callable, Dict, List, Tuple

from pydantic import TypeAdapter, ValidationError

from .fields import bounds_of, dotted, range_text, rule_of, strip_optional, value_at, walk
from .problems import Problem, add_error as _err, add_warning as _warn
from .schema import Config
from .translate import error_loc, to_problem


def _interval(bounds: Dict[str, float]) -> Callable[[Any], bool]:
    """``bounds`` (``{"ge": 0, "lt": 1}``) as a predicate: ``None`` passes (only ``Optional`` keys hold it), NaN
    fails."""
    tests = {"ge": lambda v, b: v >= b, "gt": lambda v, b: v > b, "le": lambda v, b: v <= b, "lt": lambda v, b: v < b}
    return lambda v: v is None or all(tests[name](v, b) for name, b in bounds.items())


def range_bounds() -> Dict[str, Callable[[Any], bool]]:
    """The keys whose allowed range is a plain interval, with that interval as a predicate (``sampling.top_k``,
    ruled by a validator, is left out)."""
    return {key: _interval(bounds_of(info)) for key, info in walk(Config) if bounds_of(info)}


def _predicate(info: Any) -> Callable[[Any], bool]:
    """Whether a value passes the field's own validation (its type, range and validators)."""
    adapter = TypeAdapter(Annotated[(info.annotation, *info.metadata)])

    def ok(value: Any) -> bool:
        try:
            return adapter.validate_python(value) is not None or value is None
        except ValidationError:
            return False
    return ok


#: (key, predicate, problem, fix) for every number with a range or a rule of its own (what check_values enforces)
_RANGES: List[Tuple[str, Callable[[Any], bool], str, str]] = [
    (key, _interval(bounds_of(info)) if bounds_of(info) else _predicate(info),
     rule_of(info).problem or f"must be {range_text(info) or 'valid'}", rule_of(info).fix)
    for key, info in walk(Config) if strip_optional(info.annotation)[0] in (int, float)
    and (bounds_of(info) or rule_of(info).fix)]


def check_values(config: Config, problems: List[Problem]) -> None:
    """Every key's type, range and allowed values, and each section's rules across its keys (the schema's model
    validators), as pydantic checks them on the config as it is now; then whether the loggers named are installed
    and whether the warm-up covers the run."""
    try:
        Config.model_validate(config.model_dump(warnings=False))
    except ValidationError as exc:
        for err in exc.errors():
            loc = error_loc(err)
            p = to_problem(err, Config, value_at(config, loc, err.get("input")))  # NaN shown as the NaN set
            _err(problems, p.key, p.value, p.message, p.fix,
                 depends_on=[dotted(loc[:-1] + (k,)) for k in err.get("ctx", {}).get("depends_on", ())])
    for i, name in enumerate(config.logging.report_to):
        if name in ("trackio", "wandb") and importlib.util.find_spec(name) is None:
            _err(problems, f"logging.report_to[{i}]", name, f"`{name}` is not installed", f"pip install {name}")
    t = config.training
    if isinstance(t.max_steps, int) and isinstance(t.warmup_steps, int) and 0 < t.max_steps <= t.warmup_steps:
        _warn(problems, "training.warmup_steps", t.warmup_steps, f"covers all {t.max_steps} steps",
              "use fewer warm-up steps than training.max_steps",
              depends_on=("training.max_steps", "training.warmup_steps"))
