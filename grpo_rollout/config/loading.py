"""Load a YAML config plus OmegaConf dotlist overrides into a :class:`~grpo_rollout.config.schema.Config`.

Unlike a plain ``OmegaConf.merge`` with the structured schema, which stops at the first bad key, loading walks the
user's tree against the schema and records *every* unknown key (with the nearest valid one) and every value of the
wrong type as a :class:`Problem`, then builds the config from what is left. Interpolations (``${sampling.n}``) and
environment variables (``${oc.env:HOME}``) resolve as in OmegaConf.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from .problems import ConfigError, Problem
from .schema import ENUMS, Config, RewardConfig


@dataclass
class LoadedConfig:
    """The result of :func:`load_config`.

    Attributes:
        config: the resolved config (defaults filled in for anything missing or rejected); ``None`` only when the file
            could not be read at all.
        problems: every problem found while loading (unknown keys, wrong types, bad interpolations, bad overrides).
        path: the config file.
    """

    config: Optional[Config]
    problems: List[Problem] = field(default_factory=list)
    path: Optional[Path] = None

    @property
    def base_dir(self) -> Path:
        """Folder of the config file; relative file paths in the config are also looked up there."""
        return self.path.parent.resolve() if self.path else Path.cwd()


def _hints(cls: type) -> Dict[str, Any]:
    return typing.get_type_hints(cls)


def _all_keys(cls: type = Config, prefix: str = "") -> List[str]:
    """Every valid dotted key of the schema (list items of ``rewards`` as ``rewards[].key``)."""
    keys = []
    for name, tp in _hints(cls).items():
        dotted = f"{prefix}{name}"
        keys.append(dotted)
        if dataclasses.is_dataclass(tp):
            keys += _all_keys(tp, dotted + ".")
        elif typing.get_args(tp) and dataclasses.is_dataclass(typing.get_args(tp)[0]):
            keys += _all_keys(typing.get_args(tp)[0], dotted + "[]." )
    return keys


def suggest_key(bad_key: str, cls: type, prefix: str) -> Optional[str]:
    """Nearest valid key for an unknown ``prefix + bad_key``: a close name in the same section first, then the same
    or a close name in another section. Returns the full dotted key, or ``None``."""
    same_level = list(_hints(cls))
    from ..rollouts.contract import SAMPLING_ALIASES  # e.g. `sampling.max_tokens` → `sampling.max_completion_length`

    if cls.__name__ == "SamplingConfig" and bad_key in SAMPLING_ALIASES:
        return prefix + SAMPLING_ALIASES[bad_key]
    close = difflib.get_close_matches(bad_key, same_level, n=1, cutoff=0.6)
    if close:
        return prefix + close[0]
    everywhere = [k for k in _all_keys() if not k.startswith("rewards[]")]
    exact = [k for k in everywhere if k.rsplit(".", 1)[-1] == bad_key]
    if exact:
        return exact[0]
    leaf_names = {k.rsplit(".", 1)[-1]: k for k in everywhere}
    close = difflib.get_close_matches(bad_key, list(leaf_names), n=1, cutoff=0.75)
    if close:
        return leaf_names[close[0]]
    # whole dotted keys of *other* sections, compared below the sections they share with the unknown key: a shared
    # `model.` would make `model.lora.sync_mode` look close to `model.trust_remote_code`
    full = prefix + bad_key
    others = [k for k in everywhere if not full.startswith((k + ".", k + "[")) and not (prefix and k.startswith(prefix))]
    scored = [(difflib.SequenceMatcher(None, *_below_shared(full, k)).ratio(), k) for k in others]
    best = max(scored, default=(0.0, None), key=lambda item: item[0])
    return best[1] if best[0] >= 0.6 else None


def _below_shared(a: str, b: str) -> Tuple[str, str]:
    """Dotted keys ``a`` and ``b`` without the leading sections they share (``model.lora.sync_mode`` and
    ``model.trust_remote_code`` → ``lora.sync_mode`` and ``trust_remote_code``); the last part always stays."""
    mine, theirs = a.split("."), b.split(".")
    shared = 0
    while shared < min(len(mine), len(theirs)) - 1 and mine[shared] == theirs[shared]:
        shared += 1
    return ".".join(mine[shared:]), ".".join(theirs[shared:])


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
    :func:`_plain_scalar_texts`): a key typed ``str`` takes that text, not YAML's reading of it (``1e5`` stays
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


def load_config(path: str | Path, overrides: Sequence[str] = (), strict: bool = False) -> LoadedConfig:
    """Read ``path`` (YAML) and apply dotlist ``overrides`` such as ``["sampling.temperature=0.7"]``.

    Returns a :class:`LoadedConfig` whose ``problems`` lists every unknown key, type error, bad override and failed
    interpolation. With ``strict=True`` a non-empty error list raises :class:`ConfigError` instead. Range and
    cross-key checks are not run here: see :func:`grpo_rollout.preflight.validate`.
    """
    path = Path(path)
    problems: List[Problem] = []
    if not path.is_file():
        problems.append(Problem("<config>", str(path), "config file not found", "pass the path of an existing YAML file"))
        return _finish(LoadedConfig(None, problems, path), strict)
    try:
        raw = OmegaConf.load(path)
    except Exception as exc:  # noqa: BLE001 - YAML errors come in several types
        problems.append(Problem("<config>", str(path), f"not valid YAML: {str(exc).splitlines()[0]}",
                                "fix the YAML syntax at the line named"))
        return _finish(LoadedConfig(None, problems, path), strict)
    if raw is None or isinstance(raw, ListConfig):
        raw = OmegaConf.create({}) if raw is None else raw
    texts = _plain_scalar_texts(path.read_text())
    if isinstance(raw, DictConfig):
        _apply_overrides(raw, overrides, problems, texts)
    return _finish(LoadedConfig(_build(raw, problems, texts), problems, path), strict)


def _plain_scalar_texts(yaml_text: str) -> Dict[str, str]:
    """Dotted key (``logging.run_name``, ``rewards[0].function``) → the text of every plain (unquoted) YAML scalar
    that YAML does not read as text (``1e5``, ``0123456``, ``yes``; ``null``/``~`` excluded), so that a key typed
    ``str`` can keep exactly what the user wrote."""
    import yaml

    try:
        root = yaml.compose(yaml_text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return {}
    texts: Dict[str, str] = {}

    def walk(node: Any, dotted: str) -> None:
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode):
                    walk(value, f"{dotted}.{key.value}" if dotted else str(key.value))
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                walk(item, f"{dotted}[{i}]")
        elif isinstance(node, yaml.ScalarNode) and node.style is None and node.tag != "tag:yaml.org,2002:null":
            texts[dotted] = node.value

    walk(root, "")
    return texts


def _build(raw: Any, problems: List[Problem], texts: Optional[Dict[str, str]] = None) -> Config:
    """Check ``raw`` against the schema (recording problems), merge what is valid over the defaults, resolve.
    ``texts``: the user's text of plain scalars (:func:`_plain_scalar_texts`)."""
    clean = _check_section(raw, Config, "", problems, texts)
    cfg = OmegaConf.merge(OmegaConf.structured(Config), clean)
    _resolve_leaves(cfg, problems)
    try:
        return OmegaConf.to_object(cfg)
    except OmegaConfBaseException as exc:  # a value that became wrong only after resolving
        problems.append(Problem("<config>", None, str(exc).splitlines()[0], "fix the key named above"))
        return Config()


