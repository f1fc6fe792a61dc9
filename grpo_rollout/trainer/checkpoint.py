"""Checkpoints: a ``save_pretrained`` model + tokenizer folder that transformers and vLLM load unchanged (with LoRA:
the PEFT adapter, and with ``training.save_merged`` the merged model in ``merged/``), plus the trainer state
(optimizer, scheduler, RNG, step, data position) for ``train --resume``.

Weights no step changed since they were saved are not written again (issue 51.10: a run of 3 steps without signal
wrote its unchanged 135M-parameter model at every save): unchanged since an earlier checkpoint, the new folder's weight
files are hard links to that one's (a copy where the file system cannot link). Every checkpoint stays whole and
loadable with ``from_pretrained``: a run's first save writes its weights even when no step changed them."""

from __future__ import annotations

import os
import random
import re
import shutil
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Union

import torch

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

STATE_FILE = "trainer_state.pt"
_NAME = re.compile(r"checkpoint-(\d+)")


@dataclass
class TrainerState:
    """What a checkpoint holds besides the weights (``trainer_state.pt``): enough to continue exactly.

    Attributes:
        step: completed steps (the checkpoint's ``N``). optimizer: AdamW's state keyed by parameter name
        (``None`` with ``training.save_only_model``). optimizer_saved: whether it was. scheduler: the LR schedule's
        ``state_dict``. rng_by_rank: every process's RNG states (:func:`rng_state`). data_position: where the prompt
        order stood (``{"epoch", "offset"}``, :meth:`PromptOrder.position`). config: the run's
        resolved YAML. world_size: processes that saved it. stream_by_rank: with streaming rollouts, every
        process's place in its prompt sequence (:meth:`~..orchestrator.stream_source.StreamSource.state`), else ``None``.
    """

    step: int
    optimizer: Optional[Dict[str, Any]]
    optimizer_saved: bool
    scheduler: Dict[str, Any]
    rng_by_rank: List[Dict[str, Any]]
    data_position: Optional[Dict[str, int]] = None
    config: str = ""
    world_size: int = 1
    stream_by_rank: Optional[List[Dict[str, Any]]] = None

    def to_dict(self) -> Dict[str, Any]:
        """The dict written to :data:`STATE_FILE` (shallow: tensors are not copied)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @staticmethod
    def from_dict(state: Dict[str, Any]) -> "TrainerState":
        """From :data:`STATE_FILE`, also as earlier versions wrote it (one ``rng``; no ``optimizer_saved``)."""
        return TrainerState(int(state["step"]), state.get("optimizer"),
                            state.get("optimizer_saved", state.get("optimizer") is not None), state["scheduler"],
                            state.get("rng_by_rank") or [state["rng"]], state.get("data_position"),
                            state.get("config", ""), int(state.get("world_size", 1)), state.get("stream_by_rank"))

    def without_optimizer(self) -> "TrainerState":
        """The same, less the (large) optimizer state: what every process needs."""
        return replace(self, optimizer=None)


def checkpoint_dir(output_dir: Path, step: int) -> Path:
    """``output_dir/checkpoint-<step>``."""
    return Path(output_dir) / f"checkpoint-{step}"


def save_checkpoint(output_dir: Path, step: int, model: Any, tokenizer: PreTrainedTokenizerBase, state: Union[TrainerState, Dict[str, Any]],
                    weights: Optional[Dict[str, torch.Tensor]] = None, keep: Optional[int] = None,
                    extra: Optional[Callable[[Path], Any]] = None, unchanged: Optional[Path] = None) -> Path:
    """Write ``checkpoint-<step>`` atomically and return its path.

    Args:
        model, tokenizer: written with ``save_pretrained`` (``weights``: the full state dict to write instead of the
            model's own, e.g. gathered from FSDP shards). A ``peft.PeftModel`` writes its adapters only
            (``adapter_config.json`` + ``adapter_model.safetensors``).
        state: the trainer state saved as :data:`STATE_FILE` (step, optimizer, scheduler, RNG, data position, ...).
        keep: delete all but the newest ``keep`` checkpoints after this one is in place (``None``: keep all).
        extra: called with the unfinished folder to write more into it (e.g. a merged LoRA model), before the rename.
        unchanged: ``None``: write the model. A checkpoint folder holding the same weights (:func:`holds_weights`):
            link its files instead (``model``, ``weights`` and ``extra`` unused).

    Everything goes to ``checkpoint-<step>.tmp`` first, which is renamed only when complete: a process killed during
    a save leaves no ``checkpoint-<step>`` folder, only the ``.tmp`` one that :func:`find_checkpoint` ignores and the
    next save removes.
    """
    final = checkpoint_dir(output_dir, step)
    tmp = final.with_name(final.name + ".tmp")
    for stale in Path(output_dir).glob("checkpoint-*.tmp"):  # left by a save that was killed
        shutil.rmtree(stale, ignore_errors=True)
    tokenizer.save_pretrained(tmp)
    if unchanged is not None:
        _link_missing(Path(unchanged), tmp)
    else:
        model.save_pretrained(tmp, safe_serialization=True, **({"state_dict": weights} if weights is not None else {}))
        if extra is not None:
            extra(tmp)
    torch.save({"step": step, **(state.to_dict() if isinstance(state, TrainerState) else state)}, tmp / STATE_FILE)
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    if keep is not None:
        for old in list_checkpoints(output_dir)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    return final


def _link_missing(source: Path, folder: Path) -> None:
    """Hard-link into ``folder`` every file of checkpoint ``source`` that ``folder`` lacks, but its trainer state (a
    copy where the file system cannot link)."""
    for path in sorted(source.rglob("*")):
        target = folder / path.relative_to(source)
        if path.is_dir() or target.exists() or path == source / STATE_FILE:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(path, target)
        except OSError:
            shutil.copy2(path, target)


def holds_weights(folder: Union[Path, str, None]) -> bool:
    """Whether ``folder`` is a complete checkpoint with weights of its own (what :func:`save_checkpoint` can link)."""
    return isinstance(folder, Path) and (folder / STATE_FILE).is_file() and any(folder.glob("*.safetensors"))


def weights_on_disk(output_dir: Path, resume: Optional[str]) -> Optional[Path]:
    """Where the weights a run starts from lie saved in this run's folder: the checkpoint ``resume`` names, or
    ``None`` (a fresh run: its first save writes them)."""
    return find_checkpoint(output_dir, resume) if resume else None


def reusable_weights(since: Optional[Path], dist: Any) -> Optional[Path]:
    """What a save of weights unchanged ``since`` (a checkpoint, or ``None``: changed, or never saved) gives as
    :func:`save_checkpoint`'s ``unchanged``: that checkpoint when it still holds them (rank 0 looks; a collective),
    else ``None`` (write them)."""
    return None if since is None else dist.broadcast(since if holds_weights(since) else None)


def rng_state() -> Dict[str, Any]:
    """This process's RNG states (torch CPU, CUDA when present, Python's ``random``)."""
    state = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def list_checkpoints(output_dir: Path) -> List[Path]:
    """Complete ``checkpoint-<N>`` folders (holding :data:`STATE_FILE`) in ``output_dir``, oldest first."""
    found = [p for p in Path(output_dir).glob("checkpoint-*")
             if _NAME.fullmatch(p.name) and (p / STATE_FILE).is_file()]
    return sorted(found, key=checkpoint_step)


def checkpoint_step(path: Path) -> int:
    """The step a checkpoint folder was saved after (from its name ``checkpoint-<N>``, else from its state file)."""
    match = _NAME.fullmatch(Path(path).name)
    return int(match.group(1)) if match else int(load_trainer_state(path)["step"])


def find_checkpoint(output_dir: Path, resume: str) -> Path:
    """Resolve ``--resume``: ``latest`` → the highest-numbered ``checkpoint-*`` in ``output_dir``; else a folder.

    Raises:
        FileNotFoundError: no checkpoint there (the message says where it looked).
    """
    if resume == "latest":
        found = list_checkpoints(output_dir)
        if not found:
            raise FileNotFoundError(f"no checkpoint-* folder with {STATE_FILE} in {output_dir}")
        return found[-1]
    path = Path(resume)
    if not (path / STATE_FILE).is_file():
        raise FileNotFoundError(f"{path} is not a checkpoint (no {STATE_FILE})")
    return path


def load_trainer_state(path: Path) -> Dict[str, Any]:
    """The trainer state saved in checkpoint folder ``path``."""
    return torch.load(Path(path) / STATE_FILE, weights_only=False)


def restore_rng(rng: Dict[str, Any]) -> None:
    """Put back RNG states from :func:`rng_state`."""
    torch.set_rng_state(rng["torch"])
    random.setstate(rng["python"])
    if "cuda" in rng and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
