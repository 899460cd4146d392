"""Tool schemas for the catalogue: strict arguments and compact published schemas.

The SDK builds each tool's argument model from its signature and ignores arguments it does not
know; a client that passes `size_overrides` to a tool without it would get a silent no-op. Every
argument model here forbids unknown names with a message listing the ones the tool takes.

Every argument model is also strict (issue 28): an integer is a JSON integer, a number a JSON number
(an integer is fine where a number is meant), a flag a JSON boolean; `true` is not a size and `"8"`
is not a number, even where the SDK would pre-parse a string argument as JSON. A refused argument
answers one sentence per argument naming it, what was wrong and what it takes (`plain_argument_error`),
instead of pydantic's report with its links.

The published schemas drop pydantic's titles and `null` defaults, and output schemas keep one
level: nested models become `object` with a pointer to the full schema resource. Validation is
unchanged: the SDK still validates arguments and results against the full pydantic models.
"""

from __future__ import annotations

import copy
import json
import math
from typing import Any, Mapping

from mcp.server.mcpserver.exceptions import ToolError
from pydantic import ConfigDict, ValidationError, model_validator

SCHEMA_URI = "egg://schemas/{tool}"


def strict_arguments(arg_model: type, tool: str) -> type:
    """A subclass of the SDK's argument model that refuses unknown argument names, clearly."""
    allowed = sorted(f.alias or n for n, f in arg_model.model_fields.items())

    class Strict(arg_model):  # type: ignore[misc, valid-type]
        model_config = ConfigDict(extra="forbid", strict=True)

        @model_validator(mode="before")
        @classmethod
        def _refuse_unknown(cls, data: Any) -> Any:
            if isinstance(data, dict):
                unknown = sorted(set(data) - set(allowed))
                if unknown:
                    raise ValueError(
                        f"unknown argument(s) {', '.join(unknown)} for {tool}; it takes: "
                        f"{', '.join(allowed) or 'none'}. "
                        "Remove them (nothing was run); egg://docs/tools describes every tool's arguments")
            return data

    Strict.__name__ = arg_model.__name__
    Strict.__qualname__ = arg_model.__qualname__
    return Strict


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        name = ref.removeprefix("#/$defs/")
        return {**defs.get(name, {}), **{k: v for k, v in node.items() if k != "$ref"}}, name
    return node, None


