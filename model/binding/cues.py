"""Cue words (:mod:`model.binding`): where the request's own words say which value a parameter takes, over the
classifier's pick. A place parameter takes the name after "in", "near", "at" ("in Palo Alto"; the classifier
gave ``"olive"``); one pair of places takes "from X to Y" or "between X and Y" in that order.


Every rule here takes ``(runs, specs, labelling)`` and returns a new ``runs``: ``runs`` the binding so far,
``{(tool name, parameter): [text, ...]}`` (not modified); ``specs`` the turn's
``model.constraints.schema.ToolSpec`` list; ``labelling`` the same prompt's
:class:`model.binding.labelling.Labelling`. Each binds only tools the turn calls
(:func:`model.binding.rules.called_tools`); :func:`model.binding.bind_turn` applies them in order.

Figures: docs/TRAINING.md, "Experiment 2026-12-05".
"""

from __future__ import annotations

import re
from typing import Any

from model.binding.labelling import Labelling
from model.binding.rules import (
    _declared_words,
    _first_of_pair,
    _is_free_string,
    _is_number,
    _same_word,
    called_tools,
)

#: Words of a parameter name that make it a place (``location``, ``city_name``, ``start_location``).
_PLACE_WORDS = frozenset(
    "location loc city town place country county state region address destination origin venue".split()
)
#: Words of a place parameter's name that want the place without its region ("Tokyo" of "Tokyo, Japan").
_CITY_WORDS = frozenset({"city", "town"})
#: Words of a place parameter's name that want the region of "Tokyo, Japan" beside a city parameter.
_REGION_WORDS = frozenset({"country", "state", "region", "county"})
#: Capitalised words that follow "in" but name no place (months, days, languages, scales, units).
_NOT_PLACES = frozenset(
    """january february march april may june july august september october november december monday tuesday
    wednesday thursday friday saturday sunday english spanish french german italian portuguese chinese japanese
    dutch russian arabic hindi korean python java javascript celsius fahrenheit kelvin usd eur gbp i""".split()
)
#: A name as the request writes it: capitalised words ("Palo Alto", "U.S", "D.C."), joined by "of"/"de"
#: ("Bay of Biscay"), with a region after a comma ("Denver, Colorado", "Boston, MA").
_NAME = r"[A-Z][\w.'-]*(?:\s+(?:(?:of|de|del|la|le)\s+)?[A-Z][\w.'-]*)*"
_PLACE = re.compile(rf"\b(in|near|around|within|at|from|to|of)\s+(?:the\s+)?({_NAME}(?:,\s*{_NAME})?)")
_BETWEEN = re.compile(
    rf"\bbetween\s+(?:the\s+)?({_NAME}(?:,\s*{_NAME})?)\s*,?\s+and\s+({_NAME}(?:,\s*{_NAME})?)"
)
#: How strongly each preposition says "a place follows" (lower first).
_RANK = {"in": 0, "near": 0, "around": 0, "within": 0, "at": 1, "from": 2, "to": 2, "of": 3}


def _bare(value: str) -> str:
    """``value`` without the comma, full stop or possessive it ends with ("Chicago.", "Stradivarius'",
    "Google's") nor the next sentence ("San Jose. Show"); an abbreviation keeps its stop ("D.C.", "U.S.")."""
    value = re.split(r"(?<=[a-z])\.\s+(?=[A-Z])", value)[0].rstrip(
        ","
    )  # "San Jose. Show me": a sentence ends
    if value.endswith(".") and "." not in value.split()[-1][:-1]:
        value = value[:-1]
    return re.sub(r"(?:'s?|’s?)$", "", value)


def _place_words(name: str) -> set[str]:
    return set(re.split(r"[_\W]+", name.lower())) & _PLACE_WORDS


def place_names(request: str) -> list[tuple[int, str, str, int]]:
    """The places the request names after a preposition: ``(rank, preposition, name, offset)`` in request order
    (rank: :data:`_RANK`); names whose first word is a month, a day, a language or a unit are left out."""
    out = []
    for m in _PLACE.finditer(request):
        prep, name = m.group(1).lower(), _bare(m.group(2))
        if name.split()[0].lower().strip(".,") in _NOT_PLACES:
            continue
        out.append((_RANK[prep], prep, name, m.start(2)))
    return out


def _part(name: str, param: str, props: dict[str, Any]) -> str:
    """The part of place ``name`` ("Tokyo, Japan") that parameter ``param`` takes in a tool with a city
    parameter and a country, state or region one: the city for the city parameter ("Tokyo"), the region for
    the other ("Japan"); else the whole name."""
    if ", " not in name:
        return name
    city, region = name.split(", ", 1)
    kinds = set().union(*(_place_words(p) for p in props))
    if not (kinds & _CITY_WORDS and kinds & _REGION_WORDS):
        return name
    words = _place_words(param)
    return city if words & _CITY_WORDS else region if words & _REGION_WORDS else name


