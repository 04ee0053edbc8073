"""Typed candidates: the values a request states that a parameter's JSON Schema can take, read by the schema's type
alone (no phrase rules): numbers within bounds, named ``enum`` options, dates (``dateparser``), e-mail addresses,
words matching a ``pattern``, lists of numbers or words; spelled numbers by ``text2num``."""

from __future__ import annotations

import calendar
import datetime
import functools
import math
import re
from typing import Any

import jsonschema

from schema import grammar_format_checker
from schema.regex import pattern_matches

_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
#: What separates the items of a list the request writes in words: a comma, "and", or both.
_LIST_SEPARATOR = re.compile(r"\s*,\s*(?:and\s+)?|\s+and\s+")
#: A date as dateparser finds it must name a month or write a numeric date; "3 days" (relative) is no date.
_MONTHS = "|".join(m for m in (*calendar.month_name[1:], *calendar.month_abbr[1:]))
_DATE_SHAPE = re.compile(rf"(?i)\b(?:{_MONTHS})\b|\d[-/.]\d")
_DAY_MONTH = {"REQUIRE_PARTS": ["day", "month"]}


def non_null(schema: Any) -> Any:
    """A nullable schema's other branch (``anyOf``/``oneOf`` with ``{"type": "null"}``), outer keywords kept; any
    other schema as it is."""
    if not isinstance(schema, dict):
        return schema
    for word in ("anyOf", "oneOf"):
        branches = schema.get(word)
        if isinstance(branches, list) and len(branches) == 2 and {"type": "null"} in branches:
            other = branches[1 - branches.index({"type": "null"})]
            if isinstance(other, dict):
                return {k: v for k, v in schema.items() if k != word} | other
    return schema


def base_type(schema: Any) -> Any:
    """A schema's type without ``null`` (of :func:`non_null`); ``None`` when it has none."""
    schema = non_null(schema)
    kind = schema.get("type") if isinstance(schema, dict) else None
    if isinstance(kind, list):
        rest = [k for k in kind if k != "null"]
        return rest[0] if len(rest) == 1 else None
    return kind


def accepts(schema: dict[str, Any], value: Any) -> bool:
    """Whether ``schema`` (its ``x-grounded`` mark aside) accepts ``value``, string formats as the tool-call grammar
    writes them (a candidate becomes an ``enum`` that drops the ``format``: it must satisfy it already)."""
    try:
        jsonschema.validate(
            value,
            {k: v for k, v in schema.items() if k != "x-grounded"},
            format_checker=grammar_format_checker(),
        )
    except (jsonschema.exceptions.ValidationError, jsonschema.exceptions.SchemaError):
        return False
    return True


@functools.lru_cache(maxsize=256)
def _found_dates(request: str) -> tuple[tuple[int, int, datetime.datetime], ...]:
    from dateparser.search import search_dates

    out, pos, more = [], 0, True
    while more:  # search_dates may stop after a date in a list: the rest of the request is searched again
        more = False
        for text, when in search_dates(request[pos:], languages=["en"], settings=_DAY_MONTH) or []:
            if not text or (at := request.find(text, pos)) < 0:
                continue
            if _DATE_SHAPE.search(text):
                out.append((at, at + len(text), when))
            pos, more = at + len(text), True
    return tuple(out)


def date_spans(request: str) -> list[tuple[int, int]]:
    """Character spans of the dates ``request`` writes with a day and a month (not "3 days")."""
    return [(a, b) for a, b, _ in _found_dates(request)]


def dated(request: str) -> list[tuple[str, int, int]]:
    """The dates of :func:`date_spans` in ISO 8601 and their spans."""
    return [(w.date().isoformat(), a, b) for a, b, w in _found_dates(request)]


def whole_date(text: str) -> str | None:
    """The ISO date when the whole of ``text`` is one date (:func:`date_spans`), else ``None``."""
    found = _found_dates(text)
    if len(found) != 1 or text[: found[0][0]].strip(" ,.") or text[found[0][1] :].strip(" ,."):
        return None
    return found[0][2].date().isoformat()


def spelled_numbers(request: str) -> list[str]:
    """The numbers ``request`` spells in words (``"3"`` for "three"), not those in digits."""
    from text_to_num import alpha2digit

    digits = set(re.findall(r"\d+(?:\.\d+)?", request))
    converted = alpha2digit(request, "en")
    return [n for n in dict.fromkeys(re.findall(r"\d+(?:\.\d+)?", converted)) if n not in digits]


def number_value(text: str, kind: str) -> int | float | None:
    """``text`` as a JSON number of ``kind`` (``"integer"``: whole only), or ``None``."""
    try:
        value: int | float = int(text) if kind == "integer" else float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def named_options(schema: dict[str, Any], request: str) -> list[Any]:
    """The string ``enum`` options ``request`` names as whole words (case-insensitive; ``_`` and ``-`` as spaces),
    in enum order."""
    options = schema.get("enum")
    if not isinstance(options, list):
        return []
    text = f" {' '.join(re.findall(r'[a-z0-9]+', request.lower()))} "
    out = []
    for option in options:
        if isinstance(option, str) and (words := " ".join(re.findall(r"[a-z0-9]+", option.lower()))):
            if f" {words} " in text:
                out.append(option)
    return out


#: The ``format`` values read from a request; other formats take the tagger's spans (a ``date-time`` too: a
#: request's date and time carry no UTC offset, which RFC 3339 requires).
READ_FORMATS = ("date", "email")


def shaped_strings(schema: dict[str, Any], request: str) -> list[str]:
    """The request's e-mail addresses (``format: email``) or whole words matching ``pattern`` that ``schema``
    accepts."""
    if schema.get("format") == "email":
        found = _EMAIL.findall(request)
    elif "pattern" in schema:
        words = [w.strip(".,;:!?()[]\"'") for w in request.split()]
        found = [w for w in dict.fromkeys(words) if w and pattern_matches(str(schema["pattern"]), w)]
    else:
        return []
    return [v for v in found if accepts(schema, v)]


def item_type(schema: Any) -> str | None:
    """An array schema's item type, ``"integer"``, ``"number"`` or ``"string"`` (no ``enum``); else ``None``."""
    if not isinstance(schema, dict) or base_type(schema) != "array" or "enum" in schema:
        return None
    items = schema.get("items")
    kind = base_type(items) if isinstance(items, dict) and "enum" not in items else None
    return kind if kind in ("integer", "number", "string") else None


def written_list(text: str) -> list[str]:
    """The items of a list written as ``text`` ("pasta, soup and bread")."""
    return [item for item in _LIST_SEPARATOR.split(text.strip()) if item and item.lower() != "and"]
