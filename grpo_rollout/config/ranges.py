"""The value checks of a config: every key's range and allowed set (the schema's fields, checked by pydantic), the
rules across keys of a section (its model validators), and the loggers installed (:func:`check_values`)."""

from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass
from typing import Annotated, Any, Callable, Dict, List, Optional, Tuple

from pydantic import TypeAdapter, ValidationError

from .fields import bounds_of, range_text, rule_of, strip_optional, walk
from .problems import Problem, add_error as _err, add_warning as _warn
from .schema import Config
from .translate import dotted, error_loc, to_problem


@dataclass(frozen=True)
class Bound:
    """A key's interval, read from its field (:func:`range_bounds`): ``None`` passes (only ``Optional`` keys can
    hold it); NaN fails. ``minimum``/``maximum``: ``>=``/``<=``; ``exclusive_*``: ``>``/``<``."""

    minimum: Optional[float] = None
    exclusive_minimum: Optional[float] = None
    maximum: Optional[float] = None
    exclusive_maximum: Optional[float] = None

    def __call__(self, value: Any) -> bool:
        """Whether ``value`` lies in the interval (``None``: yes)."""
        if value is None:
            return True
        return ((self.minimum is None or value >= self.minimum)
                and (self.exclusive_minimum is None or value > self.exclusive_minimum)
                and (self.maximum is None or value <= self.maximum)
                and (self.exclusive_maximum is None or value < self.exclusive_maximum))


def range_bounds() -> Dict[str, Bound]:
    """The keys whose allowed range is a plain interval, with that interval (``sampling.top_k``, ruled by a
    validator, is left out)."""
    names = {"ge": "minimum", "gt": "exclusive_minimum", "le": "maximum", "lt": "exclusive_maximum"}
    return {key: Bound(**{names[k]: v for k, v in bounds_of(info).items()})
            for key, info in walk(Config) if bounds_of(info)}


def _field_check(info: Any) -> Callable[[Any], bool]:
    adapter = TypeAdapter(Annotated[(info.annotation, *info.metadata)])

    def ok(value: Any) -> bool:
        try:
            adapter.validate_python(value)
            return not (isinstance(value, float) and math.isnan(value))
        except ValidationError:
            return False
    return ok


def _ranges() -> List[Tuple[str, Callable[[Any], bool], str, str]]:
    """(key, predicate, problem, fix) for every number with a range or a rule of its own."""
    out = []
    for key, info in walk(Config):
        rule = rule_of(info)
        if strip_optional(info.annotation)[0] in (int, float) and (bounds_of(info) or rule.problem or rule.fix):
            bound = range_bounds().get(key)
            message = rule.problem or (f"must be {range_text(info)}" if bound else "must pass its validator")
            out.append((key, bound or _field_check(info), message, rule.fix))
    return out


_RANGES = _ranges()


def check_values(config: Config, problems: List[Problem]) -> None:
    """Every key's type, range and allowed values, and each section's rules across its keys (the schema's model
    validators), as pydantic checks them on the config as it is now; then whether the loggers named are installed
    and whether the warm-up covers the run."""
    try:
        Config.model_validate(config.model_dump(warnings=False))
    except ValidationError as exc:
        for err in exc.errors():
            loc = error_loc(err)
            p = to_problem(err, Config, _value_at(config, loc, err.get("input")))
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


def _value_at(config: Config, loc: Tuple[Any, ...], default: Any) -> Any:
    """The value at ``loc`` as the config holds it (the very object: NaN is shown as the NaN set)."""
    node: Any = config
    try:
        for part in loc:
            node = node[part] if isinstance(part, int) else getattr(node, part)
        return node
    except (AttributeError, IndexError, KeyError, TypeError):
        return default
