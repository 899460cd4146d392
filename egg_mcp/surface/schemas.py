"""Tool schemas for the catalogue: strict arguments and compact published schemas.

The SDK builds each tool's argument model from its signature and ignores arguments it does not
know; a client that passes `size_overrides` to a tool without it would get a silent no-op. Every
argument model here forbids unknown names with a message listing the ones the tool takes.

The published schemas drop pydantic's titles and `null` defaults, and output schemas keep one
level: nested models become `object` with a pointer to the full schema resource. Validation is
unchanged: the SDK still validates arguments and results against the full pydantic models.
"""

from __future__ import annotations

import copy
from typing import Any

from pydantic import ConfigDict, model_validator

SCHEMA_URI = "egg://schemas/{tool}"


def strict_arguments(arg_model: type, tool: str) -> type:
    """A subclass of the SDK's argument model that refuses unknown argument names, clearly."""
    allowed = sorted(f.alias or n for n, f in arg_model.model_fields.items())

    class Strict(arg_model):  # type: ignore[misc, valid-type]
        model_config = ConfigDict(extra="forbid")

        @model_validator(mode="before")
        @classmethod
        def _refuse_unknown(cls, data: Any) -> Any:
            if isinstance(data, dict):
                unknown = sorted(set(data) - set(allowed))
                if unknown:
                    raise ValueError(
                        f"unknown argument(s) {', '.join(unknown)} for {tool}; it takes: {', '.join(allowed) or 'none'}. "
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


def harden_tools(server) -> dict[str, dict[str, Any]]:
    """Make every registered tool refuse unknown arguments and publish compact schemas.

    Returns the full output schema of each tool (served at egg://schemas/{tool})."""
    full: dict[str, dict[str, Any]] = {}
    for tool in server._tool_manager.list_tools():
        meta = tool.fn_metadata
        meta.arg_model = strict_arguments(meta.arg_model, tool.name)
        tool.parameters = compact_input_schema(tool.parameters)
        if meta.output_schema is not None:
            full[tool.name] = meta.output_schema
            meta.output_schema = compact_output_schema(meta.output_schema, tool.name)
    return full
