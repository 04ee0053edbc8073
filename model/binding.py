"""Bound values: the copy head's binding classifier picks, before a tool-call turn, which words of the user's
request fill which declared parameter, and the turn's constraint then allows exactly those words there.

The copy head (:mod:`model.copy_head`) is trained with dense binding supervision: every token of the last user
message is labelled with the declared parameter whose value it states, or "none", scored against the encoder's
state at that parameter's name in the declaration (:meth:`model.copy_head.CopyHead.binding_logits`; the labels
come from :mod:`model.training.labels`). On held-out requests that classifier gives the right span more often
than the denoising loop copies it (docs/TRAINING.md, "Bound values"), so a turn can use it as a constraint:

1. encode the prompt once and label each token of the last user message (argmax over "none" and the declared
   parameters of every tool);
2. the labelled tokens of each parameter form runs, widened to whole words (:func:`binding_runs`); the
   request's numbers are shared out one to one among each tool's labelled number parameters by the
   classifier's posteriors (:func:`assign_numbers`; a percentage is read as a fraction); a number parameter
   keeps only the numbers its runs spell (:func:`typed_runs`); a parameter left with one run is bound to its
   text; the lists of numbers the request writes go to the list parameters, and any other list may hold
   only the request's numbers (:func:`number_arrays`);
3. the turn's *constraint* (never the prompt the model reads) then follows the binding
   (:func:`pin_bound_values`):

   * a bound string parameter allows only its text (``enum: [text]``), and also the ISO form of a spoken date
     (``December 16, 2022`` -> ``2022-12-16``); a bound integer or number parameter allows only the number its
     text spells; a bound ``enum`` parameter allows only the option its text names as a whole word ("in metric
     units" -> ``metric``); each only when the parameter's own schema accepts the value;
   * a bound parameter becomes required, and an optional parameter no request word is bound to is left out,
     in every tool with at least one bound parameter;
   * when any parameter is bound, only the tools with a bound parameter can be called (a named
     ``tool_choice`` keeps its tool);
   * when something is bound and no parameter has several runs, the turn holds one call
     (:func:`single_call`; several runs, as "in Berlin and in Paris", leave parallel calls open).

The model still chooses between the tools left, which of them to call and every value the classifier left
unbound. On the held-out split these rules took exact calls from 0.31 (values only) to 0.59, and BFCL simple_python
from 0.045 to 0.1675 (docs/TRAINING.md, "Experiment 2026-12-03 (4)", "Experiment 2026-12-04", "(2)" and "(3)").
Slot-filling taggers decide binding the same way, from per-token labels (Mesnil et al. 2015, "Using Recurrent
Neural Networks for Slot Filling in Spoken Language Understanding").
"""

from __future__ import annotations

import bisect
import dataclasses
import datetime
import functools
import itertools
import re
from typing import Any

import jsonschema
import torch

from model import hf_compat as hf
from model.constraints.grammar import named_tool
from model.declarations import declared_keys, last_user_span

#: Schema keywords under which a parameter is never pinned: the constraint already fixes or shapes its value.
_KEEP = frozenset({"const", "pattern", "format"})
#: A number as the request spells it (``40``, ``-3``, ``2.5``).
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
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


