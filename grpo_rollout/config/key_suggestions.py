"""The nearest valid key for an unknown one (the "did you mean" of an unknown-key problem), and what to do instead
of the keys other trainers have that grpo-rollout computes or spells otherwise (:data:`OTHER_TRAINERS_KEYS`)."""

from __future__ import annotations

import difflib
from typing import Dict, List, Optional, Sequence, Tuple

from .fields import aliases, walk
from .schema import Config


#: Keys of TRL's GRPOConfig (and transformers' TrainingArguments) with no key of the same meaning here → the fix. A
#: name that only differs (``per_device_train_batch_size``) is left to :func:`suggest_key`.
OTHER_TRAINERS_KEYS: Dict[str, str] = {
    "gradient_accumulation_steps": "none needed: accumulation follows from training.prompts_per_step × "
    "sampling.num_generations ÷ training.micro_batch_size (every micro-batch of a step adds its gradient to the one "
    "update); set those",
    "generation_batch_size": "a step generates training.prompts_per_step × sampling.num_generations completions; set "
    "those",
    "steps_per_generation": "a step generates once, then makes training.num_iterations updates on the whole batch; "
    "set training.num_iterations",
    "bf16": "set model.dtype: bfloat16 (mixed precision: weights and optimizer state stay float32)",
    "fp16": "set model.dtype: bfloat16 (mixed precision: weights and optimizer state stay float32; float16 is "
            "refused, as it trains without loss scaling)",
    "use_vllm": "set vllm.mode: spawn (start a server), attach (vllm.url) or off (transformers generates)",
    "vllm_mode": "set vllm.mode: spawn (start a server), attach (vllm.url) or off (transformers generates)",
}


def other_trainers_fix(bad_key: str) -> Optional[str]:
    """What to do instead of ``bad_key``, another trainer's key that has no counterpart of that meaning here."""
    return OTHER_TRAINERS_KEYS.get(bad_key)


def suggest_key(bad_key: str, cls: type, prefix: str) -> Optional[str]:
    """Nearest valid key for an unknown ``prefix + bad_key``: the same name in another section first, then a close
    name in the same section, then a close one elsewhere. Returns the full dotted key, or ``None``."""
    same_level = list(cls.model_fields)
    # e.g. `sampling.max_tokens` → `sampling.max_completion_length`

    if bad_key in aliases(cls):  # another name of a key here: `sampling.max_tokens`
        return prefix + aliases(cls)[bad_key]
    everywhere = [k for k, _ in walk(Config) if not k.startswith("rewards[]")]  # every valid dotted key
    exact = [k for k in everywhere if k.rsplit(".", 1)[-1] == bad_key]  # the very name, in another section
    if exact:
        return exact[0]
    close = difflib.get_close_matches(bad_key, same_level, n=1, cutoff=0.6)
    if close:
        return prefix + close[0]
    leaf_names = {k.rsplit(".", 1)[-1]: k for k in everywhere}
    close = difflib.get_close_matches(bad_key, list(leaf_names), n=1, cutoff=0.75)
    if close:
        return leaf_names[close[0]]
    # whole dotted keys of *other* sections, compared below the sections they share with the unknown key: a shared
    # `model.` would make `model.lora.sync_mode` look close to `model.trust_remote_code`
    full = prefix + bad_key
    others = [k for k in everywhere if not full.startswith((k + ".", k + "[")) and not (prefix and k.startswith(prefix))]
    scored = [(difflib.SequenceMatcher(None, *_below_shared(full, k)).ratio(), k) for k in others]
    best = max(scored, default=(0.0, None), key=lambda item: item[0])
    return best[1] if best[0] >= 0.6 else None


def _below_shared(a: str, b: str) -> Tuple[str, str]:
    """Dotted keys ``a`` and ``b`` without the leading sections they share (``model.lora.sync_mode`` and
    ``model.trust_remote_code`` → ``lora.sync_mode`` and ``trust_remote_code``); the last part always stays."""
    mine, theirs = a.split("."), b.split(".")
    shared = 0
    while shared < min(len(mine), len(theirs)) - 1 and mine[shared] == theirs[shared]:
        shared += 1
    return ".".join(mine[shared:]), ".".join(theirs[shared:])


def close_names(name: str, names: Sequence[str], n: int = 3, cutoff: float = 0.6) -> List[str]:
    """Up to ``n`` of ``names`` that ``name`` may be a misspelling of: difflib's closest (ratio at least ``cutoff``,
    best first), else those holding ``name`` whole (``sorting`` → ``number_sorting``, ``word_sorting``). For names
    outside the config: a reasoning-gym task, a task's setting."""
    close = difflib.get_close_matches(name, list(names), n=n, cutoff=cutoff)
    if close and difflib.SequenceMatcher(None, name, close[0]).ratio() >= 0.9:  # one letter off: only that one
        return close[:1]
    return close or [k for k in names if name and name in k][:n]


def did_you_mean(name: str, names: Sequence[str], quote=lambda k: f"`{k}`") -> str:
    """``"did you mean `a`?"`` (``"`a`, `b` or `c`"`` for several) for :func:`close_names`, ``""`` when none is
    close."""
    close = [quote(k) for k in close_names(name, names)]
    if not close:
        return ""
    return f"did you mean {', '.join(close[:-1]) + ' or ' if len(close) > 1 else ''}{close[-1]}?"
