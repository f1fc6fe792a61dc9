"""What the user wrote: the text of plain YAML scalars (so a ``str`` key keeps it as written), dotlist overrides
applied to the raw tree, and the tree with YAML's readings undone where the schema wants text."""

from __future__ import annotations

import re
from typing import Any, Dict, List, Sequence, Type

from omegaconf import DictConfig
from pydantic import BaseModel

from .fields import allowed_values, is_text, item_type, section_of, strip_optional, type_name
from .problems import Problem


def _plain_scalar_texts(yaml_text: str) -> Dict[str, str]:
    """Dotted key (``logging.run_name``, ``rewards[0].function``) → the text of every plain (unquoted) YAML scalar
    that YAML does not read as text (``1e5``, ``0123456``, ``yes``, and an empty value as ``""``; ``null``/``~``
    excluded), so that a key typed ``str`` can keep exactly what the user wrote."""
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
        elif isinstance(node, yaml.ScalarNode) and node.style is None and (node.tag != "tag:yaml.org,2002:null"
                                                                           or node.value == ""):
            texts[dotted] = node.value

    walk(root, "")
    return texts


def _apply_overrides(raw: DictConfig, overrides: Sequence[str], problems: List[Problem],
                     texts: Dict[str, str]) -> None:
    """Apply each ``key=value`` override to ``raw`` in place (list items as ``rewards.0.weight=2``); one that cannot be
    parsed or applied (bad YAML value, missing list index) is a problem, the others still apply. The text of an
    unquoted value goes into ``texts``, so a ``str`` key keeps it as written. Hydra's ``+key=value`` is taken as
    ``key=value``: free-form maps (``rollout.kwargs``) take new keys anyway; elsewhere a new key is unknown."""
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


def as_written(node: Any, model: Type[BaseModel], prefix: str, texts: Dict[str, str], problems: List[Problem]) -> Any:
    """The user's mapping for section ``model`` with YAML's readings undone where the schema says so, before pydantic
    sees it: a text key takes the text written (``1e5`` stays ``"1e5"``, ``0123456`` stays ``"0123456"``, an unquoted
    ``off`` stays ``"off"``, and nothing written, ``data.eval=`` or ``eval:``, is the empty text where null is not
    allowed: YAML and OmegaConf read it as null), a bare string in a list of sections is ``{function: <it>}``, and a
    boolean for a number or a float for an integer is a problem (pydantic would read ``true`` as 1 and ``8.0`` as 8). Keys with a problem
    are left out, so they keep their default; anything else wrong is left for pydantic to report."""
    if not isinstance(node, dict):
        return node
    out: Dict[Any, Any] = {}
    for key, value in node.items():
        dotted, info = prefix + str(key), model.model_fields.get(str(key))
        tp = strip_optional(info.annotation)[0] if info else None
        sub = section_of(tp)
        if value is None and info is not None and is_text(tp) and item_type(tp) is tp and \
                not strip_optional(info.annotation)[1] and texts.get(dotted) == "":
            out[str(key)] = ""  # `data.eval=`: empty, not null
        elif info is None or value is None:
            out[str(key)] = value
        elif sub is not None and sub is not tp and isinstance(value, list):  # a list of sections: `rewards`
            out[str(key)] = [as_written({"function": v} if isinstance(v, str) else v, sub, f"{dotted}[{i}].", texts,
                                        problems) for i, v in enumerate(value)]
        elif sub is tp:
            out[str(key)] = as_written(value, sub, dotted + ".", texts, problems)
        elif is_text(tp) and isinstance(value, list):
            out[str(key)] = [_text(v, f"{dotted}[{i}]", texts) for i, v in enumerate(value)]
        elif is_text(tp) and item_type(tp) is tp:
            out[str(key)] = _text(value, dotted, texts, allowed_values(tp) or ())
            if isinstance(out[str(key)], bool):
                problems.append(Problem(dotted, out.pop(str(key)), "YAML read this unquoted word as a boolean, not "
                                        "text", f'quote it: `{dotted}: "..."`'))
        elif isinstance(value, bool) and tp in (int, float) or isinstance(value, float) and tp is int:
            problems.append(Problem(dotted, value, f"expected {type_name(info.annotation)}, got "
                                    f"{type(value).__name__}", f"set `{dotted}` to {type_name(info.annotation)}"))
        else:
            out[str(key)] = value
    return out


def _text(value: Any, dotted: str, texts: Dict[str, str], allowed: tuple = ()) -> Any:
    """A text key's value as the user wrote it (when YAML read it as something else)."""
    if isinstance(value, str) or value is None:
        return value
    if value is False and "off" in allowed:
        return "off"  # YAML 1.1 reads an unquoted off as false; the Python dict path has no text to go back to
    return texts.get(dotted, value)
