"""Call plans (:mod:`model.binding`): a request that asks for several calls gets them, one constrained call each.

The tiny checkpoint writes one call and stops, even where the request lists several values for one parameter
("for owner Wen Wilson, Sara Garcia and Anya Nakamura") or asks two tools for something ("... and also get
the weather in Paris"). The binding already reads those values; a plan turns them into the turn's calls, in
the order the request states them, and the constraint then allows exactly that sequence
(:func:`model.constraints.grammar.tool_call_grammar` with ``planned_calls=True``):

* a parameter *listed* in the request (:func:`listed_values`: runs of a free string parameter, or the
  numbers of a written list given to a number parameter, joined only by commas and "and") is one call per
  item, the tool's other bound values shared by every call; two listed parameters of one tool with as many
  items each are zipped ("Taylor Swift and Maroon 5 ... 20 and 15 minutes respectively");
* several tools, each with a bound value no other tool holds, are one call each (:func:`plan_calls`).

Figures: docs/TRAINING.md, "Experiment 2026-12-05".
"""

from __future__ import annotations

import re
from typing import Any

from model.binding.labelling import _MONTH_NAMES, Labelling, whole
from model.binding.rules import _base_type, _first_of_pair, _is_free_string, _is_number, pin_bound_values
from model.constraints.grammar import named_tool

#: A month name right before a number: "July 20, 2022" is a date, no list of 20 and 2022.
_DATE_BEFORE = re.compile(rf"(?i)\b{_MONTH_NAMES}\.?\s+$")
#: What stands between two items of a list the request writes: a comma, "and", "or", ", and", "&", with the
#: item's preposition again ("in Berlin and in Paris").
_ITEM_GAP = re.compile(
    r"(?i)\s*(?:,\s*(?:and\s+|or\s+)?|(?:and|or|&)\s+)(?:(?:in|at|for|on|to|from|of|near)\s+(?:the\s+)?)?"
)


def _chain(request: str, texts: list[str]) -> list[str]:
    """The longest run of ``texts`` (in request order) that the request writes as one list: consecutive
    occurrences separated only by :data:`_ITEM_GAP`, the last two by "and", "or" or "&" as English writes a
    list ("A, B and C"; "Miami, Florida" is one place); ``[]`` when no two are."""
    found, at = [], 0
    for text in texts:
        start = request.find(text, at)
        if start < 0:
            return []
        found.append((start, start + len(text), text))
        at = start + len(text)
    best: list[str] = []
    chain: list[str] = []
    for i, (start, _end, text) in enumerate(found):
        if chain and _ITEM_GAP.fullmatch(request, found[i - 1][1], start):
            chain.append(text)
        else:
            chain = [text]
        ends = len(chain) >= 2 and re.search(r"(?i)\b(?:and|or)\b|&", request[found[i - 1][1] : start])
        if ends and len(chain) > len(best):
            best = list(chain)
    return best


