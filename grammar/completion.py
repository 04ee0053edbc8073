"""Shortest completion: few tokens that close an llguidance matcher's current parse (termination support for the
denoising constraint), and :func:`bitmask_to_bool`, the one numpy unpacking of an llguidance bitmask."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from grammar import special_tokens as st
from grammar.llg import llg_tokenizer


def bitmask_to_bool(mask: bytes | bytearray | np.ndarray, vocab_size: int) -> np.ndarray:
    """Unpack an llguidance bitmask (little-endian int32 words, bit ``j`` of word ``w`` = token ``32w+j``) to a
    bool ``np.ndarray`` ``[vocab_size]``."""
    raw = np.frombuffer(bytes(mask), dtype=np.uint8)
    return np.unpackbits(raw, bitorder="little")[:vocab_size].astype(bool)


#: Characters of tokens that close several things at once (``"}``, ``]]``).
_CLOSER_CHARS = set('"]}')


@dataclass
class _Tables:
    vocab: int
    specials: list[int]  # <|tool_response>, <turn|>, <tool_call|>, <channel|>
    quotes: list[int]  # <|"|> and '"': end a string (or open one)
    probes: list[int]  # single ASCII letters: allowed only inside free text
    exits: list[int]  # closers that may end free text: specials, quotes, brackets, ':'
    colon: int  # ':' (-1: no such token): may also go on inside a key (grammar.gemma_lark.KEY_REGEX)
    delim: int  # <|"|> (-1: none): opens a string value
    openers: list[int]  # other value starts (0 t f n - [): never go on in a key after its ':'
    structural: list[int]  # closers outside text: specials, brackets, quotes
    chars: list[int]  # single printable ASCII characters, by rank
    avoid: set[int]  # tried only when nothing else is allowed (<|channel>)
    order: np.ndarray  # ids by rank
    long_order: np.ndarray  # printable ids, longest first (progress in a long run of text)


def _single_id(tokenizer: Any, text: str, vocab: int) -> int | None:
    tid: Any = None
    if text.startswith("<"):
        tid = tokenizer.convert_tokens_to_ids(text)
        if tid == tokenizer.unk_token_id:
            tid = None
    if not isinstance(tid, int):
        ids = tokenizer.encode(text, add_special_tokens=False)
        tid = ids[0] if len(ids) == 1 else None
    return tid if tid is not None and 0 <= tid < vocab else None


@functools.lru_cache(maxsize=8)
def _tables(tokenizer: Any) -> _Tables:
    """Token tables of one tokenizer (built once per tokenizer object: about a second for 262k tokens)."""
    ll = llg_tokenizer(tokenizer)
    vocab = int(ll.vocab_size)

    def ids(texts: tuple[str, ...]) -> list[int]:
        out = [_single_id(tokenizer, t, vocab) for t in texts]
        return list(dict.fromkeys(i for i in out if i is not None))

    specials = ids((st.TOOL_RESPONSE_START, st.TURN_END, st.TOOL_CALL_END, st.CHANNEL_END))
    quotes = ids((st.STRING_DELIM, '"'))
    probes = ids(("a", "x", "Z", "q"))
    rank = np.full(vocab, 1 << 40, dtype=np.int64)
    printable = np.zeros(vocab, dtype=bool)
    lengths = np.zeros(vocab, dtype=np.int64)
    multi: list[tuple[int, int]] = []
    for i in range(vocab):
        if ll.is_special_token(i):
            continue
        b = ll.decode_bytes([i])
        if not b:
            continue
        try:
            text = b.decode("utf-8")
            nice = text.isascii() and text.isprintable()
        except UnicodeDecodeError:
            text, nice = "", False
        printable[i] = nice
        lengths[i] = len(b)
        if text and set(text) <= _CLOSER_CHARS and len(text) > 1:
            multi.append((len(text), i))
        cls = 0 if text == "," else 1 if text == "0" else 2 if text.isdigit() else 3 if text.isalpha() else 4
        rank[i] = ((0 if nice else 1) << 36) | (min(len(b), 255) << 28) | (cls << 24) | i
    brackets = [i for _, i in sorted(multi, reverse=True)] + ids(("]", "}"))
    opener = _single_id(tokenizer, st.CHANNEL_START, vocab)
    if opener is not None:  # a thinking block is never the short way out
        rank[opener] = 1 << 41
    order = np.argsort(rank, kind="stable")
    chars = [int(i) for i in order if printable[i] and len(ll.decode_bytes([int(i)])) == 1][:128]
    long_ids = np.flatnonzero(printable)
    long_order = long_ids[np.argsort(-lengths[long_ids], kind="stable")]
    exits, structural = specials + quotes + brackets + ids((":",)), specials + brackets + quotes
    colon, delim = (next(iter(ids((text,))), -1) for text in (":", st.STRING_DELIM))
    key_end = (colon, delim, ids(("0", "t", "f", "n", "-", "[")))  # a key's ':', what may start its value
    avoid = set() if opener is None else {opener}
    return _Tables(
        vocab, specials, quotes, probes, exits, *key_end, structural, chars, avoid, order, long_order
    )


def _ok(m: Any, t: int) -> bool:
    """Whether token ``t`` may come next (``validate_tokens``: ~1 us, state unchanged; a bitmask costs ~100x)."""
    return bool(m.validate_tokens([t]) == 1)


def _in_text(m: Any, tab: _Tables) -> bool:
    """True inside free text (a string body, a key, prose): a single-letter token may come next."""
    return any(_ok(m, t) for t in tab.probes)


def _exit(m: Any, tab: _Tables) -> list[int]:
    """An allowed closer whose consumption leaves free text ([] if none): ends a string, key or prose. A ``:``
    after which the text may go on (a patternProperties key may hold ``a:b``, grammar.gemma_lark.KEY_REGEX)
    leaves it with the value's first token (:func:`_value_start`): ``[":", "<|"|>"]``."""
    for t in tab.exits:
        if not _ok(m, t) or m.try_consume_tokens([t]) != 1:
            continue
        path = []
        if m.is_accepting() or not _in_text(m, tab):
            path = [t]
        elif t == tab.colon and (first := _value_start(m, tab)) >= 0:
            path = [t, first]
        m.rollback(1)
        if path:
            return path
    return []


