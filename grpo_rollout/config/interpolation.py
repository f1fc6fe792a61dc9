"""Resolve the interpolations of the user's tree (``${sampling.num_generations}``, ``${oc.env:HOME}``) with
OmegaConf's public API, against the user's values over the schema defaults; one that fails is a :class:`Problem`
and its key is left out (so it keeps its default)."""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

from omegaconf import DictConfig, ListConfig, OmegaConf

from .fields import dotted
from .problems import Problem

_FAILED = object()
_FIX = "point it at an existing key (`${section.key}`) or a set variable (`${oc.env:NAME}`)"


def resolve(data: Dict[str, Any], defaults: Dict[str, Any], problems: List[Problem]) -> Tuple[Dict[str, Any],
                                                                                                 Dict[str, str]]:
    """Resolve every string holding ``${`` in ``data`` (plain dicts and lists, as read from YAML); returns ``(data
    resolved, {dotted key: the expression written})``, keys that failed left out and reported in ``problems``."""
    if "${" not in repr(data):
        return data, {}
    try:
        merged = OmegaConf.create(_over(defaults, data))
    except Exception as exc:  # noqa: BLE001 - an interpolation OmegaConf cannot even parse
        problems.append(Problem("<config>", None, f"interpolation failed: {str(exc).splitlines()[0]}", _FIX))
        return data, {}
    written: Dict[str, str] = {}
    return _walk(data, merged, (), problems, written), written


def _over(base: Any, top: Any) -> Any:
    """``top`` merged over ``base``: mappings key by key, anything else replaced."""
    if isinstance(base, dict) and isinstance(top, dict):
        return {**base, **{k: _over(base.get(k), v) for k, v in top.items()}}
    return top


def _walk(node: Any, merged: Any, path: Tuple[Any, ...], problems: List[Problem], written: Dict[str, str]) -> Any:
    if isinstance(node, dict):
        items = ((k, _walk(v, merged, path + (k,), problems, written)) for k, v in node.items())
        return {k: v for k, v in items if v is not _FAILED}
    if isinstance(node, list):
        items = (_walk(v, merged, path + (i,), problems, written) for i, v in enumerate(node))
        return [v for v in items if v is not _FAILED]
    if not (isinstance(node, str) and "${" in node):
        return node
    try:
        value = merged
        for part in path:
            value = value[part]  # resolves the node, and any interpolated section on the way
        if isinstance(value, (DictConfig, ListConfig)):
            value = OmegaConf.to_container(value, resolve=True)
    except Exception as exc:  # noqa: BLE001 - OmegaConf's resolution errors come in several types
        problems.append(Problem(dotted(path), node, f"interpolation failed: {str(exc).splitlines()[0]}", _FIX))
        return _FAILED
    if value != node:
        written[dotted(path)] = node
    return value
