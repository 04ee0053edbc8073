"""Whole-span copying in answers: once a turn's prose has started a span of a tool response, the rest of the span is
committed in one decision, not one token per denoising step.

A small checkpoint writes an answer one position per step, each a fresh draw of the copy head's pointer, so paths
and numbers come out with pieces skipped or repeated (``6.0.0``, ``2026---30``). Here:

* *Spans*: maximal runs of :data:`SPAN_CHARS` in the tool responses' leaf values, trailing ``. : -`` removed.
* *Start and continuation*: when the frontier's candidate (the accepted token, or the step's masked argmax)
  continues the word being written into a strict prefix of a span, it is committed with the longest continuation
  every such span shares (:meth:`SpanCopier.propose`); where spans part, the model picks the next piece.
* *Glued start*: a span's first token has no leading space; when it and the next piece start a fact span (one
  holding a :data:`FACT_MARKS` character) glued to the word before, the glued piece is replaced by a space and
  the span (:meth:`SpanCopier.restart`).
* *Inside a span*: while the word is a fact (or a copy) and a prefix of a span, the frontier only takes tokens
  that keep it one or end the word (:meth:`SpanCopier.allowed`); a plain word becomes a fact only at a span's
  start.
* The grammar still checks every committed token; the readout follows the same mask and copies.

A checkpoint opts in with ``"span_copy": true`` in ``agentkit_decoding.json``. Source: the pointer-generator copy of
See et al. 2017 (arXiv:1704.04368) decided per span, as in Lan et al. 2023 ("Copy Is All You Need",
arXiv:2307.06962)."""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

#: A span of a tool response: a maximal run of these characters.
SPAN_CHARS = r"[\w./:+\-]"
_SPAN = re.compile(f"{SPAN_CHARS}+")
_WORD_TAIL = re.compile(f"{SPAN_CHARS}*$")
#: Committed tokens decoded to find the word being written (a span is at most this many tokens back).
TAIL_TOKENS = 48
#: Characters that make a word a fact (its spans are then enforced at the frontier: :meth:`SpanCopier.allowed`).
FACT_MARKS = frozenset("0123456789_./:-")
_PUNCT = frozenset(".:-")


def tool_spans(texts: Iterable[str], min_chars: int = 2) -> set[str]:
    """The spans of ``texts`` (the tool responses' leaf values): maximal runs of :data:`SPAN_CHARS`, trailing
    ``.:-`` removed, at least ``min_chars`` long."""
    out: set[str] = set()
    for text in texts:
        for m in _SPAN.finditer(text):
            span = m.group().rstrip(".:-")
            if len(span) >= min_chars:
                out.add(span)
    return out


@functools.lru_cache(maxsize=16)
def _lead_table(tokenizer: Any, vocab_size: int) -> list[tuple[int, str, bool, bool]]:
    """Tokens with a leading run of span characters: (id, run, whole token, holds a fact mark)."""
    leads = []
    for t in range(vocab_size):
        text = tokenizer.decode([t])
        m = re.match(f"{SPAN_CHARS}+", text)
        if m:
            lead = m.group()
            marks = bool(FACT_MARKS & set(lead)) and not set(lead) <= _PUNCT
            leads.append((t, lead, m.end() == len(text), marks))
    return leads


