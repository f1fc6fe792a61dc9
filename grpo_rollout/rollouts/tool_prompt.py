"""How tools are shown to the model: in the chat template (``tools=``) or in a system prompt of their own.

``tool_prompt`` (a setting of the tool-calling rollout): ``"template"`` passes the tools' JSON schemas to the chat
template, ``"system"`` writes them into a system prompt with the call format and a one-line example call, ``"auto"``
uses the template when it renders the tools and describes the ``<tool_call>`` format, else the system prompt.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple

from .contract import RolloutError
from .conversation import render
from .tool_running import ToolError, example_call, tool_schema

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

DEFAULT_SYSTEM_PROMPT = """You can use these tools:
{tools}
To call a tool, write its name and arguments as JSON inside <tool_call></tool_call> tags, exactly like this example:
{example}
The tool's answer comes back in the next message. When you know the answer, reply without a tool call."""

def template_renders_tools(tokenizer: PreTrainedTokenizerBase, schemas: Sequence[Dict[str, Any]]) -> bool:
    """True when the chat template writes the tool schemas into the prompt (many templates ignore ``tools=``)."""
    probe = [{"role": "user", "content": "hi"}]
    try:
        with_tools = render(tokenizer, probe, True, tools=list(schemas))
        without = render(tokenizer, probe, True)
    except Exception:  # templates that reject the argument
        return False
    return with_tools != without and all(s["function"]["name"] in with_tools for s in schemas)


#: nested objects deeper than this are written as ``object``
MAX_DEPTH = 3


def _resolved(prop: Any, defs: Dict[str, Any], seen: Sequence[str] = ()) -> Tuple[Dict[str, Any], Sequence[str]]:
    """``prop`` with its local ``$ref`` (``#/$defs/Name``) followed; ``seen``: the definitions already entered."""
    ref = prop.get("$ref") if isinstance(prop, dict) else None
    if isinstance(ref, str) and ref.split("/")[-1] in defs and ref.split("/")[-1] not in seen:
        name = ref.split("/")[-1]
        return {**defs[name], **{k: v for k, v in prop.items() if k != "$ref"}}, (*seen, name)
    return (prop if isinstance(prop, dict) else {}), seen


def type_text(prop: Any, defs: Dict[str, Any], seen: Sequence[str] = (), depth: int = 0) -> str:
    """A JSON schema written for the model: ``"up" | "down"``, ``integer | null``, ``array of string``,
    ``{size: integer, fast: boolean = false}`` (nested objects' fields, to :data:`MAX_DEPTH` levels)."""
    prop, seen = _resolved(prop, defs, seen)
    if "enum" in prop:
        return " | ".join(json.dumps(v) for v in prop["enum"])
    if "const" in prop:
        return json.dumps(prop["const"])
    for key in ("anyOf", "oneOf"):
        if isinstance(prop.get(key), list):
            return " | ".join(type_text(p, defs, seen, depth) for p in prop[key])
    kind = prop.get("type")
    if isinstance(kind, list):
        return " | ".join(type_text({**prop, "type": k}, defs, seen, depth) for k in kind)
    if kind == "object" and isinstance(prop.get("properties"), dict) and prop["properties"] and depth < MAX_DEPTH:
        return "{" + fields_text(prop, defs, seen, depth + 1) + "}"
    if kind == "array" and isinstance(prop.get("prefixItems"), list):
        return "[" + ", ".join(type_text(p, defs, seen, depth + 1) for p in prop["prefixItems"]) + "]"
    if kind == "array" and isinstance(prop.get("items"), dict) and prop["items"]:
        inner = type_text(prop["items"], defs, seen, depth + 1)
        return f"array of ({inner})" if " | " in inner else f"array of {inner}"
    if kind == "object" and isinstance(prop.get("additionalProperties"), dict):
        return f"object of {type_text(prop['additionalProperties'], defs, seen, depth + 1)}"
    return kind if isinstance(kind, str) else "any"


def fields_text(schema: Dict[str, Any], defs: Dict[str, Any], seen: Sequence[str] = (), depth: int = 0) -> str:
    """An object schema's fields: ``name: type`` each, ``= default`` when it has one, ``name?`` when it may be left
    out without a default."""
    required = set(schema.get("required", []))
    out = []
    for name, prop in schema.get("properties", {}).items():
        optional = "?" if name not in required and not (isinstance(prop, dict) and "default" in prop) else ""
        default = f" = {json.dumps(prop['default'])}" if isinstance(prop, dict) and "default" in prop else ""
        out.append(f"{name}{optional}: {type_text(prop, defs, seen, depth)}{default}")
    return ", ".join(out)


