"""Load a YAML config plus OmegaConf dotlist overrides into a :class:`~grpo_rollout.config.schema.Config`: OmegaConf
reads the YAML, applies the overrides and resolves interpolations (``${sampling.n}``, ``${oc.env:HOME}``); pydantic
checks the tree. Every unknown key (with the nearest valid one), wrong type, bad override and failed interpolation is
a :class:`Problem` and the key keeps its default; a value outside its range is kept for the range checks."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import GrammarParseError
from pydantic import TypeAdapter, ValidationError

from .interpolation import resolve
from .problems import ConfigError, Problem
from .reading import _apply_overrides, _plain_scalar_texts, as_written
from .schema import Config
from .fields import dotted, field_at, value_at
from .translate import VALUE_ERRORS, Loc, error_loc, to_problem


@dataclass
class LoadedConfig:
    """The result of :func:`load_config`: ``config`` (defaults for anything missing or rejected; ``None`` only when
    the file could not be read), ``problems`` (unknown keys, wrong types, interpolations, overrides), ``path``."""

    config: Optional[Config]
    problems: List[Problem] = field(default_factory=list)
    path: Optional[Path] = None

    @property
    def base_dir(self) -> Path:
        """Folder of the config file; relative file paths in the config are also looked up there."""
        return self.path.parent.resolve() if self.path else Path.cwd()


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
    except GrammarParseError as exc:  # a `${` OmegaConf cannot parse, at the key it names
        problems.append(Problem(exc.full_key or "<config>", None, f"interpolation OmegaConf cannot parse: "
                                f"{str(exc).splitlines()[0]}", "close it (`${section.key}`), or write a literal `$` "
                                "followed by `{` as `\\${`"))
        return _finish(LoadedConfig(None, problems, path), strict)
    except Exception as exc:  # noqa: BLE001 - YAML errors come in several types
        mark, context, start = (getattr(exc, k, None) for k in ("problem_mark", "context", "context_mark"))
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        said = getattr(exc, "problem", None) or str(exc).splitlines()[0]  # a duplicate key, a missing `]`: named
        if context and start is not None:
            said += f", {context} that starts at line {start.line + 1}, column {start.column + 1}"
        fix = ("write each key once: merge the two into one section" if "duplicate key" in said
               else "fix the YAML syntax there")
        problems.append(Problem("<config>", str(path), f"not valid YAML{where}: {said}", fix))
        return _finish(LoadedConfig(None, problems, path), strict)
    texts = _plain_scalar_texts(path.read_text())
    if isinstance(raw, DictConfig):
        if "rewards" in raw and not OmegaConf.is_interpolation(raw, "rewards") and isinstance(raw.rewards, ListConfig):
            raw.rewards = [{"function": r} if isinstance(r, str) and "${" not in r else r  # `- pkg.module:function`
                           for r in OmegaConf.to_container(raw.rewards, resolve=False)]  # as a mapping: overrides add
        _apply_overrides(raw, overrides, problems, texts)
    data = OmegaConf.to_container(raw, resolve=False) if isinstance(raw, (DictConfig, ListConfig)) else raw
    return _finish(LoadedConfig(_build({} if data is None else data, problems, texts), problems, path), strict)


def _build(data: Any, problems: List[Problem], texts: Optional[Dict[str, str]] = None) -> Config:
    """Resolve ``data``'s interpolations, check it against the schema (recording problems) and build the config.
    ``texts``: the user's text of plain scalars (:func:`_plain_scalar_texts`)."""
    found: List[Problem] = []
    written: Dict[str, str] = {}
    if isinstance(data, dict):
        data, written = resolve(data, Config().model_dump(), found)
        data = as_written(data, Config, "", {k: v for k, v in (texts or {}).items() if k not in written}, found)
    sections = list(data) if isinstance(data, dict) else []
    config = _validate(data, written, found)
    # in the order of the user's sections (within one: the schema's)
    problems += sorted(found, key=lambda p: sections.index(p.key.split(".")[0].split("[")[0])
                       if p.key.split(".")[0].split("[")[0] in sections else -1)
    return config


def _validate(data: Any, written: Dict[str, str], found: List[Problem]) -> Config:
    """Validate until pydantic takes ``data``: a key with a type error is reported and taken out (its default
    applies); a key with a value error is taken out and put back into the built config unvalidated (the range checks
    report it, :func:`grpo_rollout.config.ranges.check_values`)."""
    kept: Dict[Loc, Any] = {}
    seen: set = set()
    while True:
        try:
            config = Config.model_validate(data)
            break
        except ValidationError as exc:
            errors = [e for e in exc.errors() if (e["type"], error_loc(e)) not in seen]
        if not errors:  # pragma: no cover - an error that taking its key out did not remove
            config = Config()
            break
        for err in sorted(errors, key=lambda e: [(0, p) if isinstance(p, int) else (1, str(p)) for p in error_loc(e)],
                          reverse=True):  # the last list items first, so that taking one out moves no other
            loc = error_loc(err)
            seen.add((err["type"], loc))
            if err["type"] in VALUE_ERRORS and loc:
                loc = loc[:-1] if isinstance(loc[-1], int) else loc
                kept.setdefault(loc, _as_type(_take(data, loc), field_at(Config, dotted(loc))))
                continue
            problem = to_problem(err, Config, err.get("input"), written)
            if problem.key not in written or all(p.key != problem.key for p in found):
                found.append(problem)  # one problem per failed interpolation of a whole section
            if not loc:  # the whole file is not a mapping
                data = {}
            else:
                _take(data, loc, keep_place=isinstance(loc[-1], int) and err["type"] == "model_type")
    for loc, value in kept.items():
        parent = value_at(config, loc[:-1])
        if parent is not None:
            setattr(parent, loc[-1], value)
    return config


def _as_type(value: Any, info: Any) -> Any:
    """``value`` in its key's type, the range ignored (``0`` → ``0.0`` for a float); as it is if it cannot be."""
    try:
        return TypeAdapter(info.annotation).validate_python(value)
    except (ValidationError, AttributeError, TypeError):
        return value


def _take(data: Any, loc: Loc, keep_place: bool = False) -> Any:
    """Remove what ``loc`` points at from ``data`` and return it (``keep_place``: a list item becomes ``{}``)."""
    try:
        node = data
        for part in loc[:-1]:
            node = node[part]
        if keep_place:
            value, node[loc[-1]] = node[loc[-1]], {}
            return value
        return node.pop(loc[-1])
    except (KeyError, IndexError, TypeError, AttributeError):
        return None


def _finish(loaded: LoadedConfig, strict: bool) -> LoadedConfig:
    if strict and any(p.is_error for p in loaded.problems):
        raise ConfigError(loaded.problems)
    return loaded


def to_yaml(config: Config) -> str:
    """The resolved config as YAML text (what a run actually used; text that YAML would read otherwise is quoted)."""
    return OmegaConf.to_yaml(config.model_dump())


def config_dict(config: Config) -> Dict[str, Any]:
    """The resolved config as plain nested dicts and lists (what trackio/wandb record as the run's config)."""
    return config.model_dump()


def config_from_dict(data: Dict[str, Any]) -> Tuple[Config, List[Problem]]:
    """Build a config from a Python mapping (for notebooks and tests); same checks as :func:`load_config`."""
    problems: List[Problem] = []
    return _build(data, problems), problems


__all__ = ["LoadedConfig", "config_dict", "config_from_dict", "load_config", "to_yaml"]
