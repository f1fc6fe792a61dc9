"""The ranges of single numbers and the allowed values of enum-like keys (:func:`check_values`).

A plain interval is a :class:`Bound`, which the JSON Schema (:mod:`grpo_rollout.config.json_schema`) reads too.
"""

from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

from .problems import Problem, add_error as _err, add_warning as _warn
from .schema import ENUMS, REPORT_TO, Config


@dataclass(frozen=True)
class Bound:
    """A plain interval as a range predicate: :data:`_RANGES` uses it wherever a key's range is one, and the JSON
    Schema (:func:`grpo_rollout.config.json_schema.config_json_schema`) reads the same limits, so they are written
    once. ``None`` passes (only ``Optional`` keys can hold it, and null is allowed there); NaN fails.

    Attributes:
        minimum: smallest allowed value (``>=``), or ``None``.
        exclusive_minimum: the value must be above this (``>``), or ``None``.
        maximum: largest allowed value (``<=``), or ``None``.
        exclusive_maximum: the value must be below this (``<``), or ``None``.
    """

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

    def json_schema(self) -> Dict[str, float]:
        """The interval as JSON Schema keywords (``minimum``, ``exclusiveMinimum``, ``maximum``, ...)."""
        words = {"minimum": self.minimum, "exclusiveMinimum": self.exclusive_minimum, "maximum": self.maximum,
                 "exclusiveMaximum": self.exclusive_maximum}
        return {word: limit for word, limit in words.items() if limit is not None}


# (key, predicate, problem, fix) for single numbers; predicates see the value (None only for Optional keys).
# A plain interval is a Bound, which the JSON Schema reads too; other rules stay lambdas (and out of the schema).
_RANGES: List[Tuple[str, Callable[[Any], bool], str, str]] = [
    ("sampling.num_generations", Bound(minimum=2),
     "must be at least 2: GRPO scores each completion against the others of its group, so a group of one has "
     "zero advantage and learns nothing", "set it to 2 or more (4-16 is common)"),
    ("sampling.temperature", Bound(exclusive_minimum=0),
     "must be > 0: at temperature 0 all completions of a group are identical, their rewards equal, and every "
     "advantage is zero", "use a sampling temperature such as 0.7-1.0"),
    ("sampling.top_p", Bound(exclusive_minimum=0, maximum=1), "must be in (0, 1]",
     "use 1.0 to disable nucleus sampling"),
    ("sampling.top_k", lambda v: v in (-1, 0) or v >= 1, "must be -1 (disabled) or >= 1", "use -1 to disable top-k"),
    ("sampling.min_p", Bound(minimum=0, maximum=1), "must be in [0, 1]", "use 0.0 to disable min-p"),
    ("sampling.repetition_penalty", Bound(exclusive_minimum=0), "must be > 0", "use 1.0 for no penalty"),
    ("sampling.max_prompt_length", Bound(minimum=1), "must be >= 1 or null", "use null for no limit"),
    ("sampling.max_completion_length", Bound(minimum=1), "must be >= 1", "e.g. 256"),
    ("model.lora.r", Bound(minimum=0), "must be >= 0 (the LoRA rank; 0 = LoRA off, every weight trains)",
     "e.g. 8 or 16 to train LoRA adapters, or 0 for full fine-tuning"),
    ("model.lora.alpha", Bound(exclusive_minimum=0), "must be > 0 (adapter outputs are scaled by alpha / r)",
     "e.g. 16 (often 2 × r)"),
    ("model.lora.dropout", Bound(minimum=0, exclusive_maximum=1), "must be in [0, 1)",
     "0.0 (deterministic log-probs) or e.g. 0.05"),
    ("training.max_steps", Bound(minimum=1), "must be >= 1", "e.g. 100"),
    ("training.num_epochs", Bound(exclusive_minimum=0), "must be > 0 (passes over the dataset) or null (use "
     "training.max_steps)", "e.g. 1 or 2.5"),
    ("training.dynamic_sampling.max_rounds", Bound(minimum=1),
     "must be >= 1 (rollout calls per step, the first included)", "e.g. 3"),
    ("training.prompts_per_step", Bound(minimum=1), "must be >= 1", "e.g. 8"),
    ("training.micro_batch_size", Bound(minimum=1), "must be >= 1", "e.g. 8"),
    ("training.learning_rate", Bound(minimum=0), "must be >= 0 (0: a diagnostic run that changes no weight)",
     "1e-6 to 1e-5 is usual for full fine-tuning"),
    ("training.weight_decay", Bound(minimum=0), "must be >= 0", "e.g. 0.0"),
    ("training.warmup_steps", Bound(minimum=0), "must be >= 0", "e.g. 0"),
    ("training.max_grad_norm", Bound(minimum=0), "must be >= 0 (0 disables clipping)", "e.g. 1.0"),
    ("training.beta", Bound(minimum=0), "must be >= 0 (0 = no KL penalty, no reference model)", "e.g. 0.0 or 0.04"),
    ("training.epsilon", Bound(exclusive_minimum=0, exclusive_maximum=1), "must be in (0, 1)",
     "0.2 is the PPO/GRPO default"),
    ("training.epsilon_high", Bound(exclusive_minimum=0), "must be > 0 or null", "DAPO uses 0.28; null = epsilon"),
    ("training.num_iterations", Bound(minimum=1), "must be >= 1", "1 = one update per generation batch"),
    ("training.save_steps", Bound(minimum=0), "must be >= 0 (0 = only at the end)", "e.g. 50"),
    ("training.save_total_limit", Bound(minimum=1), "must be >= 1 (checkpoints kept) or null (keep all)",
     "e.g. 2"),
    ("training.max_nonfinite_steps", Bound(minimum=1),
     "must be >= 1 (steps in a row with a NaN/inf loss or gradient before the run stops)", "e.g. 3"),
    ("training.logging_steps", Bound(minimum=1), "must be >= 1", "e.g. 1"),
    ("training.log_completions", Bound(minimum=0), "must be >= 0", "e.g. 4"),
    ("training.logprob_chunk_size", Bound(minimum=1), "must be >= 1", "e.g. 1024"),
    ("vllm.port", Bound(minimum=0, maximum=65535), "must be a TCP port (0-65535)", "e.g. 8000"),
    ("vllm.max_model_len", Bound(minimum=1), "must be >= 1 or null", "e.g. 2048"),
    ("vllm.gpu_memory_utilization", Bound(exclusive_minimum=0, maximum=1), "must be in (0, 1]", "e.g. 0.9"),
    ("vllm.kv_cache_space_gib", Bound(minimum=1), "must be >= 1 (GiB)", "e.g. 2"),
    ("vllm.startup_timeout_s", Bound(exclusive_minimum=0), "must be > 0 (seconds)", "e.g. 600"),
    ("vllm.sync_timeout_s", Bound(exclusive_minimum=0), "must be > 0 (seconds)", "e.g. 600"),
]