def _descriptions(schema: Dict[str, Any], defs: Dict[str, Any], prefix: str = "", depth: int = 0) -> List[str]:
    """``  name: description`` for every described field, nested ones as ``opts.size``."""
    lines = []
    for name, prop in schema.get("properties", {}).items():
        resolved, _ = _resolved(prop, defs)
        if isinstance(prop, dict) and str(prop.get("description", "")).strip():
            lines.append(f"  {prefix}{name}: {' '.join(str(prop['description']).split())}")
        if depth < MAX_DEPTH and isinstance(resolved.get("properties"), dict):
            lines += _descriptions(resolved, defs, f"{prefix}{name}.", depth + 1)
    return lines


def tool_signature(schema: Dict[str, Any]) -> str:
    """A tool described for the model: ``- multiply(a: integer, b: integer): Multiply two integers.``, with allowed
    values, defaults and nested fields in the parentheses, then one indented line per described argument."""
    fn = schema.get("function", schema)
    params = fn.get("parameters") or {}
    defs = params.get("$defs") or params.get("definitions") or {}
    head = f"- {fn['name']}({fields_text(params, defs)}): {fn.get('description', '').strip()}"
    return "\n".join([head, *_descriptions(params, defs)])


def system_prompt_text(schemas: Sequence[Dict[str, Any]], template: Optional[str] = None) -> str:
    """The tools system prompt: ``template`` (default :data:`DEFAULT_SYSTEM_PROMPT`) with ``{tools}`` replaced by one
    line per tool (:func:`tool_signature`), ``{tools_json}`` by one JSON schema per line and ``{example}`` by an
    example call of the first tool. (Compact lines rather than JSON schemas by default: measured on SmolLM2-135M, a
    prompt holding the JSON schemas got 0 valid calls in 64 samples where a short one got 8.)"""
    text = DEFAULT_SYSTEM_PROMPT if template is None else template
    return (text.replace("{tools_json}", "\n".join(json.dumps(s) for s in schemas))
            .replace("{tools}", "\n".join(tool_signature(s) for s in schemas))
            .replace("{example}", example_call(schemas[0]) if schemas else ""))


def with_system_prompt(messages: List[Dict[str, Any]], text: str) -> List[Dict[str, Any]]:
    """``messages`` with ``text`` as the system prompt (put before an existing system message's content)."""
    if messages and messages[0].get("role") == "system":
        return [{"role": "system", "content": f"{text}\n\n{messages[0]['content']}"}] + messages[1:]
    return [{"role": "system", "content": text}] + messages


def choose_tool_prompt(tokenizer: PreTrainedTokenizerBase, schemas: Sequence[Dict[str, Any]], mode: str = "auto") -> str:
    """``"template"`` or ``"system"`` for ``mode`` ``"auto"`` (see the module docstring).

    Raises:
        RolloutError: unknown ``mode``, or ``"template"`` with a template that ignores ``tools=``.
    """
    if mode not in ("auto", "template", "system"):
        raise RolloutError(f"tool_prompt must be auto, template or system, got {mode!r}")
    if mode == "system":
        return mode
    renders = template_renders_tools(tokenizer, schemas)
    if mode == "template":
        if not renders:
            raise RolloutError("tool_prompt is 'template' but the chat template does not render `tools=`; "
                               "use tool_prompt: system")
        return mode
    described = renders and "<tool_call>" in render(tokenizer, [{"role": "user", "content": "hi"}], True,
                                                     tools=list(schemas))
    return "template" if described else "system"


@dataclass
class ToolPrompt:
    """How one set of tools is shown to the model: in the chat template (``template_kwargs``) or in a system prompt
    (``system_text``)."""

    template_kwargs: Dict[str, Any]
    system_text: Optional[str]

    @classmethod
    def of(cls, tokenizer: PreTrainedTokenizerBase, functions: Dict[str, Callable], mode: str = "auto",
           template: Optional[str] = None) -> "ToolPrompt":
        """For ``functions`` (name → tool), with ``tool_prompt`` ``mode`` and the system prompt ``template``.

        Raises:
            RolloutError: a tool has no usable schema, or ``mode`` is unknown or cannot be used.
        """
        try:
            schemas = [tool_schema(fn) for fn in functions.values()]
        except ToolError as exc:
            raise RolloutError(str(exc)) from exc
        if choose_tool_prompt(tokenizer, schemas, mode) == "template":
            return cls({"tools": schemas}, None)
        return cls({}, system_prompt_text(schemas, template))

    def messages(self, messages: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
        """``messages`` with the tools' system prompt, when they are shown there."""
        return messages if self.system_text is None else with_system_prompt(messages, self.system_text)
