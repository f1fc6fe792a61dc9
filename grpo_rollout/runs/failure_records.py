"""``failures.jsonl``: one JSON line per episode attempt that failed outside the model (``rollout.on_error`` retry or
drop), with its step, rank, dataset row, prompt, attempt, error type, text and outcome; rank 0 appends each step's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List


def append_failures(path: Path, records: List[Dict[str, Any]]) -> None:
    """Append ``records`` (each a JSON object; a value JSON cannot hold is written as its ``str``) to ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record, default=str) + "\n")


def read_failures(path: Path) -> List[Dict[str, Any]]:
    """The records of a ``failures.jsonl`` (none when there is no such file)."""
    if not Path(path).is_file():
        return []
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
