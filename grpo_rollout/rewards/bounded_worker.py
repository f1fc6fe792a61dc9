"""The worker process of :mod:`grpo_rollout.rewards.bounded`: ``python -m grpo_rollout.rewards.bounded_worker``.

It reads requests from stdin and answers on stdout, each a pickle after its 8-byte length: first
``("warm_up", (module, name, file) | None)``, answered ``("ready", None)`` (or ``("failed", reason)``); then any number of
``("call", ((module, name, file), args))``, each answered ``("ok", value)`` or ``("error", exception)``. It imports nothing
of the parent's main script. What the scoring code prints goes to stderr, so it cannot garble the answers.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import pickle
import struct
import sys
import traceback
from typing import Any, Callable, Optional, Tuple

_HEADER = struct.Struct("<Q")


def _load(ref: Tuple[str, str, Optional[str]]) -> Callable:
    """The function ``ref`` names: ``(module, qualified name, the module's file or None)``; by the module's name,
    else from its file (loaded once, under that name)."""
    module, name, file = ref
    if module in sys.modules:
        obj: Any = sys.modules[module]
    else:
        try:
            obj = importlib.import_module(module)
        except ModuleNotFoundError:
            if not file:
                raise
            spec = importlib.util.spec_from_file_location(module, file)
            obj = importlib.util.module_from_spec(spec)
            sys.modules[module] = obj
            spec.loader.exec_module(obj)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def _read(stream: Any) -> Any:
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        return None  # the parent closed the pipe: exit
    return pickle.loads(stream.read(_HEADER.unpack(header)[0]))


def _write(stream: Any, message: Any) -> None:
    try:
        data = pickle.dumps(message)
    except Exception:  # noqa: BLE001 - an exception or value that does not pickle is sent as text
        kind, payload = message
        data = pickle.dumps((kind, RuntimeError(f"{type(payload).__name__}: {payload}")))
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def main() -> None:
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # print() in scoring code goes to stderr
    requests = sys.stdin.buffer
    while True:
        message = _read(requests)
        if message is None:
            return
        kind, payload = message
        if kind == "warm_up":
            try:
                if payload is not None:
                    _load(payload)()
                _write(answers, ("ready", None))
            except BaseException:  # noqa: BLE001 - said to the parent, which raises it
                _write(answers, ("failed", traceback.format_exc(limit=5)))
                return
            continue
        ref, args = payload
        try:
            _write(answers, ("ok", _load(ref)(*args)))
        except Exception as exc:  # noqa: BLE001 - raised again in the parent
            _write(answers, ("error", exc))


if __name__ == "__main__":
    main()
