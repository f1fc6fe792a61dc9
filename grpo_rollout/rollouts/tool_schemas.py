"""Tool JSON schemas: a Python tool's, built from its signature and docstring; and a call's arguments checked against
a tool's whole schema.

A Python tool (a function, or a TRL environment's method) gets the full JSON schema of its parameters from pydantic:
enums (``Literal``), defaults, and the fields of nested pydantic models, dataclasses and ``TypedDict`` s (under
``$defs``); the descriptions come from its docstring's ``Args:`` (read by ``transformers.utils.get_json_schema``,
which also says what is missing). An MCP server's tool brings its own schema. Either way a call's arguments are
validated against that whole schema with ``jsonschema`` before the tool runs, and converted to the parameters' types
(a dict into the pydantic model or dataclass the parameter is declared as).
"""

from __future__ import annotations

import inspect
import json
import math
import sys
import types
import typing
from typing import Any, Callable, Dict, Mapping, Optional, Tuple


class ToolError(ValueError):
    """A configured tool cannot be used (not importable, not callable, or no usable schema)."""


def tool_schema(fn: Callable) -> Dict[str, Any]:
    """The OpenAI-style JSON schema of ``fn`` (``{"type": "function", "function": {name, description, parameters}}``):
    its ``__tool_schema__`` when it has one (an MCP server's tool), else built from its signature (pydantic: enums,
    defaults, nested fields under ``$defs``) and docstring (the description of the tool and of each argument).

    Raises:
        ToolError: the function lacks type hints or a docstring describing each argument (the message says which).
    """
    from transformers.utils import get_json_schema

    given = getattr(fn, "__tool_schema__", None)
    if given is not None:  # a tool that brings its own schema (an MCP server's)
        return given
    name = getattr(fn, "__name__", fn)
    if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
        raise ToolError(f"tool {name!r} is a generator; a tool must return its answer")
    try:
        variadic = [p.name for p in inspect.signature(fn).parameters.values()
                    if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    except (TypeError, ValueError):
        variadic = []
    if variadic:
        raise ToolError(f"tool {name!r} takes *{variadic[0]}: the model can only pass named arguments, so give "
                        "each one its own parameter")
    try:
        schema = get_json_schema(fn)
    except Exception as exc:  # TypeHintParsingException / DocstringParsingException
        raise ToolError(f"tool {name!r}: cannot build its JSON schema: {exc}. Give every parameter a type hint and "
                        "describe it under `Args:` in the docstring") from exc
    full = _parameters_schema(fn)
    if full is not None:  # else (a type pydantic cannot describe): transformers' flatter schema, as it is
        described = schema["function"]["parameters"].get("properties", {})
        for pname, prop in full["properties"].items():
            if described.get(pname, {}).get("description"):
                prop["description"] = described[pname]["description"]
        schema["function"]["parameters"] = full
    return schema


def _pydantic_ready(tp: Any) -> Any:
    """``tp`` with each ``typing.TypedDict`` in it (pydantic reads only ``typing_extensions``' before Python 3.12)
    remade as a ``typing_extensions.TypedDict`` with the same fields."""
    import typing_extensions as te

    if sys.version_info >= (3, 12):
        return tp
    if isinstance(tp, type) and typing.is_typeddict(tp) and type(tp).__module__ == "typing":
        hints = typing.get_type_hints(tp, include_extras=True)
        fields = {k: _pydantic_ready(v) if k in tp.__required_keys__ else te.NotRequired[_pydantic_ready(v)]
                  for k, v in hints.items()}
        remade = te.TypedDict(tp.__name__, fields)
        remade.__doc__ = tp.__doc__
        return remade
    args = typing.get_args(tp)
    if args and not isinstance(tp, type):
        new = tuple(_pydantic_ready(a) for a in args)
        if new != args:
            origin = typing.get_origin(tp)
            try:
                if origin is typing.Union or origin is types.UnionType:
                    return typing.Union[new]
                if origin is typing.Annotated or hasattr(tp, "__metadata__"):
                    return typing.Annotated[(new[0], *tp.__metadata__)]
                return tp.copy_with(new) if hasattr(tp, "copy_with") else origin[new]
            except Exception:  # noqa: BLE001 - a form not remade here: pydantic says whether it can read it
                return tp
    return tp


def _parameter_types(fn: Callable) -> Optional[Dict[str, Tuple[Any, Any]]]:
    """``name → (type, default or inspect.Parameter.empty)`` of ``fn``'s parameters (``None``: no signature)."""
    try:
        params = inspect.signature(fn).parameters.values()
        hints = typing.get_type_hints(fn, include_extras=True)
    except (TypeError, ValueError, NameError):
        return None
    return {p.name: (_pydantic_ready(hints.get(p.name, Any)), p.default) for p in params
            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}


def _untitled(node: Any, properties: bool = False) -> Any:
    """A pydantic JSON schema without its ``title`` keys (noise in a prompt; a property named ``title`` is kept)."""
    if isinstance(node, dict):
        return {k: _untitled(v, k in ("properties", "$defs") and not properties)
                for k, v in node.items() if properties or not (k == "title" and isinstance(v, str))}
    if isinstance(node, list):
        return [_untitled(v) for v in node]
    return node


def _parameters_schema(fn: Callable) -> Optional[Dict[str, Any]]:
    """The JSON schema of ``fn``'s parameters, built by pydantic (``None`` when it cannot describe one of them)."""
    from pydantic import TypeAdapter

    types = _parameter_types(fn)
    if types is None:
        return None
    try:
        adapters = {name: TypeAdapter(tp) for name, (tp, _) in types.items()}
        found, defs = TypeAdapter.json_schemas([(name, "validation", a) for name, a in adapters.items()])
    except Exception:  # noqa: BLE001 - PydanticSchemaGenerationError, a forward reference it cannot resolve, ...
        return None
    properties = {}
    for name, (_, default) in types.items():
        prop = dict(found[(name, "validation")])
        if default is not inspect.Parameter.empty:
            try:
                prop["default"] = json.loads(json.dumps(adapters[name].dump_python(default, mode="json", warnings=False)))
            except Exception:  # noqa: BLE001 - a default JSON cannot write: the schema just does not show it
                pass
        properties[name] = prop
    out = {"type": "object", "properties": properties,
           "required": [n for n, (_, default) in types.items() if default is inspect.Parameter.empty],
           "additionalProperties": False}
    if defs.get("$defs"):
        out["$defs"] = defs["$defs"]
    return _untitled(out)


def _where(path: Any) -> str:
    return ".".join(str(p) for p in path)


def _problem_text(error: Any) -> str:
    """One ``jsonschema`` error in the words the model reads: ``argument 'a' must be integer, got "two"``."""
    where, got = _where(error.absolute_path), json.dumps(error.instance)[:40]
    if error.validator == "type" and where:
        kinds = error.validator_value if isinstance(error.validator_value, list) else [error.validator_value]
        return f"argument {where!r} must be {' or '.join(kinds)}, got {got}"
    if error.validator in ("enum", "const") and where:
        allowed = error.validator_value if error.validator == "enum" else [error.validator_value]
        return f"argument {where!r} must be one of {', '.join(json.dumps(v) for v in allowed)}, got {got}"
    return f"argument {where!r}: {error.message}" if where else error.message


def _non_finite(value: Any, path: str = "") -> Optional[str]:
    """Where ``value`` holds NaN or an infinity (JSON has neither, Python's reader accepts both)."""
    if isinstance(value, float) and not math.isfinite(value):
        return path or "?"
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found = _non_finite(item, f"{path}.{key}" if path else str(key))
        if found:
            return found
    return None


def arguments_problem(schema: Mapping[str, Any], arguments: Dict[str, Any]) -> Optional[str]:
    """What is wrong with ``arguments`` for the tool schema ``schema`` (its ``function.parameters``, validated whole
    with ``jsonschema``: types, enums, required and nested fields), in words; ``None`` when they fit (or the schema
    itself is not a valid JSON schema: then the tool decides)."""
    from jsonschema import exceptions, validators

    nan = _non_finite(arguments)
    if nan is not None:
        return f"argument {nan!r} must be a finite number, got {json.dumps(_dig(arguments, nan))}"
    parameters = schema.get("function", schema).get("parameters") or {}
    if id(parameters) not in _VALIDATORS:  # kept with its schema, so the id is not reused
        cls = validators.validator_for(parameters)
        try:
            cls.check_schema(parameters)
            _VALIDATORS[id(parameters)] = (parameters, cls(parameters))
        except exceptions.SchemaError:
            _VALIDATORS[id(parameters)] = (parameters, None)
    validator = _VALIDATORS[id(parameters)][1]
    if validator is None:
        return None
    by_argument: Dict[Any, list] = {}  # every argument's problem (the best of its errors), in the order written
    for error in validator.iter_errors(arguments):
        by_argument.setdefault(error.absolute_path[0] if error.absolute_path else None, []).append(error)
    order = [None] + list(arguments)
    return "; ".join(_problem_text(exceptions.best_match(by_argument[key]))
                     for key in sorted(by_argument, key=order.index)) or None


#: ``id(parameters schema) → (that schema, its jsonschema validator or None when the schema is not valid)``
_VALIDATORS: Dict[int, Tuple[Any, Any]] = {}


def _dig(value: Any, path: str) -> Any:
    for key in path.split("."):
        value = value[int(key)] if isinstance(value, list) else value.get(key)
    return value


def converted(fn: Callable, arguments: Dict[str, Any]) -> Dict[str, Any]:
    """``arguments`` (already valid for the schema) as the types ``fn`` declares: a JSON object into the pydantic
    model or dataclass of its parameter, a whole float ``3.0`` given for an ``int`` into ``3``, a list for a tuple.

    Raises:
        ValueError: a value that fits the schema but not the type (a model's own validator rejected it).
    """
    from pydantic import ValidationError

    adapters = _adapters(fn)
    out = dict(arguments)
    for name, value in arguments.items():
        if adapters.get(name) is None:
            continue
        try:
            out[name] = adapters[name].validate_python(value)
        except ValidationError as exc:
            raise ValueError(f"argument {name!r}: {exc.errors()[0].get('msg', exc)}") from None
    return out


#: per tool function (an environment's methods: the class's function), ``name → pydantic.TypeAdapter`` of each
#: typed parameter (``None``: left as the model wrote it)
_ADAPTERS: Dict[Callable, Dict[str, Any]] = {}


def _adapters(fn: Callable) -> Dict[str, Any]:
    from pydantic import TypeAdapter

    key = getattr(fn, "__func__", fn)
    if key not in _ADAPTERS:
        adapters: Dict[str, Any] = {}
        for name, (tp, _) in (_parameter_types(fn) or {}).items():
            try:
                adapters[name] = None if tp is Any else TypeAdapter(tp)
            except Exception:  # noqa: BLE001 - a type pydantic cannot build: the value is passed as written
                adapters[name] = None
        _ADAPTERS[key] = adapters
    return _ADAPTERS[key]
