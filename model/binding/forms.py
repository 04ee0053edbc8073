"""Values with a form of their own (:mod:`model.binding`): dates and identifiers, read from the request by
their shape rather than by the classifier, whose runs hold pieces of them ("2023" of "March 10th, 2023",
"felony" for ``case_number`` beside "CA123456").


The rules take and return what those of :mod:`model.binding.cues` do (its docstring).

Figures: docs/TRAINING.md, "Experiment 2026-12-05".
"""

from __future__ import annotations

import datetime
import re
from typing import Any

from model.binding.labelling import Labelling
from model.binding.rules import _first_of_pair, _is_free_string, called_tools
from model.constraints.schema import pattern_matches

_MONTHS = {
    m: i + 1
    for i, names in enumerate(
        [
            "jan january",
            "feb february",
            "mar march",
            "apr april",
            "may",
            "jun june",
            "jul july",
            "aug august",
            "sep sept september",
            "oct october",
            "nov november",
            "dec december",
        ]
    )
    for m in names.split()
}
_MONTH = r"(?P<month>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(?P<day>\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>\d{4})"
#: The dates a request writes, as ``re`` patterns with ``year``, ``month`` and ``day`` groups.
_DATES = [
    re.compile(r"\b(?P<year>\d{4})-(?P<month>\d{1,2})-(?P<day>\d{1,2})\b"),
    re.compile(r"\b(?P<year>\d{4})/(?P<month>\d{1,2})/(?P<day>\d{1,2})\b"),
    re.compile(r"\b(?P<month>\d{1,2})/(?P<day>\d{1,2})/(?P<year>\d{4})\b"),
    re.compile(rf"(?i)\b{_MONTH}\s*{_DAY},?\s*{_YEAR}\b"),
    re.compile(rf"(?i)\b{_DAY}\s+(?:of\s+)?{_MONTH},?\s*{_YEAR}\b"),
    re.compile(rf"(?i)\b{_YEAR}\s+{_MONTH}\s+{_DAY}\b"),
]
#: Date formats a parameter description may name, and their ``strftime`` forms.
_FORMATS = {
    "yyyy-mm-dd": "%Y-%m-%d",
    "mm-dd-yyyy": "%m-%d-%Y",
    "dd-mm-yyyy": "%d-%m-%Y",
    "mm/dd/yyyy": "%m/%d/%Y",
    "dd/mm/yyyy": "%d/%m/%Y",
    "yyyy/mm/dd": "%Y/%m/%d",
}


def request_dates(request: str) -> list[datetime.date]:
    """The calendar dates ``request`` writes with a year ("2022-06-04", "2022/08/16", "March 10th, 2023", "10th
    December 2022", "2023 April 4th", "Mar.11, 2022"), in request order, each place read once."""
    found: list[tuple[int, int, datetime.date]] = []
    for pattern in _DATES:
        for m in pattern.finditer(request):
            if any(a < m.end() and m.start() < b for a, b, _ in found):
                continue
            month = m.group("month")
            number = int(month) if month.isdigit() else _MONTHS[month.lower()]
            try:
                found.append(
                    (m.start(), m.end(), datetime.date(int(m.group("year")), number, int(m.group("day"))))
                )
            except ValueError:
                continue
    return [d for _, _, d in sorted(found)]


def _date_form(schema: dict[str, Any]) -> str:
    """The ``strftime`` format a date parameter's description names (:data:`_FORMATS`), ISO 8601 by default
    and for ``format: date``."""
    text = str(schema.get("description", "")).lower()
    if schema.get("format") == "date":
        return "%Y-%m-%d"
    return next((fmt for name, fmt in _FORMATS.items() if name in text), "%Y-%m-%d")


def _is_date(name: str, schema: Any) -> bool:
    """Whether parameter ``name`` is a date: a string of ``format: date``, or a free string with ``date`` among
    its name words (``start_date``, ``check_in_date``) or whose description names a date format."""
    words = set(re.split(r"[_\W]+", name.lower()))
    described = (
        any(f in str(schema.get("description", "")).lower() for f in _FORMATS)
        if isinstance(schema, dict)
        else False
    )
    iso = isinstance(schema, dict) and schema.get("type") == "string" and schema.get("format") == "date"
    return iso or (_is_free_string(schema) and ("date" in words or described))


def dates(
    runs: dict[tuple[str, str], list[str]], specs: list[Any], labelling: Labelling
) -> dict[tuple[str, str], list[str]]:
    """``runs`` with each free string date parameter (:func:`_is_date`) of a tool the turn calls bound to a
    date the request writes (:func:`request_dates`), in the format its description names (``MM-DD-YYYY``...;
    ISO 8601 by default): one date parameter takes the first date, several (``start_date``, ``end_date``;
    ``check_in_date``, ``check_out_date``) take the dates in request order, as many as there are.

    Arguments and result as every rule of this module (its docstring).
    """
    found = request_dates(labelling.request)
    if not found:
        return runs
    out = dict(runs)
    for spec, props in called_tools(specs, runs):
        names = [n for n, sub in props.items() if _is_date(n, sub)]
        if len(names) == 2 and _first_of_pair(*names) == names[1]:
            names.reverse()
        for name, day in zip(names, found, strict=False):
            out[(spec.name, name)] = [day.strftime(_date_form(props[name]))]
    return out


