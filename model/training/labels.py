"""Dense labels for the copy head's binding supervision (:mod:`model.heads.copy_head`), by character offsets:

* ``decl_pos``: the prompt position of the last token of each declared parameter's name, in declaration order;
* ``bind``: per prompt token, ``-100`` outside the last user message, else ``0`` ("none") or ``1 + k`` inside the
  words that state parameter ``k``'s value (``Example.bindings``);
* ``key``: per target token, ``k`` inside parameter ``k``'s value in a call (no string delimiters), else ``-100``;
* ``ptr``: per target token, True where the pointer is trained (call values, word-like tokens of prose answers).

Slot-filling taggers learn from such per-token labels (Mesnil et al. 2015).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any

from grammar import special_tokens as st
from model.training.data import Example
from model.training.render import render_prompt
from model.turn.declarations import declared_keys, format_value, last_user_span

IGNORE = -100


@dataclass
class Encoded:
    """Token ids of one example's rendered ``prompt`` and ``target``; ``copied[i]``: ``target[i]`` is a word-like
    token of the prompt after the system turn and not in it (a value to copy); ``decl_pos``, ``bind``, ``key``,
    ``ptr``: the copy head's labels (lists of equal length to ``prompt``/``target``)."""

    prompt: list[int]
    target: list[int]
    copied: list[bool] = field(default_factory=list)
    decl_pos: list[int] = field(default_factory=list)
    bind: list[int] = field(default_factory=list)
    key: list[int] = field(default_factory=list)
    ptr: list[bool] = field(default_factory=list)


def _mentions(text: str, spoken: str) -> list[tuple[int, int]]:
    """Spans of ``spoken`` in ``text`` at word boundaries (case-insensitive fallback)."""
    if not spoken:
        return []
    pat = r"(?<![A-Za-z0-9])" + re.escape(spoken) + r"(?![A-Za-z0-9])"
    exact = [(m.start(), m.end()) for m in re.finditer(pat, text)]
    return exact or [(m.start(), m.end()) for m in re.finditer(pat, text, flags=re.IGNORECASE)]


def call_value_spans(calls: list[tuple[str, dict[str, Any]]]) -> tuple[str, list[tuple[str, str, int, int]]]:
    """``(text, [(tool, parameter, start, end)])``: the calls as ``format_call`` writes them and the span of each
    top-level argument's value (a string's without its ``<|"|>`` delimiters)."""
    q = st.STRING_DELIM
    text, spans = "", []
    for name, args in calls:
        text += f"{st.TOOL_CALL_START}call:{name}{{"
        for i, (k, v) in enumerate(args.items()):
            if i:
                text += ","
            text += f"{k}:"
            fv = format_value(v)
            s, e = len(text), len(text) + len(fv)
            if isinstance(v, str):
                s, e = s + len(q), e - len(q)
            spans.append((name, k, s, e))
            text += fv
        text += "}" + st.TOOL_CALL_END
    return text, spans


def _overlap(offsets: list[tuple[int, int]], s: int, e: int) -> list[int]:
    return [i for i, (a, b) in enumerate(offsets) if a < e and b > s and b > a]


_COPY_WORD = re.compile(r"[A-Za-z0-9_]+")  # a path or a location is several words: agentkit / bundle . py
#: Control-token spellings in a text: ``<|turn>``, ``<turn|>``, ``<|"|>``.
CONTROL_SPELLING = re.compile(r"<\|[^<>|]*>|<[^<>|]*\|>")


@functools.cache
def _variant_tables(tok: Any) -> tuple[dict[str, int], dict[str, int]]:
    """``(plain, spaced)``: token text -> id for the tokens without and with a leading ``Ġ`` (byte-level BPE)."""
    plain: dict[str, int] = {}
    spaced: dict[str, int] = {}
    for t, i in tok.get_vocab().items():
        if t.startswith("Ġ") and len(t) > 1:
            spaced[t[1:]] = i
        else:
            plain[t] = i
    return plain, spaced


def _word_tokens(offsets: list[tuple[int, int]], text: str, s: int, e: int) -> list[int] | None:
    """Indices of the tokens that spell exactly ``text[s:e]`` (the first may also hold one leading space), or
    ``None`` when a token crosses the word's edges."""
    idx = _overlap(offsets, s, e)
    if not idx:
        return None
    a, b = offsets[idx[0]][0], offsets[idx[-1]][1]
    if b != e or not (a == s or (a == s - 1 and text[a] == " ")):
        return None
    return idx


