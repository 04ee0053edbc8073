"""The binding tagger's reading of a prompt: per-token labels over the declared parameters, grouped into runs of
request words (:class:`Labelling`, :func:`label_request`), and the request's typed values (numbers, written
lists of numbers). :mod:`model.binding.binder` turns them into a :class:`model.binding.Decision`."""

from __future__ import annotations

import bisect
import dataclasses
import functools
import itertools
import re
from typing import Any

import torch

from model.binding.typed import date_spans
from model.checkpoint import hf_compat as hf
from model.turn.declarations import declared_keys, last_user_span

#: A number as the request writes it in digits (``40``, ``-3``, ``2.5``, ``12,000``, ``1e-9``).
_NUMBER = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+(?![\d,])|\d+)(?:\.\d+)?(?:[eE][-+]?\d+(?![\w.]))?")
#: One number of a list written without spaces ("[200,300,400]"), which :data:`_NUMBER` reads as one.
_PLAIN = re.compile(r"-?\d+(?:\.\d+)?")
#: What stands between two numbers of one list the request writes: a comma, spaces, "and".
_LIST_GAP = re.compile(r"\s*,?\s*(?:and\s+)?")
#: Punctuation a word carries but a value does not: quotes and brackets, a comma or full stop after it.
_OPEN, _CLOSE = "\"'`([{<¿¡«“‘", "\"'`.,;:!?)]}>»”’"
#: A quoted value of the request ('Blue Lagoon', "ACME Ltd.", `build-42`): its quotes open and close words.
_QUOTED = re.compile(r"(?<![^\s(])(['\"`])([^'\"`\n]{1,80}?)\1(?=[\s.,;:!?)]|$)")


@dataclasses.dataclass(frozen=True)
class Labelling:
    """The binding tagger's reading of one prompt (:func:`label_request`).

    Attributes:
        prompt: the prompt text (its ``P`` tokens' decoded pieces joined).
        ends: ``[P]`` character offset where each token ends.
        user: ``(start, end)`` character span of the last user message.
        keys: the ``K`` declared parameters, ``(tool, parameter, start, end)``
            (:func:`model.turn.declarations.declared_keys`).
        logp: ``[P, 1 + K]`` float32 log-posteriors per token: column 0 "none", column ``k + 1`` ``keys[k]``."""

    prompt: str
    ends: list[int]
    user: tuple[int, int]
    keys: list[tuple[str, str, int, int]]
    logp: torch.Tensor

    def token_at(self, ch: int) -> int:
        """Index of the prompt token holding character ``ch``."""
        return bisect.bisect_right(self.ends, ch)

    @functools.cached_property
    def request(self) -> str:
        """The text of the last user message."""
        return self.prompt[self.user[0] : self.user[1]]

    @functools.cached_property
    def columns(self) -> dict[tuple[str, str], int]:
        """``{(tool, parameter): column of logp}``."""
        return {(tool, name): k + 1 for k, (tool, name, _, _) in enumerate(self.keys)}

    def token_score(self, key: tuple[str, str], tokens: list[int]) -> float:
        """The highest probability (0..1) of parameter ``key`` over ``tokens`` (0.0 for none)."""
        column = self.columns.get(key)
        if column is None or not tokens:
            return 0.0
        return float(self.logp[tokens, column].max().exp())

    @functools.cached_property
    def runs(self) -> dict[tuple[str, str], dict[str, float]]:
        """Each parameter's runs of request tokens labelled with it, widened to whole words: ``{(tool, parameter):
        {text: confidence}}`` in request order (confidence: the highest probability over the run)."""
        lo, hi = self.user
        tokens = range(self.token_at(lo), self.token_at(hi - 1) + 1)
        labels = self.logp.argmax(-1).tolist()
        out: dict[tuple[str, str], dict[str, float]] = {}
        for k, (tool, name, _, _) in enumerate(self.keys):
            toks = [i for i in tokens if labels[i] == k + 1]
            runs = [[t] for t in toks[:1]]
            for t in toks[1:]:
                runs[-1].append(t) if t == runs[-1][-1] + 1 else runs.append([t])
            scored: dict[str, float] = {}
            for run in runs:
                start = max(self.ends[run[0] - 1] if run[0] else 0, lo)
                text = _word_span(self.prompt, start, min(self.ends[run[-1]], hi), lo, hi)
                if text:
                    scored[text] = max(float(self.logp[run, k + 1].max().exp()), scored.get(text, 0.0))
            if scored:
                out[(tool, name)] = scored
        return out

    @functools.cached_property
    def _number_spans(self) -> list[tuple[int, int]]:
        """Spans of the request's numbers in digits at a word's start, outside dates."""
        (lo, hi), prompt = self.user, self.prompt
        in_dates = date_spans(self.request)
        spans = []
        for m in _NUMBER.finditer(prompt, lo, hi):
            a, b = m.span()
            if (a > lo and prompt[a - 1].isalpha()) or any(s <= a - lo < e for s, e in in_dates):
                continue
            a += prompt[a] == "-" and a > lo and prompt[a - 1].isdigit()  # "172-229": a range, no minus sign
            if "," in m.group() and a > lo and prompt[a - 1] in "[(,":
                spans += [p.span() for p in _PLAIN.finditer(prompt, a, b)]
            else:
                spans.append((a, b))
        return spans

    def numbers(self) -> list[tuple[str, list[int]]]:
        """The request's numbers in order: text without thousands separators, and their tokens."""
        return [
            (self.prompt[a:b].replace(",", ""), sorted({self.token_at(c) for c in range(a, b)}))
            for a, b in self._number_spans
        ]

    def number_lists(self) -> list[list[int]]:
        """Runs of two or more :meth:`numbers` (indexes) separated only by commas, spaces and "and", in request
        order."""
        spans = self._number_spans
        out: list[list[int]] = []
        for j, (a, _) in enumerate(spans):
            if out and _LIST_GAP.fullmatch(self.prompt, spans[j - 1][1], a):
                out[-1].append(j)
            else:
                out.append([j])
        return [js for js in out if len(js) >= 2]


