"""Value banks (words in ``tables/values.json``, hand-written, no BFCL text) and phrase helpers for the
synthetic function-calling data. Generators of ``kinds.json`` read the other banks by name (:func:`kinds.gen_of`).
"""

from __future__ import annotations

import random
import re
import string

from model.training.tables import words

CITIES = words("values", "CITIES")
COUNTRIES = words("values", "COUNTRIES")
STATES = words("values", "STATES")
FIRST_NAMES = words("values", "FIRST_NAMES")
LAST_NAMES = words("values", "LAST_NAMES")
FOODS = words("values", "FOODS")
PRODUCTS = words("values", "PRODUCTS")
TOPICS = words("values", "TOPICS")
WORDS = words("values", "WORDS")
IDENT_PARTS = words("values", "IDENT_PARTS")
FILE_EXTS = words("values", "FILE_EXTS")
DIRS = words("values", "DIRS")
MONTHS = words("values", "MONTHS")
SMALL_NUMBER_WORDS = words("values", "SMALL_NUMBER_WORDS")
#: Short free-text values (titles, messages).
MESSAGES = words("values", "MESSAGES")


def person(rng: random.Random) -> str:
    """A random full name, e.g. ``"Priya Kowalski"``."""
    return f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}"


def place(rng: random.Random) -> str:
    """A city, sometimes with a country or US state suffix (``"Austin, TX"``)."""
    city = rng.choice(CITIES)
    r = rng.random()
    if r < 0.15:
        return f"{city}, {rng.choice(STATES)}"
    if r < 0.3:
        return f"{city}, {rng.choice(COUNTRIES)}"
    return city


def date_iso(rng: random.Random) -> tuple[str, str]:
    """Return ``(iso_value, spoken_form)`` for a random date, e.g. ``("2025-03-07", "March 7, 2025")``."""
    y, m, d = rng.randint(2019, 2027), rng.randint(1, 12), rng.randint(1, 28)
    iso = f"{y:04d}-{m:02d}-{d:02d}"
    spoken = rng.choice([iso, f"{MONTHS[m - 1]} {d}, {y}", f"{d} {MONTHS[m - 1]} {y}", iso])
    return iso, spoken


def time_hm(rng: random.Random) -> str:
    """A 24-hour time such as ``"14:30"``."""
    return f"{rng.randint(0, 23):02d}:{rng.choice([0, 15, 30, 45]):02d}"


def identifier(rng: random.Random) -> str:
    """A code identifier in snake_case, camelCase or PascalCase, e.g. ``"parse_config"``."""
    a, b = rng.sample(IDENT_PARTS, 2)
    style = rng.random()
    if style < 0.5:
        return f"{a}_{b}"
    if style < 0.75:
        return a + b.capitalize()
    return a.capitalize() + b.capitalize()


def file_path(rng: random.Random) -> str:
    """A relative source path such as ``"src/parse_config.py"``."""
    name = rng.choice(IDENT_PARTS) + rng.choice(["", "_" + rng.choice(IDENT_PARTS)])
    return f"{rng.choice(DIRS)}/{name}.{rng.choice(FILE_EXTS)}"


def code_id(rng: random.Random) -> str:
    """An opaque identifier such as an order number (``"ORD-48213"``, ``"a9f3c2"``)."""
    r = rng.random()
    if r < 0.4:
        prefix = rng.choice(["ORD", "INV", "TKT", "USR", "SKU", "PRJ", "ACC"])
        return f"{prefix}-{rng.randint(100, 99999)}"
    if r < 0.7:
        return "".join(rng.choice("0123456789abcdef") for _ in range(rng.randint(6, 10)))
    return f"{rng.choice(string.ascii_uppercase)}{rng.choice(string.ascii_uppercase)}{rng.randint(10, 9999)}"


def email(rng: random.Random) -> str:
    """An e-mail address at a made-up domain."""
    return f"{rng.choice(FIRST_NAMES).lower()}.{rng.choice(LAST_NAMES).lower()}@{rng.choice(WORDS)}.com"


def url(rng: random.Random) -> str:
    """An https URL at a made-up domain."""
    return (
        f"https://{rng.choice(WORDS)}{rng.choice(['.com', '.org', '.io', '.net'])}/{rng.choice(IDENT_PARTS)}"
    )


def phrase(rng: random.Random) -> str:
    """A short free-text value (a title, a query, a message)."""
    r = rng.random()
    if r < 0.3:
        return rng.choice(TOPICS)
    if r < 0.5:
        return f"{rng.choice(WORDS)} {rng.choice(WORDS)}"
    if r < 0.7:
        return f"the {rng.choice(WORDS)} of {rng.choice(CITIES)}"
    if r < 0.85:
        return rng.choice(MESSAGES)
    return f"{rng.choice(FOODS)} recipe"


def number_words(n: int) -> str:
    """Spell small non-negative integers (0..12) as English words; larger numbers stay digits."""
    return SMALL_NUMBER_WORDS[n] if 0 <= n < len(SMALL_NUMBER_WORDS) else str(n)


def and_list(items: list[str]) -> str:
    """``"a, b and c"`` (one item: itself; none: ``""``)."""
    return ", ".join(items[:-1]) + " and " + items[-1] if len(items) > 1 else "".join(items)


def natural(name: str) -> str:
    """Turn an identifier into words: ``"maxResults"``/``"max_results"`` -> ``"max results"``."""
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name.split(".")[-1])
    return re.sub(r"[_\-]+", " ", s).strip().lower()


def fmt_float(x: float) -> str:
    """Format a float the way a user types it (no trailing zeros beyond one decimal)."""
    s = f"{x:.2f}".rstrip("0")
    return s + "0" if s.endswith(".") else s
