"""Tool declarations as the checkpoint's chat template (``model/chat_template.jinja``) writes them, as plain
text, and where each declared parameter's name sits in a rendered prompt.

Training (:mod:`model.training.render`, :mod:`model.training.labels`) and inference
(:mod:`model.binding`) read their offsets from these functions, so the Python rendering exists once; tests pin
it equal to the template.
"""

from __future__ import annotations

from typing import Any

from grammar import special_tokens as st
from grammar.parse import format_value as format_gemma_value


def format_value(v: Any) -> str:
    """A JSON value as plain text in Gemma 4 call syntax, as the chat template writes it: what the checkpoint
    was trained on (:func:`grammar.parse.format_value` with ``marked=False``; raises its errors)."""
    return format_gemma_value(v, marked=False)


def format_call(name: str, arguments: dict[str, Any]) -> str:
    """``<|tool_call>call:NAME{...}<tool_call|>`` for one call, as plain text (see :func:`format_value`)."""
    return f"{st.TOOL_CALL_START}call:{name}{format_value(arguments)}{st.TOOL_CALL_END}"


def _type_str(t: Any) -> str:
    q = st.STRING_DELIM
    if isinstance(t, str):
        return f"{q}{t.upper()}{q}"
    return "[" + ",".join(f"{q}{str(x).upper()}{q}" for x in t) + "]"


def _leading_parts(s: dict[str, Any]) -> list[str]:
    """The parts :func:`render_schema` writes before ``properties:{`` (description, enum, items)."""
    q = st.STRING_DELIM
    parts = []
    if s.get("description"):
        parts.append(f"description:{q}{s['description']}{q}")
    if "enum" in s:
        parts.append("enum:" + format_value(s["enum"]))
    if isinstance(s.get("items"), dict):
        parts.append("items:" + render_schema(s["items"]))
    return parts


def render_schema(s: dict[str, Any]) -> str:
    """Render a parameter schema as the template's declaration object (sorted properties, upper-case types)."""
    parts = _leading_parts(s)
    if isinstance(s.get("properties"), dict):
        props = ",".join(f"{k}:{render_schema(s['properties'][k])}" for k in sorted(s["properties"]))
        parts.append("properties:{" + props + "}")
    if s.get("required"):
        parts.append("required:" + format_value(s["required"]))
    if "type" in s:
        parts.append("type:" + _type_str(s["type"]))
    return "{" + ",".join(parts) + "}"


def declaration_head(tool: dict[str, Any]) -> str:
    """``<|tool>declaration:NAME{description:<|"|>...<|"|>,parameters:`` (what comes before the parameters)."""
    f = tool.get("function", tool)
    q = st.STRING_DELIM
    return (
        f"{st.TOOL_START}declaration:{f['name']}{{description:{q}{f.get('description') or ''}{q},parameters:"
    )


def render_declaration(tool: dict[str, Any]) -> str:
    """``<|tool>declaration:NAME{description:...,parameters:{...}}<tool|>`` for an OpenAI-style tool."""
    params = tool.get("function", tool).get("parameters") or {"type": "object"}
    return f"{declaration_head(tool)}{render_schema(params)}}}{st.TOOL_END}"


def property_offsets(params: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """``{name: (start, end)}``: character spans of the top-level property names inside
    ``render_schema(params)``."""
    props = params.get("properties")
    if not isinstance(props, dict) or not props:
        return {}
    off = 1 + sum(len(b) + 1 for b in _leading_parts(params)) + len("properties:{")
    out = {}
    for k in sorted(props):
        out[k] = (off, off + len(k))
        off += len(k) + 1 + len(render_schema(props[k])) + 1
    return out


def declared_keys(prompt: str, tools: list[dict[str, Any]]) -> list[tuple[str, str, int, int]]:
    """``[(tool, parameter, start, end)]``: character spans of every declared top-level parameter name in
    ``prompt`` (rendered by the chat template, or :func:`model.training.render.render_prompt`), in declaration
    order. A tool whose declaration is not found verbatim in ``prompt`` is left out."""
    out: list[tuple[str, str, int, int]] = []
    pos = 0
    for t in tools:
        f = t.get("function", t)
        decl = render_declaration(t)
        at = prompt.find(decl, pos)
        if at < 0:
            continue
        pos = at + len(decl)
        params = f.get("parameters") or {"type": "object"}
        base = at + len(declaration_head(t))
        for k, (s, e) in property_offsets(params).items():
            out.append((f["name"], k, base + s, base + e))
    return out


def last_user_span(prompt: str) -> tuple[int, int] | None:
    """``(start, end)`` characters of the last user message's text in ``prompt`` (``None``: no user turn)."""
    opener = f"{st.TURN_START}user\n"
    at = prompt.rfind(opener)
    if at < 0:
        return None
    start = at + len(opener)
    end = prompt.find(st.TURN_END, start)
    return start, (end if end >= 0 else len(prompt))