def range_bounds() -> Dict[str, Bound]:
    """The keys whose allowed range is a plain interval, with that interval (the JSON Schema states them as well).

    Returns:
        dotted key → :class:`Bound`; keys ruled by something else (``sampling.top_k``: -1, 0 or >= 1) are left out.
    """
    return {key: ok for key, ok, *_ in _RANGES if isinstance(ok, Bound)}


def _get(config: Config, dotted: str) -> Any:
    obj: Any = config
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def check_values(config: Config, problems: List[Problem]) -> None:
    """Ranges of single numbers and the allowed values of enum-like keys."""
    for key, ok, message, fix in _RANGES:
        value = _get(config, key)
        if isinstance(value, float) and math.isnan(value) or not ok(value):
            _err(problems, key, value, message, fix)
    for key, allowed in ENUMS.items():
        value = _get(config, key)
        if value not in allowed:
            _err(problems, key, value, f"must be one of {', '.join(allowed)}", f"set `{key}` to one of {', '.join(allowed)}")
    for i, name in enumerate(config.logging.report_to):
        if name not in REPORT_TO:
            _err(problems, f"logging.report_to[{i}]", name, f"unknown logger; allowed: {', '.join(REPORT_TO)}",
                 "remove it or use jsonl, trackio or wandb")
        elif name != "jsonl" and importlib.util.find_spec(name) is None:
            _err(problems, f"logging.report_to[{i}]", name, f"`{name}` is not installed", f"pip install {name}")
    t = config.training
    if not (t.save_rollouts in ("every", "off") or (t.save_rollouts.isdigit() and int(t.save_rollouts) >= 1)):
        _err(problems, "training.save_rollouts", t.save_rollouts,
             "must be `every`, `off`, or a number N >= 1 (every N-th step and the last)", "e.g. every")
    if t.epsilon_high is not None and t.epsilon_high < t.epsilon:
        _err(problems, "training.epsilon_high", t.epsilon_high, f"is below training.epsilon ({t.epsilon})",
             "use a value >= epsilon (DAPO's clip-higher uses 0.28 with epsilon 0.2), or null",
             depends_on=("training.epsilon", "training.epsilon_high"))
    if 0 < t.max_steps <= t.warmup_steps:
        _warn(problems, "training.warmup_steps", t.warmup_steps, f"covers all {t.max_steps} steps",
              "use fewer warm-up steps than training.max_steps",
              depends_on=("training.max_steps", "training.warmup_steps"))