def single_call(
    runs: dict[tuple[str, str], list[str]],
    arrays: set[tuple[str, str]] | frozenset[tuple[str, str]] = frozenset(),
) -> bool:
    """Whether the binding plans one tool call for the turn: something is bound (a run, or a list of numbers
    held to the request's, whose keys :func:`number_arrays` gives as ``arrays``) and no other parameter is
    labelled on several runs of the request (as "in Berlin and in Paris" would be, a parallel request; a
    list's items are several runs by nature). ``runs``: :func:`binding_runs`' result. The turn's constraint
    then allows one call (``parallel_tool_calls=False``)."""
    return bool(runs or arrays) and all(len(texts) == 1 for key, texts in runs.items() if key not in arrays)


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

    def _span(self, run: list[int]) -> str:
        """The request text of token run ``run``, widened to whole words and stripped."""
        (lo, hi), prompt = self.user, self.prompt
        start = max(self.ends[run[0] - 1] if run[0] else 0, lo)
        end = min(self.ends[run[-1]], hi)
        while start > lo and prompt[start - 1].isalnum() and prompt[start].isalnum():
            start -= 1
        while end < hi and prompt[end].isalnum() and prompt[end - 1].isalnum():
            end += 1
        return prompt[start:end].strip()

    def runs(self) -> dict[tuple[str, str], list[str]]:
        """:func:`binding_runs`' result: the argmax label of each request token, grouped into runs of
        consecutive tokens per parameter, each run's text once, in request order."""
        first, last = self.token_at(self.user[0]), self.token_at(self.user[1] - 1)
        labels = self.logp.argmax(-1).tolist()
        out: dict[tuple[str, str], list[str]] = {}
        for k, (tool, name, _, _) in enumerate(self.keys):
            toks = [i for i in range(first, last + 1) if labels[i] == k + 1]
            runs = [[t] for t in toks[:1]]
            for t in toks[1:]:
                runs[-1].append(t) if t == runs[-1][-1] + 1 else runs.append([t])
            texts = list(dict.fromkeys(t for t in map(self._span, runs) if t))
            if texts:
                out[(tool, name)] = texts
        return out

    def names(self, parameter: str, j: int) -> bool:
        """Whether the request names ``parameter`` right at its ``j``-th number (:meth:`numbers`): its words
        (``initial_velocity`` -> "initial velocity") just before it, joined by ``=``, ``:``, "of", "is" or a
        space ("a=1", "radius of 4", "initial velocity is 10"), or just after it ("7 days"). A name of one or
        two letters counts only before ``=`` or ``:`` ("a" is also a word)."""
        words = [w for w in re.split(r"[_\W]+", parameter) if w]
        if not words:
            return False
        name = r"[\s_]+".join(map(re.escape, words))
        text, (lo, hi) = self.prompt, self.user
        a, b = self._number_spans[j]
        sep = r"\s*[=:]\s*" if len(parameter) <= 2 else r"(?:\s*[=:]\s*|\s+(?:of|is|=)\s+|\s+)"
        before = re.search(rf"(?i)(?<![A-Za-z0-9]){name}{sep}$", text[max(lo, a - 60) : a])
        after = len(parameter) > 2 and re.match(rf"(?i)\s+{name}(?![A-Za-z0-9])", text[b:hi])
        return bool(before or after)

    @functools.cached_property
    def _number_spans(self) -> list[tuple[int, int]]:
        """Character spans of the request's numbers that start a word: ``40``, the ``70`` of ``70kg`` and the
        ``1.75`` of ``1.75m``, not the ``2`` of ``x2``."""
        (lo, hi), prompt = self.user, self.prompt
        spans = []
        for m in _NUMBER.finditer(prompt, lo, hi):
            a, b = m.span()
            if not (a > lo and prompt[a - 1].isalpha()):
                spans.append((a, b))
        return spans

    def percent(self, j: int) -> bool:
        """Whether the request writes its ``j``-th number (:meth:`numbers`) as a percentage ("10%", "10 %")."""
        end = self._number_spans[j][1]
        return re.match(r"\s?%", self.prompt[end : self.user[1]]) is not None

    def number_lists(self) -> list[list[int]]:
        """The lists of numbers the request writes: runs of at least two of :meth:`numbers` (as indexes into
        it) separated only by commas, spaces and "and" ("[10, 15, 12]", "12, 24 and 36"; "] and [" ends a
        list), in request order."""
        spans = self._number_spans
        out: list[list[int]] = []
        for j, (a, _) in enumerate(spans):
            if out and _LIST_GAP.fullmatch(self.prompt, spans[j - 1][1], a):
                out[-1].append(j)
            else:
                out.append([j])
        return [js for js in out if len(js) >= 2]

    def numbers(self) -> list[tuple[str, list[int]]]:
        """The numbers the request spells at the start of a word (``40``, ``70kg``; not ``x2``), in order:
        their text and the indexes of the tokens that hold them."""
        return [
            (self.prompt[a:b], sorted({self.token_at(c) for c in range(a, b)})) for a, b in self._number_spans
        ]


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
    pieces = [tokenizer.decode([i]) for i in input_ids]
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