def _value_start(m: Any, tab: _Tables) -> int:
    """A value's first token allowed here (-1 if none): ``<|"|>``, else one of :attr:`_Tables.openers` after which
    no free text goes on (``0``, ``t`` of ``true``); none when all are allowed (free text, not a value's start)."""
    if tab.delim >= 0 and _ok(m, tab.delim):
        return tab.delim
    allowed = [t for t in tab.openers if _ok(m, t)]
    if len(allowed) == len(tab.openers):
        return -1
    return _first_leading_out(m, allowed, lambda p: not _in_text(p, tab))


def _ranked(allowed: np.ndarray, tab: _Tables, k: int) -> list[int]:
    """The ``k`` best-ranked allowed tokens (scans the first 4096 of the rank order before the rest)."""
    head = tab.order[:4096]
    sel = head[allowed[head]]
    if sel.size < k:
        sel = tab.order[allowed[tab.order]]
    return [int(t) for t in sel[:k]]


def _search_exit(m: Any, tab: _Tables, depth: int = 3, budget: int = 300) -> list[int] | None:
    """Breadth-first search, over the single printable characters allowed, for a short path after which free
    text can be left; a child whose allowed characters were seen is not expanded, so it follows the characters
    that change what may come next (``@`` in an e-mail). ``None`` after ``budget`` children."""

    def chars(node: Any) -> tuple[int, ...]:
        return tuple(c for c in tab.chars if _ok(node, c))

    start = chars(m)
    seen = {start}
    frontier: list[tuple[list[int], tuple[int, ...]]] = [([], start)]
    probes = 0
    for _ in range(depth):
        nxt: list[tuple[list[int], tuple[int, ...]]] = []
        for path, allowed in frontier:
            for c in allowed:
                probes += 1
                if probes > budget:
                    return None
                n = m.try_consume_tokens([*path, c])  # probed in place: a copy costs the whole history
                try:
                    if n != len(path) + 1:
                        continue
                    if m.is_accepting() or _exit(m, tab):
                        return [*path, c]
                    sig = chars(m)
                finally:
                    m.rollback(n)
                if sig not in seen:
                    seen.add(sig)
                    nxt.append(([*path, c], sig))
        frontier = nxt
    return None