#: Words of a parameter name that make it an identifier (``case_number``, ``snp_id``, ``building_id``).
_ID_WORDS = frozenset({"id", "number", "code", "no", "num", "identifier", "docket", "serial", "reference"})
#: An identifier as a request writes it: a quoted value or a word with a digit and a letter ("CA123456",
#: "rs6034464", "B1004", "2022/AL2562"), or of at least five digits ("123456").
_IDENT = re.compile(
    r"""(?x)(['"])(?P<quoted>[^'"\n]*\d[^'"\n]*)\1
    | (?<![\w/.-])(?P<word>(?=[\w/-]*\d)(?=[\w/-]*[A-Za-z])[A-Za-z0-9][\w/-]{2,}|\d{5,})(?![\w/-])"""
)


def _is_identifier(name: str) -> bool:
    """Whether parameter ``name`` names an identifier (a name word of :data:`_ID_WORDS`)."""
    return bool(set(re.split(r"[_\W]+", name.lower())) & _ID_WORDS)


def identifiers(
    runs: dict[tuple[str, str], list[str]], specs: list[Any], labelling: Labelling
) -> dict[tuple[str, str], list[str]]:
    """``runs`` with each free string identifier parameter (a name word of :data:`_ID_WORDS`) of a tool the
    turn calls whose run is no identifier bound to the first identifier the request writes (:data:`_IDENT`)
    (one its ``pattern`` accepts, for a string with a pattern) that no other identifier parameter of the tool
    holds: "case number CA123456" -> ``case_number`` CA123456
    (the classifier gave "felony"); another string parameter bound to that identifier loses it ("for case
    number XYZ123" gave ``location`` XYZ123). Numbers with a unit ("5000m", "10km") are no identifiers.

    Arguments and result as every rule of this module (its docstring).
    """
    found = [
        m.group("quoted") or m.group("word")
        for m in _IDENT.finditer(labelling.request)
        if not re.fullmatch(r"\d+(?:\.\d+)?[a-zA-Z]{1,3}", m.group("quoted") or m.group("word"))
    ]
    if not found:
        return runs
    out = dict(runs)
    for spec, props in called_tools(specs, runs):
        for name, sub in props.items():
            shaped = (
                isinstance(sub, dict)
                and sub.get("type") == "string"
                and set(sub) & {"pattern"}
                and not set(sub) & {"enum", "const", "format"}
            )
            if not (_is_free_string(sub) or shaped) or not _is_identifier(name):
                continue
            fits = [f for f in found if not shaped or pattern_matches(str(sub["pattern"]), f)]
            current = out.get((spec.name, name), [])
            if len(current) == 1 and current[0] in fits:
                continue
            ids = [n for n, o in props.items() if n != name and _is_free_string(o) and _is_identifier(n)]
            held = {t for n in ids for t in out.get((spec.name, n), [])}
            free = [f for f in fits if f not in held]
            if free:
                out[(spec.name, name)] = [free[0]]
                for n, other in props.items():  # another string parameter on the identifier had it wrong
                    if n != name and _is_free_string(other) and out.get((spec.name, n)) == [free[0]]:
                        del out[(spec.name, n)]
    return out


#: An email address as a request writes it (RFC 5322's common form, not every corner of it).
_EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}")


def emails(
    runs: dict[tuple[str, str], list[str]], specs: list[Any], labelling: Labelling
) -> dict[tuple[str, str], list[str]]:
    """``runs`` with each free string email parameter (``email`` or ``mail`` in its name or its description) of
    a tool the turn calls whose run is no address bound to the next address the request writes that no other
    parameter of the tool holds ("Email jane@corp.com" gave ``to`` "to jane@corp.com").

    Arguments and result as every rule of this module (its docstring).
    """
    found = _EMAIL.findall(labelling.request)
    if not found:
        return runs
    out = dict(runs)
    for spec, props in called_tools(specs, runs):
        for name, sub in props.items():
            about = name + " " + str(sub.get("description", "") if isinstance(sub, dict) else "")
            if not _is_free_string(sub) or not re.search(r"(?i)e-?mail", about):
                continue
            current = out.get((spec.name, name), [])
            if len(current) == 1 and current[0] in found:
                continue
            held = {t for n in props if n != name for t in out.get((spec.name, n), [])}
            free = [f for f in found if f not in held]
            if free:
                out[(spec.name, name)] = [free[0]]
    return out
