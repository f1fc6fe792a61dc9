"""The command that continues a stopped run: the config and every override it was started with, plus
``--resume latest``. Overrides are not stored in the checkpoint, so a resume without them (``training.output_dir=``
above all) would look for checkpoints in another folder, or train with other settings."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any, Optional, Sequence


def resume_command(config_path: Path, overrides: Sequence[str], processes: int = 1) -> str:
    """The shell command that resumes a run started as ``grpo-rollout train CONFIG OVERRIDES...`` (under torchrun
    with ``processes`` > 1: the same torchrun line), quoted for a POSIX shell."""
    head = ["grpo-rollout"] if processes <= 1 else ["torchrun", "--nproc-per-node", str(processes), "-m",
                                                   "grpo_rollout"]
    return shlex.join(head + ["train", str(config_path), *overrides, "--resume", "latest"])


def resume_hint(reporter: Any, output_dir: Path) -> str:
    """The sentence printed when a run stops early: the whole command when the caller (the CLI) set
    ``reporter.resume_command``, else what a Python caller passes (``train(config, resume="latest")`` with the same
    config)."""
    command: Optional[str] = getattr(reporter, "resume_command", None)
    if command:
        return f"Continue this run with: {command}"
    return (f"Continue this run with the same config (training.output_dir = {output_dir}) and resume=\"latest\" "
            "(CLI: the same command and overrides plus --resume latest)")
