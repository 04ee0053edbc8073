"""Parameter kinds of the training data: how a parameter is declared, how its value is drawn, how a request
mentions it; the domains of generated tools, verbs, openers and system prompts. The words are data, in
``tables/kinds.json``; this module builds the generators they name."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from model.training import values as V
from model.training.tables import load, words

Gen = Callable[[random.Random], tuple[Any, str]]


@dataclass(frozen=True)
class Kind:
    """A parameter archetype: candidate names, JSON schema, value generator, mention templates (``{n}``: the
    parameter's natural name, ``{v}``: the spoken value) and descriptions."""

    names: tuple[str, ...]
    schema: dict[str, Any]
    gen: Gen
    mentions: tuple[str, ...]
    descs: tuple[str, ...] = ()


def gen_str(f: Callable[[random.Random], str]) -> Gen:
    """A generator whose value is ``f``'s string, spoken as itself."""

    def g(rng: random.Random) -> tuple[Any, str]:
        x = f(rng)
        return x, x

    return g


def gen_choice(items: tuple[str, ...]) -> Gen:
    """A generator of one of ``items``, spoken as itself."""
    return gen_str(lambda rng: rng.choice(items))


def gen_int(lo: int, hi: int, words: float = 0.15) -> Gen:
    """A generator of an integer in ``[lo, hi]``, spoken in words with probability ``words``."""

    def g(rng: random.Random) -> tuple[Any, str]:
        n = rng.randint(lo, hi)
        return n, V.number_words(n) if rng.random() < words else str(n)

    return g


def gen_float(lo: float, hi: float, digits: int = 2) -> Gen:
    """A generator of a number in ``[lo, hi]`` with at most ``digits`` decimals (sometimes whole)."""

    def g(rng: random.Random) -> tuple[Any, str]:
        x = round(rng.uniform(lo, hi), rng.randint(0, digits))
        if rng.random() < 0.3:
            x = float(round(x))
        return float(x), V.fmt_float(x) if x != int(x) or rng.random() < 0.5 else str(int(x))

    return g


#: An ISO date and how it is spoken.
gen_date: Gen = V.date_iso


def gen_bool(rng: random.Random) -> tuple[Any, str]:
    """A boolean (true 60% of the time), spoken as yes/no."""
    b = rng.random() < 0.6
    return b, "yes" if b else "no"


def gen_list_of(f: Callable[[random.Random], str]) -> Gen:
    """A generator of 2-4 distinct strings from ``f``, spoken as "a, b and c"."""

    def g(rng: random.Random) -> tuple[Any, str]:
        k = rng.randint(2, 4)
        items: list[str] = []
        while len(items) < k:
            x = f(rng)
            if x not in items:
                items.append(x)
        return items, V.and_list(items)

    return g


def gen_int_list(rng: random.Random) -> tuple[Any, str]:
    """A list of 3-6 integers in ``[-20, 200]``, spoken comma-separated."""
    xs = [rng.randint(-20, 200) for _ in range(rng.randint(3, 6))]
    return xs, ", ".join(map(str, xs))


def _templates(items: list[str]) -> tuple[str, ...]:
    """Mention templates, each ``"*NAME"`` replaced by the shared templates ``MENTIONS.NAME``."""
    out: list[str] = []
    for t in items:
        out += _T["MENTIONS"][t[1:]] if t.startswith("*") else [t]
    return tuple(out)


#: Value functions a kind's ``["str", NAME]`` generator names.
VALUE_FNS: dict[str, Callable[[random.Random], str]] = {
    f.__name__: f
    for f in (V.place, V.person, V.email, V.phrase, V.code_id, V.file_path, V.identifier, V.url, V.time_hm)
}


def gen_of(spec: list[Any], where: str = "kind") -> Gen:
    """The generator a table describes: ``["str", FN]`` (:data:`VALUE_FNS`), ``["choice", BANK or [words]]``,
    ``["int", lo, hi(, words)]``, ``["float", lo, hi(, digits)]``, ``["date"]``, ``["bool"]``, ``["int_list"]``,
    ``["list_of", BANK, ...]`` (banks of ``values.json``); ``ValueError`` naming ``where`` for an unknown one."""
    op, *args = spec
    if op == "str":
        if args[0] not in VALUE_FNS:
            raise ValueError(
                f"{where}: unknown value function {args[0]!r}, expected one of {sorted(VALUE_FNS)}"
            )
        return gen_str(VALUE_FNS[args[0]])
    if op == "choice":
        return gen_choice(tuple(args[0]) if isinstance(args[0], list) else words("values", args[0]))
    if op == "list_of":
        pool = tuple(w for name in args for w in words("values", name))
        return gen_list_of(lambda r: r.choice(pool))
    fixed = {"int": gen_int, "float": gen_float}
    if op in fixed:
        return fixed[op](*args)
    simple = {"date": gen_date, "bool": gen_bool, "int_list": gen_int_list}
    if op not in simple:
        raise ValueError(f"{where}: unknown generator {op!r}")
    return simple[op]


_T = load("kinds")
GENERIC = _templates(["*GENERIC"])
NUMERIC = _templates(["*NUMERIC"])
QUOTED = _templates(["*QUOTED"])


def kind_of(name: str, entry: dict[str, Any], gen: Gen | None = None) -> Kind:
    """The :class:`Kind` of a table entry (``names``, default ``[name]``; ``schema``; ``gen``, :func:`gen_of`,
    unless given here; ``mentions``; ``descs``). ``ValueError`` without a known generator, ``KeyError`` without
    ``schema`` or ``mentions``."""
    if gen is None:
        if "gen" not in entry:
            raise ValueError(f"kind {name!r}: the table gives no generator and none was passed")
        gen = gen_of(entry["gen"], f"kind {name!r}")
    names = tuple(entry.get("names", (name,)))
    return Kind(names, entry["schema"], gen, _templates(entry["mentions"]), tuple(entry.get("descs", ())))


#: The parameter kinds of generated tools (``tables/kinds.json``: names, schema, generator, mentions,
#: descriptions).
KINDS: dict[str, Kind] = {name: kind_of(name, e) for name, e in _T["KINDS"].items()}


def _domains() -> dict[str, tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], tuple[str, ...]]]:
    """``kinds.json``'s domains as tuples (``ValueError`` for a kind :data:`KINDS` lacks)."""
    out = {
        name: (tuple(d["nouns"]), tuple(d["verbs"]), tuple(d["kinds"]), tuple(d["prefixes"]))
        for name, d in _T["DOMAINS"].items()
    }
    unknown = sorted({k for d in out.values() for k in d[2]} - set(KINDS))
    if unknown:
        raise ValueError(f"kinds.json: DOMAINS draw from unknown kinds {unknown}")
    return out


#: Domains: (noun phrases, verbs, parameter kinds to draw from, name prefixes for dotted names).
DOMAINS = _domains()

#: How each domain verb is spoken in a request.
VERB_SPOKEN: dict[str, tuple[str, ...]] = {verb: tuple(s) for verb, s in _T["VERB_SPOKEN"].items()}
OPENERS = words("kinds", "OPENERS")
#: Description templates of generated tools (``{Verb}``, ``{noun}``).
TOOL_WORDS: dict[str, tuple[str, ...]] = {"DESCRIPTIONS": words("kinds", "TOOL_DESCRIPTIONS")}
SYSTEM_PROMPTS = words("kinds", "SYSTEM_PROMPTS")
