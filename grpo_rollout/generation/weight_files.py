"""The weights a sync sends, as tensors and as bytes: what goes into a staged safetensors file (and the folder it is
staged in), and its checksum."""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Iterator

CHUNK_BYTES = 8 << 20  # bytes per read/upload chunk


def weights_for_sync(weights: Any) -> Dict[str, Any]:
    """The tensors to send, by name, from a model or a ``name → tensor`` mapping: on the CPU, contiguous, each stored
    once, and ``lm_head.weight`` written out for a model with tied embeddings — vLLM (0.32, CPU) keeps its old head
    when a tied model's file holds only ``model.embed_tokens.weight``, which silently corrupts its log-probs. (A
    mapping from a tied model must already hold ``lm_head.weight``, as ``state_dict()`` does.)"""
    import torch

    tied = False
    if isinstance(weights, torch.nn.Module):
        tied = bool(getattr(getattr(weights, "config", None), "tie_word_embeddings", False))
        weights = weights.state_dict()
    tensors, seen = {}, set()
    for name, tensor in weights.items():
        t = tensor.detach()
        key = (t.data_ptr(), t.shape)
        tensors[name] = t.clone().contiguous() if key in seen else t.contiguous()
        seen.add(key)
    if tied and "lm_head.weight" not in tensors:
        embedding = next((t for name, t in tensors.items() if name.endswith("embed_tokens.weight")), None)
        if embedding is not None:
            tensors["lm_head.weight"] = embedding.clone()
    return {name: t.cpu() for name, t in tensors.items()}


def file_sha256(path: Path) -> str:
    """Hex SHA-256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(CHUNK_BYTES), b""):
            digest.update(chunk)
    return digest.hexdigest()


def weights_root() -> Path:
    """Where weight folders for sync are written: ``/dev/shm`` (memory) when it exists, else the temp folder."""
    shm = Path("/dev/shm")
    return shm if shm.is_dir() else Path(tempfile.gettempdir())


#: The one file a staged weight folder holds.
WEIGHTS_FILE = "model.safetensors"


@contextmanager
def staged_weights(weights: Any, version: int) -> Iterator[Path]:
    """A fresh folder under :func:`weights_root` holding ``weights`` as one safetensors file, removed on exit."""
    from safetensors.torch import save_file

    folder = Path(tempfile.mkdtemp(prefix=f"grpo-rollout-weights-v{version}-", dir=weights_root()))
    try:
        save_file(weights_for_sync(weights), str(folder / WEIGHTS_FILE))
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)  # the servers have read it (or failed); nothing else needs it
