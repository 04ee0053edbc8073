"""Training prompts in the Gemma 4 format the checkpoint's chat template (``model/chat_template.jinja``)
writes, as plain text (tests pin :func:`render_prompt` equal to the template, and :func:`format_value` to the
parser's renderer on ordinary values). The declarations themselves come from :mod:`model.declarations`, which
:mod:`model.training.labels` and :mod:`model.binding` read their offsets from, so the Python rendering exists
once.
"""

from __future__ import annotations

from typing import Any

from grammar import special_tokens as st
from model.declarations import (
    declaration_head,
    format_call,
    format_value,
    render_declaration,
    render_schema,
)

__all__ = [
    "declaration_head",
    "format_call",
    "format_value",
    "render_declaration",
    "render_prompt",
    "render_schema",
    "strip_descriptions",
]


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
