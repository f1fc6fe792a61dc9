"""Checkpoints: a ``save_pretrained`` model + tokenizer folder that transformers and vLLM load unchanged, plus the
trainer state (optimizer, scheduler, RNG, step, data position) for ``train --resume``."""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path
from typing import Any, Dict, Optional

import torch

STATE_FILE = "trainer_state.pt"


def checkpoint_dir(output_dir: Path, step: int) -> Path:
    """``output_dir/checkpoint-<step>``."""
    return Path(output_dir) / f"checkpoint-{step}"


def save_checkpoint(output_dir: Path, step: int, model: Any, tokenizer: Any, optimizer: torch.optim.Optimizer,
                    scheduler: Any, extra: Dict[str, Any]) -> Path:
    """Write ``checkpoint-<step>`` atomically (to a temporary folder, then renamed) and return its path."""
    final = checkpoint_dir(output_dir, step)
    tmp = final.with_name(final.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    state = {
        "step": step,
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "rng": {"torch": torch.get_rng_state(), "python": random.getstate()},
        **extra,
    }
    torch.save(state, tmp / STATE_FILE)
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    return final


def find_checkpoint(output_dir: Path, resume: str) -> Path:
    """Resolve ``--resume``: ``latest`` → the highest-numbered ``checkpoint-*`` in ``output_dir``; else a folder.

    Raises:
        FileNotFoundError: no checkpoint there (the message says where it looked).
    """
    if resume == "latest":
        found = [p for p in Path(output_dir).glob("checkpoint-*") if (p / STATE_FILE).is_file()]
        if not found:
            raise FileNotFoundError(f"no checkpoint-* folder with {STATE_FILE} in {output_dir}")
        return max(found, key=lambda p: int(p.name.split("-")[-1]))
    path = Path(resume)
    if not (path / STATE_FILE).is_file():
        raise FileNotFoundError(f"{path} is not a checkpoint (no {STATE_FILE})")
    return path


def load_trainer_state(path: Path) -> Dict[str, Any]:
    """The trainer state saved in checkpoint folder ``path``."""
    return torch.load(Path(path) / STATE_FILE, weights_only=False)


def restore_rng(state: Dict[str, Any]) -> None:
    """Put back the RNG states saved by :func:`save_checkpoint`."""
    torch.set_rng_state(state["rng"]["torch"])
    random.setstate(state["rng"]["python"])


def latest_step(output_dir: Path) -> Optional[int]:
    """Step of the newest checkpoint in ``output_dir``, or ``None``."""
    try:
        return int(find_checkpoint(output_dir, "latest").name.split("-")[-1])
    except FileNotFoundError:
        return None
