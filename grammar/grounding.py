"""Grounded values: regexes of the spans of the conversation (user messages, tool responses) that a grounded
parameter (``x-grounded: true``) may take, and of a grounded answer's text.

A span starts where a word or a run of punctuation starts and ends where one ends (never on whitespace). The
regex is a trie over the spans (``load(?:_bundle)?``); its size grows with the text times the span length, so
texts are bounded (:data:`MAX_TEXT_CHARS` each, :data:`MAX_TOTAL_CHARS` in all, newest first) and spans are at
most :data:`MAX_GROUNDED_CHARS` long. Lone surrogates become the text ``\\udXXX``, as the tokenizer writes them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

#: Longest grounded value considered, in characters (longer schema ``maxLength`` values are capped here).
MAX_GROUNDED_CHARS = 64
#: Characters of each text kept for grounding (its beginning).
MAX_TEXT_CHARS = 1500
#: Characters of all texts kept for grounding (the newest texts first).
MAX_TOTAL_CHARS = 4000
_SURROGATE = re.compile("[\ud800-\udfff]")


def bounded_texts(texts: Sequence[str]) -> list[str]:
    """The texts grounding uses: surrogates escaped, each cut to :data:`MAX_TEXT_CHARS`, and the newest texts
    kept up to :data:`MAX_TOTAL_CHARS` in all (in their original order)."""
    out: list[str] = []
    left = MAX_TOTAL_CHARS
    for text in reversed(list(texts)):
        if left <= 0:
            break
        t = _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)[: min(MAX_TEXT_CHARS, left)]
        out.append(t)
        left -= len(t)
    return out[::-1]


def _cls(ch: str) -> int:
    return 0 if ch.isspace() else 1 if ch.isalnum() else 2


def _span_bounds(text: str, max_len: int) -> Iterable[tuple[int, int]]:
    n = len(text)
    bounds = [k for k in range(1, n) if _cls(text[k - 1]) != _cls(text[k])] + [n]
    starts = [0, *bounds[:-1]]
    for s in starts:
        if s >= n or _cls(text[s]) == 0:
            continue
        for e in (e for e in bounds if e > s):
            if e - s > max_len:
                break
            if _cls(text[e - 1]) != 0:
                yield s, e


def has_span(texts: Sequence[str], max_len: int = MAX_GROUNDED_CHARS, min_len: int = 1) -> bool:
    """True when ``texts`` hold at least one span of ``min_len..max_len`` characters (stops at the first)."""
    max_len = min(max_len, MAX_GROUNDED_CHARS)
    return min_len <= max_len and any(
        j - i >= min_len for text in bounded_texts(texts) for i, j in _span_bounds(text, max_len)
    )


def _esc(ch: str) -> str:
    if ch.isalnum():
        return ch
    if ch.isascii() and ch.isprintable() and ch not in "<>":  # ASCII punctuation, space: a backslash escape
        return "\\" + ch
    return f"\\u{{{ord(ch):x}}}"


def grounding_regex(texts: Sequence[str], max_len: int = MAX_GROUNDED_CHARS, min_len: int = 1) -> str | None:
    """A regex (llguidance syntax, no delimiters) matching exactly the spans of ``texts`` (bounded by
    :func:`bounded_texts`) of ``min_len`` to ``max_len`` characters (capped at :data:`MAX_GROUNDED_CHARS`), or
    ``None`` when no span fits."""
    max_len = max(1, min(max_len, MAX_GROUNDED_CHARS))
    spans = [
        text[s:e] for text in bounded_texts(texts) for s, e in _span_bounds(text, max_len) if e - s >= min_len
    ]
    return _trie_regex(spans) if spans else None


def _trie_regex(strings: Iterable[str]) -> str:
    """A regex matching exactly ``strings`` (non-empty), written as a trie so shared prefixes appear once."""
    trie: dict[str, dict] = {}  # char -> child; the key "" marks the end of a string
    for string in strings:
        node = trie
        for ch in string:
            node = node.setdefault(ch, {})
        node[""] = {}

    def emit(node: dict) -> str:  # recursion as deep as the longest string (MAX_GROUNDED_CHARS, FACT_CHARS)
        alts = [_esc(ch) + emit(child) for ch, child in sorted(node.items()) if ch]
        if not alts:
            return ""
        body = alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"
        return f"(?:{body})?" if "" in node else body

    return emit(trie)


#: The characters only a grounded fact may hold in a grounded answer: the ASCII digits (grounding ``_`` and ``/``
#: too derailed the tiny checkpoint; see docs/TRAINING.md).
FACT_MARKS = "0123456789"
#: Longest fact kept, in characters (a longer run of fact characters is left out: the answer cannot write it).
FACT_CHARS = 96
_FACT_RUN = re.compile(r"[A-Za-z0-9_./\-]+")
#: Regex pieces of :func:`answer_regex`: any character but a fact mark; one that can be no part of a fact (no
#: ASCII letter, digit, ``_``, ``/``, ``.`` or ``-``: a fact's neighbour); ``.`` or ``-``.
_FREE, _EDGE, _DOT = r"[^0-9]", r"[^0-9A-Za-z_\/.\-]", r"[.\-]"


def answer_facts(texts: Sequence[str]) -> set[str]:
    """The facts of ``texts`` a grounded answer may write: maximal runs of ``[A-Za-z0-9_./-]`` holding a digit
    (``-4.0``, ``2026-11-29``, ``v2.1``, ``model/v2/x.py``), without trailing ``.``/``-``, a leading ``.`` or a
    leading ``-`` that is no minus sign; at most :data:`FACT_CHARS` characters."""
    out: set[str] = set()
    for text in bounded_texts(texts):
        for m in _FACT_RUN.finditer(text):
            fact = m.group().rstrip(".-").lstrip(".")
            while fact.startswith("-") and not fact[1:2].isdigit():
                fact = fact[1:]
            if fact and len(fact) <= FACT_CHARS and any(c in FACT_MARKS for c in fact):
                out.add(fact)
    return out


def answer_regex(texts: Sequence[str]) -> str:
    """The regex (llguidance syntax, no delimiters) of a grounded answer's non-empty text: every ASCII digit lies
    inside a fact of ``texts`` (:func:`answer_facts`) written whole and standing apart (no ``[A-Za-z0-9_/.-]``
    before it; after it no ``[A-Za-z0-9_/]``, nor a ``.``/``-`` followed by one of those or another ``.``/``-``).
    Two whole numbers joined by ``-`` count as one fact (``188-192``). So with ``600`` in the texts,
    ``bundle.py:600.`` can be written and ``bundle.py:6000`` cannot; text without digits is free."""
    facts = answer_facts(texts)
    if not facts:
        return f"(?s:{_FREE}+)"
    fact = _trie_regex(sorted(facts))
    whole = sorted(f for f in facts if f.isdigit())
    if whole:  # a range of two whole numbers of the texts: "lines 188-192"
        ints = _trie_regex(whole)
        fact = f"(?:{fact}|{ints}\\-{ints})"
    before = f"(?:{_FREE}*{_EDGE})?"  # the text before the first fact
    between = f"(?:{_EDGE}|{_DOT}{_EDGE})(?:{_FREE}*{_EDGE})?"
    after = f"(?:{_EDGE}{_FREE}*|{_DOT}(?:{_EDGE}{_FREE}*)?)?"
    return f"(?s:{_FREE}+|{before}{fact}(?:{between}{fact})*{after})"
