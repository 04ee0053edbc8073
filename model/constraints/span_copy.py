"""Whole-span copying in answers: once the prose of a turn has started a span of a tool response, the rest of
the span is committed in one decision, not one token per denoising step.

A small checkpoint writes an answer left to right, one position per denoising step (``accept_window`` 1,
``extend_prose`` false), and each position is a fresh draw of the copy head's pointer: a path or a number of the
tool response comes out with pieces skipped or repeated (``tools/s/s/weather.py:205``, ``6.0.0``,
``2026---30``). The rule here takes that decision away from the per-token draws:

* *Spans.* The tool responses' leaf values (strings and numbers, as the prompt renders them) are cut into
  spans: maximal runs of :data:`SPAN_CHARS` (letters, digits, ``_ . / : + -``), without trailing ``. : -``;
  ``agentkit/bundle.py:532``, ``2026-11-29``, ``-4.0``, ``load_bundle``, ``showers``.
* *Start.* The word being written is the run of span characters at the end of the turn's committed prose. At
  the frontier (the canvas position after the committed prefix), the candidate token is the one the sampler
  accepted there, or else the argmax of the step's (grammar-masked, tempered) logits. When it continues the
  word (no leading space) and the word with it is a strict prefix of some span, the model has written two
  pieces of the span in source order: the pointer agrees with the source, so the span is started.
* *Continuation.* The candidate is committed with the longest text every such span continues with (their
  longest common continuation), tokenized by the checkpoint's tokenizer: one decision. Where spans part
  (``2026-11-29`` / ``2026-11-30``) it stops and the model picks the next piece; the rule then fires again
  on the next agreeing token. At a span's end it stops (the span boundary): the model writes what follows. A
  span that ends inside a longer one (a path inside its ``path:line`` location) is continued to the longer one.
* *Glued start.* A span's first token, as the tool response tokenizes it (after a quote), has no leading space,
  and the model's pointer copies it as it is, glued to the word before (``at`` + ``gra`` + ``mm``). When that
  piece and the next agreeing one start a fact span (one holding a :data:`FACT_MARKS` character), or follow
  letters of its first word that the pointer skipped and every such span shares (``defined`` + ``che`` + ``ma``
  for ``schema/ir.py:278``), and the word with them starts no span, the glued piece is replaced by a space and
  the span, copied whole (``at grammar/gemma_lark.py:106``; :meth:`SpanCopier.restart`, within the current
  canvas). The frontier lets in such a next piece even when it brings a fact mark to the plain word (``at`` +
  ``model`` + ``/`` for ``model/turn/chat.py:107``), so the restart is not masked away.
* *Inside a span.* While the word being written holds a digit or one of ``_ . / : -`` (a path, number, date or
  identifier, not a plain word) and is a prefix of a span, the frontier may only take a token that keeps it a
  prefix of a span, or one that ends the word (a space or other character outside spans; after a whole span
  also ``.``, ``:`` or ``-`` alone, as punctuation): the answer cannot write ``2026---30``, ``6.0.0`` or
  ``agentkit/b/backends``; punctuation after a whole span ends the word (``2026-11-30-30`` cannot be written).
  A plain word becomes a fact only at a span's start: ``tools/batching.py`` (no span starts with ``tools/``) and
  ``GrammarConstraint/constraints`` cannot be written. A plain word written in two or more pieces that is a
  prefix of a span (a copy started) is held the same way: the copy's end is the word's end (``BundleSpec``
  cannot go on to ``BundleSpecpe``, where the model's pointer, behind the copy, repeats the span's last pieces).
  A continuation never ends inside a word where spans part (``agentkit/b`` is cut back
  to ``agentkit/``), so the model picks the next piece whole.
* The grammar still checks every committed token (``try_consume_tokens``): a token the turn's grammar refuses
  (a grounded answer's regex, a budget-forced close) ends the run there.
* The readout of a canvas whose schedule is spent (left-to-right masked argmax) follows the same frontier mask
  and starts the same copies (``model/checkpoint/compat.py`` cannot be written for ``hf_compat.py``).

Paths, identifiers and numbers then come out whole, or not at all if the model never writes two agreeing
pieces. It changes decoding only (no training); a checkpoint opts in with ``"span_copy": true`` in its
``agentkit_decoding.json`` (:attr:`model.runtime.settings.DenoiseSettings.span_copy`).

Source: the pointer-generator copy of See et al. 2017 ("Get To The Point", arXiv:1704.04368) decided per span
rather than per token, as copy-span decoders do (Lan et al. 2023, "Copy Is All You Need", arXiv:2307.06962:
the next phrase is one choice among spans of the source); the induction-match trigger follows Olsson et al.
2022 ("In-context Learning and Induction Heads").
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
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
    """The spans of ``texts`` (see the module docstring): maximal runs of :data:`SPAN_CHARS`, trailing ``.:-``
    removed, at least ``min_chars`` characters long.

    Args:
        texts: the tool responses' leaf values (e.g. :func:`model.turn.chat.grounding_texts` of the tool messages).
        min_chars: shortest span kept.

    Returns:
        The set of spans (``{"agentkit/bundle.py:532", "agentkit/bundle.py", "532", ...}``).
    """
    out: set[str] = set()
    for text in texts:
        for m in _SPAN.finditer(text):
            span = m.group().rstrip(".:-")
            if len(span) >= min_chars:
                out.add(span)
    return out


@functools.lru_cache(maxsize=16)
def _lead_table(tokenizer: Any, vocab_size: int) -> list[tuple[int, str, bool, bool]]:
    """Each token with a leading run of span characters, as (id, that run, whether it is the whole token,
    whether the run holds a fact mark other than ``.:-``); cached per tokenizer object and vocabulary size."""
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
    """Proposes the rest of a tool-response span once an answer has started it (see the module docstring).

    Args:
        spans: the spans that may be copied (:func:`tool_spans`).
        tokenizer: the checkpoint's tokenizer (``decode`` and ``__call__``, as a ``PreTrainedTokenizerFast``).

    Raises:
        ValueError: ``spans`` is empty (nothing to copy: build no copier).
    """

    def __init__(self, spans: Iterable[str], tokenizer: Any) -> None:
        self.spans = sorted(set(spans))
        if not self.spans:
            raise ValueError("SpanCopier needs at least one span")
        self.tokenizer = tokenizer
        self._text_cache: dict[int, str] = {}
        self._span_set = frozenset(self.spans)
        self._prefixes = {sp[:k] for sp in self.spans for k in range(1, len(sp) + 1)}
        self._facts = [sp for sp in self.spans if FACT_MARKS & set(sp)]

    @classmethod
    def from_texts(cls, texts: Sequence[str], tokenizer: Any) -> SpanCopier | None:
        """A copier over the spans of ``texts`` (:func:`tool_spans`), or ``None`` when they hold none."""
        spans = tool_spans(texts)
        return cls(spans, tokenizer) if spans else None

    def _text(self, token: int) -> str:
        if token not in self._text_cache:
            self._text_cache[token] = self.tokenizer.decode([token])
        return self._text_cache[token]

    def word(self, committed: Sequence[int]) -> str:
        """The word being written: the run of :data:`SPAN_CHARS` at the end of the decoded ``committed`` tokens
        (the last :data:`TAIL_TOKENS` of them); ``""`` after a space or other boundary."""
        text = self.tokenizer.decode(list(committed[-TAIL_TOKENS:]))
        m = _WORD_TAIL.search(text)
        return m.group() if m else ""

    def copied(self, committed: Sequence[int], word: str) -> bool:
        """True when ``word`` (the word being written, :meth:`word`) is a prefix of a span written in two or more
        pieces: a copy started (:meth:`propose`), so the span ends the word as a fact's does (``BundleSpec``
        cannot go on to ``BundleSpecpe``), though it holds no fact mark."""
        if not committed or word not in self._prefixes:
            return False
        last = _WORD_TAIL.search(self._text(int(committed[-1])))
        return last is not None and len(word) > len(last.group())

    def continuation(self, word: str) -> str:
        """The longest text that every span strictly longer than ``word`` and starting with it continues with;
        ``""`` when no span does or when they part at once. A span that ends inside a longer one does not stop
        it: the copy goes on to the longest span (``agentkit/bundle.py`` -> ``agentkit/bundle.py:532``)."""
        ends = sorted(s[len(word) :] for s in self.spans if len(s) > len(word) and s.startswith(word))
        # only the longest spans: one that another extends is no parting (its extensions follow it when sorted)
        longer = [c for i, c in enumerate(ends) if not (i + 1 < len(ends) and ends[i + 1].startswith(c))]
        if not longer:
            return ""
        first, last = min(longer), max(longer)  # the common prefix of a set is that of its extremes
        n = 0
        while n < min(len(first), len(last)) and first[n] == last[n]:
            n += 1
        if n and first[n - 1].isalnum() and any(len(c) > n and c[n].isalnum() for c in longer):
            while n > 0 and first[n - 1].isalnum():  # the spans part inside a word: never stop there
                n -= 1
        return first[:n]

    def allowed(self, committed: Sequence[int], vocab_size: int, restart: bool = True) -> np.ndarray | None:
        """The tokens the frontier may take (see the module docstring), as a ``[vocab_size]`` bool array;
        ``None`` when nothing is restricted (the word is already no prefix of a span).

        A token whose text starts outside :data:`SPAN_CHARS` (a space, ``(``, ``°``, a control token) ends the
        word and is always allowed. One that starts with span characters (its *lead*) is allowed:

        * while the word holds a fact mark (:data:`FACT_MARKS`), or was written in two or more pieces
          (:meth:`copied`), and is a prefix of a span: when the word with the
          lead is still a prefix of a span (a token that ends the word inside, such as ``.)``, when it completes a
          span), or when the word is a whole span and the lead is punctuation alone (``.``, ``:``, ``-``);
        * after a whole fact or a plain word and punctuation (``2026-11-30-``, ``rain.``): never (the word
          ends: ``toolsatching.py`` cannot be written);
        * while the word holds no fact mark (a plain word, or none yet): when the lead brings no mark other
          than ``.:-`` punctuation (``rain.``), or the word with it is a prefix of a span (``load`` + ``_b``).
          A fact is entered only at a span's start: ``tools/``, ``GrammarConstraint/``, ``at600`` cannot be
          written; with ``restart``, also a whole token that restarts a fact span glued to the word
          (:meth:`restart`: ``/`` after ``at`` + ``model``, which then commits `` model/...``).

        Args:
            committed: the turn's committed token ids (prose, left to right).
            vocab_size: the mask's length ``V`` (token ids ``>= V`` are not considered).
            restart: let in the tokens that restart a glued span (False where the glued piece cannot be
                replaced: it lies in an earlier canvas).
        """
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
        """The tokens to commit at the frontier: ``[candidate, *rest of the span]`` when ``candidate`` continues
        the word being written into a prefix of a span (or a whole span); ``[]`` otherwise (the ordinary rules
        decide).

        Args:
            committed: the turn's committed token ids so far (prose; left to right).
            candidate: the token the step proposes at the frontier (accepted, or the masked argmax).

        Returns:
            Token ids, ``candidate`` first; the rest is the longest common continuation of the matching spans,
            tokenized without special tokens (may be empty: then ``[candidate]`` alone is returned when it
            still lies inside a span).
        """
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
        """The tokens to commit *in place of* the last committed token when the word's last piece and
        ``candidate`` are two pieces of a fact span (one holding a :data:`FACT_MARKS` character) in source order,
        but the piece was glued to the plain word before it (``at`` + ``gra`` + ``mm``: a span's first token as
        the tool response tokenizes it, after a quote, has no leading space): a space, then the span from that
        piece on, continued as :meth:`propose` continues it (`` grammar/gemma_lark.py:106``); ``[]`` otherwise.
        The two pieces may also follow letters of the span's first word that every such span shares and the
        pointer skipped (``defined`` + ``che`` + ``ma``: `` schema/ir.py:278``; ``at`` + ``gent`` + ``k``).

        Args:
            committed: the turn's committed token ids so far (prose; left to right).
            candidate: the token the step proposes at the frontier, where :meth:`propose` proposed nothing.

        Returns:
            Token ids (the checkpoint's tokenization of the space and the span part), or ``[]``.
        """
        text = self._restart_text(committed, self.word(committed), self._text(int(candidate)))
        return [int(t) for t in self.tokenizer(text, add_special_tokens=False)["input_ids"]] if text else []

    def _restart_text(self, committed: Sequence[int], word: str, piece: str) -> str:
        """What :meth:`restart` commits for the token text ``piece`` after ``committed`` (whose word being
        written is ``word``): a space and the span from the glued piece on; ``""`` when it does not restart."""
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
        """The whole-token texts holding a fact mark that would restart a fact span glued to the plain ``word``
        (:meth:`restart`: ``/`` after ``at`` + ``model`` for ``model/turn/chat.py:107``); the frontier lets them
        in, though a plain word takes a fact mark only at a span's start."""
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