def typed_runs(
    runs: dict[tuple[str, str], list[str]], specs: list[Any], taken: frozenset[str] | set[str] = frozenset()
) -> dict[tuple[str, str], list[str]]:
    """``runs`` with each ``integer`` or ``number`` top-level parameter of ``specs`` (without an ``enum``) keeping
    only the numbers its runs spell.

    The classifier labels words a number parameter cannot take ("greatest common divisor of 40 and 50" ->
    ``num1``: greatest, common, two, 40); only the numbers are values for it: ``"a=2"`` -> ``"2"``, ``"-3"``, an
    integer parameter only whole ones, each distinct number once, in request order. A number parameter on one
    run that spells no number keeps it (a mention, "rain tomorrow" -> ``days``: :func:`pin_bound_values` makes
    it required and the model writes the number); on several such runs it is left out (its words are no
    value for it, nor the several runs of a parallel request in :func:`single_call`: "the hypotenuse ... two
    sides" -> ``z``). Every other parameter keeps its runs.
    Figures: docs/TRAINING.md, "Experiment 2026-12-04" and "(2)".

    Args:
        runs: :func:`binding_runs`' result, ``{(tool name, parameter): [text, ...]}``.
        specs: the turn's ``model.constraints.schema.ToolSpec`` list.
        taken: numbers (as the request spells them) already given to a list (:attr:`HeldArrays.taken`), no
            value for a number parameter.

    Returns:
        The same shape; ``runs`` is not modified.
    """
    props = {
        (spec.name, name): sub
        for spec in specs
        if isinstance((spec.parameters or {}).get("properties"), dict)
        for name, sub in spec.parameters["properties"].items()
        if isinstance(sub, dict)
    }
    out: dict[tuple[str, str], list[str]] = {}
    for key, texts in runs.items():
        schema = props.get(key, {})
        kind = schema.get("type")
        if kind in ("integer", "number") and "enum" not in schema:
            found = [
                n
                for t in texts
                for n in _NUMBER.findall(t)
                if n not in taken and (kind == "number" or "." not in n)
            ]
            texts = list(dict.fromkeys(found)) or (texts if len(texts) == 1 else [])
            if not texts:
                continue
        out[key] = texts
    return out