def listed_values(
    runs: dict[tuple[str, str], list[str]],
    specs: list[Any],
    labelling: Labelling,
    taken: set[int] | frozenset[int] = frozenset(),
) -> dict[tuple[str, str], list[str]]:
    """The parameters the request gives a list of values for, one call each: ``{(tool, parameter): [item,
    ...]}``, items in request order.

    * A free string parameter whose runs include at least two the request writes as one list ("Wen Wilson,
      Sara Garcia and Anya Nakamura"), none of them a run of another parameter of the tool (as "Apple and
      Samsung" are for ``company1`` and ``company2``), the parameter none of an ordered pair
      (:func:`model.binding.rules._first_of_pair`) and the list not the two ends of "between X and Y":
      those runs.
    * A number parameter that :func:`model.binding.assign_numbers` gave one number of a list the request
      writes (:meth:`Labelling.number_lists`: "5, 10 and 15"), when no other number parameter of its tool got
      a number of that list and no list parameter took it (``taken``: indexes into
      :meth:`Labelling.numbers`): the list's numbers (an ``integer`` parameter's whole ones only); a list
      that starts right after a month name is a date ("July 20, 2022"), none.

    A tool with a list (``array``) parameter lists nothing: a list the request writes is that parameter's
    value, in one call.

    Args:
        runs: :func:`model.binding.typed_runs`' result (after :func:`model.binding.assign_numbers`, before
            :func:`model.binding.one_string` keeps one run per string).
        specs: the turn's ``model.constraints.schema.ToolSpec`` list.
        labelling: the same prompt's :class:`Labelling`.
        taken: numbers already given to a list parameter.
    """
    request = labelling.request
    numbers = labelling.numbers()
    lists = [
        js
        for js in labelling.number_lists()
        if not set(js) & set(taken)
        and not _DATE_BEFORE.search(labelling.prompt, 0, labelling.number_span(js[0])[0])
    ]
    out: dict[tuple[str, str], list[str]] = {}
    for spec in specs:
        props = (spec.parameters or {}).get("properties")
        if not isinstance(props, dict) or any(
            isinstance(s, dict) and s.get("type") == "array" for s in props.values()
        ):
            continue  # a tool with a list parameter takes a list there, in one call
        for name, sub in props.items():
            key = (spec.name, name)
            if _is_free_string(sub) and len(runs.get(key, [])) >= 2:
                items = _chain(request, runs[key])
                others = {t for n in props if n != name for t in runs.get((spec.name, n), [])}
                paired = any(_first_of_pair(name, n) for n in props if n != name)
                between = bool(items) and re.search(
                    rf"(?i)\bbetween\s+(?:the\s+)?{re.escape(items[0])}", request
                )
                if items and not paired and not between and not others & set(items):
                    out[key] = items
        given = {
            name: runs[(spec.name, name)][0]
            for name, sub in props.items()
            if _is_number(sub) and len(runs.get((spec.name, name), [])) == 1
        }
        for js in lists:
            texts = [numbers[j][0] for j in js]
            holders = [name for name, text in given.items() if text in texts]
            fits = len(holders) == 1 and (_base_type(props[holders[0]]) == "number" or all(map(whole, texts)))
            if fits and len(set(texts)) == len(texts):
                out[(spec.name, holders[0])] = texts
    return out


def _first_at(request: str, texts: list[str]) -> int:
    """Where the request first states any of ``texts`` (its length when it states none)."""
    found = [request.find(t) for t in texts]
    return min((p for p in found if p >= 0), default=len(request))


def plan_calls(
    specs: list[Any],
    spans: dict[tuple[str, str], str],
    listed: dict[tuple[str, str], list[str]],
    labelling: Labelling,
    tool_choice: Any = "auto",
) -> list[Any] | None:
    """The turn's calls when the binding reads several from the request, as pinned specs in call order (one
    :func:`model.binding.pin_bound_values` tool per call; names repeat for parallel calls); ``None`` when it
    reads one call or none (the constraint then works as without a plan).

    Args:
        specs: the turn's ``model.constraints.schema.ToolSpec`` list (after :func:`model.binding.number_arrays`).
        spans: ``{(tool, parameter): text}``, the values bound to one text.
        listed: :func:`listed_values`' result; a tool's listed parameters must have as many items each, else
            they are left as ``spans`` binds them.
        labelling: the same prompt's :class:`Labelling` (for the request's order).
        tool_choice: the turn's ``tool_choice``; a named tool is the only one a plan calls.
    """
    by_tool: dict[str, dict[str, str]] = {}
    for (tool, name), text in spans.items():
        by_tool.setdefault(tool, {})[name] = text
    for (tool, name), items in listed.items():
        by_tool.setdefault(tool, {}).setdefault(name, items[0])
    named = named_tool(tool_choice)
    tools = [s for s in specs if s.name in by_tool and named in (None, s.name)]
    if len(tools) > 1:  # several tools: each must hold a value no other tool holds
        held = {s.name: set(by_tool[s.name].values()) for s in tools}
        if any(not held[s.name] - set().union(*(held[o.name] for o in tools if o is not s)) for s in tools):
            return None
    request = labelling.request
    order = sorted(tools, key=lambda s: _first_at(request, list(by_tool[s.name].values())))
    plan = []
    for spec in order:
        values = by_tool[spec.name]
        varying = {name: items for (tool, name), items in listed.items() if tool == spec.name}
        counts = {len(items) for items in varying.values()}
        n = counts.pop() if len(counts) == 1 else 1
        for i in range(n):
            call = {**values, **({name: items[i] for name, items in varying.items()} if n > 1 else {})}
            pinned, _ = pin_bound_values([spec], {(spec.name, k): v for k, v in call.items()})
            plan.extend(pinned)
    return plan if len(plan) > 1 else None
