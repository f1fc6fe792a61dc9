"""What a run folder says about its run before any step finished: ``config.yaml`` is written when training starts,
``metrics.jsonl`` and ``rollouts/`` only when a step ends. ``grpo-rollout plot``/``inspect`` use it to tell "this run
did not log that" from "no step of this run finished yet"."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Optional

from .names import CONFIG_FILE, VLLM_LOG



def run_config(run_dir: Path) -> Optional[Dict[str, Any]]:
    """The resolved config the run wrote at its start (``run_dir/config.yaml``) as a dict, or ``None`` when there is
    none or it does not parse."""
    import yaml

    path = Path(run_dir) / CONFIG_FILE
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    return data if isinstance(data, dict) else None


def setting(config: Optional[Dict[str, Any]], dotted: str) -> Any:
    """``config["a"]["b"]`` for ``"a.b"`` (``None`` where a level is missing)."""
    value: Any = config
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def no_step_finished(run_dir: Path, key: str, wanted: Any) -> Optional[str]:
    """A sentence for a run whose ``config.yaml`` shows it was set up to write what is missing (``wanted(value of
    key)`` is true, e.g. ``training.save_rollouts`` is not ``off``) but that finished no step; ``None`` when there is
    no such config or the setting was off (then the missing setting is the reason)."""
    config = run_config(run_dir)
    if config is None or not wanted(setting(config, key)):
        return None
    return (f"no step of this run finished: {Path(run_dir) / CONFIG_FILE} shows it started with {key} = "
            f"{setting(config, key)!r}, but it stopped (or is still running) before its first step ended. Look at the "
            f"run's console output (or {VLLM_LOG}) for why; once a step finishes it is written here")