class SpanCopier:
    """Proposes the rest of a tool-response span once an answer has started it.

    Args:
        spans: the spans that may be copied (:func:`tool_spans`).
        tokenizer: the checkpoint's tokenizer.

    Raises:
        ValueError: ``spans`` is empty."""

    def __init__(self, spans: Iterable[str], tokenizer: Any) -> None:
        self.spans = sorted(set(spans))
        if not self.spans:
            raise ValueError("SpanCopier needs at least one span")
        self.tokenizer = tokenizer
        self._text: Callable[[int], str] = functools.cache(lambda token: tokenizer.decode([token]))
        self._span_set = frozenset(self.spans)
        self._prefixes = {sp[:k] for sp in self.spans for k in range(1, len(sp) + 1)}
        self._facts = [sp for sp in self.spans if FACT_MARKS & set(sp)]

    @classmethod
    def from_texts(cls, texts: Sequence[str], tokenizer: Any) -> SpanCopier | None:
        """A copier over the spans of ``texts``, or ``None`` when they hold none."""
        spans = tool_spans(texts)
        return cls(spans, tokenizer) if spans else None

    def word(self, committed: Sequence[int]) -> str:
        """The word being written: the run of :data:`SPAN_CHARS` ending the decoded ``committed`` tokens (``""``
        after a boundary)."""
        text = self.tokenizer.decode(list(committed[-TAIL_TOKENS:]))
        m = _WORD_TAIL.search(text)
        return m.group() if m else ""

    def copied(self, committed: Sequence[int], word: str) -> bool:
        """True when ``word`` is a prefix of a span written in two or more pieces (a copy started: the span ends the
        word, as a fact's does)."""
        if not committed or word not in self._prefixes:
            return False
        last = _WORD_TAIL.search(self._text(int(committed[-1])))
        return last is not None and len(word) > len(last.group())

    def continuation(self, word: str) -> str:
        """The longest text every span strictly longer than ``word`` and starting with it continues with (spans
        ending inside a longer one do not stop it; never a cut inside a word); ``""`` when none."""
        ends = sorted(s[len(word) :] for s in self.spans if len(s) > len(word) and s.startswith(word))
        # only the longest spans: one that another extends is no parting (its extensions follow it when sorted)
        longer = [c for i, c in enumerate(ends) if not (i + 1 < len(ends) and ends[i + 1].startswith(c))]
        if not longer:
            return ""
        first = min(longer)
        n = len(os.path.commonprefix(longer))  # noqa: RUF071 - characters, not paths
        if n and first[n - 1].isalnum() and any(len(c) > n and c[n].isalnum() for c in longer):
            while n > 0 and first[n - 1].isalnum():  # the spans part inside a word: never stop there
                n -= 1
        return first[:n]

    def allowed(self, committed: Sequence[int], vocab_size: int, restart: bool = True) -> np.ndarray | None:
        """The tokens the frontier may take, as a ``[vocab_size]`` bool array; ``None`` when nothing is restricted.

        A token starting outside :data:`SPAN_CHARS` ends the word and is always allowed. One starting with span
        characters (its lead) is allowed while the word is a fact or a copy (:meth:`copied`) if the word with it is
        still a prefix of a span, or the word is a whole span and the lead is punctuation alone; never after a whole
        fact and punctuation; in a plain word if the lead brings no fact mark or the word with it is a prefix of a
        span, and with ``restart`` a whole token that restarts a glued span (:meth:`restart`; False where the glued
        piece lies in an earlier canvas)."""
        word = self.word(committed)
        marked = bool(FACT_MARKS & set(word)) or self.copied(committed, word)
        closed = marked and word not in self._prefixes  # ``2026-11-30-``, ``rain.``: the word must end here
        base = word.rstrip(".:-")
        if closed and (base == word or (FACT_MARKS & set(base) and base not in self._span_set)):
            return None  # already off every span: nothing to keep to
        whole = word in self._span_set
        glued = self._restart_leads(committed, word) if restart and not marked else set()
        out = np.ones(vocab_size, dtype=bool)
        for t, lead, entire, marks in _lead_table(self.tokenizer, vocab_size):
            if t >= vocab_size or (not marked and not marks):
                continue
            u = word + lead
            ok = (u in self._prefixes) if entire else (u in self._span_set)
            out[t] = not closed and (ok or (whole and set(lead) <= _PUNCT) or (entire and lead in glued))
        return out

    def propose(self, committed: Sequence[int], candidate: int) -> list[int]:
        """The tokens to commit at the frontier: ``[candidate, *rest of the span]`` when ``candidate`` continues the
        word into a prefix of a span (the rest tokenized without special tokens, possibly empty); ``[]`` otherwise."""
        piece = self._text(int(candidate))
        if not piece or not re.fullmatch(f"{SPAN_CHARS}+", piece):
            return []  # a leading space, punctuation outside spans or a control token starts no copy
        word = self.word(committed)
        if not word:
            return []  # the first piece of a word: the model has not yet agreed with a source span
        started = word + piece
        if started not in self._prefixes:
            return []
        rest = self.continuation(started)
        ids = [int(candidate)]
        if rest:
            ids += [int(t) for t in self.tokenizer(rest, add_special_tokens=False)["input_ids"]]
        return ids

    def restart(self, committed: Sequence[int], candidate: int) -> list[int]:
        """The tokens to commit *in place of* the last committed token when it and ``candidate`` are two pieces of a
        fact span glued to the plain word before (possibly after letters of the span's first word the pointer
        skipped): a space, then the span continued as :meth:`propose` does; ``[]`` otherwise."""
        text = self._restart_text(committed, self.word(committed), self._text(int(candidate)))
        return [int(t) for t in self.tokenizer(text, add_special_tokens=False)["input_ids"]] if text else []

    def _restart_text(self, committed: Sequence[int], word: str, piece: str) -> str:
        """What :meth:`restart` commits for the token text ``piece``, or ``""``."""
        if not committed or not piece or not re.fullmatch(f"{SPAN_CHARS}+", piece):
            return ""
        last = self._text(int(committed[-1]))
        if (
            not re.fullmatch(f"{SPAN_CHARS}+", last)
            or len(word) <= len(last)
            or word + piece in self._prefixes
        ):
            return ""  # no glued piece, or the word itself continues a span (propose's case)
        if FACT_MARKS & set(word[: -len(last)]):
            return ""  # glued to a fact: the frontier mask (allowed) keeps facts whole
        started = last + piece
        # the letters of the span's first word the pointer skipped (``a`` of ``agentkit``, ``s`` of ``schema``)
        heads = {sp[:k] for sp in self._facts if (k := sp.find(started)) == 0 or (k > 0 and sp[:k].isalpha())}
        if len(heads) != 1:
            return ""  # no fact span holds the two pieces there, or the spans disagree on what precedes them
        started = heads.pop() + started
        return " " + started + self.continuation(started)

    def _restart_leads(self, committed: Sequence[int], word: str) -> set[str]:
        """Whole-token texts with a fact mark that would restart a span glued to ``word``."""
        last = self._text(int(committed[-1])) if committed else ""
        if not last or len(word) <= len(last) or not word.endswith(last):
            return set()
        tails: set[str] = set()
        for sp in self._facts:
            k = sp.find(last)
            while k >= 0 and (k == 0 or sp[:k].isalpha()):
                rest = sp[k + len(last) :]
                tails.update(rest[:j] for j in range(1, len(rest) + 1) if FACT_MARKS & set(rest[:j]))
                k = sp.find(last, k + 1)
        return {t for t in tails if self._restart_text(committed, word, t)}
