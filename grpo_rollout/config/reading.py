"""What the user wrote: the text of plain YAML scalars (so a ``str`` key keeps it as written) and dotlist overrides
applied to the raw tree."""

from __future__ import annotations

import re
from typing import Any, Dict, List, Sequence

from omegaconf import DictConfig

from .problems import Problem


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