def _first_leading_out(m: Any, cands: Iterable[int], ok: Any) -> int:
    """The first of ``cands`` after which ``ok(matcher)`` holds (probed in place and rolled back: a copy would
    cost the matcher's whole token history, quadratic over a long completion), else -1."""
    for c in cands:
        if m.try_consume_tokens([c]) == 1:
            good = ok(m)
            m.rollback(1)
            if good:
                return c
    return -1


#: In-text steps without a way out after which progress takes the longest allowed token (``minLength: 3000``).
_LONG_RUN = 16
#: Most steps between two searches for a way out in a long run (each search costs ~300 probes).
_MAX_GAP = 32


@dataclass
class _TextRun:
    """A run of in-text steps without a way out (:func:`_text_choice`)."""

    stuck: int = 0  # steps since the last breadth-first search
    length: int = 0  # steps in the run
    gap: int = 4  # steps between searches: doubled after each failed one, up to _MAX_GAP


def _text_choice(m: Any, tab: _Tables, allowed: np.ndarray, run: _TextRun, lookahead: int) -> list[int]:
    """Inside free text: an allowed closer that leaves it (:func:`_exit`); else, at doubling gaps, a
    :func:`_search_exit` path; else a token after which a closer is allowed; else progress (the longest token
    after :data:`_LONG_RUN`)."""
    way_out = _exit(m, tab)
    if way_out:
        run.stuck = run.length = 0
        run.gap = 4
        return way_out
    if run.stuck >= run.gap:
        run.stuck = 0
        path = _search_exit(m, tab)
        if path:
            run.gap = 4
            return path
        run.gap = min(2 * run.gap, _MAX_GAP)
    run.stuck += 1
    run.length += 1
    cands = _ranked(allowed, tab, lookahead)
    choice = _first_leading_out(m, cands, lambda p: bool(_exit(p, tab)))
    if choice >= 0:
        return [choice]
    if run.length > _LONG_RUN:
        longest = tab.long_order[allowed[tab.long_order]]
        if longest.size:
            return [int(longest[0])]
    return cands[:1]


def _outside_text_choice(m: Any, tab: _Tables, allowed: np.ndarray, banned: set[int], lookahead: int) -> int:
    """Outside free text: the first allowed structural closer not banned, else the best-ranked token after
    which one is allowed (``5`` for ``minimum: 5``), banned and avoided tokens last."""
    for t in tab.structural:
        if allowed[t] and t not in banned:
            return t
    ranked = _ranked(allowed, tab, lookahead + len(banned) + len(tab.avoid))
    cands = [c for c in ranked if c not in banned and c not in tab.avoid][:lookahead] or ranked[:1]
    choice = _first_leading_out(
        m, cands, lambda p: p.is_accepting() or any(_ok(p, t) for t in tab.structural)
    )
    return choice if choice >= 0 else cands[0]


#: Longest period (tokens) of a cycle of choices that :func:`_cycle` repeats without bitmasks.
_MAX_PERIOD = 8


def _period(out: list[int]) -> int:
    """The period (2 to :data:`_MAX_PERIOD`) of the last three periods of ``out``, or 0 (``0`` ``,`` repeated
    for ``minItems: 2000``)."""
    for p in range(2, _MAX_PERIOD + 1):
        tail = out[-3 * p :]
        if len(tail) == 3 * p and tail[:p] * 3 == tail and len(set(tail[:p])) > 1:
            return p
    return 0


