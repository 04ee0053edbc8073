"""The tool declaration: :class:`ToolSpec` and :func:`normalize_tool`."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from schema.build import cached_ir
from schema.errors import SchemaError
from schema.ir import IR, Never, Obj, object_part
from schema.normalize import normalize_schema
from schema.regex import pattern_matches


@dataclass(frozen=True)
class ToolSpec:
    """A normalised tool declaration: ``name`` as calls write it (``call:NAME{...}``), ``description`` (may be
    empty) and ``parameters``, the plain JSON Schema of the arguments object (see :func:`normalize_tool`)."""

    name: str
    description: str
    parameters: dict[str, Any] = field(hash=False)


#: Characters a tool name cannot hold: the Gemma call syntax reads the name up to ``{``.
_BAD_NAME = re.compile(r"[{}\s<>:,\[\]\"]")


def normalize_tool(tool: Any) -> ToolSpec:
    """Normalise one tool declaration (OpenAI ``{"type": "function", "function": {...}}``, bare ``{"name",
    "description", "parameters"}`` or a :class:`ToolSpec`, returned as is) and check its argument schema.

    Returns a :class:`ToolSpec` whose ``parameters`` is an object schema (:func:`normalize_schema`).

    Raises:
        SchemaError: a malformed declaration (keyword ``"name"``/``"parameters"``), or a schema
            :func:`build_ir` refuses; ``path`` is relative to ``parameters``.
    """
    if isinstance(tool, ToolSpec):
        return tool
    if not isinstance(tool, dict):
        raise SchemaError("name", "", f"tool declaration must be a dict, got {type(tool).__name__}")
    fn = tool.get("function") if tool.get("type") == "function" or "function" in tool else tool
    if not isinstance(fn, dict):
        raise SchemaError("name", "", "tool declaration's 'function' must be a dict")
    name = fn.get("name")
    if not isinstance(name, str) or not name or _BAD_NAME.search(name):
        raise SchemaError(
            "name",
            "",
            f"tool name must be a non-empty string without spaces or any of '{{}}[]<>:,\"': {name!r}",
        )
    description = fn.get("description") or ""
    if not isinstance(description, str):
        raise SchemaError("description", "", f"tool {name!r}: description must be a string")
    params = fn.get("parameters")
    if params is None:
        params = {"type": "object", "properties": {}}
    if not isinstance(params, dict):
        raise SchemaError("parameters", "", f"tool {name!r}: parameters must be a JSON Schema object")
    clean = normalize_schema(params)
    tool_ir(name, clean, False)
    return ToolSpec(name=name, description=description, parameters=clean)


def tool_ir(name: str, parameters: dict[str, Any], additional_default: bool) -> IR:
    """The (cached) :class:`IR` of tool ``name``'s normalised ``parameters``, its root narrowed to the part that
    accepts objects; a :class:`SchemaError` when that part is empty, a ``required`` parameter is declared nowhere
    (not in ``properties``, no ``patternProperties`` or ``additionalProperties`` taking it, unless
    ``additional_default``), or the schema is refused."""
    compiled = cached_ir(canonical(parameters), additional_default)
    root = object_part(compiled.root, compiled.defs)
    if isinstance(root, Never):
        raise SchemaError("type", "", f"tool {name!r}: parameters must describe a JSON object")
    if isinstance(root, Obj) and root.additional is None and not additional_default:
        for r in root.required_only():
            if not any(pattern_matches(p, r) for p, _ in root.pattern_props):
                raise SchemaError(
                    "required", "", f"tool {name!r}: required parameter {r!r} is not in properties"
                )
    return IR(root, compiled.defs, compiled.paths)


def canonical(obj: Any) -> str:
    """A stable text key for caching schemas and tool lists (property order preserved)."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False, default=_default)


def fingerprint(obj: Any) -> str:
    """SHA-256 (hex) of :func:`canonical` of ``obj`` (property order counts); ``TypeError`` for non-JSON values."""
    return hashlib.sha256(canonical(obj).encode("utf-8", "surrogatepass")).hexdigest()


def _default(o: Any) -> Any:
    if isinstance(o, ToolSpec):
        return {"name": o.name, "description": o.description, "parameters": o.parameters}
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
