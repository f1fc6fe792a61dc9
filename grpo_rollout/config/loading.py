"""Load a YAML config plus OmegaConf dotlist overrides into a :class:`~grpo_rollout.config.schema.Config`.

Unlike a plain ``OmegaConf.merge`` with the structured schema, which stops at the first bad key, loading walks the
user's tree against the schema and records *every* unknown key (with the nearest valid one) and every value of the
wrong type as a :class:`Problem`, then builds the config from what is left. Interpolations (``${sampling.n}``) and
environment variables (``${oc.env:HOME}``) resolve as in OmegaConf.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from .interpolation import _resolve_leaves
from .key_suggestions import suggest_key
from .problems import ConfigError, Problem
from .reading import _apply_overrides, _plain_scalar_texts
from .schema import Config, RewardConfig
from .schema_walk import _check_section


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