def place_values(
    runs: dict[tuple[str, str], list[str]], specs: list[Any], labelling: Labelling
) -> dict[tuple[str, str], list[str]]:
    """``runs`` with each free string place parameter (a name word of :data:`_PLACE_WORDS`) of a tool the turn
    calls (one with a parameter on a run) bound to a place the request names (:func:`place_names`):

    * a parameter the classifier put on one of those places keeps it, or the whole place it starts ("Boston"
      of "Boston, Massachusetts"), as :func:`_part` reads it ("Tokyo" of "Tokyo, Japan" beside a country
      parameter);
    * any other takes the most strongly cued place ("in" before "at" before "from"), the first of those, that
      no other string parameter of the tool holds.
    * Two place parameters that form an ordered pair (``start_location``/``end_location``) take "from X ... to
      Y" or "between X and Y" in that order.
    * A city parameter takes the city of "Tokyo, Japan", a country or state parameter beside it the region.

    Arguments and result as every rule of this module (its docstring).
    """
    request = labelling.request
    places = place_names(request)
    if not places and not _BETWEEN.search(request):
        return runs
    out = dict(runs)
    for spec, props in called_tools(specs, runs):
        strings = [n for n, sub in props.items() if _is_free_string(sub)]
        names = [n for n in strings if _place_words(n)]
        pair = next(
            ((a, b) for i, a in enumerate(names) for b in names[i + 1 :] if _first_of_pair(a, b)), None
        )
        if pair is not None:
            first = _first_of_pair(*pair)
            head, tail = pair if first == pair[0] else pair[::-1]
            m = _BETWEEN.search(request)
            ends = (_bare(m.group(1)), _bare(m.group(2))) if m else None
            if ends is None:
                start = next((p for _, prep, p, _ in places if prep == "from"), None)
                end = next((p for _, prep, p, _ in places if prep == "to"), None)
                ends = (start, end) if start and end else None
            if ends:
                out[(spec.name, head)] = [_part(ends[0], head, props)]
                out[(spec.name, tail)] = [_part(ends[1], tail, props)]
            names = [n for n in names if n not in pair]
        for name in names:
            current = out.get((spec.name, name), [])
            held = {t for n in strings if n != name for t in out.get((spec.name, n), [])}
            found = [
                p
                for _, _, p, _ in places
                if current and (current[0] in (p, _part(p, name, props)) or p.startswith(current[0] + ", "))
            ]
            if found:  # the classifier picked a place the request names: kept, whole ("Boston, MA"), in part
                out[(spec.name, name)] = [_part(found[0], name, props)]
                continue
            free = [p for p in places if _part(p[2], name, props) not in held]
            if free:
                out[(spec.name, name)] = [_part(min(free, key=lambda p: (p[0], p[3]))[2], name, props)]
    return out


#: Words of a parameter name that say nothing of what the value is about (``team_name``, ``crime_type``).
_GENERIC = frozenset(
    "name names type kind id ids number value data info information detail details of the".split()
)
#: A value right after the word that names its parameter: quoted ("game 'Overwatch'") or a name ("company
#: Google", "player, Serena Williams"), after an optional "named", "called", ":" or "=".
_AFTER = re.compile(
    rf"(?:\s*,\s*|\s+(?:named|called)\s+|\s*[:=]\s*|\s+)(?:(['\"])([^'\"\n]{{1,80}}?)\1|({_NAME}))"
)
#: A value right before the word that names its parameter: a name ("Santa Clara county") or one word
#: ("theft crimes", "2022 season", "luxury room").
_BEFORE = re.compile(rf"(?:({_NAME})|\b([a-z0-9][\w-]*))\s+$")


