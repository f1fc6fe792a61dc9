"""The value checks of a config: every key's range and allowed set (the schema's fields, checked by pydantic), the
rules across keys of a section (its model validators), and the loggers installed (:func:`check_values`)."""

from __future__ import annotations

import importlib.util
from typing import List

from pydantic import ValidationError

from .fields import dotted, value_at
from .problems import Problem, add_error as _err, add_warning as _warn
from .schema import Config
from .translate import error_loc, to_problem


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