def assign_numbers(
    runs: dict[tuple[str, str], list[str]],
    specs: list[Any],
    labelling: Labelling,
    taken: set[int] | frozenset[int] = frozenset(),
) -> dict[tuple[str, str], list[str]]:
    """``runs`` with the request's numbers shared out among each tool's number parameters by the classifier's
    posteriors: a greedy one-to-one assignment.

    The argmax labels leave a number parameter on several numbers or on words only ("the greatest common
    divisor of 40 and 50": ``num1`` on "greatest, common, two, 40", ``num2`` on "50" and "numbers"), though
    the posteriors still rank the numbers. Within each tool, every ``integer`` or ``number`` top-level
    parameter (without an ``enum``) takes part that is required or that the labels put on some request word.
    Each (parameter, number) pair is ranked first by what names it, then by its score, the highest
    log-posterior of the parameter over the number's tokens: pairs the request names (:meth:`Labelling.names`:
    "a=1", "radius of 4", "7 days") come first, then required parameters, then optional ones. Pairs are taken
    in that order, each parameter and each number at most once (an integer parameter takes whole numbers
    only). A parameter that gets a number is bound to it alone (a percentage as :func:`_rate` reads it); the
    others keep their runs; an optional parameter not labelled takes part only where the request names it. Greedy
    assignment as in slot filling with one value per slot; the figures on the held-out split and BFCL are in
    docs/TRAINING.md, "Experiment 2026-12-04 (2)".

    Args:
        runs: :func:`binding_runs`' result, ``{(tool name, parameter): [text, ...]}`` (not modified).
        specs: the turn's ``model.constraints.schema.ToolSpec`` list (types after normalisation: BFCL's
            ``float`` is ``number``).
        labelling: the same prompt's :class:`Labelling`.
        taken: indexes into :meth:`Labelling.numbers` already given to a list (:attr:`HeldArrays.taken`),
            left out.

    Returns:
        The same shape as ``runs``.
    """
    numbers = labelling.numbers()
    column = {(tool, name): k + 1 for k, (tool, name, _, _) in enumerate(labelling.keys)}
    out = dict(runs)
    for spec in specs:
        props = (spec.parameters or {}).get("properties")
        if not isinstance(props, dict) or not numbers:
            continue
        required = set(spec.parameters.get("required") or [])
        pairs = []
        for name, sub in props.items():
            key = (spec.name, name)
            if not isinstance(sub, dict) or key not in column or "enum" in sub:
                continue
            if sub.get("type") not in ("integer", "number"):
                continue
            chosen = key in runs or name in required
            for j, (text, toks) in enumerate(numbers):
                if j not in taken and (sub["type"] == "number" or "." not in text):
                    score = float(labelling.logp[toks, column[key]].max())
                    tier = 0 if labelling.names(name, j) else 1 if name in required else 2
                    if chosen or tier == 0:
                        pairs.append((tier, -score, name, j, text))
        done: set[str] = set()
        used: set[int] = set()
        for _, _, name, j, text in sorted(pairs):
            if name not in done and j not in used:
                done.add(name)
                used.add(j)
                out[(spec.name, name)] = [_rate(text, props[name]) if labelling.percent(j) else text]
    return out


def _rate(text: str, schema: dict[str, Any]) -> str:
    """A percentage's number ``text`` ("10" of "10%") as the value of a parameter with ``schema``: the fraction
    (``"0.1"``) for a ``number`` parameter whose description does not say it takes a percentage, else
    ``text``. Rates in APIs are fractions unless documented otherwise (BFCL simple_python: 17 of the 19
    questions with a "%" want the fraction, and both others describe the parameter "as a percentage")."""
    if schema.get("type") != "number" or re.search(r"(?i)percent", str(schema.get("description", ""))):
        return text
    return repr(float(text) / 100)


@dataclasses.dataclass(frozen=True)
class HeldArrays:
    """:func:`number_arrays`' result.

    Attributes:
        specs: the turn's tools, each list of numbers held to the request's numbers (tools untouched are the
            same objects as before).
        held: ``(tool name, parameter)`` of every list held.
        bound: ``{(tool name, parameter): text}`` of the lists fixed to one list the request writes.
        taken: indexes into :meth:`Labelling.numbers` of the numbers those fixed lists hold.
    """

    specs: list[Any]
    held: set[tuple[str, str]]
    bound: dict[tuple[str, str], str]
    taken: set[int]


def _number_items(schema: Any) -> str | None:
    """``"integer"`` or ``"number"`` for an array schema whose items are numbers of that type with no ``enum``
    or ``const`` (on the array or its items), else ``None``."""
    if not isinstance(schema, dict) or schema.get("type") != "array" or {"enum", "const"} & schema.keys():
        return None
    items = schema.get("items")
    if not isinstance(items, dict) or {"enum", "const"} & items.keys():
        return None
    kind = items.get("type")
    return kind if kind in ("integer", "number") else None


def _accepts(schema: dict[str, Any], value: Any) -> bool:
    """Whether ``schema`` (its ``x-grounded`` mark aside) accepts ``value``."""
    try:
        jsonschema.validate(value, {k: v for k, v in schema.items() if k != "x-grounded"})
    except (jsonschema.exceptions.ValidationError, jsonschema.exceptions.SchemaError):
        return False
    return True


