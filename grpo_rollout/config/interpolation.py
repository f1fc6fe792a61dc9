"""Resolve the interpolations of a merged config (``${sampling.n}``, ``${oc.env:HOME}``); one that fails is recorded
as a :class:`Problem` and its key falls back to the schema default."""

from __future__ import annotations

from typing import List

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from .problems import Problem
from .schema import Config


def _resolve_leaves(cfg: DictConfig, problems: List[Problem], prefix: str = "") -> None:
    """Resolve every interpolation; on failure record a problem and put the schema default back."""
    for key in list(cfg.keys()):
        dotted = f"{prefix}{key}"
        if OmegaConf.is_interpolation(cfg, key):
            raw = cfg._get_node(key)._value()
            try:
                cfg[key] = cfg[key]  # resolves, converts to the node's type, stores the result
            except OmegaConfBaseException as exc:
                msg = str(exc).splitlines()[0]
                problems.append(Problem(dotted, raw, f"interpolation failed: {msg}",
                                        "point it at an existing key (`${section.key}`) or a set variable (`${oc.env:NAME}`)"))
                default = OmegaConf.structured(Config)
                try:
                    cfg[key] = OmegaConf.select(default, dotted, default=None)
                except OmegaConfBaseException:
                    pass
            continue
        child = cfg._get_node(key)
        if isinstance(child, DictConfig):
            _resolve_leaves(child, problems, dotted + ".")
        elif isinstance(child, ListConfig):
            failed = []
            for i in range(len(child)):
                if OmegaConf.is_interpolation(child, i):
                    try:
                        child[i] = child[i]
                    except OmegaConfBaseException as exc:
                        problems.append(Problem(f"{dotted}[{i}]", child._get_node(i)._value(),
                                                f"interpolation failed: {str(exc).splitlines()[0]}",
                                                "point it at an existing key (`${section.key}`) or a set variable "
                                                "(`${oc.env:NAME}`)"))
                        failed.append(i)
                elif isinstance(child._get_node(i), DictConfig):
                    _resolve_leaves(child._get_node(i), problems, f"{dotted}[{i}].")
            for i in reversed(failed):  # reported; left out so that the rest of the list still loads
                del child[i]
