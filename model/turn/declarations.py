"""Where each declared parameter's name, and the last user message, sit in a prompt rendered by the chat template,
found by rendering the template itself with marked inputs (so no Python copy of the template decides training's or
inference's offsets); and Gemma 4 call text as the template writes it."""

from __future__ import annotations

import functools
import json
import re
from typing import Any

from grammar import special_tokens as st
from grammar.parse import format_value as format_gemma_value

#: Written before a declared parameter's name in a probe rendering.
_NAME_OPEN = "\ue000"
#: Written after it: the lowest character, so marked names sort as the names do (case-folded or not).
_NAME_CLOSE = "\x00"
#: Stands for the system prompt / the user message in a probe rendering.
_SLOT = "\ue001"


def format_value(v: Any) -> str:
    """A JSON value as plain text in Gemma 4 call syntax, as the chat template writes it."""
    return format_gemma_value(v, marked=False)


def format_call(name: str, arguments: dict[str, Any]) -> str:
    """``<|tool_call>call:NAME{...}<tool_call|>`` for one call, as plain text."""
    return f"{st.TOOL_CALL_START}call:{name}{format_value(arguments)}{st.TOOL_CALL_END}"


def _render(tokenizer: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
    return str(
        tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=False)
    )


def _marked_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``tool`` whose top-level parameter names are wrapped in the name markers."""
    f = dict(tool.get("function", tool))
    params = f.get("parameters")
    if isinstance(params, dict) and isinstance(params.get("properties"), dict):
        marked = {f"{_NAME_OPEN}{k}{_NAME_CLOSE}": v for k, v in params["properties"].items()}
        f["parameters"] = {**params, "properties": marked}
    return {**tool, "function": f} if "function" in tool else f


@functools.lru_cache(maxsize=4096)
def _declaration(tokenizer: Any, tool_json: str) -> tuple[str, tuple[tuple[str, int, int], ...]]:
    """The template's declaration text of one tool and ``(name, start, end)`` of its parameter names."""
    tool = json.loads(tool_json)
    if _NAME_OPEN in tool_json or _SLOT in tool_json or "\\u0000" in tool_json:  # json.dumps escapes NUL
        name = tool.get("function", tool).get("name")
        raise ValueError(
            f"tool {name!r}: holds U+E000, U+E001 or NUL, so its parameter names cannot be located"
        )
    messages = [{"role": "system", "content": _SLOT}, {"role": "user", "content": _SLOT}]
    bare = _render(tokenizer, messages, None)
    marked = _render(tokenizer, messages, [_marked_tool(tool)])
    tail = bare[bare.index(_SLOT) + 1 :]
    start = marked.index(_SLOT) + 1
    if not marked.endswith(tail) or len(marked) - len(tail) < start:
        raise ValueError("the chat template does not write tool declarations right after the system prompt")
    text = marked[start : len(marked) - len(tail)]
    names = []
    for k, m in enumerate(re.finditer(f"{_NAME_OPEN}([^{_NAME_CLOSE}]*){_NAME_CLOSE}", text)):
        s = m.start() - 2 * k  # the k marker pairs before it are not in the prompt
        names.append((m[1], s, s + len(m[1])))
    return text.replace(_NAME_OPEN, "").replace(_NAME_CLOSE, ""), tuple(names)


def declared_keys(
    tokenizer: Any, prompt: str, tools: list[dict[str, Any]]
) -> list[tuple[str, str, int, int]]:
    """``[(tool, parameter, start, end)]``: character spans of every declared top-level parameter name in the
    rendered ``prompt``, in template order (a tool whose declaration is not found verbatim is left out).

    Raises:
        ValueError: a tool holding U+E000, U+E001 or NUL, or a template that does not write declarations right after
            the system prompt.
        TypeError: a tool that is not JSON."""
    out: list[tuple[str, str, int, int]] = []
    pos = 0
    for t in tools:
        decl, names = _declaration(tokenizer, json.dumps(t, ensure_ascii=False))
        at = prompt.find(decl, pos)
        if at < 0:
            continue
        pos = at + len(decl)
        tool = t.get("function", t)["name"]
        out.extend((tool, k, at + s, at + e) for k, s, e in names)
    return out


@functools.lru_cache(maxsize=16)
def _user_turn(tokenizer: Any) -> tuple[str, str]:
    """What the template writes before and after a user message's text."""
    system = {"role": "system", "content": _SLOT}
    bare = _render(tokenizer, [system], None)
    probe = _render(tokenizer, [system, {"role": "user", "content": _SLOT}], None)
    at = probe.rindex(_SLOT)
    if not probe.startswith(bare) or at < len(bare):
        raise ValueError("the chat template does not write a user turn after the system turn")
    return probe[len(bare) : at], probe[at + 1 :].rstrip("\n")


def last_user_span(tokenizer: Any, prompt: str) -> tuple[int, int] | None:
    """``(start, end)`` characters of the last user message's text in the rendered ``prompt`` (``None``: no user
    turn). ValueError for a template that writes no user turn after the system turn."""
    opener, closer = _user_turn(tokenizer)
    at = prompt.rfind(opener)
    if at < 0:
        return None
    start = at + len(opener)
    end = prompt.find(closer, start)
    return start, (end if end >= 0 else len(prompt))