def _fixed_lists(
    arrays: list[tuple[str, dict[str, Any], str, bool]], labelling: Labelling, texts: list[str]
) -> dict[str, tuple[list[int], list[Any]]]:
    """The request's written lists (:meth:`Labelling.number_lists`) given one each, in order, to the tool's
    required lists of numbers, or else to all of them, when the counts agree and each list fits its schema:
    ``{parameter: (number indexes, value)}``; ``{}`` otherwise. ``arrays``: ``(parameter, schema, item type,
    required)`` in declaration order; ``texts``: the request's numbers as :meth:`Labelling.numbers` spells them."""
    lists = labelling.number_lists()
    for group in ([a for a in arrays if a[3]], arrays):
        if not group or len(group) != len(lists):
            continue
        out = {}
        for (name, sub, kind, _), js in zip(group, lists, strict=True):
            if kind == "integer" and any("." in texts[j] for j in js):
                return {}
            value = [int(texts[j]) if kind == "integer" else float(texts[j]) for j in js]
            if not _accepts(sub, value):
                return {}
            out[name] = (js, value)
        return out
    return {}


def number_arrays(specs: list[Any], labelling: Labelling) -> HeldArrays:
    """``specs`` with each top-level list-of-numbers parameter held to the request's numbers.

    The tiny checkpoint fills a list of numbers with numbers it invents, item after item, until the token
    budget runs out (BFCL simple_python: the 20 questions with such a list took 24% of the run's time and none
    was right). The values of a list come from the request, as every other bound value does:

    * when the request writes as many lists of numbers ("[10, 15, 12]", "12, 24, 36 and 48": numbers
      separated only by commas, spaces and "and") as a tool has required list parameters (or list
      parameters), they are given one each in order, and each parameter allows only its list
      (``enum: [[10, 15, 12]]``);
    * any other list may hold only numbers the request spells (:meth:`Labelling.numbers`; an ``integer`` item
      only whole ones), at most as many as the request has.

    A request without a number, an array or item schema with ``enum`` or ``const``, or a list the parameter's
    own schema refuses (``minItems``, ``maxItems``...) leaves the parameter as it is.

    Args:
        specs: the turn's ``model.constraints.schema.ToolSpec`` list (not modified).
        labelling: the same prompt's :class:`Labelling`.

    Returns:
        The :class:`HeldArrays`.
    """
    texts = [text for text, _ in labelling.numbers()]
    out: list[Any] = []
    held: set[tuple[str, str]] = set()
    bound: dict[tuple[str, str], str] = {}
    taken: set[int] = set()
    for spec in specs:
        found = (spec.parameters or {}).get("properties")
        props: dict[str, Any] = found if isinstance(found, dict) else {}
        required = set((spec.parameters or {}).get("required") or [])
        arrays = [
            (name, sub, kind, name in required) for name, sub in props.items() if (kind := _number_items(sub))
        ]
        lists = _fixed_lists(arrays, labelling, texts)
        fixed = {}
        for name, sub, kind, _ in arrays:
            if name in lists:
                js, value = lists[name]
                fixed[name] = {**sub, "enum": [value]}
                bound[(spec.name, name)] = ", ".join(texts[j] for j in js)
                taken.update(js)
                continue
            usable = [t for t in texts if kind == "number" or "." not in t]
            cap = min(len(usable), sub.get("maxItems", len(usable)))
            if usable and sub.get("minItems", 0) <= cap:
                values = list(dict.fromkeys(int(t) if kind == "integer" else float(t) for t in usable))
                fixed[name] = {**sub, "items": {**sub["items"], "enum": values}, "maxItems": cap}
        held.update((spec.name, name) for name in fixed)
        if fixed:
            spec = dataclasses.replace(spec, parameters={**spec.parameters, "properties": {**props, **fixed}})
        out.append(spec)
    return HeldArrays(out, held, bound, taken)