def _cued(request: str, head: str, skip: set[str]) -> str | None:
    """The value the request writes next to word ``head`` (in some form: "crimes" for ``crime``): after it
    (:data:`_AFTER`) or, failing that, before it (:data:`_BEFORE`); values made only of words in ``skip``
    (lower case) do not count. A capitalised ``head`` past the request's first word is part of a name, and the
    value is that name ("Premier League", "The British Museum", "Metropolitan Museum of Art"). ``None`` when the request does not write
    ``head`` or writes it twice."""
    hits = [m for m in re.finditer(r"[A-Za-z]+", request) if _same_word(m.group().lower(), head)]
    if len(hits) != 1:
        return None
    m = hits[0]
    if m.group()[0].isupper() and request[: m.start()].strip():  # "Premier League": the word is in the name
        left = re.search(rf"(?:{_NAME}\s+)?$", request[: m.start()])
        right = re.match(r"(?:\s+(?:of\s+(?:the\s+)?)?[A-Z][\w.'-]*)*", request[m.end() :])
        name = request[
            m.start() - len(left.group()) if left else m.start() : m.end()
            + len(right.group() if right else "")
        ]
        return _bare(name.strip())
    after = _AFTER.match(request, m.end())
    value = (after.group(2) or after.group(3)) if after else None
    if value is None or set(re.findall(r"[a-z0-9]+", value.lower())) <= skip:
        before = _BEFORE.search(request[: m.start()])
        value = (before.group(1) or before.group(2)) if before else None
    if value is None or set(re.findall(r"[a-z0-9]+", value.lower())) <= skip:
        return None
    return _bare(value)


def _cued_in(text: str, head: str) -> bool:
    """Whether ``text`` holds word ``head`` in some form ("artist Beyonce" holds ``artist``)."""
    return any(_same_word(w, head) for w in re.findall(r"[a-z]+", text.lower()))


def named_values(
    runs: dict[tuple[str, str], list[str]], specs: list[Any], labelling: Labelling
) -> dict[tuple[str, str], list[str]]:
    """``runs`` with each free string parameter that is no place (:func:`place_values` binds those) of a tool
    the turn calls bound to the value the request writes next to the parameter's own name word: "the company
    Google" -> ``company_name`` Google, "the online game 'Overwatch'" -> ``game`` Overwatch, "theft crimes" ->
    ``crime_type`` theft. The name word is the last of the parameter's words that says what it is about
    (:data:`_GENERIC` words left out); a value another string or number parameter of the tool holds is left to
    it ("a radius of 5 units": ``radius`` holds 5, no ``unit``; a place
    parameter's aside: :func:`place_values`, applied after this rule, binds those again), and a run
    that starts with the value and goes on ("Reminder about the invoice" for "note Reminder about ...") is
    kept unless it holds the name word itself ("artist Beyonce").

    Arguments and result as every rule of this module (its docstring).
    """
    request = labelling.request
    out = dict(runs)
    for spec, props in called_tools(specs, runs):
        skip = _declared_words(spec)
        for name, sub in props.items():
            words = [w for w in re.split(r"[_\W]+", name.lower()) if w and w not in _GENERIC]
            words = words or (
                [name.lower()] if re.fullmatch(r"[a-z]{3,}", name.lower()) else []
            )  # "name Bob"
            if not _is_free_string(sub) or not words or _place_words(name):
                continue
            value = _cued(request, words[-1], skip)
            if value is None:
                continue
            held = {
                t
                for n, other in props.items()
                if n != name and (_is_number(other) or (_is_free_string(other) and not _place_words(n)))
                for t in out.get((spec.name, n), [])
            }
            current = out.get((spec.name, name), [])
            longer = (
                len(current) == 1 and current[0].startswith(value) and not _cued_in(current[0], words[-1])
            )
            if value not in held and not longer:  # "Reminder about the invoice" keeps its words
                out[(spec.name, name)] = [value]
    return out


#: Words that name a unit of one measurement system: the option of a ``metric``/``imperial`` parameter.
_SYSTEMS = {
    "imperial": frozenset(
        "fahrenheit °f f mph miles mile feet foot ft inches inch in pounds pound lb lbs ounces oz gallons yards".split()
    ),
    "metric": frozenset(
        "celsius centigrade °c c kmh km/h kph kilometers kilometres km meters metres m millimeters mm "
        "centimeters cm kilograms kg grams g litres liters".split()
    ),
}


def unit_systems(
    runs: dict[tuple[str, str], list[str]], specs: list[Any], labelling: Labelling
) -> dict[tuple[str, str], list[str]]:
    """``runs`` with each unbound ``enum`` parameter of a tool the turn calls whose options include
    ``metric`` and ``imperial`` (any case), and each free string one whose description names both, bound to
    the system the request's unit words name, when they name one only: "in Fahrenheit" -> ``imperial``, "in km/h" -> ``metric`` (:data:`_SYSTEMS`; one-letter and
    ambiguous units count only written right after a number or a degree sign: "70 F", "5 m").

    Arguments and result as every rule of this module (its docstring).
    """
    request = labelling.request.lower()
    words = set(re.findall(r"°[cf]|km/h|[a-z]+", request))
    after_number = set(re.findall(r"\d\s*(°?[a-z]+)", request))
    named = {
        system
        for system, units in _SYSTEMS.items()
        for unit in units
        if (unit in words and len(unit) > 2 and unit != "in") or unit in after_number
    }
    if len(named) != 1:
        return runs
    system = named.pop()
    out = dict(runs)
    for spec, props in called_tools(specs, runs):
        for name, sub in props.items():
            options = sub.get("enum") if isinstance(sub, dict) else None
            lowered = {str(o).lower(): o for o in options or []}
            described = _is_free_string(sub) and {"metric", "imperial"} <= set(
                re.findall(r"[a-z]+", str(sub.get("description", "")).lower())
            )
            if described:
                lowered = {"metric": "metric", "imperial": "imperial"}
            if {"metric", "imperial"} <= lowered.keys() and (
                (spec.name, name) not in out or (described and out[(spec.name, name)] != [system])
            ):
                out[(spec.name, name)] = [str(lowered[system])]
    return out


