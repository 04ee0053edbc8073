"""ECMA-262 patterns translated to llguidance's regex syntax, JSON Schema's search semantics made explicit."""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import lru_cache

from schema.errors import SchemaError

_LOOKAROUND = re.compile(r"\(\?(?:=|!|<=|<!)")
_BACKREF = re.compile(r"\\(?:[1-9]|k<)")
_RUST_META = set("\\.+*?()|[]{}^$#&-~/")  # and "/", which Lark's /.../ literals need escaped


def _scan(p: str) -> Iterator[tuple[int, str, int]]:
    """``(index, character, group depth before it)`` of each character of ``p`` outside escapes and classes
    (ECMA-262: ``[]`` and ``[^]`` end at once, another class at the first unescaped ``]``)."""
    depth = i = 0
    n = len(p)
    while i < n:
        c = p[i]
        if c == "\\":
            i += 2
            continue
        if c == "[":
            k = i + 1 + (p[i + 1 : i + 2] == "^")
            if p[k : k + 1] != "]":
                while k < n and p[k] != "]":
                    k += 2 if p[k] == "\\" else 1
            i = k + 1
            continue
        yield i, c, depth
        depth += (c == "(") - (c == ")")
        i += 1


def _paren_error(p: str) -> str | None:
    """Python ``re``'s message for an unbalanced parenthesis of ``p`` (outside escapes and classes), or None."""
    opened: list[int] = []
    for i, c, _ in _scan(p):
        if c == "(":
            opened.append(i)
        elif c == ")":
            if not opened:
                return f"unbalanced parenthesis at position {i}"
            opened.pop()
    return f"missing ), unterminated subpattern at position {opened[-1]}" if opened else None


def _split_top(p: str) -> list[str]:
    """Split ``p`` at top-level ``|`` (outside groups and classes)."""
    cuts = [i for i, c, depth in _scan(p) if c == "|" and depth == 0]
    return [p[a + 1 : b] for a, b in zip([-1, *cuts], [*cuts, len(p)], strict=True)]


_QUANT = re.compile(r"\{\d+(?:,\d*)?\}")


def _escape(p: str, i: int, e: str, in_cls: bool) -> tuple[str, int]:
    """The Rust-regex spelling of the ECMA escape ``\\e`` (``i``: the index after it) and the index after what
    it consumed."""
    body = {"d": "0-9", "w": "0-9A-Za-z_"}.get(e.lower())
    if body and (e.islower() or not in_cls):  # ASCII, as ECMA-262 has them; \D and \W only outside a class
        return (body if in_cls else f"[{'' if e.islower() else '^'}{body}]"), i
    if e == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", p[i : i + 4]):
        return "\\u{" + p[i : i + 4] + "}", i + 4
    if e == "0":
        return "\\x00", i
    if e == "c" and i < len(p) and p[i].isalpha():
        return f"\\x{ord(p[i].upper()) - 64:02x}", i + 1
    if e.isalnum() or e in _RUST_META:
        return "\\" + e, i  # \s \n \t \xHH \p{..}...: llguidance checks the rest
    return e, i  # ECMA identity escape of a character Rust does not allow escaped


def _translate_body(p: str, path: str) -> str:
    """Translate ECMA-262 regex syntax to llguidance's (Rust ``regex``) inside ``/.../`` of a Lark grammar."""
    out: list[str] = []
    i, in_cls = 0, False
    while i < len(p):
        c = p[i]
        if c == "\\":
            if i + 1 >= len(p):
                raise SchemaError("pattern", path, f"pattern {p!r} ends with a lone backslash")
            piece, i = _escape(p, i + 2, p[i + 1], in_cls)
            out.append(piece)
            continue
        if in_cls:
            in_cls = c != "]"
            out.append("\\" + c if c in "[&~/" else c)
            i += 1
            continue
        if c == "[":
            neg = p[i + 1 : i + 2] == "^"
            j = i + (2 if neg else 1)
            if p[j : j + 1] == "]":  # ECMA: "[]" matches nothing, "[^]" any character
                if not neg:
                    raise SchemaError(
                        "pattern", path, f"empty character class in pattern {p!r} is not supported"
                    )
                out.append("(?s:.)")
                i = j + 1
                continue
            out.append("[^" if neg else "[")
            in_cls = True
            i = j
            continue
        if c == "{":
            m = _QUANT.match(p, i)
            if m and out:
                out.append(m.group(0))
                i = m.end()
                continue
            out.append("\\{")
        elif c in "}/":
            out.append("\\" + c)
        elif c in "^$":
            raise SchemaError("pattern", path, f"anchor {c!r} inside pattern {p!r} is not supported")
        else:
            out.append(c)
        i += 1
    if in_cls:
        raise SchemaError("pattern", path, f"unterminated character class in pattern {p!r}")
    return "".join(out)