def _spoken_date(text: str) -> str | None:
    """``text`` as an ISO date (``"2022-12-16"``) when it spells one as ``December 16, 2022`` or ``16 December
    2022`` (month names in English, full or abbreviated), else ``None``."""
    for fmt in ("%B %d, %Y", "%d %B %Y", "%b %d, %Y", "%d %b %Y"):
        try:
            return datetime.datetime.strptime(text, fmt).date().isoformat()
        except ValueError:
            continue
    return None


def _pinned(schema: dict[str, Any], text: str) -> dict[str, Any] | None:
    """``schema`` allowing only the value(s) ``text`` states, or ``None`` to leave it as it is."""
    if _KEEP & schema.keys():
        return None
    if "enum" in schema:  # narrowed to the one option the words name, if they name exactly one
        enum = schema["enum"]
        words = set(re.findall(r"[a-z0-9]+", text.lower()))
        named = (
            [o for o in enum if isinstance(o, str) and o.lower() in words] if isinstance(enum, list) else []
        )
        return {**schema, "enum": named} if len(named) == 1 and len(enum) > 1 else None
    kind = schema.get("type")
    values: list[Any]
    if kind == "string":
        iso = _spoken_date(text)
        values = [text] if iso is None else [iso, text]
    elif kind in ("integer", "number"):
        try:
            values = [int(text) if kind == "integer" else float(text)]
        except ValueError:
            return None
    else:
        return None
    ok = [value for value in values if _accepts(schema, value)]
    return {**{k: v for k, v in schema.items() if k != "x-grounded"}, "enum": ok} if ok else None


def _bound_spec(spec: Any, spans: dict[tuple[str, str], str]) -> tuple[Any, int]:
    """One tool's spec under the binding (the rules of the module docstring) and how many values it pins."""
    props = (spec.parameters or {}).get("properties")
    if not isinstance(props, dict):
        return spec, 0
    bound = [name for name in props if (spec.name, name) in spans]
    if not bound:
        return spec, 0
    fixed = {}
    for name in bound:
        new = _pinned(props[name], spans[(spec.name, name)]) if isinstance(props[name], dict) else None
        if new is not None:
            fixed[name] = new
    required = list(spec.parameters.get("required") or [])
    required += [n for n in bound if n not in required]
    props = {n: fixed.get(n, v) for n, v in props.items() if n in required}
    params = {**spec.parameters, "properties": props, "required": required}
    return dataclasses.replace(spec, parameters=params), len(fixed)


def pin_bound_values(
    specs: list[Any], spans: dict[tuple[str, str], str], tool_choice: Any = "auto"
) -> tuple[list[Any], int]:
    """The turn's normalised tools as the constraint should enforce them under the binding ``spans``.

    Args:
        specs: ``model.constraints.schema.ToolSpec`` list (not modified).
        spans: :func:`bound_spans`' result, ``{(tool name, parameter): text}``.
        tool_choice: the turn's ``tool_choice``; a named tool (``{"name": NAME}``, OpenAI's
            ``{"type": "function", "function": {"name": NAME}}``) is never left out.

    Returns:
        ``(specs, pinned)``. In each tool with a bound top-level parameter: a bound string parameter has
        ``enum: [text]`` (plus the ISO date when ``text`` spells a date; ``x-grounded`` dropped: the span is of
        the conversation), a bound integer or number parameter ``enum: [value]`` when ``text`` parses as one,
        a bound ``enum`` parameter the one option ``text`` names as a whole word; a value the parameter's own
        schema refuses, a ``const``/``pattern``/``format`` parameter or another type keeps its schema. Bound
        parameters are added to ``required`` and optional unbound ones are removed. When ``spans`` binds
        anything, tools without a bound parameter are left out (except the named one). ``pinned`` counts the
        values fixed. Tools untouched are returned as the same objects.
    """
    out, pinned = [], 0
    for spec in specs:
        new, n = _bound_spec(spec, spans)
        out.append(new)
        pinned += n
    named = named_tool(tool_choice)
    hit = {tool for (tool, _) in spans} & {s.name for s in specs}
    if hit:
        out = [s for s in out if s.name in hit or s.name == named]
    return out, pinned
