"""Loading the training prompts (``data.train``) into a ``datasets.Dataset``.

``data.train`` may be:
- a local ``.jsonl``/``.json``/``.csv``/``.parquet`` file (relative to the current directory, or else to the config
  file's folder),
- a dotted path or ``file.py:function`` naming a function that returns a ``datasets.Dataset`` (or a list of dicts),
- a hub dataset name (``org/name``), loaded with ``datasets.load_dataset(name, split=data.split)``,
- ``reasoning_gym:<task>``: a reasoning-gym task, made offline (:mod:`.reasoning_gym`),
- ``verifiers:<taskset>``: a verifiers 0.4 taskset's tasks (:mod:`.verifiers_tasks`).
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, Callable, Iterable, List, Mapping, Optional, Tuple

from ..user_code.resolve import ImportSpecError, resolve_callable

#: validate-config's fix for a data source that does not load (``data.train``, ``data.eval``)
SOURCE_FIX = "name a .jsonl/.json/.csv/.parquet file, a hub dataset, or a module:function returning a datasets.Dataset"
FILE_BUILDERS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}
#: Roles a chat-message prompt may use (what chat templates render).
CHAT_ROLES = ("system", "user", "assistant", "tool")
#: The two prompt formats, as named in messages.
TEXT, CHAT = "a plain string", "a list of chat messages"


class DatasetError(ValueError):
    """``data.train`` could not be loaded; the message says why and what to write instead."""


def classify_source(spec: str, base_dir: Optional[Path] = None) -> tuple[str, Any]:
    """Decide what kind of source ``spec`` is: ``("file", Path)``, ``("function", spec)``, ``("reasoning_gym",
    task)``, ``("verifiers", taskset)`` or ``("hub", spec)``.

    Raises:
        DatasetError: for an empty spec or a data file that does not exist.
    """
    spec = spec.strip()
    if not spec:
        raise DatasetError("`data.train` is empty")
    if spec.startswith("verifiers:"):  # a verifiers taskset, by id or file (data/verifiers_tasks.py)
        return "verifiers", spec.split(":", 1)[1].strip()
    suffix = Path(spec).suffix.lower()
    if suffix in FILE_BUILDERS:
        for path in (Path(spec).expanduser(), (base_dir or Path.cwd()) / spec):
            if path.is_file():
                return "file", path
        folders = " and ".join(dict.fromkeys(str(f.resolve()) for f in (Path.cwd(), base_dir or Path.cwd())))
        raise DatasetError(f"data file `{spec}` not found (looked in {folders})")
    candidates = (Path(spec).expanduser(), (base_dir or Path.cwd()) / spec)
    if suffix and ":" not in spec and any(p.is_file() for p in candidates):
        raise DatasetError(f"data file `{spec}`: {suffix} is not a format it reads; convert it to "
                           f"{', '.join(FILE_BUILDERS)} (one row per prompt)")
    if spec.startswith("reasoning_gym:"):  # a reasoning-gym task by name (data/reasoning_gym.py)
        return "reasoning_gym", spec.split(":", 1)[1].strip()
    if ":" in spec:
        return "function", spec
    if "/" in spec or "." not in spec:
        return "hub", spec
    return "function", spec


def _what_failed(exc: BaseException) -> str:
    """``Type: first line`` of ``exc``, and of the exception it was raised from (datasets wraps a JSON parse error
    naming the row in a DatasetGenerationError saying only that generation failed)."""
    def said(e: BaseException) -> str:
        text = str(e).strip()
        return f"{type(e).__name__}: {text.splitlines()[0] if text else ''}".rstrip(": ")

    inner = exc.__cause__ or exc.__context__
    return said(exc) if inner is None else f"{said(exc)} ({said(inner)[:300]})"


def load_train_dataset(spec: str, split: str = "train", base_dir: Optional[Path] = None,
                       task_kwargs: Optional[Mapping[str, Any]] = None, held_out: bool = False,
                       task_instruction: Optional[str] = None):
    """Load ``data.train`` (or ``data.eval``) as a ``datasets.Dataset`` (rows of named columns); a
    ``reasoning_gym:<task>`` source is made with ``task_kwargs`` (a ``verifiers:<taskset>`` one: its config fields) and
    ``task_instruction`` (``None``: the default, which
    asks for ``<answer>`` tags; ``held_out``: the rows that never overlap the training ones, :mod:`.reasoning_gym`).

    Raises:
        DatasetError: the file is missing or unreadable, the function fails or returns something else, or the hub
            dataset cannot be loaded (no network, unknown name, unknown split).
    """
    import datasets

    datasets.disable_progress_bars()
    kind, target = classify_source(spec, base_dir)
    try:
        if kind == "reasoning_gym":
            from .reasoning_gym import task_rows

            instruction = {} if task_instruction is None else {"instruction": task_instruction}
            ds = datasets.Dataset.from_list(task_rows(target, task_kwargs or {}, held_out, **instruction))
        elif kind == "verifiers":
            from .verifiers_tasks import task_rows as taskset_rows

            ds = datasets.Dataset.from_list(taskset_rows(target, task_kwargs or {}, base_dir))
        elif kind == "file":
            if not target.read_bytes().strip():
                raise DatasetError(f"data file `{spec}` is empty; it needs one row per prompt")
            ds = datasets.load_dataset(FILE_BUILDERS[target.suffix.lower()], data_files=str(target), split="train")
        elif kind == "function":
            try:
                fn = resolve_callable(target, base_dir)
            except ImportSpecError as exc:
                raise DatasetError(f"`{spec}`: {exc}") from exc
            ds = fn()
            if isinstance(ds, list):
                ds = datasets.Dataset.from_list(ds)
            if isinstance(ds, datasets.DatasetDict):
                if split not in ds:
                    raise DatasetError(f"`{spec}` returned splits {list(ds)}, none named `{split}`; set `data.split`")
                ds = ds[split]
            if not isinstance(ds, datasets.Dataset):
                raise DatasetError(f"`{spec}` returned {type(ds).__name__}; it must return a datasets.Dataset "
                                   "or a list of dicts")
        else:
            ds = datasets.load_dataset(target, split=split)
    except DatasetError:
        raise
    except Exception as exc:  # datasets raises many types; the message is what matters
        raise DatasetError(f"loading `{spec}` failed: {_what_failed(exc)}") from exc
    if len(ds) == 0:
        raise DatasetError(f"`{spec}` has no rows")
    return ds


def load_section(data: Any, base_dir: Optional[Path] = None, held_out: bool = False):
    """A config's ``data`` section's training rows (``held_out``: its ``data.eval`` rows, split ``eval_split``), as
    :func:`load_train_dataset` loads them.

    Raises:
        DatasetError: they do not load (the message says why).
    """
    spec, split = (data.eval, data.eval_split) if held_out else (data.train, data.split)
    return load_train_dataset(spec, split, base_dir, data.task_kwargs, held_out, data.task_instruction)


def prompt_format(prompt: Any) -> Tuple[Optional[str], Optional[str]]:
    """Which format ``prompt`` is in and what is wrong with it.

    Returns:
        ``(format, problem)``: format :data:`TEXT` or :data:`CHAT` (``None`` when it is neither), and a sentence
        saying what is wrong (``None`` for a well-formed prompt): an empty string, a message without a string
        ``role``/``content``, or a role outside :data:`CHAT_ROLES`.
    """
    if isinstance(prompt, str):
        return TEXT, None if prompt.strip() else "the prompt is an empty string"
    if not isinstance(prompt, (list, tuple)):
        return None, f"the prompt is {type(prompt).__name__} {repr(prompt)[:60]}, neither {TEXT} nor {CHAT}"
    if not prompt:
        return CHAT, "the prompt is an empty list of messages"
    for j, message in enumerate(prompt):
        if not isinstance(message, dict):
            return CHAT, f"message {j} is {type(message).__name__} {repr(message)[:40]}, not a {{role, content}} mapping"
        for field in ("role", "content"):
            if not isinstance(message.get(field), str):
                got = "missing" if message.get(field) is None else f"{type(message[field]).__name__}"
                return CHAT, f"message {j} has no string `{field}` ({got})"
        if message["role"] not in CHAT_ROLES:
            return CHAT, f"message {j} has the unknown role {message['role']!r} (roles: {', '.join(CHAT_ROLES)})"
    return CHAT, None


def prompt_problems(prompts: Iterable[Any], limit: int = 3, column: str = "prompt",
                    row_keys: Optional[Callable[[int], List[str]]] = None) -> List[str]:
    """Up to ``limit`` sentences, each naming a row, about prompts that are malformed or whose format differs from
    the first row's (a step's prompts are all strings or all message lists: rewards and rollouts receive them as a
    batch and would break on the mix). A missing prompt (``None``: a JSON line without the ``column`` key) is
    reported as such, with the keys the row does have (``row_keys(i)``) and the closest one to ``column``."""
    found: List[str] = []
    first: Optional[Tuple[int, str]] = None
    mixed_reported = False
    for i, prompt in enumerate(prompts):
        if prompt is None:
            keys = row_keys(i) if row_keys else []
            close = difflib.get_close_matches(column, keys, n=1, cutoff=0.6)
            has = ""
            if keys:
                typo = f"; `{close[0]}` looks like a misspelling of `{column}`" if close else ""
                has = f" (it has {', '.join(f'`{k}`' for k in keys)}{typo})"
            found.append(f"row {i} has no `{column}` key{has}")
            if len(found) >= limit:
                break
            continue
        fmt, problem = prompt_format(prompt)
        if problem:
            found.append(f"row {i}: {problem}")
        elif first is None:
            first = (i, fmt)
        elif fmt != first[1] and not mixed_reported:
            found.append(f"row {i}'s prompt is {fmt} but row {first[0]}'s is {first[1]}: every prompt must use the "
                         "same format")
            mixed_reported = True
        if len(found) >= limit:
            break
    return found
