"""Reading what a remote model wrote as *text*: inline thinking and tool calls sent in ``content``.

A server without a reasoning or tool parser returns both inside ``message.content``. :func:`split_thinking`
moves the thinking out of the answer; :func:`recover_calls` finds calls in the formats models are trained on:

* Gemma 4 native ``<|tool_call>call:NAME{...}<tool_call|>`` and its JSON form (a missing final
  ``<tool_call|>`` is tolerated);
* Hermes/Qwen tags ``<tool_call>{"name": NAME, "arguments": {...}}</tool_call>`` (the last may be left open);
* bare JSON: the whole content is ``{"name": NAME, "arguments" | "parameters": {...}}`` or a list of them,
  optionally in a Markdown code fence.

Text that *looks* like a call but does not parse is reported as a problem (the planner sends a format reminder).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from agentkit.messages import ToolCall, decode_arguments, loads_json
from grammar import special_tokens as st
from grammar.parse import ToolCallParseError, parse_tool_calls

__all__ = ["TextCalls", "recover_calls", "split_thinking"]

#: (opening tag, closing tag) of inline thinking blocks: Gemma 4's thought channel, DeepSeek/Qwen ``<think>``.
THINKING_TAGS: tuple[tuple[str, str], ...] = ((st.CHANNEL_START, st.CHANNEL_END), ("<think>", "</think>"))

_HERMES_OPEN = "<tool_call>"
#: A Hermes call: its body up to ``</tool_call>`` (the last may be left open).
_HERMES = re.compile(r"<tool_call>(?P<body>.*?)(?:</tool_call>|\Z)", re.DOTALL)
_FENCE = re.compile(r"^```[A-Za-z0-9_-]*\s*\n?(?P<body>.*?)\n?\s*```$", re.DOTALL)
#: A content that opens like a call object: ``{"name"``, ``[{"name"``, ``{"function"``...
_CALL_LIKE_JSON = re.compile(r'^\s*\[?\s*\{\s*"(?:name|function|tool|tool_name)"\s*:')
#: ``call:NAME{`` at the start of the text: a Gemma call whose markers were stripped.
_UNMARKED_GEMMA = re.compile(r"^\s*call:[A-Za-z_][A-Za-z0-9_.\-]*\{")
_CALL_KEYS = {"name", "arguments", "parameters", "id", "type"}


def _strip_channel_name(body: str, open_tag: str) -> str:
    return (body.removeprefix("thought") if open_tag == st.CHANNEL_START else body).strip()


def split_thinking(text: str) -> tuple[str, str]:
    """``(answer, thinking)`` of a model's text: the blocks of :data:`THINKING_TAGS` moved out (joined with blank
    lines). A closing tag without an opening one makes all before it thinking; an opening tag never closed,
    all after it."""
    thoughts: list[str] = []
    for open_tag, close_tag in THINKING_TAGS:
        if open_tag not in text and close_tag not in text:
            continue
        out: list[str] = []
        i = 0
        while i < len(text):
            o = text.find(open_tag, i)
            c = text.find(close_tag, i)
            if c >= 0 and (o < 0 or c < o):  # closed but not opened here: all before it is thinking
                thoughts.append(_strip_channel_name(text[i:c], open_tag))
                i = c + len(close_tag)
                continue
            if o < 0:
                out.append(text[i:])
                break
            out.append(text[i:o])
            c = text.find(close_tag, o + len(open_tag))
            end = len(text) if c < 0 else c
            thoughts.append(_strip_channel_name(text[o + len(open_tag) : end], open_tag))
            i = len(text) if c < 0 else c + len(close_tag)
        text = "".join(out)
    return text.strip(), "\n\n".join(t for t in thoughts if t)


@dataclass(slots=True)
class TextCalls:
    """What :func:`recover_calls` found: the prose around the calls, the calls (without ids), or the
    ``problem`` of text that looks like a call but does not parse (then no calls, and ``text`` as given)."""

    text: str
    calls: list[ToolCall] = field(default_factory=list)
    problem: str | None = None


def _call_from_object(obj: Any, where: str) -> ToolCall:
    """A call (without an id) from a ``{"name", "arguments"}`` object; ValueError for another shape."""
    if isinstance(obj, dict) and isinstance(obj.get("function"), dict) and "name" not in obj:
        obj = obj["function"]  # {"type": "function", "function": {...}}
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"].strip():
        raise ValueError(f"{where}: a call must be a JSON object with a non-empty string 'name'")
    raw = obj.get("arguments", obj.get("parameters", {}))
    args, error = decode_arguments(raw)
    return ToolCall("", obj["name"].strip(), args, error, raw if isinstance(raw, str) else None)


def _unfence(text: str) -> str:
    m = _FENCE.match(text.strip())
    return m.group("body").strip() if m else text.strip()


def _gemma(text: str) -> TextCalls:
    errors: list[str] = []
    for candidate in (text, text.rstrip() + st.TOOL_CALL_END):
        for syntax in ("gemma", "json"):
            try:
                parsed = parse_tool_calls(candidate, syntax)
            except ToolCallParseError as exc:
                errors.append(f"{syntax} syntax: {exc}")
                continue
            if parsed.calls:
                return TextCalls(parsed.text, [ToolCall("", c.name, dict(c.arguments)) for c in parsed.calls])
        if text.rstrip().endswith(st.TOOL_CALL_END):
            break
    why = errors[0] if errors else f"no call before the end of the turn ({st.TURN_END} or {st.EOS})"
    return TextCalls(text, [], f"{st.TOOL_CALL_START} call does not parse ({why})")


def _unmarked_gemma(text: str) -> TextCalls:
    """``call:NAME{...}`` without its markers (a server that strips special tokens drops them)."""
    got = _gemma(st.TOOL_CALL_START + text.strip())
    if got.calls:
        return got
    return TextCalls(
        text,
        [],
        "the text looks like a Gemma call without its <|tool_call> markers (a server that strips special "
        'tokens removes them and the <|"|> string delimiters; serve with skip_special_tokens=false or a tool '
        f"parser): {got.problem}",
    )


def _hermes(text: str) -> TextCalls:
    calls: list[ToolCall] = []
    for n, m in enumerate(_HERMES.finditer(text), 1):
        where = f"{_HERMES_OPEN} number {n}"
        try:
            obj = loads_json(_unfence(m["body"]))
        except json.JSONDecodeError as exc:
            return TextCalls(text, [], f"{where} does not hold valid JSON ({exc.msg} at character {exc.pos})")
        try:
            calls.append(_call_from_object(obj, where))
        except ValueError as exc:
            return TextCalls(text, [], str(exc))
    return TextCalls(_HERMES.sub("", text).strip(), calls)


def _bare_json(text: str) -> TextCalls | None:
    body = _unfence(text)
    if not body.startswith(("{", "[")):
        return None
    call_like = bool(_CALL_LIKE_JSON.match(body))
    try:
        obj = loads_json(body)
    except json.JSONDecodeError as exc:
        if call_like:
            return TextCalls(
                text,
                [],
                f"the text looks like a JSON call but is not valid JSON ({exc.msg} at character {exc.pos})",
            )
        return None
    items = obj if isinstance(obj, list) else [obj]
    if not items or not all(
        isinstance(x, dict)
        and (
            ("name" in x and ("arguments" in x or "parameters" in x) and set(x) <= _CALL_KEYS)
            or (set(x) <= {"type", "id", "function"} and isinstance(x.get("function"), dict))
        )
        for x in items
    ):
        return None  # ordinary JSON in an answer (an object with a "name" key is not a call by itself)
    try:
        return TextCalls("", [_call_from_object(x, f"call {k + 1}") for k, x in enumerate(items)])
    except ValueError as exc:
        return TextCalls(text, [], str(exc))


def recover_calls(text: str) -> TextCalls:
    """Find tool calls written as text (thinking already removed). The first format present decides: Gemma
    markers, Hermes tags, a Gemma call without markers, bare JSON; plain prose has no calls and no problem."""
    if st.TOOL_CALL_START in text:
        return _gemma(text)
    if _HERMES_OPEN in text:
        return _hermes(text)
    if _UNMARKED_GEMMA.match(text):
        return _unmarked_gemma(text)
    bare = _bare_json(text)
    if bare is not None:
        return bare
    return TextCalls(text.strip())
