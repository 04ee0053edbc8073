"""Training prompts in the Gemma 4 format the checkpoint's chat template (``model/chat_template.jinja``)
writes, as plain text: a fast Python rendering for the data pipeline (tests pin :func:`render_prompt` equal to
the template, and :func:`format_value` to the parser's renderer on ordinary values). Parameter-name offsets do
not come from here: :mod:`model.turn.declarations` finds them by rendering the template itself.
"""

from __future__ import annotations

from typing import Any

from grammar import special_tokens as st
from model.turn.declarations import format_call, format_value


def _type_str(t: Any) -> str:
    q = st.STRING_DELIM
    if isinstance(t, str):
        return f"{q}{t.upper()}{q}"
    return "[" + ",".join(f"{q}{str(x).upper()}{q}" for x in t) + "]"


def render_schema(s: dict[str, Any]) -> str:
    """Render a parameter schema as the template's declaration object (properties sorted case-folded, upper-case
    types)."""
    q = st.STRING_DELIM
    parts = []
    if s.get("description"):
        parts.append(f"description:{q}{s['description']}{q}")
    if "enum" in s:
        parts.append("enum:" + format_value(s["enum"]))
    if isinstance(s.get("items"), dict):
        parts.append("items:" + render_schema(s["items"]))
    if isinstance(s.get("properties"), dict):
        # the template's ``dictsort`` folds case
        props = ",".join(
            f"{k}:{render_schema(s['properties'][k])}" for k in sorted(s["properties"], key=str.lower)
        )
        parts.append("properties:{" + props + "}")
    if s.get("required"):
        parts.append("required:" + format_value(s["required"]))
    if "type" in s:
        parts.append("type:" + _type_str(s["type"]))
    return "{" + ",".join(parts) + "}"


def render_declaration(tool: dict[str, Any]) -> str:
    """``<|tool>declaration:NAME{description:...,parameters:{...}}<tool|>`` for an OpenAI-style tool."""
    f = tool.get("function", tool)
    q = st.STRING_DELIM
    params = f.get("parameters") or {"type": "object"}
    head = (
        f"{st.TOOL_START}declaration:{f['name']}{{description:{q}{f.get('description') or ''}{q},parameters:"
    )
    return f"{head}{render_schema(params)}}}{st.TOOL_END}"


def strip_descriptions(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Copies of OpenAI-style ``tools`` without any ``description`` (function's and parameters'), for terse
    declarations: a prompt about half as long that still names every function, parameter, type and enum."""

    def strip(s: Any) -> Any:
        if isinstance(s, dict):
            return {k: strip(v) for k, v in s.items() if k != "description"}
        if isinstance(s, list):
            return [strip(x) for x in s]
        return s

    return [strip(t) for t in tools]


def _content(c: Any) -> str:
    if isinstance(c, str):
        return c
    if isinstance(c, list):
        return "".join(x.get("text", "") for x in c if isinstance(x, dict) and x.get("type") == "text")
    return ""


def render_prompt(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, add_generation_prompt: bool = True
) -> str:
    """Render ``messages`` + ``tools`` exactly as ``model/chat_template.jinja`` does (including ``<bos>``).

    Raises:
        KeyError: if a message lacks ``role``.
    """
    out = [st.BOS]
    msgs = list(messages)
    system = ""
    if msgs and msgs[0]["role"] in ("system", "developer"):
        system = _content(msgs[0]["content"])
        msgs = msgs[1:]
    if system or tools:
        out.append(f"{st.TURN_START}system\n{system}")
        out.extend(render_declaration(t) for t in tools or [])
        out.append(f"{st.TURN_END}\n")
    in_model = False
    for m in msgs:
        role = m["role"]
        if role == "user":
            if in_model:
                out.append(f"{st.TURN_END}\n")
                in_model = False
            out.append(f"{st.TURN_START}user\n{_content(m['content'])}{st.TURN_END}\n")
        elif role in ("assistant", "model"):
            if not in_model:
                out.append(f"{st.TURN_START}model\n")
            thought = m.get("reasoning") or m.get("thinking")
            if thought:
                out.append(f"{st.CHANNEL_START}thought\n{thought}{st.CHANNEL_END}")
            if m.get("content"):
                out.append(_content(m["content"]))
            if m.get("tool_calls"):
                for c in m["tool_calls"]:
                    f = c.get("function", c)
                    out.append(format_call(f["name"], f["arguments"]))
                in_model = True
            else:
                out.append(f"{st.TURN_END}\n")
                in_model = False
        elif role == "tool":
            c = m["content"]
            body = c if isinstance(c, dict) else {"result": _content(c)}
            out.append(
                f"{st.TOOL_RESPONSE_START}response:{m.get('name') or ''}{format_value(body)}{st.TOOL_RESPONSE_END}"
            )
    if add_generation_prompt and not in_model:
        out.append(f"{st.TURN_START}model\n")
    return "".join(out)