def align_copied_words(
    tok: Any,
    prompt: str,
    p_ids: list[int],
    p_off: list[tuple[int, int]],
    target: str,
    t_ids: list[int],
    t_off: list[tuple[int, int]],
) -> tuple[list[int], list[tuple[int, int]]]:
    """The target's ``(ids, offsets)`` with each copied word spelled with its prompt tokens where its own
    spelling cannot be copied.

    Byte-level BPE splits a word by its context (``a gent k it`` after a quote, ``Ġagent k it`` after a space)
    and the copy head emits each source token's stripped or spaced form. A target word that occurs in the prompt
    after the system turn, with canonical tokens not all among the prompt's, is written as the source's tokens
    (``Ġa gent k it``): the same text, every token copyable, the offsets still covering ``target``. A word stays
    as it is when no occurrence starts and ends on token edges or the needed variant is not in the vocabulary.
    """
    plain, spaced = _variant_tables(tok)
    end = prompt.find(st.TURN_END)
    src = end + len(st.TURN_END) if end >= 0 else 0
    names = tok.convert_ids_to_tokens(p_ids)
    source = {n.removeprefix("Ġ") for n, (a, _) in zip(names, p_off, strict=True) if a >= src}
    t_names = tok.convert_ids_to_tokens(t_ids)
    masked = CONTROL_SPELLING.sub(lambda m: " " * len(m.group()), target)
    edits: list[tuple[list[int], list[int], list[tuple[int, int]]]] = []
    for m in _COPY_WORD.finditer(masked):
        s, e = m.span()
        idx = _word_tokens(t_off, target, s, e)
        if idx is None or all(t_names[i].removeprefix("Ġ") in source for i in idx):
            continue
        lead = t_off[idx[0]][0] < s  # the first token holds the word's leading space
        new = _source_spelling(prompt, p_off, names, src, m.group(), lead, plain, spaced)
        if new is None:
            continue
        ids, pos, offs = [], t_off[idx[0]][0], []
        for j, piece in enumerate(new):
            n = len(piece) + (1 if j == 0 and lead else 0)
            ids.append(spaced[piece] if j == 0 and lead else plain[piece])
            offs.append((pos, pos + n))
            pos += n
        edits.append((idx, ids, offs))
    for idx, ids, offs in reversed(edits):
        t_ids = t_ids[: idx[0]] + ids + t_ids[idx[-1] + 1 :]
        t_off = t_off[: idx[0]] + offs + t_off[idx[-1] + 1 :]
    return t_ids, t_off


def _source_spelling(
    prompt: str,
    p_off: list[tuple[int, int]],
    names: list[str],
    src: int,
    word: str,
    lead: bool,
    plain: dict[str, int],
    spaced: dict[str, int],
) -> list[str] | None:
    """The token texts (no ``Ġ``) of ``word``'s last occurrence in ``prompt[src:]`` on token edges that the
    variant ``lead`` asks for can write, or ``None``."""
    pat = r"(?<![A-Za-z0-9_])" + re.escape(word) + r"(?![A-Za-z0-9_])"
    for m in reversed(list(re.finditer(pat, prompt[src:]))):
        idx = _word_tokens(p_off, prompt, src + m.start(), src + m.end())
        if idx is None:
            continue
        pieces = [names[i].removeprefix("Ġ") for i in idx]
        first = spaced if lead else plain
        if pieces[0] in first and all(p in plain for p in pieces[1:]):
            return pieces
    return None


def example_labels(
    tok: Any, ex: Example, word_table: list[bool] | None = None, *, align_copies: bool = False
) -> Encoded:
    """Token ids and binding labels of ``ex`` (prompt and target tokenized apart, as at inference).

    ``tok`` must give offset mappings and carry the chat template; ``word_table[id]`` marks word-like tokens, the
    pointer targets of prose answers (``None``: none); ``align_copies``: :func:`align_copied_words`.
    """
    prompt = render_prompt(ex.messages, ex.tools)
    pe = tok(prompt, add_special_tokens=False, return_offsets_mapping=True)
    te = tok(ex.target, add_special_tokens=False, return_offsets_mapping=True)
    p_ids, p_off = list(pe["input_ids"]), [tuple(o) for o in pe["offset_mapping"]]
    t_ids, t_off = list(te["input_ids"]), [tuple(o) for o in te["offset_mapping"]]
    if align_copies:
        t_ids, t_off = align_copied_words(tok, prompt, p_ids, p_off, ex.target, t_ids, t_off)
    keys = declared_keys(tok, prompt, ex.tools)
    index = {(tool, k): j for j, (tool, k, _, _) in enumerate(keys)}
    decl_pos = [(_overlap(p_off, s, e) or [0])[-1] for _, _, s, e in keys]
    bind = [IGNORE] * len(p_ids)
    req = last_user_span(tok, prompt)
    if req is not None and ex.calls:
        for i in _overlap(p_off, *req):
            bind[i] = 0
        text = prompt[req[0] : req[1]]
        for tool, k, spoken in ex.bindings:
            j = index.get((tool, k))
            if j is None:
                continue
            for s, e in _mentions(text, spoken):
                for i in _overlap(p_off, req[0] + s, req[0] + e):
                    bind[i] = 1 + j
    key = [IGNORE] * len(t_ids)
    ptr = [False] * len(t_ids)
    if ex.calls:
        text, spans = call_value_spans(ex.calls)
        if ex.target.startswith(text):
            for tool, k, s, e in spans:
                j = index.get((tool, k))
                for i in _overlap(t_off, s, e):
                    ptr[i] = True
                    if j is not None:
                        key[i] = j
    elif word_table is not None:
        ptr = [word_table[x] for x in t_ids]
    return Encoded(p_ids, t_ids, [], decl_pos, bind, key, ptr)