#: Currencies as requests name them, and their ISO 4217 codes (the form currency APIs take).
_CURRENCIES = [
    (re.compile(r"(?i)\b(?:US|U\.S\.|United States|American)\s+dollars?\b"), "USD"),
    (re.compile(r"(?i)\bCanadian\s+dollars?\b"), "CAD"),
    (re.compile(r"(?i)\bAustralian\s+dollars?\b"), "AUD"),
    (re.compile(r"(?i)\b(?:British\s+)?pounds?(?:\s+sterling)?\b"), "GBP"),
    (re.compile(r"(?i)\beuros?\b"), "EUR"),
    (re.compile(r"(?i)\b(?:Japanese\s+)?yen\b"), "JPY"),
    (re.compile(r"(?i)\b(?:Chinese\s+)?(?:yuan|renminbi)\b"), "CNY"),
    (re.compile(r"(?i)\b(?:Indian\s+)?rupees?\b"), "INR"),
    (re.compile(r"(?i)\bSwiss\s+francs?\b"), "CHF"),
    (re.compile(r"\b(USD|EUR|GBP|JPY|CAD|AUD|CHF|CNY|INR)\b"), ""),
    (re.compile(r"(?i)\bdollars?\b"), "USD"),
    (re.compile(r"\$"), "USD"),
    (re.compile(r"€"), "EUR"),
    (re.compile(r"£"), "GBP"),
    (re.compile(r"¥"), "JPY"),
]


def _currency_mentions(request: str) -> list[tuple[int, int, str]]:
    """The currencies the request names: ``(start, end, ISO code)``, in request order, overlaps left out
    (the first pattern of :data:`_CURRENCIES` that matches a place wins)."""
    found: list[tuple[int, int, str]] = []
    for pattern, code in _CURRENCIES:
        for m in pattern.finditer(request):
            if not any(a < m.end() and m.start() < b for a, b, _ in found):
                found.append((m.start(), m.end(), code or m.group(1)))
    return sorted(found)


def currencies(
    runs: dict[tuple[str, str], list[str]], specs: list[Any], labelling: Labelling
) -> dict[tuple[str, str], list[str]]:
    """``runs`` with the free string currency parameters (``currency``, ``base_currency``...; or a description
    that says "currency") of a tool the turn calls bound to the ISO codes of the currencies the request names
    ("US dollars", "$" -> ``USD``,
    :data:`_CURRENCIES`). One parameter takes the first currency named; an ordered pair (``base_currency`` and
    ``target_currency``, ``from_currency`` and ``to_currency``) takes first the currency of an amount ("500
    US dollars", "from British pounds"), then the other ("How many Canadian dollars can I get for 500 US
    dollars?" -> USD, CAD), or else the two in request order.

    Arguments and result as every rule of this module (its docstring).
    """
    request = labelling.request
    named = _currency_mentions(request)
    if not named:
        return runs
    out = dict(runs)
    for spec, props in called_tools(specs, runs):
        names = [
            n
            for n, sub in props.items()
            if _is_free_string(sub)
            and ("currency" in n.lower() or re.search(r"(?i)\bcurrency\b", str(sub.get("description", ""))))
        ]
        if len(names) == 1:
            out[(spec.name, names[0])] = [named[0][2]]
        elif len(names) == 2 and _first_of_pair(*names) and len({c for _, _, c in named}) >= 2:
            first = _first_of_pair(*names)
            head, tail = names if first == names[0] else names[::-1]
            source = [c for a, _, c in named if re.search(r"(?:\d[\d,.]*|\bfrom)\s*$", request[:a])]
            base = source[0] if source else named[0][2]
            other = next(c for _, _, c in named if c != base)
            out[(spec.name, head)], out[(spec.name, tail)] = [base], [other]
    return out
