"""Parse and format tool calls in the Gemma 4 native syntax and in the JSON call syntax.

Gemma: ``<|tool_call>call:NAME{key:<|"|>text<|"|>,n:42,x:1.5,flag:true,none:null,obj:{...},list:[...]}<tool_call|>``
(bare keys read up to ``:``, raw strings between ``<|"|>`` tokens, JSON numbers: ``42`` an ``int``, ``1e3`` a
``float``). JSON: ``<|tool_call>{"name":NAME,"arguments":{...}}<tool_call|>``. A thinking block
``<|channel>thought ...<channel|>`` may come first, prose before the calls; ``<|tool_response>``, ``<turn|>`` or
``<eos>`` end the turn. ``parse_value(format_value(x)) == x`` for every JSON value (property-tested).

Formatting writes text that spells a control token *marked* (:func:`grammar.special_tokens.mark_text`), so a
literal ``<|"|>`` in a formatted call is the delimiter token; parsing reads marked text (or plain decoded text)
and returns unmarked values.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from grammar import special_tokens as st

DELIM = st.STRING_DELIM
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_TERMINATORS = (st.TOOL_RESPONSE_START, st.TURN_END, st.EOS)


class ToolCallParseError(ValueError):
    """Malformed tool-call text; ``offset``: the character offset in the parsed text where it was found."""

    def __init__(self, message: str, offset: int) -> None:
        self.offset = offset
        super().__init__(f"{message} (at character {offset})")


@dataclass(frozen=True)
class ParsedCall:
    """One tool call: the tool's name and its decoded arguments."""

    name: str
    arguments: dict[str, Any] = field(hash=False)


@dataclass(frozen=True)
class ParsedOutput:
    """A parsed model turn: ``text`` (the prose outside thinking and calls, stripped), ``thinking`` (the thinking
    block's text without the channel name, or ``None``) and ``calls`` in order."""

    text: str
    thinking: str | None
    calls: list[ParsedCall] = field(hash=False)


class NotJSONError(TypeError, ValueError):
    """A value :func:`format_value` cannot write: a ``TypeError`` as ``json.dumps`` raises, and a ``ValueError``
    like every other input :func:`format_tool_call` refuses."""


def _check_key(k: Any) -> str:
    if k.startswith("}"):
        raise ValueError(f"object key {k!r} starts with '}}' (cannot be told from the end of the object)")
    if ":" in k and any(c in k for c in ",{}[]"):
        raise ValueError(f"object key {k!r} holds ':' together with one of ',{{}}[]' (ambiguous)")
    return st.mark_text(k)


def format_value(v: Any, *, marked: bool = True) -> str:
    """Render a JSON value in the Gemma syntax (the one renderer: calls, tool responses, schema enums).

    Strings become ``<|"|>text<|"|>``, scalars are written as JSON (floats by shortest round-trip repr), objects
    ``{k:v,...}`` with bare keys in order, arrays ``[a,b]``; no whitespace. ``marked``: strings and keys marked
    where they spell a control token, keys the parser could not read back refused; ``False``: plain text as the
    chat template writes it.

    Raises:
        NotJSONError: a non-JSON type, or a key that is not a string.
        ValueError: a non-finite float; with ``marked``, a key that starts with ``}`` or holds ``:`` with one of
            ``,{}[]``.
    """
    if v is None or isinstance(v, bool):
        return json.dumps(v)
    if isinstance(v, int):
        return str(int(v))
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError(f"non-finite number {v!r} has no JSON form")
        return json.dumps(v)
    if isinstance(v, str):
        return f"{DELIM}{st.mark_text(v) if marked else v}{DELIM}"
    if isinstance(v, dict):
        parts = []
        for k, x in v.items():
            if not isinstance(k, str):
                raise NotJSONError(f"object keys must be strings, got {type(k).__name__} {k!r}")
            parts.append(f"{_check_key(k) if marked else k}:{format_value(x, marked=marked)}")
        return "{" + ",".join(parts) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(format_value(x, marked=marked) for x in v) + "]"
    raise NotJSONError(f"not a JSON value: {type(v).__name__} {v!r}")


