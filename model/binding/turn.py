"""One turn's binding (:mod:`model.binding`): the rules applied in order to the classifier's reading of a
request, and a request that asks two tools for something read one clause per tool (:func:`bind_turn`)."""

from __future__ import annotations

import dataclasses
import itertools
import re
from typing import Any

from model.binding import cues, forms, plan, rules
from model.binding.labelling import Labelling


@dataclasses.dataclass(frozen=True)
class TurnBinding:
    """:func:`bind_turn`'s result.

    Attributes:
        specs: the tools the turn's constraint enforces (``model.constraints.schema.ToolSpec``); with
            ``planned``, the calls in order (names may repeat); ``None`` when the binding changes nothing (the
            turn's tools as given).
        parallel: whether the turn may hold several calls (``False`` when the binding reads one).
        planned: whether ``specs`` is a call plan (:func:`model.binding.plan_calls`).
    """

    specs: list[Any] | None
    parallel: bool
    planned: bool


@dataclasses.dataclass(frozen=True)
class _Read:
    """The rules' reading of one request (or clause): what :func:`_read` found."""

    specs: list[Any]
    spans: dict[tuple[str, str], str]
    runs: dict[tuple[str, str], list[str]]
    listed: dict[tuple[str, str], list[str]]
    held: set[tuple[str, str]]
    named: str | None


#: The rules after the classifier's numbers and lists, in the order :func:`_read` applies them: one run per
#: string, then the request's own words (:mod:`model.binding.cues`, :mod:`model.binding.forms`), then flags.
WORD_RULES = (
    rules.one_string,
    cues.named_values,
    cues.place_values,
    cues.unit_systems,
    cues.currencies,
    forms.identifiers,
    forms.emails,
    forms.dates,
    rules.named_flags,
)


def _read(specs: list[Any], labelling: Labelling, tool_choice: Any) -> _Read:
    """The rules of :mod:`model.binding` in order over ``specs`` (normalised) and ``labelling``."""
    arrays = rules.number_arrays(specs, labelling)
    runs = rules.assign_numbers(labelling.runs(), arrays.specs, labelling, arrays.taken)
    numbers = labelling.numbers()
    runs = rules.typed_runs(runs, arrays.specs, {numbers[j][0] for j in arrays.taken})
    runs.update({key: [text] for key, text in arrays.bound.items()})
    listed = plan.listed_values(runs, arrays.specs, labelling, arrays.taken)
    for rule in WORD_RULES:
        runs = rule(runs, arrays.specs, labelling)
    spans = {key: texts[0] for key, texts in runs.items() if len(texts) == 1}
    named = (
        rules.named_tool_of(arrays.specs, labelling) if tool_choice in ("auto", "required", None) else None
    )
    out = arrays.specs
    if named is not None:  # the request names one tool: the turn calls that one only
        out = [s for s in out if s.name == named]
        spans = {key: text for key, text in spans.items() if key[0] == named}
        runs = {key: texts for key, texts in runs.items() if key[0] == named}
        listed = {key: items for key, items in listed.items() if key[0] == named}
    return _Read(out, spans, runs, listed, arrays.held, named)


#: Where a request turns from one task to the next: "and also", "; also", ". Also,", "and then", "Then".
_NEXT_TASK = re.compile(r"(?i)(?:[,;.]\s*|\s+)(?:and\s+)?(?:also|then|additionally)\b,?|;\s+(?=also\b)")


def _clause_tools(specs: list[Any], labelling: Labelling) -> list[tuple[int, int, str]]:
    """The request's clauses that each name one tool, a different one each, when there are at least two:
    ``[(start, end, tool name)]`` as character spans of the prompt, in order; ``[]`` otherwise.

    Clauses are split where the request turns to the next task (:data:`_NEXT_TASK`); a clause names the tool
    its words name best (:func:`model.binding.rules.tool_named_in`, as :func:`model.binding.named_tool_of`
    scores the whole request); a clause that names none joins the one before it."""
    lo, hi = labelling.user
    cuts = [lo] + [m.start() + lo for m in _NEXT_TASK.finditer(labelling.request)] + [hi]
    clauses: list[tuple[int, int, str | None]] = []
    for a, b in itertools.pairwise(cuts):
        words = [w.lower() for w in re.findall(r"[A-Za-z0-9']+", labelling.prompt[a:b])]
        tool = rules.tool_named_in(specs, words)
        if clauses and tool is None:
            clauses[-1] = (clauses[-1][0], b, clauses[-1][2])
        elif clauses and clauses[-1][2] is None:
            clauses[-1] = (clauses[-1][0], b, tool)
        else:
            clauses.append((a, b, tool))
    found = [(a, b, t) for a, b, t in clauses if t is not None]
    if len(found) < 2 or len({t for _, _, t in found}) < len(found):
        return []
    return found


def bind_turn(specs: list[Any], labelling: Labelling, tool_choice: Any = "auto") -> TurnBinding:
    """The turn's constraint under the binding: the rules of :mod:`model.binding` in order, and the call plan
    when the request asks for several calls (:mod:`model.binding.plan`).

    A request whose clauses name two or more tools, one each (:func:`_clause_tools`: "compute the kinetic
    energy with mass 5, and also calculate retirement savings with ..."), is read one clause per tool: each
    clause's words bind that tool's parameters only, and the plan calls each tool in clause order.

    Args:
        specs: the turn's tools, normalised (``model.constraints.schema.ToolSpec``).
        labelling: the prompt's :class:`Labelling`.
        tool_choice: the turn's ``tool_choice``.

    Returns:
        The :class:`TurnBinding`.
    """
    clauses = _clause_tools(specs, labelling) if tool_choice in ("auto", "required", None) else []
    if clauses:
        sequence: list[Any] = []
        for a, b, tool in clauses:
            part = dataclasses.replace(labelling, user=(a, b))
            read = _read([s for s in specs if s.name == tool], part, tool_choice)
            calls = plan.plan_calls(read.specs, read.spans, read.listed, part, tool_choice)
            if (
                calls is None
            ):  # one call of the clause's tool, its values as bound (the model writes the rest)
                calls = rules.pin_bound_values(read.specs, read.spans)[0] if read.spans else read.specs
            sequence += calls
        if len(sequence) > 1:
            return TurnBinding(sequence, True, True)
    read = _read(specs, labelling, tool_choice)
    calls = plan.plan_calls(read.specs, read.spans, read.listed, labelling, tool_choice)
    if calls is not None:
        return TurnBinding(calls, True, True)
    parallel = not rules.single_call(read.runs, read.held)
    if not read.spans:
        return TurnBinding(read.specs if read.held or read.named else None, parallel, False)
    return TurnBinding(rules.pin_bound_values(read.specs, read.spans, tool_choice)[0], parallel, False)
