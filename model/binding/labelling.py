"""The binding classifier's reading of a prompt: per-token labels over the declared parameters, grouped into
runs of request words (:class:`Labelling`, :func:`label_request`). The rules that turn runs into the turn's
constraint are in :mod:`model.binding.rules`; the whole method is described in :mod:`model.binding`."""

from __future__ import annotations

import bisect
import dataclasses
import functools
import itertools
import re
from typing import Any

import torch

from model import hf_compat as hf
from model.declarations import declared_keys, last_user_span

#: A number as the request spells it (``40``, ``-3``, ``2.5``).
_NUMBER = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+(?![\d,])|\d+)(?:\.\d+)?(?:[eE][-+]?\d+(?![\w.]))?")
#: One number of a list written without spaces ("[200,300,400]"), which :data:`_NUMBER` reads as one.
_PLAIN = re.compile(r"-?\d+(?:\.\d+)?")


_MONTH_NAMES = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec)[a-z]*"
#: A month name right before a day ("March 10th") and a day's ordinal and month right after it ("10th of May").
_MONTH_BEFORE = re.compile(rf"\b{_MONTH_NAMES}\.?\s*$")
_MONTH_AFTER = re.compile(rf"(?:st|nd|rd|th)?\s+(?:of\s+)?{_MONTH_NAMES}\b")
#: Numbers a request spells as words ("the next three days", "top five"), and their values. "one" is left
#: out: it is as often a pronoun ("which one").
_NUMBER_WORDS = {
    w: i
    for i, w in enumerate(
        "_ _ two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen"
        " seventeen eighteen nineteen twenty".split()
    )
    if i >= 2
} | {"thirty": 30, "forty": 40, "fifty": 50, "hundred": 100, "dozen": 12}
_WORD_NUMBER = re.compile(r"(?i)\b(?:" + "|".join(_NUMBER_WORDS) + r")\b(?!-)")


def number_text(text: str) -> str:
    """A number as the request spells it (:data:`_NUMBER`: ``40``, ``-3``, ``2.5``, ``12,000``, ``1e-9``; or
    a word of :data:`_NUMBER_WORDS`: ``three``) in the form Python and JSON read: without thousands
    separators (``12000``), in digits (``3``)."""
    word = _NUMBER_WORDS.get(text.lower())
    return str(word) if word is not None else text.replace(",", "")


def whole(text: str) -> bool:
    """Whether number ``text`` (:func:`number_text`'s form) is a whole number (``40``, not ``2.5`` or ``1e3``)."""
    return re.fullmatch(r"-?\d+", text) is not None


#: Words of a parameter name that say it counts something (``num_tickets``, ``number_of_players``).
_COUNT_WORDS = frozenset({"num", "number", "n", "of", "count", "total"})
#: A word of a declaration or a request, for comparing them (lower case).
_WORD = re.compile(r"[a-z0-9]+")
#: What stands between two numbers of one list the request writes: a comma, spaces, "and".
_LIST_GAP = re.compile(r"\s*,?\s*(?:and\s+)?")


def bound_spans(
    model: Any, tokenizer: Any, input_ids: list[int], tools: list[dict[str, Any]]
) -> dict[tuple[str, str], str]:
    """The request words the binding classifier binds to each declared parameter: :func:`binding_runs` for the
    parameters labelled on exactly one run (arguments and cost as there)."""
    return {
        key: texts[0]
        for key, texts in binding_runs(model, tokenizer, input_ids, tools).items()
        if len(texts) == 1
    }