def format_tool_call(name: str, arguments: dict[str, Any], syntax: str = "gemma") -> str:
    """One tool call as marked text, ``<|tool_call>`` ... ``<tool_call|>`` included, in ``syntax`` ``"gemma"``
    (``call:NAME{...}``) or ``"json"`` (compact ``{"name":NAME,"arguments":{...}}``).

    Raises:
        ValueError: unknown syntax, a name holding ``{``, ``<``, ``>`` or whitespace, or arguments
            :func:`format_value` rejects.
    """
    if not isinstance(arguments, dict):
        raise ValueError(f"arguments must be a dict, got {type(arguments).__name__}")
    if not name or re.search(r"[{<>\s]", name):
        raise ValueError(f"tool name {name!r} must be non-empty without '{{', '<', '>' or whitespace")
    if syntax == "gemma":
        return f"{st.TOOL_CALL_START}call:{name}{format_value(arguments)}{st.TOOL_CALL_END}"
    if syntax == "json":
        body = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False, separators=(",", ":"))
        return f"{st.TOOL_CALL_START}{st.mark_text(body)}{st.TOOL_CALL_END}"
    raise ValueError(f"syntax must be 'gemma' or 'json', got {syntax!r}")


class _ValueParser:
    """Recursive-descent parser of Gemma-syntax values over ``text`` (offsets index ``text``)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def value(self, i: int) -> tuple[Any, int]:
        t = self.text
        if t.startswith(DELIM, i):
            j = t.find(DELIM, i + len(DELIM))
            if j < 0:
                raise ToolCallParseError("unterminated string", i)
            return st.unmark_text(t[i + len(DELIM) : j]), j + len(DELIM)
        if i >= len(t):
            raise ToolCallParseError("expected a value, found the end of the text", i)
        c = t[i]
        if c == "{":
            return self.obj(i)
        if c == "[":
            return self._items(i, "]", self.value)
        for word, val in (("true", True), ("false", False), ("null", None)):
            if t.startswith(word, i):
                return val, i + len(word)
        m = _NUMBER.match(t, i)
        if m:
            s = m.group(0)
            if "." in s or "e" in s or "E" in s:
                return float(s), m.end()
            return int(s), m.end()
        raise ToolCallParseError(f"expected a value, found {t[i : i + 12]!r}", i)

    def obj(self, i: int) -> tuple[dict[str, Any], int]:
        pairs, j = self._items(i, "}", self.member)
        return dict(pairs), j

    def _items(self, i: int, close: str, item: Any) -> tuple[list[Any], int]:
        """The items ``item(i)`` reads between the opening bracket at ``i`` and ``close``, separated by ``,``."""
        t = self.text
        out: list[Any] = []
        i += 1
        if t.startswith(close, i):
            return out, i + 1
        while True:
            v, i = item(i)
            out.append(v)
            if t.startswith(",", i):
                i += 1
            elif t.startswith(close, i):
                return out, i + 1
            else:  # member() checks the object's separators itself
                raise ToolCallParseError("expected ',' or ']' in array", i)

    def member(self, i: int) -> tuple[tuple[str, Any], int]:
        """``key:value`` at ``i``; a key may hold ``:`` (then the split that parses is taken)."""
        t = self.text
        colon = t.find(":", i)
        first_err: ToolCallParseError | None = None
        while colon >= 0:
            key = t[i:colon]
            if DELIM in key:
                break
            try:
                v, j = self.value(colon + 1)
                if t.startswith((",", "}"), j):
                    return (st.unmark_text(key), v), j
                raise ToolCallParseError("expected ',' or '}' after a value in object", j)
            except ToolCallParseError as e:
                first_err = first_err or e
            colon = t.find(":", colon + 1)
        if first_err is not None:
            raise first_err
        raise ToolCallParseError("expected 'key:' in object", i)


def parse_value(text: str) -> Any:
    """Parse one Gemma-syntax value spanning all of ``text``; :class:`ToolCallParseError` when malformed."""
    v, i = _ValueParser(text).value(0)
    if i != len(text):
        raise ToolCallParseError("unexpected text after the value", i)
    return v


def _strip_thinking(text: str) -> tuple[str | None, int]:
    """(thinking text or None, offset after the block)."""
    i = len(text) - len(text.lstrip())
    if text.startswith(st.BOS, i):
        i += len(st.BOS)
    if not text.startswith(st.CHANNEL_START, i):
        return None, 0
    end = text.find(st.CHANNEL_END, i)
    if end < 0:
        raise ToolCallParseError("thinking block is not closed with <channel|>", i)
    body = text[i + len(st.CHANNEL_START) : end].removeprefix("thought")
    return st.unmark_text(body.strip()), end + len(st.CHANNEL_END)


def parse_tool_calls(text: str, syntax: str = "gemma") -> ParsedOutput:
    """Parse a model turn (optional thinking, prose, tool calls, terminator) in ``syntax`` ``"gemma"`` or
    ``"json"``, from decoded output with control tokens kept (best marked, from
    :func:`model.checkpoint.tokenizer.decode_marked`). Text after the first terminator outside a call and padding
    are ignored; the :class:`ParsedOutput` holds unmarked text.

    Raises:
        ToolCallParseError: a call that is malformed or not closed, with the character offset.
        ValueError: unknown ``syntax``.
    """
    if syntax not in ("gemma", "json"):
        raise ValueError(f"syntax must be 'gemma' or 'json', got {syntax!r}")
    thinking, i = _strip_thinking(text)
    prose: list[str] = []
    calls: list[ParsedCall] = []
    parser = _ValueParser(text)
    n = len(text)
    while i < n:
        nxt = text.find(st.TOOL_CALL_START, i)
        ends = [p for p in (text.find(t, i) for t in _TERMINATORS) if p >= 0]
        end = min(ends) if ends else n
        if nxt < 0 or end < nxt:
            prose.append(text[i:end])
            break
        prose.append(text[i:nxt])
        start = nxt + len(st.TOOL_CALL_START)
        if syntax == "gemma":
            if not text.startswith("call:", start):
                raise ToolCallParseError("expected 'call:' after <|tool_call>", start)
            brace = text.find("{", start)
            if brace < 0:
                raise ToolCallParseError("expected '{' after the tool name", start)
            name = text[start + 5 : brace]
            if not name or re.search(r"[\s<>]", name):
                raise ToolCallParseError(f"bad tool name {name!r}", start + 5)
            args, j = parser.obj(brace)
        else:
            try:
                obj, j = json.JSONDecoder().raw_decode(text, start)
            except json.JSONDecodeError as e:
                raise ToolCallParseError(f"invalid JSON call: {e.msg}", e.pos) from None
            if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
                raise ToolCallParseError("a JSON call must be an object with a string 'name'", start)
            args = obj.get("arguments", {})
            if not isinstance(args, dict) or set(obj) - {"name", "arguments"}:
                raise ToolCallParseError("a JSON call must be {'name': ..., 'arguments': {...}}", start)
            name = obj["name"]
            args = _unmark_json(args)
        if not text.startswith(st.TOOL_CALL_END, j):
            raise ToolCallParseError("tool call is not closed with <tool_call|>", j)
        calls.append(ParsedCall(st.unmark_text(name), args))
        i = j + len(st.TOOL_CALL_END)
    body = "".join(prose).replace(st.PAD, "").replace(st.BOS, "")
    return ParsedOutput(text=st.unmark_text(body.strip()), thinking=thinking, calls=calls)


def _unmark_json(v: Any) -> Any:
    """A JSON value with every string and key unmarked."""
    if isinstance(v, str):
        return st.unmark_text(v)
    if isinstance(v, dict):
        return {st.unmark_text(k): _unmark_json(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_unmark_json(x) for x in v]
    return v