def _groups(b: str) -> list[tuple[int, int]]:
    """(start, end) of the top-level groups of ``b`` (``end`` = index of the closing parenthesis)."""
    spans, start = [], 0
    for i, c, depth in _scan(b):
        if c == "(" and depth == 0:
            start = i
        elif c == ")" and depth == 1:
            spans.append((start, i))
    return spans


def _has_anchor(b: str) -> bool:
    """Whether ``b`` holds a ``^`` or ``$`` anchor (outside escapes and classes)."""
    return any(c in "^$" for _, c, _ in _scan(b))


def _group_inner(b: str, start: int, end: int) -> str | None:
    """The alternatives text of group ``b[start:end+1]``, or None for lookarounds/named groups we keep."""
    inner = b[start + 1 : end]
    if inner.startswith("?:"):
        return inner[2:]
    if inner.startswith("?<") and not inner.startswith(("?<=", "?<!")):
        close = inner.find(">")
        return inner[close + 1 :] if close > 0 else None
    return None if inner.startswith("?") else inner


def _expand_branch(b: str, depth: int) -> list[str]:
    """Alternative ``b`` as alternatives with every ``^``/``$`` moved to an edge where possible."""
    if depth > 8 or not _has_anchor(b.removeprefix("^").removesuffix("$")):
        return [b]
    spans = _groups(b)
    # A trailing group (no quantifier after it) holding anchors: distribute the prefix over its alternatives.
    if spans and spans[-1][1] == len(b) - 1:
        s0, e0 = spans[-1]
        inner = _group_inner(b, s0, e0)
        if inner is not None and _has_anchor(inner):
            return [x for alt in _split_top(inner) for x in _expand_branch(b[:s0] + alt, depth + 1)]
    if spans and spans[0][0] == 0:
        s0, e0 = spans[0]
        rest = b[e0 + 1 :]
        if not rest[:1] or rest[:1] not in "*+?{":
            inner = _group_inner(b, s0, e0)
            if inner is not None and _has_anchor(inner):
                return [x for alt in _split_top(inner) for x in _expand_branch(alt + rest, depth + 1)]
    return [b]


@lru_cache(maxsize=4096)
def pattern_to_regex(pattern: str, path: str = "") -> str:
    """Translate a JSON Schema ``pattern`` (ECMA-262, unanchored search) to a full-match llguidance regex.

    Unanchored ends of the top-level alternatives get ``(?s:.*)``; anchors inside a group at an alternative's
    end are distributed over the group (``(^a|^b)``, ``^(x|$)``); ``\\d``/``\\w`` are ASCII; ``/`` is escaped
    for Lark's ``/.../`` literals.

    Raises:
        SchemaError: unbalanced parentheses, lookaround, backreference, an inner anchor, or syntax llguidance
            rejects (``"pattern"``).
    """
    if err := _paren_error(pattern):
        raise SchemaError("pattern", path, f"pattern {pattern!r} is not a valid regular expression: {err}")
    if _LOOKAROUND.search(pattern):
        raise SchemaError("pattern", path, f"lookaround in pattern {pattern!r} is not supported")
    if _BACKREF.search(pattern):
        raise SchemaError("pattern", path, f"backreference in pattern {pattern!r} is not supported")
    branches = []
    for b in (x for part in _split_top(pattern) for x in _expand_branch(part, 0)):
        start = b.startswith("^")
        if start:
            b = b[1:]
        end = b.endswith("$") and not b.endswith("\\$")
        if end:
            b = b[:-1]
        body = _translate_body(b, path)
        branches.append(("" if start else "(?s:.*)") + f"(?:{body})" + ("" if end else "(?s:.*)"))
    rx = branches[0] if len(branches) == 1 else "|".join(f"(?:{b})" for b in branches)
    if err := _regex_error(rx):
        raise SchemaError(
            "pattern", path, f"pattern {pattern!r} is not supported: {err.splitlines()[0][:200]}"
        )
    return rx


@lru_cache(maxsize=4096)
def _regex_error(rx: str) -> str:
    import llguidance

    return str(
        llguidance.LLMatcher.validate_grammar(llguidance.LLMatcher.grammar_from_lark(f"start: /{rx}/"))
    )


@lru_cache(maxsize=4096)
def _py_pattern(pattern: str) -> re.Pattern[str] | None:
    try:
        return re.compile(pattern, re.ASCII)
    except re.error:
        return None


def pattern_matches(pattern: str, text: str) -> bool | None:
    """``re.search`` of a JSON Schema pattern in ``text`` with Python's engine; ``None`` if it cannot compile."""
    rx = _py_pattern(pattern)
    return None if rx is None else rx.search(text) is not None