def _apply_overrides(raw: DictConfig, overrides: Sequence[str], problems: List[Problem],
                     texts: Dict[str, str]) -> None:
    """Apply each ``key=value`` override to ``raw`` in place (list items as ``rewards.0.weight=2``); one that cannot be
    parsed or applied (bad YAML value, missing list index) is recorded as a problem, the others still apply. The text
    of an unquoted value goes into ``texts`` (replacing the YAML file's), so a ``str`` key keeps it as written.

    Hydra's ``+key=value`` (add a key) is accepted as ``key=value``: free-form maps such as ``rollout.kwargs`` take
    new keys anyway, and a new key anywhere else is reported as unknown like any other."""
    for item in overrides:
        item = item[1:] if item.startswith("+") and not item.startswith("++") else item
        if "=" not in item or item.startswith("="):
            problems.append(Problem(item, None, "override is not of the form key=value",
                                    "write overrides like `sampling.temperature=0.7`"))
            continue
        key, value = item.split("=", 1)
        try:
            raw.merge_with_dotlist([item])
        except Exception as exc:  # noqa: BLE001 - OmegaConf and YAML errors come in several types
            problems.append(Problem(key, value, f"override could not be applied: {str(exc).splitlines()[0]}",
                                    "write overrides like `sampling.temperature=0.7` (list items: `rewards.0.weight=2`)"))
            continue
        dotted = re.sub(r"\.(\d+)(?=\.|$)", r"[\1]", key.strip())  # rewards.0.function → rewards[0].function
        if value.strip()[:1] in ("'", '"'):
            texts.pop(dotted, None)  # quoted: YAML already reads it as text
        else:
            texts[dotted] = value.strip()


def _finish(loaded: LoadedConfig, strict: bool) -> LoadedConfig:
    if strict and any(p.is_error for p in loaded.problems):
        raise ConfigError(loaded.problems)
    return loaded


def to_yaml(config: Config) -> str:
    """The resolved config as YAML text (what a run actually used)."""
    return OmegaConf.to_yaml(OmegaConf.structured(config))


def config_dict(config: Config) -> Dict[str, Any]:
    """The resolved config as plain nested dicts and lists (what trackio/wandb record as the run's config)."""
    return OmegaConf.to_container(OmegaConf.structured(config), resolve=True)


def config_from_dict(data: Dict[str, Any]) -> Tuple[Config, List[Problem]]:
    """Build a config from a Python mapping (for notebooks and tests); same checks as :func:`load_config`."""
    problems: List[Problem] = []
    return _build(OmegaConf.create(data), problems), problems


__all__ = ["LoadedConfig", "load_config", "config_from_dict", "to_yaml", "suggest_key", "RewardConfig"]
