"""The tensor names and shapes of a folder of safetensors files, and why one does not fit the served model."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, Optional


def _weight_layout(folder: Path) -> Dict[str, tuple]:
    """Tensor name → shape of every ``*.safetensors`` file in ``folder``, read from the file headers only.

    Raises:
        ValueError: a file is not a readable safetensors file.
    """
    from safetensors import safe_open

    layout: Dict[str, tuple] = {}
    for file in sorted(folder.glob("*.safetensors")):
        try:
            with safe_open(str(file), framework="pt") as f:
                for name in f.keys():
                    layout[name] = tuple(f.get_slice(name).get_shape())
        except Exception as exc:  # safetensors raises its own error types for a bad header
            raise ValueError(f"{file.name} is not a readable safetensors file ({exc})") from exc
    return layout


def _layout_problem(got: Dict[str, tuple], expected: Optional[Dict[str, tuple]], tied: bool) -> Optional[str]:
    """Why a weight folder does not fit the served model: unknown or missing tensors, or other shapes (``None``: it
    fits). ``expected`` is the layout of the folder the server loaded (``None``: unknown, only the files are read);
    with ``tied`` embeddings ``lm_head.weight`` may come along, with the embedding's shape."""
    if not got:
        return "it holds no tensors"
    if expected is None:
        return None
    expected = dict(expected)
    if tied and "lm_head.weight" not in expected:
        embedding = next((shape for name, shape in expected.items() if name.endswith("embed_tokens.weight")), None)
        if embedding is not None:
            expected["lm_head.weight"] = embedding
    unknown = sorted(set(got) - set(expected))
    if unknown:
        return f"{len(unknown)} tensor(s) the served model does not have, e.g. {unknown[0]!r}"
    missing = sorted(set(expected) - set(got) - {"lm_head.weight"})
    if missing:
        return f"{len(missing)} tensor(s) of the served model are missing, e.g. {missing[0]!r}"
    for name, shape in got.items():
        if shape != expected[name]:
            return f"{name!r} has shape {list(shape)}, the served model's has {list(expected[name])}"
    return None


def _served_layout(model: str) -> Optional[Dict[str, tuple]]:
    """The weight layout of the folder the server loaded (a local folder, or a hub model already in the local
    cache); ``None`` when it cannot be found."""
    folder = Path(model)
    if not folder.is_dir():
        try:
            from huggingface_hub import snapshot_download

            folder = Path(snapshot_download(model, local_files_only=True))
        except Exception:  # not a hub id, or not cached: the update's own files are still checked
            return None
    try:
        return _weight_layout(folder) or None
    except ValueError:
        return None