@dataclasses.dataclass(frozen=True)
class Labelling:
    """The binding classifier's reading of one prompt (:func:`label_request`).

    Attributes:
        prompt: the prompt text, the decoded pieces of its ``P`` tokens joined.
        ends: ``[P]`` character offset in ``prompt`` where each token ends.
        user: ``(start, end)`` character span of the last user message.
        keys: the ``K`` declared parameters, ``(tool name, parameter, start, end)`` as
            :func:`model.declarations.declared_keys` finds them.
        logp: ``[P, 1 + K]`` float32 log-posteriors of every prompt token: column 0 "none", column ``k + 1``
            ``keys[k]``.
    """

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
    def request_words(self) -> list[str]:
        """The words of :attr:`request`, lower case, apostrophes kept ("don't"), in order."""
        return [w.lower() for w in re.findall(r"[A-Za-z0-9']+", self.request)]

    @functools.cached_property
    def columns(self) -> dict[tuple[str, str], int]:
        """``{(tool name, parameter): column of logp}`` for every declared parameter."""
        return {(tool, name): k + 1 for k, (tool, name, _, _) in enumerate(self.keys)}

    @functools.cached_property
    def _request_tokens(self) -> range:
        """Indexes of the prompt tokens that hold the last user message."""
        return range(self.token_at(self.user[0]), self.token_at(self.user[1] - 1) + 1)

    def _span(self, run: list[int]) -> str:
        """The request text of token run ``run``, widened to whole words (:func:`_word_span`)."""
        lo, hi = self.user
        start = max(self.ends[run[0] - 1] if run[0] else 0, lo)
        end = min(self.ends[run[-1]], hi)
        return _word_span(self.prompt, start, end, lo, hi)

    def runs(self) -> dict[tuple[str, str], list[str]]:
        """:func:`binding_runs`' result: the argmax label of each request token, grouped into runs of
        consecutive tokens per parameter, each run's text once, in request order."""
        return {key: list(scored) for key, scored in self._scored_runs.items()}

    def score(self, key: tuple[str, str], text: str) -> float:
        """The highest log-posterior of parameter ``key`` over the tokens of its run ``text`` (one of
        :meth:`runs`' texts for ``key``; ``-inf`` for another text)."""
        return self._scored_runs.get(key, {}).get(text, float("-inf"))

    def best_word(self, key: tuple[str, str], skip: set[str]) -> str | None:
        """The request word (:func:`_word_span` of one token) parameter ``key`` scores highest, leaving out the
        words in ``skip`` and those made only of words in it (lower case); ``None`` when none is left or ``key``
        is not declared."""
        column = self.columns.get(key)
        if column is None:
            return None
        lowered = {w.lower() for w in skip}
        best, found = float("-inf"), None
        for i in self._request_tokens:
            word, score = self._span([i]), float(self.logp[i, column])
            if word and word not in skip and not set(_WORD.findall(word.lower())) <= lowered and score > best:
                best, found = score, word
        return found

    @functools.cached_property
    def _scored_runs(self) -> dict[tuple[str, str], dict[str, float]]:
        """``{key: {text: score}}`` behind :meth:`runs` and :meth:`score`, texts in request order."""
        labels = self.logp.argmax(-1).tolist()
        out: dict[tuple[str, str], dict[str, float]] = {}
        for k, (tool, name, _, _) in enumerate(self.keys):
            toks = [i for i in self._request_tokens if labels[i] == k + 1]
            runs = [[t] for t in toks[:1]]
            for t in toks[1:]:
                runs[-1].append(t) if t == runs[-1][-1] + 1 else runs.append([t])
            scored: dict[str, float] = {}
            for run in runs:
                text, score = self._span(run), float(self.logp[run, k + 1].max())
                if text:
                    scored[text] = max(score, scored.get(text, score))
            if scored:
                out[(tool, name)] = scored
        return out

    def names(self, parameter: str, j: int) -> bool:
        """Whether the request names ``parameter`` right at its ``j``-th number (:meth:`numbers`): its words
        (``initial_velocity`` -> "initial velocity") just before it, joined by ``=``, ``:``, "of", "is" or a
        space ("a=1", "radius of 4", "initial velocity is 10"), or just after it ("7 days"; a count's name
        without its count words, when it starts with one or ends with "count" or "number": "two tickets" for
        ``num_tickets``, :data:`_COUNT_WORDS`; not "4 light years" for ``speed_of_light``). A name of one or two
        letters counts only before ``=`` or ``:`` ("a" is also a word)."""
        words = [w for w in re.split(r"[_\W]+", parameter) if w]
        if not words:
            return False
        name = r"[\s_]+".join(map(re.escape, words))
        text, (lo, hi) = self.prompt, self.user
        a, b = self._number_spans[j]
        sep = r"\s*[=:]\s*" if len(parameter) <= 2 else r"(?:\s*[=:]\s*|\s+(?:of|is|=)\s+|\s+)"
        before = re.search(rf"(?i)(?<![A-Za-z0-9]){name}{sep}$", text[max(lo, a - 60) : a])
        after = len(parameter) > 2 and re.match(rf"(?i)\s+{name}(?![A-Za-z0-9])", text[b:hi])
        counted = [w for w in words if w.lower() not in _COUNT_WORDS]  # num_tickets: "two tickets"
        counts = words[0].lower() in _COUNT_WORDS or words[-1].lower() in ("count", "number")
        if not after and counts and counted and len(counted[-1]) > 2:
            after = re.match(rf"(?i)\s+{re.escape(counted[-1])}(?![A-Za-z0-9])", text[b:hi])
        return bool(before or after)

    @functools.cached_property
    def _number_spans(self) -> list[tuple[int, int]]:
        """Character spans of the request's numbers that start a word: ``40``, the ``70`` of ``70kg``, the
        ``1.75`` of ``1.75m``, ``12,000`` and ``1e-9``, not the ``2`` of ``x2`` nor the day of a date with a
        capitalised month name ("March 10th, 2025", "10 March": its year stays a number; not "may 5 people");
        comma-grouped digits right after
        a bracket or a comma are a list written without spaces ("[200,300,400]"), one number each; and the
        numbers spelled as words ("three", :data:`_NUMBER_WORDS`; not "six-sided", nor the count of the numbers
        written after it: "two numbers, 36 and 48"), in request order."""
        (lo, hi), prompt = self.user, self.prompt
        spans = []
        for m in _NUMBER.finditer(prompt, lo, hi):
            a, b = m.span()
            if a > lo and prompt[a - 1].isalpha():
                continue
            day = b - a <= 2 and m.group().isdigit()
            if day and (_MONTH_BEFORE.search(prompt, lo, a) or _MONTH_AFTER.match(prompt, b, hi)):
                continue  # the day of "March 10th, 2025", "10 March": part of a date, no number
            if "," in m.group() and a > lo and prompt[a - 1] in "[(,":
                spans += [p.span() for p in _PLAIN.finditer(prompt, a, b)]
            else:
                spans.append((a, b))
        for m in _WORD_NUMBER.finditer(prompt, lo, hi):  # "two numbers, 36 and 48": a count, no value
            if sum(a >= m.end() for a, _ in spans) < _NUMBER_WORDS[m.group().lower()]:
                spans.append(m.span())
        return sorted(spans)

    def spelled(self, j: int) -> bool:
        """Whether the request spells its ``j``-th number (:meth:`numbers`) as a word ("three")."""
        a, b = self._number_spans[j]
        return self.prompt[a:b].lower() in _NUMBER_WORDS

    def number_span(self, j: int) -> tuple[int, int]:
        """``(start, end)`` character span in :attr:`prompt` of the request's ``j``-th number (:meth:`numbers`)."""
        return self._number_spans[j]

    def percent(self, j: int) -> bool:
        """Whether the request writes its ``j``-th number (:meth:`numbers`) as a percentage ("10%", "10 %")."""
        end = self._number_spans[j][1]
        return re.match(r"\s?%", self.prompt[end : self.user[1]]) is not None

    def number_lists(self) -> list[list[int]]:
        """The lists of numbers the request writes: runs of at least two of :meth:`numbers` (as indexes into
        it) separated only by commas, spaces and "and" ("[10, 15, 12]", "12, 24 and 36"; "] and [" ends a
        list; a number spelled as a word is in none), in request order."""
        spans = self._number_spans
        out: list[list[int]] = []
        for j, (a, _) in enumerate(spans):
            if self.spelled(j):
                out.append([])  # a spelled number ("three") ends a list and is in none
            elif out and out[-1] and _LIST_GAP.fullmatch(self.prompt, spans[j - 1][1], a):
                out[-1].append(j)
            else:
                out.append([j])
        return [js for js in out if len(js) >= 2]

    def numbers(self) -> list[tuple[str, list[int]]]:
        """The numbers the request spells at the start of a word (``40``, ``70kg``; not ``x2``), in order:
        their text (:func:`number_text`: ``12,000`` is ``12000``) and the indexes of the tokens that hold them."""
        return [
            (number_text(self.prompt[a:b]), sorted({self.token_at(c) for c in range(a, b)}))
            for a, b in self._number_spans
        ]