def _clean(node: Any) -> Any:
    """Drop titles and null defaults; fold `anyOf: [X, null]` into `type: [X, "null"]`."""
    if isinstance(node, list):
        return [_clean(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        if key == "title" and isinstance(value, str):
            continue
        if key == "default" and value is None:
            continue
        out[key] = _clean(value) if key != "properties" else {k: _clean(v) for k, v in value.items()}
    options = out.get("anyOf")
    if isinstance(options, list) and len(options) == 2 and {"type": "null"} in options:
        other = next(o for o in options if o != {"type": "null"})
        if set(other) == {"type"} and isinstance(other["type"], str):
            del out["anyOf"]
            out["type"] = [other["type"], "null"]
    return out


def compact_input_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The full argument schema (clients build calls from it), without titles; unknown names refused."""
    out = _clean(copy.deepcopy(schema))
    out["additionalProperties"] = False
    return out


def _shallow(node: dict[str, Any], defs: dict[str, Any], tool: str) -> dict[str, Any]:
    field_desc = node.get("description")
    node, name = _resolve(node, defs)
    nullable = False
    options = node.get("anyOf")
    if isinstance(options, list):
        rest = [o for o in options if o != {"type": "null"}]
        nullable = len(rest) < len(options)
        if len(rest) == 1:
            inner, name = _resolve(rest[0], defs)
            node = {**{k: v for k, v in node.items() if k != "anyOf"}, **inner}
        elif rest and all(isinstance(o, dict) and "$ref" in o for o in rest):  # a union of models
            name = " or ".join(o["$ref"].removeprefix("#/$defs/") for o in rest)
    desc = field_desc or (node.get("description") or "").split(". ")[0][:120]
    if name or (node.get("type") == "object" and "properties" in node):
        label = f"{name or 'object'}; fields: egg://schemas/{tool}"
        return {"type": ["object", "null"] if nullable else "object",
                "description": f"{desc} ({label})" if desc else label}
    if node.get("type") == "array":
        items, item_name = _resolve(node.get("items") or {}, defs)
        out: dict[str, Any] = {"type": "array"}
        if item_name or items.get("type") == "object":
            out["items"] = {"type": "object"}
            label = f"list of {item_name or 'object'}; fields: egg://schemas/{tool}"
            out["description"] = f"{desc} ({label})" if desc else label
        else:
            out["items"] = _clean(items)
            if desc:
                out["description"] = desc
        return out
    out = _clean({k: v for k, v in node.items() if k != "$defs"})
    if field_desc:
        out["description"] = field_desc
    if nullable and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    return out


def compact_output_schema(schema: dict[str, Any], tool: str) -> dict[str, Any]:
    """One level of the output schema: scalars keep their types, nested models point to the full schema."""
    defs = schema.get("$defs", {})
    props = {name: _shallow(node, defs, tool) for name, node in (schema.get("properties") or {}).items()}
    out: dict[str, Any] = {"type": "object", "properties": props}
    if schema.get("required"):
        out["required"] = list(schema["required"])
    return out


# -- plain argument errors -------------------------------------------------------------------------

MAX_SENTENCES = 5
_SCALARS = {"integer", "number", "boolean"}


def _types(node: dict[str, Any]) -> set[str]:
    t = node.get("type")
    out = set(t) if isinstance(t, list) else {t} if isinstance(t, str) else set()
    for option in node.get("anyOf") or []:
        if isinstance(option, dict):
            out |= _types(option)
    return out


def _deref(node: Any, defs: dict[str, Any]) -> dict[str, Any]:
    node = node if isinstance(node, dict) else {}
    resolved, _ = _resolve(node, defs)
    return resolved


def _num(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value) if abs(value) < 10**15 else f"{value:.3g}"
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return repr(value) if len(repr(value)) <= 12 else f"{value:.6g}"
    return str(value)


def _shown(value: Any) -> str:
    """A short JSON-ish rendering of a client's value (never the whole of a long text)."""
    if value is None:
        return "null"
    if isinstance(value, (bool, int, float)):
        return _num(value)
    if isinstance(value, str):
        return json.dumps(value if len(value) <= 40 else value[:40] + "...")
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, (list, tuple)):
        return "a list"
    return type(value).__name__


def _bound(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else _num(value)


def _range(noun: str, node: dict[str, Any]) -> str:
    lo, hi = node.get("minimum"), node.get("maximum")
    xlo, xhi = node.get("exclusiveMinimum"), node.get("exclusiveMaximum")
    if lo is not None and hi is not None:
        return f"{noun} from {_bound(lo)} to {_bound(hi)}"
    low = f"greater than {_bound(xlo)}" if xlo is not None else f"at least {_bound(lo)}" if lo is not None else None
    high = f"less than {_bound(xhi)}" if xhi is not None else f"at most {_bound(hi)}" if hi is not None else None
    bounds = [b for b in (low, high) if b]
    return f"{noun} {' and '.join(bounds)}" if bounds else noun


def accepted(node: Any, defs: dict[str, Any]) -> str:
    """What an argument's schema accepts, in words ('an integer from 1 to 8', 'true or false')."""
    node = _deref(node, defs)
    if "enum" in node:
        return "one of " + ", ".join(json.dumps(v) for v in node["enum"])
    if "const" in node:
        return json.dumps(node["const"])
    options = node.get("anyOf")
    if isinstance(options, list):
        words = [accepted(o, defs) for o in options if o != {"type": "null"}]
        text = ", ".join(words[:-1]) + f" or {words[-1]}" if len(words) > 1 else (words[0] if words else "null")
        return text + (", or null" if {"type": "null"} in options else "")
    types = node.get("type")
    nullable = isinstance(types, list) and "null" in types
    t = next((x for x in types if x != "null"), None) if isinstance(types, list) else types
    if t == "integer":
        text = _range("an integer", node)
    elif t == "number":
        text = _range("a number", node)
    elif t == "boolean":
        text = "true or false"
    elif t == "string":
        text = f"a string of at most {node['maxLength']} characters" if "maxLength" in node else "a string"
    elif t == "array":
        text = f"a list, each item {accepted(node.get('items') or {}, defs)}"
    elif t == "object" and isinstance(node.get("additionalProperties"), dict):
        text = f"an object of names to values, each value {accepted(node['additionalProperties'], defs)}"
    elif t == "object" and node.get("properties"):
        required = set(node.get("required") or ())
        fields = [f"{k} (required)" if k in required else k for k in node["properties"]]
        text = "an object with the fields " + ", ".join(fields)
    else:
        text = f"a JSON {t}" if t else "a value"
    return text + (", or null" if nullable else "")


def _locate(schema: dict[str, Any], loc: tuple) -> tuple[str, dict[str, Any]]:
    """The argument's printable name and its schema node, for a pydantic error location.

    Parts that name no property, key or index are a union member's tag ('float', 'str') and are skipped."""
    defs = schema.get("$defs", {})
    node: dict[str, Any] = schema
    name = ""
    for part in loc:
        node = _deref(node, defs)
        options = [o for o in node.get("anyOf") or [] if o != {"type": "null"}]
        if len(options) == 1:
            node = _deref(options[0], defs)
        props = node.get("properties") or {}
        extra = node.get("additionalProperties")
        if isinstance(part, str) and part in props:
            node, name = props[part], f"{name}.{part}" if name else part
        elif isinstance(part, int) and "items" in node:
            node, name = node["items"], f"{name}[{part}]"
        elif isinstance(part, str) and isinstance(extra, dict) and name:
            node, name = extra, f"{name}[{json.dumps(part)}]"
    return name or "the arguments", node


def _unquote(wants: set[str]) -> str:
    return f" (a JSON {' or '.join(sorted(wants & _SCALARS))}, without quotes)"


def _wrong(err: Mapping[str, Any], node: dict[str, Any], defs: dict[str, Any]) -> tuple[str, str]:
    """What was wrong, and a hint to put after what the argument takes."""
    kind, value = err.get("type", ""), err.get("input")
    wants = _types(_deref(node, defs))
    if isinstance(value, str) and "string" not in wants and wants & _SCALARS:
        return f"got the string {_shown(value)}", _unquote(wants)
    return _what(kind, value, wants), ""


def _what(kind: str, value: Any, wants: set[str]) -> str:
    if kind == "missing":
        return "is missing"
    if kind == "string_too_long" and isinstance(value, str):
        return f"is {len(value)} characters long"
    if isinstance(value, bool) and "boolean" not in wants:
        return f"got {_num(value)}, a boolean"
    if kind == "finite_number":
        return f"got {_num(value)}, not a finite number"
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        return f"got {_num(value)}, out of range"
    if isinstance(value, float) and "integer" in wants and "number" not in wants:
        return f"got {_num(value)}, not an integer"
    return f"got {_shown(value)}"


def plain_argument_error(tool: str, exc: ValidationError, schema: dict[str, Any]) -> str:
    """One sentence per refused argument: its name, what was wrong, what it takes. No pydantic report."""
    defs = schema.get("$defs", {})
    sentences: dict[str, str] = {}
    for err in exc.errors():
        ctx = err.get("ctx") or {}
        if err.get("type") == "value_error" and isinstance(ctx.get("error"), Exception):
            # our own model validator's message (unknown names): already a whole answer
            return str(ctx["error"]).rstrip(".") + "."
        name, node = _locate(schema, tuple(err.get("loc") or ()))
        if name not in sentences:
            wrong, hint = _wrong(err, node, defs)
            sentences[name] = f"{name} {wrong}; it takes {accepted(node, defs)}{hint}."
    shown = list(sentences.values())
    more = len(shown) - MAX_SENTENCES
    text = " ".join(shown[:MAX_SENTENCES]) + (f" ({more} more refused argument(s) not shown.)" if more > 0 else "")
    return f"{text} Nothing was run; egg://docs/tools describes {tool}'s arguments."


def _strings_for_scalars(arguments: Any, schema: dict[str, Any]) -> str | None:
    """A top-level number or flag sent as a string. The SDK pre-parses a string argument as JSON for any
    field that is not a string ('true' would become true, 'null' null), so this is checked on the raw call."""
    if not isinstance(arguments, dict):
        return None
    defs = schema.get("$defs", {})
    props = schema.get("properties") or {}
    for key, value in arguments.items():
        node = props.get(key)
        if not isinstance(value, str) or node is None:
            continue
        wants = _types(_deref(node, defs))
        if "string" not in wants and wants & _SCALARS:
            return f"{key} got the string {_shown(value)}; it takes {accepted(node, defs)}{_unquote(wants)}."
    return None


def check_arguments(tool, arguments: Any) -> None:
    """Refuse a call's arguments as the hardened tool would, in plain sentences (ToolError); None when valid."""
    where = f"Error executing tool {tool.name}: "
    refused = _strings_for_scalars(arguments, tool.parameters)
    if refused:
        raise ToolError(f"{where}{refused} Nothing was run; egg://docs/tools describes {tool.name}'s arguments.")
    try:
        tool.fn_metadata.validate_arguments(arguments)
    except ValidationError as exc:
        raise ToolError(where + plain_argument_error(tool.name, exc, tool.parameters)) from exc


def _plain_errors(tool) -> None:
    """Check a call's arguments before the SDK does, answering a refusal in plain sentences (the SDK would
    answer pydantic's report). The SDK validates again; a crash in validation stays the SDK's to report."""
    original = tool.run

    async def run(arguments, context, convert_result: bool = False):
        try:
            check_arguments(tool, arguments)
        except ToolError:
            raise
        except Exception:  # noqa: BLE001 - not a refusal: the SDK's own run reports it
            pass
        return await original(arguments, context, convert_result=convert_result)

    object.__setattr__(tool, "run", run)  # Tool is a pydantic model: no field named run


def harden_tools(server) -> dict[str, dict[str, Any]]:
    """Make every registered tool refuse unknown arguments and loose types in plain words, and publish
    compact schemas.

    Returns the full output schema of each tool (served at egg://schemas/{tool})."""
    full: dict[str, dict[str, Any]] = {}
    for tool in server._tool_manager.list_tools():
        meta = tool.fn_metadata
        meta.arg_model = strict_arguments(meta.arg_model, tool.name)
        tool.parameters = compact_input_schema(tool.parameters)
        _plain_errors(tool)
        if meta.output_schema is not None:
            full[tool.name] = meta.output_schema
            meta.output_schema = compact_output_schema(meta.output_schema, tool.name)
    return full
