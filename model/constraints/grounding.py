"""Grounded string values: a regex of the spans of the conversation a grounded parameter may take.

A parameter marked ``x-grounded: true`` (``grounded: true`` in a bundle, ``Grounded[str]`` in the Python API)
must take, as its string value, a span of the conversation: the user's messages and the tool responses so far.
The tool-call grammar (:func:`model.constraints.grammar.tool_call_grammar` with ``grounding=``) intersects the
string's own constraints with the regex built here, so the constraint applied during denoising only lets the
model write such a span: no invented identifier, path or id, whatever the checkpoint.

A span starts where a word or a run of punctuation starts (never inside a word, never on whitespace) and ends
where one ends (never on whitespace); it is at most ``max_len`` characters long. The regex is a trie over the
spans, so shared prefixes are written once: ``load(?:_bundle)?`` for ``load_bundle``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

#: Longest grounded value considered, in characters (longer schema ``maxLength`` values are capped here).
MAX_GROUNDED_CHARS = 96
#: Characters of each text kept for grounding, from its end (the newest part of a long tool response).
MAX_TEXT_CHARS = 6000


def _cls(ch: str) -> int:
    if ch.isspace():
        return 0
    return 1 if ch.isalnum() else 2


def grounding_spans(texts: Iterable[str], max_len: int = MAX_GROUNDED_CHARS) -> set[str]:
    """Every span of ``texts`` a grounded value may take (see the module docstring).

    Args:
        texts: the conversation's user messages and tool responses.
        max_len: longest span in characters.

    Returns:
        The set of spans (a test and diagnostics helper; the grammar uses :func:`grounding_regex`).
    """
    out: set[str] = set()
    for text in texts:
        text = text[-MAX_TEXT_CHARS:]
        for i, j in _span_bounds(text, max_len):
            out.add(text[i:j])
    return out


def _span_bounds(text: str, max_len: int) -> Iterable[tuple[int, int]]:
    n = len(text)
    bounds = [k for k in range(1, n) if _cls(text[k - 1]) != _cls(text[k])] + [n]
    starts = [0, *bounds[:-1]]
    for s in starts:
        if s >= n or _cls(text[s]) == 0:
            continue
        for e in bounds:
            if e <= s:
                continue
            if e - s > max_len:
                break
            if _cls(text[e - 1]) != 0:
                yield s, e


def _esc(ch: str) -> str:
    return ch if ch.isascii() and ch.isalnum() else f"\\u{{{ord(ch):x}}}"


def grounding_regex(texts: Sequence[str], max_len: int = MAX_GROUNDED_CHARS) -> str | None:
    """A regex (llguidance / Rust syntax, no delimiters) matching exactly the spans of ``texts``.

    Args:
        texts: the conversation's user messages and tool responses (each cut to its last
            :data:`MAX_TEXT_CHARS` characters).
        max_len: longest span in characters (capped at :data:`MAX_GROUNDED_CHARS`).

    Returns:
        The regex, or ``None`` when the texts hold no span at all (nothing to ground on).
    """
    max_len = max(1, min(max_len, MAX_GROUNDED_CHARS))
    trie: dict[str, dict] = {}  # char -> child; the key "" marks the end of a span
    any_span = False
    for text in texts:
        text = text[-MAX_TEXT_CHARS:]
        for s, e in _span_bounds(text, max_len):
            node = trie
            for ch in text[s:e]:
                node = node.setdefault(ch, {})
            node[""] = {}
            any_span = True
    if not any_span:
        return None

    def emit(node: dict) -> str:
        # iterative-safe for max_len <= MAX_GROUNDED_CHARS (recursion depth bounded by span length)
        ends = "" in node
        kids = [(ch, child) for ch, child in node.items() if ch]
        if not kids:
            return ""
        alts = []
        for ch, child in sorted(kids):
            tail = emit(child)
            alts.append(_esc(ch) + tail)
        body = alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"
        if ends:
            return "(?:" + body + ")?"
        return body

    return emit(trie)
