"""Walk the user's tree against the schema: keep the valid keys, coerce values to their types as the user wrote
them, and record every unknown key and every value of the wrong type as a :class:`Problem`."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, Dict, List, Optional

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from .key_suggestions import _hints, suggest_key
from .problems import Problem
from .schema import ENUMS


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is typing.Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return f"{_type_name(args[0])} or null"
    if origin in (list, List):
        return f"a list of {_type_name(typing.get_args(tp)[0])}"
    if origin in (dict, Dict):
        return "a mapping"
    return getattr(tp, "__name__", str(tp))


def _is_type(tp: Any, kind: type) -> bool:
    """``tp`` is ``kind`` or ``Optional[kind]``."""
    return tp is kind or (typing.get_origin(tp) is typing.Union and kind in typing.get_args(tp))


def _check_section(node: Any, cls: type, prefix: str, problems: List[Problem],
                   texts: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
    """Walk one mapping of the user's tree against dataclass ``cls``; return the keys that are valid, record the rest.

    ``texts`` maps dotted keys to the text the user wrote for a plain (unquoted) YAML or override value (see
    :func:`~.reading._plain_scalar_texts`): a key typed ``str`` takes that text, not YAML's reading of it (``1e5`` stays
    ``"1e5"``, ``0123456`` stays ``"0123456"``, ``off`` stays ``"off"``)."""
    texts = texts or {}
    if not isinstance(node, DictConfig):
        problems.append(Problem(prefix.rstrip(".") or "<config>", _plain(node), f"expected a mapping of {cls.__name__} keys",
                                f"write `{prefix.rstrip('.')}:` followed by indented keys such as {', '.join(list(_hints(cls))[:3])}"))
        return {}
    hints = _hints(cls)
    probe = OmegaConf.structured(cls)
    clean: Dict[str, Any] = {}
    for key in node.keys():
        key = str(key)
        dotted = prefix + key
        if key not in hints:
            hint = suggest_key(key, cls, prefix)
            problems.append(Problem(dotted, _plain_child(node, key), "unknown key",
                                    f"did you mean `{hint}`?" if hint else f"valid keys here: {', '.join(hints)}"))
            continue
        tp = hints[key]
        if OmegaConf.is_interpolation(node, key):
            clean[key] = node._get_node(key)._value()  # keep "${...}" for resolution after the merge
            continue
        value = node[key]
        if dataclasses.is_dataclass(tp):
            clean[key] = _check_section(value, tp, dotted + ".", problems, texts)
        elif typing.get_args(tp) and dataclasses.is_dataclass(typing.get_args(tp)[0]):
            clean[key] = _check_list_of_sections(value, typing.get_args(tp)[0], dotted, problems, texts)
        else:
            if _is_type(tp, float) and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)  # `temperature: 1` means 1.0 (OmegaConf deprecates converting it implicitly)
            if _is_type(tp, str) and value is not None and not isinstance(value, str) and dotted in texts:
                value = texts[dotted]  # the text as written: commit hashes, run names, paths
            if typing.get_origin(tp) in (list, List) and typing.get_args(tp) == (str,) and isinstance(value, ListConfig):
                value = [v if isinstance(v, str) else texts.get(f"{dotted}[{i}]", str(v))  # items as written too
                         for i, v in enumerate(OmegaConf.to_container(value, resolve=False))]
            if _is_type(tp, str) and isinstance(value, bool):
                # YAML 1.1 reads unquoted off/on/yes/no/true/false as booleans: `vllm.mode: off` arrives as False
                if not value and "off" in ENUMS.get(dotted, ()):
                    value = "off"
                else:
                    problems.append(Problem(dotted, value, "YAML read this unquoted word as a boolean, not text",
                                            f'quote it: `{dotted}: "..."`'))
                    continue
            try:
                probe[key] = value
                clean[key] = value
            except OmegaConfBaseException:
                problems.append(Problem(dotted, _plain(value), f"expected {_type_name(tp)}, got {type(_plain(value)).__name__}",
                                        f"set `{dotted}` to {_type_name(tp)}"))
    return clean


def _check_list_of_sections(value: Any, item_cls: type, dotted: str, problems: List[Problem],
                            texts: Dict[str, str]) -> List[Any]:
    if not isinstance(value, ListConfig):
        problems.append(Problem(dotted, _plain(value), "expected a list",
                                f"write `{dotted}:` followed by `- function: pkg.module:func` entries"))
        return []
    items = []
    for i in range(len(value)):
        try:
            item = value[i]  # resolves an item that is itself an interpolation
        except OmegaConfBaseException as exc:
            problems.append(Problem(f"{dotted}[{i}]", _plain(value._get_node(i)._value()),
                                    f"interpolation failed: {str(exc).splitlines()[0]}",
                                    "point it at an existing key (`${section.key}`) or write the entry out"))
            continue
        if isinstance(item, str):  # shorthand: a bare dotted path
            item = OmegaConf.create({"function": item})
        items.append(_check_section(item, item_cls, f"{dotted}[{i}].", problems, texts))
    return items


def _plain(value: Any) -> Any:
    if isinstance(value, (DictConfig, ListConfig)):
        return OmegaConf.to_container(value, resolve=False)
    return value


def _plain_child(node: DictConfig, key: str) -> Any:
    try:
        return _plain(node._get_node(key)._value())
    except Exception:  # noqa: BLE001 - only used for display
        return None