#: Punctuation a word carries but a value does not: quotes and brackets, a comma or full stop after it.
_OPEN, _CLOSE = "\"'`([{<¿¡«“‘", "\"'`.,;:!?)]}>»”’"
#: A quoted value of the request ('Roe v. Wade', "ABC Ltd.", `DNA123`): its quotes open and close words.
_QUOTED = re.compile(r"(?<![^\s(])(['\"`])([^'\"`\n]{1,80}?)\1(?=[\s.,;:!?)]|$)")


def _strip_word(text: str, start: int, end: int) -> tuple[int, int]:
    """The bounds of word ``text[start:end]`` without its quotes, brackets, possessive "'s" and closing
    punctuation (an abbreviation keeps its last full stop: "D.C.")."""
    while start < end and text[start] in _OPEN:
        start += 1
    if text.endswith(("'s", "’s"), start, end):  # a possessive: "Berlin's"
        end -= 2
    while end > start and text[end - 1] in _CLOSE and not re.fullmatch(r"(?:\w\.){2,}", text[start:end]):
        end -= 1
    return start, end


def _word_span(text: str, start: int, end: int, lo: int, hi: int) -> str:
    """``text[start:end]`` widened to whole words of the request ``text[lo:hi]``, without the punctuation
    around them (:func:`_strip_word`).

    A run inside quotes is the quoted text ("'Roe v. Wade'"). A word runs between spaces ("01-01-1980",
    "C:/data/cars.csv"). A capitalised word goes on over the
    capitalised words next to it, as a proper name does ("Los" -> "Los Angeles", "D.C." -> "Washington
    D.C.", "Yellowstone" -> "Yellowstone National Park"; to the right also over "of" and "of the": "Treaty of
    Lisbon", "Museum of Art"), never over the request's first word nor past punctuation. The classifier labels token pieces and parts of names; values are whole words and names
    (BFCL simple_python: docs/TRAINING.md, "Experiment 2026-12-04 (4)").
    """
    for quoted in _QUOTED.finditer(text, lo, hi):
        if quoted.start(2) < end and start < quoted.end(2) and text[start:end].strip():
            return quoted.group(2).strip()  # a run inside quotes: the quoted value
    while start < end and text[start].isspace():  # a token's leading space is no part of its word
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    while start > lo and not text[start - 1].isspace():
        start -= 1
    while end < hi and not text[end].isspace():
        end += 1
    a, b = _strip_word(text, start, end)
    if a < b and text[a].isupper():
        while b == end and (right := re.match(r"\s+(?:(?:of|of the|de)\s+)?(?!I\b)([A-Z]\S*)", text[b:hi])):
            b, end = _strip_word(text, b + right.start(1), b + right.end())[1], b + right.end()
        while left := re.search(r"(\S+)\s+$", text[lo:a]):
            word = left.group(1)
            if not text[lo : lo + left.start(1)].strip() or not word[0].isupper() or not word[-1].isalnum():
                break
            a = lo + left.start(1)
    return text[a:b].strip()