def _would_choose(m: Any, tab: _Tables, t: int, banned: set[int]) -> int:
    """Whether a full step would take ``t`` here, checked without a bitmask: 0 when not; 1 inside free text with
    no way out allowed and ``t`` allowed (progress); 2 when ``t`` is the fast-forward token, the closer the step
    would take, or, none allowed, an allowed non-closer (a full step might rank another first; still valid)."""
    ff = m.compute_ff_tokens()
    if ff:
        return 2 * (ff[0] == t)
    if _in_text(m, tab):
        first = next((c for c in tab.exits if _ok(m, c)), -1)
        if first >= 0 and first != t:  # a closer that may not leave the text (``]`` in a key): probe them
            first = next(iter(_exit(m, tab)), -1)
        return 2 * (first == t) if first >= 0 else int(_ok(m, t))
    first = next((c for c in tab.structural if c not in banned and _ok(m, c)), -1)
    if first >= 0 or t in tab.structural:
        return 2 * (first == t)
    return 2 * _ok(m, t)


def _cycle(m: Any, tab: _Tables, out: list[int], banned: set[int], room: int) -> int:
    """Repeat the cycle of the last choices (:func:`_period`) into ``m`` and ``out``, at most ``room`` tokens,
    while each token is what a full step would take and each period leaves free text; returns how many (a few
    ``validate_tokens`` calls a token instead of a bitmask and a ranking)."""
    p = _period(out)
    if not p:
        return 0
    cycle, n, in_text = out[-p:], 0, 0
    while n < room:
        t = cycle[n % p]
        how = _would_choose(m, tab, t, banned)
        in_text = in_text + 1 if how == 1 else 0
        if not how or in_text >= p or m.try_consume_tokens([t]) != 1:
            break
        out.append(t)
        n += 1
        if m.is_accepting() or m.is_stopped():
            break
    return n


def shortest_completion(matcher: Any, tokenizer: Any, limit: int, *, lookahead: int = 6) -> list[int]:
    """Greedily complete a copy of ``matcher`` (an ``llguidance.LLMatcher``, not modified; ``tokenizer``: the
    Hugging Face tokenizer of its ``LLTokenizer``) to an accepting state, preferring the shortest way out.

    Each step takes the fast-forward tokens if any. Inside free text (a string, a key, prose) it takes an allowed
    closer that leaves the text (a special token, a quote, a token of ``"]}``, ``:``), else one of the
    ``lookahead`` best-ranked tokens (printable ASCII, shorter first) after which a closer is allowed, else the
    best-ranked (:func:`_text_choice`, with a small search for the characters a way out needs). Outside text
    it takes the first allowed structural closer, else a token after which one is allowed. A cycle of choices
    (``minItems: 2000``) is repeated with cheap checks (:func:`_cycle`).

    Returns:
        Token ids (at most ``limit``) reaching an accepting state, unless ``limit`` was too small or no
        completion was found (a matcher in error: an empty list).
    """
    tab = _tables(tokenizer)
    m = matcher.deep_copy()
    out: list[int] = []
    run = _TextRun()
    last, repeats = -1, 0
    banned: set[int] = set()

    def take(toks: list[int]) -> bool:
        toks = toks[: limit - len(out)]
        n = int(m.try_consume_tokens(toks))
        out.extend(toks[:n])
        return n == len(toks)

    while len(out) < limit and not (m.is_error() or m.is_accepting() or m.is_stopped()):
        ff = m.compute_ff_tokens()
        if ff:
            if not take(ff):
                break
            continue
        allowed = bitmask_to_bool(m.compute_bitmask(), tab.vocab)
        if not allowed.any():
            break
        if _in_text(m, tab):
            path = _text_choice(m, tab, allowed, run, lookahead)
        else:
            run = _TextRun()
            path = [_outside_text_choice(m, tab, allowed, banned, lookahead)]
        if not take(path):  # a single token: the bitmask allowed it
            break
        if len(path) > 1:
            continue
        choice = path[0]
        if choice in tab.specials or choice in tab.quotes:
            banned.clear()
        repeats = repeats + 1 if choice == last else 0
        last = choice
        if repeats >= 8:
            banned.add(choice)
            repeats = 0
        _cycle(m, tab, out, banned, limit - len(out))
    return out