def _strip_word(text: str, start: int, end: int) -> tuple[int, int]:
    """Bounds of word ``text[start:end]`` without quotes, brackets, possessive and closing punctuation."""
    while start < end and text[start] in _OPEN:
        start += 1
    if text.endswith(("'s", "’s"), start, end):
        end -= 2
    while end > start and text[end - 1] in _CLOSE and not re.fullmatch(r"(?:\w\.){2,}", text[start:end]):
        end -= 1
    return start, end


def _word_span(text: str, start: int, end: int, lo: int, hi: int) -> str:
    """``text[start:end]`` widened to whole words (a quoted text, a capitalised name) of ``text[lo:hi]``."""
    for quoted in _QUOTED.finditer(text, lo, hi):
        if quoted.start(2) < end and start < quoted.end(2) and text[start:end].strip():
            return quoted.group(2).strip()
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    while start > lo and not text[start - 1].isspace():
        start -= 1
    while end < hi and not text[end].isspace():
        end += 1
    a, b = _strip_word(text, start, end)
    if a < b and text[a].isupper():
        while b == end and (right := re.match(r"\s+(?!I\b)([A-Z]\S*)", text[b:hi])):
            b, end = _strip_word(text, b + right.start(1), b + right.end())[1], b + right.end()
        while left := re.search(r"(\S+)\s+$", text[lo:a]):
            word = left.group(1)
            if not text[lo : lo + left.start(1)].strip() or not word[0].isupper() or not word[-1].isalnum():
                break
            a = lo + left.start(1)
    return text[a:b].strip()


def token_pieces(tokenizer: Any, input_ids: list[int]) -> list[str]:
    """The text of each of the ``P`` tokens, joining to the prompt's text; a character split over byte tokens (each
    alone U+FFFD) is given whole to its last token, the others ``""``."""
    pieces: list[str] = []
    pending: list[int] = []
    for k, i in enumerate(input_ids):
        pending.append(i)
        text = tokenizer.decode(pending)
        if "\ufffd" in text and len(pending) < 4 and k + 1 < len(input_ids):
            pieces.append("")
            continue
        pieces.append(text)
        pending = []
    return pieces


def label_request(
    model: Any,
    tokenizer: Any,
    input_ids: list[int],
    tools: list[dict[str, Any]],
    memory_keys: torch.Tensor | None = None,
    hidden: torch.Tensor | None = None,
) -> Labelling | None:
    """Label every prompt token with the copy head's binding tagger.

    Args:
        model: a checkpoint with a copy head.
        tokenizer: its tokenizer, whose chat template rendered the prompt.
        input_ids: the turn's ``P`` prompt ids.
        tools: the OpenAI-style tools rendered in the prompt, in order.
        memory_keys, hidden: ``[1, >= P, D]`` pointer keys and ``[1, P, H]`` encoder states from the prefill;
            ``None``: one encoder pass here.

    Returns:
        The :class:`Labelling`, or ``None`` without a copy head, tools, a user message or a declaration found."""
    head = getattr(model, "copy_head", None)
    if head is None or not tools or not input_ids:
        return None
    pieces = token_pieces(tokenizer, input_ids)
    ends = list(itertools.accumulate(len(p) for p in pieces))
    prompt = "".join(pieces)
    keys = declared_keys(tokenizer, prompt, tools)
    user = last_user_span(tokenizer, prompt)
    if not keys or user is None or user[0] >= user[1]:
        return None
    with torch.no_grad():
        if memory_keys is None or hidden is None:
            ids = torch.tensor([input_ids], dtype=torch.long, device=model.device)
            hidden = hf.encoder_states(model, ids)
            memory_keys = head.new_memory(ids, hidden).keys
        decl = hidden[:, [bisect.bisect_right(ends, end - 1) for (_, _, _, end) in keys]]
        logits = head.binding_logits(memory_keys[:, : len(input_ids)], decl)[0]
    return Labelling(prompt, ends, user, keys, logits.float().log_softmax(-1))