def token_pieces(tokenizer: Any, input_ids: list[int]) -> list[str]:
    """The text of each of the ``P`` tokens ``input_ids``, joining to the prompt's text.

    A character of several UTF-8 bytes ("ó", "函") may span byte tokens, and each of those decodes alone to
    U+FFFD; such a run of tokens (up to 4, the longest UTF-8 character) is decoded together and its text given
    to its last token (the others get ``""``), so that no value copied from the request holds U+FFFD.

    Returns:
        ``P`` strings.
    """
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
    model: Any, tokenizer: Any, input_ids: list[int], tools: list[dict[str, Any]]
) -> Labelling | None:
    """Label every token of the prompt with the binding classifier (one encoder pass over its ``P`` tokens).

    Args:
        model: a checkpoint with a copy head (``model.copy_model.DiffusionGemmaWithCopyHead``).
        tokenizer: its tokenizer.
        input_ids: the turn's prompt ids (:meth:`model.chat.ChatModel.encode`).
        tools: the OpenAI-style tools rendered in that prompt, in order.

    Returns:
        The :class:`Labelling`, or ``None`` for a model without a copy head, no tools, no user message, or a
        prompt that holds no declaration verbatim.
    """
    head = getattr(model, "copy_head", None)
    if head is None or not tools or not input_ids:
        return None
    pieces = token_pieces(tokenizer, input_ids)
    ends = list(itertools.accumulate(len(p) for p in pieces))
    prompt = "".join(pieces)
    keys = declared_keys(prompt, tools)
    user = last_user_span(prompt)
    if not keys or user is None or user[0] >= user[1]:
        return None
    ids = torch.tensor([input_ids], dtype=torch.long, device=model.device)
    with torch.no_grad():
        hidden = hf.encoder_states(model, ids)
        memory = head.new_memory(ids, hidden)
        decl = hidden[:, [bisect.bisect_right(ends, end - 1) for (_, _, _, end) in keys]]
        logits = head.binding_logits(memory.keys[:, : len(input_ids)], decl)[0]
    return Labelling(prompt, ends, user, keys, logits.float().log_softmax(-1))


def binding_runs(
    model: Any, tokenizer: Any, input_ids: list[int], tools: list[dict[str, Any]]
) -> dict[tuple[str, str], list[str]]:
    """The runs of request words the binding classifier labels with each declared parameter.

    Args:
        model, tokenizer, input_ids, tools: as in :func:`label_request`; a model without a copy head gives
            ``{}``.

    Returns:
        ``{(tool name, parameter): [text, ...]}``: the texts of the contiguous runs of request tokens labelled
        with each parameter, in request order (widened to whole words, stripped); parameters with no labelled
        token are left out, as are tools whose declaration the prompt does not hold verbatim. One encoder pass
        over the ``P`` prompt tokens.
    """
    labelling = label_request(model, tokenizer, input_ids, tools)
    return {} if labelling is None else labelling.runs()
