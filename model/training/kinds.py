"""Parameter kinds and the word tables of the training data: how a parameter is declared, how its value is
drawn, how a request mentions it; the domains of generated tools, verbs, openers and system prompts."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from model.training import values as V

Gen = Callable[[random.Random], tuple[Any, str]]


@dataclass(frozen=True)
class Kind:
    """A parameter archetype: candidate names, JSON schema, value generator and mention templates.

    ``mentions`` use ``{n}`` (the parameter's natural name) and ``{v}`` (the spoken value).
    """

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


def gen_date(rng: random.Random) -> tuple[Any, str]:
    """An ISO date and how it is spoken."""
    return V.date_iso(rng)


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
        return items, ", ".join(items[:-1]) + " and " + items[-1]

    return g


def gen_int_list(rng: random.Random) -> tuple[Any, str]:
    """A list of 3-6 integers in ``[-20, 200]``, spoken comma-separated."""
    xs = [rng.randint(-20, 200) for _ in range(rng.randint(3, 6))]
    return xs, ", ".join(map(str, xs))


GENERIC = ("{n} {v}", "{n}: {v}", "the {n} is {v}", "{n} set to {v}", "with {n} {v}", "using {v} as the {n}")
NUMERIC = ("{n} of {v}", "{n} {v}", "{n} = {v}", "a {n} of {v}", "with {n} {v}", "{n} equal to {v}")
QUOTED = ('{n} "{v}"', "{n} '{v}'", 'the {n} "{v}"', "{n}: {v}")

KINDS: dict[str, Kind] = {
    "city": Kind(
        ("city", "location", "place", "city_name"),
        {"type": "string"},
        gen_str(V.place),
        ("in {v}", "for {v}", "at {v}", "{n} {v}"),
        ("The city name", "City and country, e.g. Lyon, France", "Location to look up"),
    ),
    "country": Kind(
        ("country", "country_name", "nation"),
        {"type": "string"},
        gen_choice(V.COUNTRIES),
        ("in {v}", "for {v}", "{n} {v}"),
        ("Name of the country",),
    ),
    "date": Kind(
        ("date", "day", "on_date", "target_date"),
        {"type": "string"},
        gen_date,
        ("on {v}", "for {v}", "{n} {v}"),
        ("Date in YYYY-MM-DD format", "The date (ISO 8601)"),
    ),
    "start_date": Kind(
        ("start_date", "from_date", "check_in"),
        {"type": "string"},
        gen_date,
        ("from {v}", "starting {v}", "{n} {v}"),
        ("Start date, YYYY-MM-DD",),
    ),
    "end_date": Kind(
        ("end_date", "to_date", "check_out"),
        {"type": "string"},
        gen_date,
        ("until {v}", "to {v}", "{n} {v}"),
        ("End date, YYYY-MM-DD",),
    ),
    "days": Kind(
        ("days", "num_days", "duration_days", "nights"),
        {"type": "integer"},
        gen_int(1, 14),
        ("for {v} days", "over the next {v} days", "{n} {v}", "{n} of {v}"),
        ("Number of days",),
    ),
    "limit": Kind(
        ("limit", "max_results", "count", "top_n", "num_results"),
        {"type": "integer"},
        gen_int(1, 50),
        ("top {v}", "at most {v} results", "{v} results", "{n} {v}", "limit it to {v}"),
        ("Maximum number of results",),
    ),
    "amount": Kind(
        ("amount", "price", "principal", "total", "budget", "value"),
        {"type": "number"},
        gen_float(1, 50000),
        ("{n} of {v}", "{v} dollars", "${v}", "{n} {v}"),
        ("The amount in the given currency", "Amount of money"),
    ),
    "rate": Kind(
        ("rate", "interest_rate", "tax_rate", "discount", "percentage"),
        {"type": "number"},
        gen_float(0.5, 30, 1),
        ("{n} of {v}%", "at {v} percent", "{n} {v}", "{v}% {n}"),
        ("Rate in percent",),
    ),
    "years": Kind(
        ("years", "term", "duration", "period", "age"),
        {"type": "integer"},
        gen_int(1, 40),
        ("for {v} years", "over {v} years", "{n} of {v}", "{n} {v}"),
        ("Duration in years",),
    ),
    "person": Kind(
        ("name", "person", "full_name", "contact", "author", "owner"),
        {"type": "string"},
        gen_str(V.person),
        ("for {v}", "named {v}", "{n} {v}", "by {v}"),
        ("Full name of the person",),
    ),
    "email": Kind(
        ("email", "recipient", "to", "email_address"),
        {"type": "string"},
        gen_str(V.email),
        ("to {v}", "{n} {v}", "at {v}"),
        ("Recipient e-mail address",),
    ),
    "text": Kind(
        ("query", "title", "subject", "message", "keyword", "text", "topic", "note"),
        {"type": "string"},
        gen_str(V.phrase),
        (*QUOTED, "about {v}"),
        ("Free text", "The search query", "Title or subject"),
    ),
    "currency_from": Kind(
        ("from_currency", "base_currency", "source_currency"),
        {"type": "string"},
        gen_choice(V.CURRENCIES),
        ("from {v}", "{n} {v}"),
        ("ISO code of the source currency",),
    ),
    "currency_to": Kind(
        ("to_currency", "target_currency", "quote_currency"),
        {"type": "string"},
        gen_choice(V.CURRENCIES),
        ("to {v}", "into {v}", "{n} {v}"),
        ("ISO code of the target currency",),
    ),
    "language": Kind(
        ("language", "target_language", "lang"),
        {"type": "string"},
        gen_choice(V.LANGUAGES),
        ("in {v}", "into {v}", "{n} {v}"),
        ("Language name",),
    ),
    "ticker": Kind(
        ("symbol", "ticker", "stock_symbol"),
        {"type": "string"},
        gen_choice(V.TICKERS),
        ("for {v}", "of {v}", "{n} {v}"),
        ("Stock ticker symbol",),
    ),
    "company": Kind(
        ("company", "company_name", "organization", "vendor"),
        {"type": "string"},
        gen_choice(V.COMPANIES),
        ("for {v}", "at {v}", "{n} {v}"),
        ("Company name",),
    ),
    "genre": Kind(
        ("genre", "category", "style"),
        {"type": "string"},
        gen_choice(V.GENRES),
        ("{v}", "in the {v} {n}", "{n} {v}"),
        ("Genre or category",),
    ),
    "cuisine": Kind(
        ("cuisine", "food_type"),
        {"type": "string"},
        gen_choice(V.CUISINES),
        ("{v}", "{n} {v}", "serving {v} food"),
        ("Type of cuisine",),
    ),
    "dish": Kind(
        ("dish", "recipe_name", "food", "ingredient"),
        {"type": "string"},
        gen_choice(V.FOODS),
        ("for {v}", "{n} {v}", "of {v}"),
        ("Name of the dish",),
    ),
    "product": Kind(
        ("product", "item", "product_name"),
        {"type": "string"},
        gen_choice(V.PRODUCTS),
        ("a {v}", "for a {v}", "{n} {v}"),
        ("Product to search for",),
    ),
    "color": Kind(
        ("color", "colour"), {"type": "string"}, gen_choice(V.COLORS), ("in {v}", "{n} {v}"), ("Color",)
    ),
    "record_id": Kind(
        ("order_id", "user_id", "ticket_id", "id", "account_id", "booking_id"),
        {"type": "string"},
        gen_str(V.code_id),
        ("{n} {v}", "number {v}", "with {n} {v}", "#{v}"),
        ("Identifier of the record",),
    ),
    "path": Kind(
        ("path", "file", "file_path", "filename"),
        {"type": "string"},
        gen_str(V.file_path),
        ("{v}", "in {v}", "{n} {v}", "the file {v}"),
        ("Path of the file, relative to the repository root",),
    ),
    "symbol_name": Kind(
        ("name", "symbol", "function_name", "identifier"),
        {"type": "string"},
        gen_str(V.identifier),
        ("{v}", "`{v}`", "{n} {v}"),
        ("Identifier to look up",),
    ),
    "url": Kind(
        ("url", "link", "website"),
        {"type": "string"},
        gen_str(V.url),
        ("{v}", "at {v}", "{n} {v}"),
        ("The URL",),
    ),
    "team": Kind(
        ("team", "team_name", "club"),
        {"type": "string"},
        gen_choice(V.SPORTS_TEAMS),
        ("for the {v}", "{n} {v}", "of {v}"),
        ("Name of the team",),
    ),
    "animal": Kind(
        ("species", "animal"),
        {"type": "string"},
        gen_choice(V.ANIMALS),
        ("of the {v}", "{n} {v}", "for {v}"),
        ("Species name",),
    ),
    "airport_from": Kind(
        ("origin", "departure_airport", "from_airport"),
        {"type": "string"},
        gen_choice(V.AIRPORTS),
        ("from {v}", "departing {v}", "{n} {v}"),
        ("IATA code of the origin airport",),
    ),
    "airport_to": Kind(
        ("destination", "arrival_airport", "to_airport"),
        {"type": "string"},
        gen_choice(V.AIRPORTS),
        ("to {v}", "arriving at {v}", "{n} {v}"),
        ("IATA code of the destination airport",),
    ),
    "time": Kind(
        ("time", "start_time", "at_time"),
        {"type": "string"},
        gen_str(V.time_hm),
        ("at {v}", "{n} {v}"),
        ("Time, HH:MM (24h)",),
    ),
    "weekday": Kind(
        ("weekday", "day_of_week"),
        {"type": "string"},
        gen_choice(V.WEEKDAYS),
        ("on {v}", "{n} {v}"),
        ("Day of the week",),
    ),
    "num_a": Kind(
        ("a", "x", "n", "number", "num1", "value", "base", "first"),
        {"type": "integer"},
        gen_int(-50, 500, 0.1),
        NUMERIC,
        ("The first number", "An integer", "Input value"),
    ),
    "num_b": Kind(
        ("b", "y", "k", "num2", "exponent", "second", "divisor"),
        {"type": "integer"},
        gen_int(-50, 500, 0.1),
        NUMERIC,
        ("The second number", "An integer"),
    ),
    "length": Kind(
        ("length", "width", "height", "radius", "side", "distance", "depth"),
        {"type": "number"},
        gen_float(0.5, 300, 1),
        (*NUMERIC, "{v} units of {n}"),
        ("Length in meters", "Size of the side"),
    ),
    "mass": Kind(
        ("weight", "mass", "weight_kg"),
        {"type": "number"},
        gen_float(1, 150, 1),
        ("{n} of {v}", "{v} kg", "{n} {v}"),
        ("Weight in kilograms",),
    ),
    "temperature": Kind(
        ("temperature", "temp"), {"type": "number"}, gen_float(-30, 120, 1), NUMERIC, ("Temperature value",)
    ),
    "flag": Kind(
        (
            "include_details",
            "verbose",
            "case_sensitive",
            "refundable",
            "vegetarian",
            "recursive",
            "include_forecast",
            "dry_run",
            "notify",
        ),
        {"type": "boolean"},
        gen_bool,
        ("{n}: {v}",),
        ("Whether to enable this option",),
    ),
    "unit_len": Kind(
        ("unit", "units", "length_unit"),
        {"type": "string", "enum": list(V.UNITS_LEN)},
        gen_choice(V.UNITS_LEN),
        ("in {v}", "{n} {v}"),
        ("Unit of length",),
    ),
    "unit_temp": Kind(
        ("unit", "scale", "temperature_unit"),
        {"type": "string", "enum": list(V.UNITS_TEMP)},
        gen_choice(V.UNITS_TEMP),
        ("in {v}", "{n} {v}"),
        ("Temperature scale",),
    ),
    "sort": Kind(
        ("sort_by", "order", "sort_order"),
        {"type": "string", "enum": ["asc", "desc", "relevance", "date"]},
        gen_choice(("asc", "desc", "relevance", "date")),
        ("sorted by {v}", "{n} {v}"),
        ("Sort order",),
    ),
    "priority": Kind(
        ("priority", "level", "severity"),
        {"type": "string", "enum": ["low", "medium", "high"]},
        gen_choice(("low", "medium", "high")),
        ("with {v} {n}", "{n} {v}", "{v} {n}"),
        ("Priority level",),
    ),
    "tags": Kind(
        ("tags", "keywords", "labels"),
        {"type": "array", "items": {"type": "string"}},
        gen_list_of(lambda r: r.choice(V.WORDS)),
        ("{n} {v}", "tagged {v}", "with {n} {v}"),
        ("List of tags",),
    ),
    "cities": Kind(
        ("cities", "locations", "destinations"),
        {"type": "array", "items": {"type": "string"}},
        gen_list_of(lambda r: r.choice(V.CITIES)),
        ("{n} {v}", "for {v}", "covering {v}"),
        ("List of cities",),
    ),
    "ingredients": Kind(
        ("ingredients", "items", "products"),
        {"type": "array", "items": {"type": "string"}},
        gen_list_of(lambda r: r.choice(V.FOODS + V.PRODUCTS)),
        ("{n} {v}", "with {v}", "including {v}"),
        ("List of items",),
    ),
    "numbers": Kind(
        ("numbers", "values", "data", "scores"),
        {"type": "array", "items": {"type": "integer"}},
        gen_int_list,
        ("{n} {v}", "of {v}", "for the {n} {v}", "[{v}]"),
        ("List of numbers",),
    ),
    "ticker_list": Kind(
        ("symbols", "tickers"),
        {"type": "array", "items": {"type": "string"}},
        gen_list_of(lambda r: r.choice(V.TICKERS)),
        ("for {v}", "{n} {v}"),
        ("Ticker symbols",),
    ),
}

#: Domains: (noun phrases, verbs, parameter kinds to draw from, name prefixes for dotted names).
DOMAINS: dict[str, tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {
    "weather": (
        ("weather", "forecast", "air quality", "uv index", "humidity", "sunrise time"),
        ("get", "check", "fetch", "look up"),
        ("city", "date", "days", "unit_temp", "flag"),
        ("weather", "climate"),
    ),
    "travel": (
        ("flights", "hotel", "train tickets", "car rental", "flight status", "travel time"),
        ("search", "book", "find", "check", "get"),
        (
            "airport_from",
            "airport_to",
            "date",
            "start_date",
            "end_date",
            "city",
            "days",
            "limit",
            "amount",
            "flag",
            "person",
        ),
        ("travel", "booking"),
    ),
    "finance": (
        (
            "stock price",
            "exchange rate",
            "loan payment",
            "compound interest",
            "tax",
            "portfolio value",
            "mortgage",
        ),
        ("get", "calculate", "compute", "estimate", "convert"),
        (
            "ticker",
            "amount",
            "rate",
            "years",
            "currency_from",
            "currency_to",
            "date",
            "ticker_list",
            "company",
        ),
        ("finance", "stocks", "bank"),
    ),
    "math": (
        (
            "sum",
            "product",
            "factorial",
            "power",
            "gcd",
            "average",
            "median",
            "prime factors",
            "square root",
            "logarithm",
        ),
        ("calculate", "compute", "find", "get"),
        ("num_a", "num_b", "numbers", "flag"),
        ("math", "algebra", "stats"),
    ),
    "geometry": (
        (
            "area of a circle",
            "rectangle area",
            "triangle perimeter",
            "volume of a cube",
            "distance between points",
        ),
        ("calculate", "compute", "find"),
        ("length", "num_a", "num_b", "unit_len"),
        ("geometry", "geo"),
    ),
    "physics": (
        ("velocity", "force", "kinetic energy", "density", "acceleration"),
        ("calculate", "compute", "estimate"),
        ("mass", "length", "num_a", "temperature", "unit_len"),
        ("physics",),
    ),
    "commerce": (
        ("products", "order status", "shipping cost", "discount", "inventory", "refund"),
        ("search", "check", "get", "track", "create", "cancel"),
        ("product", "record_id", "amount", "limit", "sort", "color", "ingredients", "flag", "email"),
        ("shop", "store"),
    ),
    "media": (
        ("movies", "songs", "books", "podcasts", "news articles", "tv shows"),
        ("find", "search", "recommend", "list", "get"),
        ("genre", "text", "person", "limit", "years", "language", "sort"),
        ("media", "library"),
    ),
    "food": (
        ("recipes", "restaurants", "nutrition facts", "calories", "meal plan"),
        ("find", "search", "get", "suggest", "calculate"),
        ("cuisine", "dish", "city", "ingredients", "limit", "flag", "amount"),
        ("food", "recipes"),
    ),
    "sports": (
        ("match results", "team standings", "player stats", "fixtures"),
        ("get", "find", "check", "list"),
        ("team", "date", "years", "limit", "person"),
        ("sports",),
    ),
    "contacts": (
        ("email", "reminder", "meeting", "contact", "calendar event", "message"),
        ("send", "create", "schedule", "find", "delete", "update"),
        ("email", "person", "text", "date", "time", "weekday", "priority", "flag"),
        ("calendar", "mail"),
    ),
    "text": (
        ("translation", "summary", "word count", "sentiment", "spelling check"),
        ("translate", "get", "analyze", "count", "check"),
        ("text", "language", "flag", "limit"),
        ("text", "nlp"),
    ),
    "health": (
        ("bmi", "calorie needs", "heart rate zone", "water intake"),
        ("calculate", "estimate", "compute"),
        ("mass", "length", "years", "flag"),
        ("health",),
    ),
    "geo": (
        ("population", "timezone", "capital city", "distance", "coordinates"),
        ("get", "find", "look up", "calculate"),
        ("city", "country", "cities", "unit_len"),
        ("geo", "maps"),
    ),
    "science": (
        ("boiling point", "molar mass", "half life", "species info", "habitat"),
        ("get", "find", "calculate", "look up"),
        ("animal", "temperature", "mass", "num_a", "text"),
        ("science", "bio", "chem"),
    ),
    "web": (
        ("web page", "search results", "site status", "links"),
        ("fetch", "search", "check", "get"),
        ("url", "text", "limit", "flag", "language"),
        ("web",),
    ),
    "support": (
        ("ticket", "account", "subscription", "invoice"),
        ("create", "get", "update", "cancel", "check"),
        ("record_id", "email", "priority", "text", "amount", "date"),
        ("support",),
    ),
}

VERB_SPOKEN: dict[str, tuple[str, ...]] = {
    "get": ("get", "fetch", "show me", "give me", "retrieve"),
    "check": ("check", "verify", "look at"),
    "fetch": ("fetch", "get", "pull up"),
    "look up": ("look up", "find", "check"),
    "search": ("search for", "find", "look for"),
    "book": ("book", "reserve"),
    "find": ("find", "look for", "search for", "locate"),
    "calculate": ("calculate", "compute", "work out", "figure out"),
    "compute": ("compute", "calculate", "work out"),
    "estimate": ("estimate", "calculate", "approximate"),
    "convert": ("convert", "change"),
    "track": ("track", "follow", "check"),
    "create": ("create", "make", "open", "set up"),
    "cancel": ("cancel", "call off"),
    "recommend": ("recommend", "suggest"),
    "list": ("list", "show", "give me"),
    "suggest": ("suggest", "recommend"),
    "send": ("send", "write"),
    "schedule": ("schedule", "set up", "plan"),
    "delete": ("delete", "remove"),
    "update": ("update", "change", "modify"),
    "translate": ("translate",),
    "analyze": ("analyze", "run an analysis of"),
    "count": ("count",),
}

OPENERS = (
    "",
    "",
    "Please ",
    "Can you ",
    "Could you ",
    "I need you to ",
    "Help me ",
    "I want to ",
    "I'd like to ",
    "Would you ",
    "Go ahead and ",
    "Quick task: ",
    "Hey, ",
    "Kindly ",
)
SYSTEM_PROMPTS = (
    "You are a helpful assistant.",
    "You are a helpful assistant with access to tools. Call a tool when it helps answer the user.",
    "You are an agent. Use the available functions to complete the user's request.",
    "Answer briefly. Use tools when they are needed.",
    "You are a support bot for a software company.",
    "You help developers navigate a code base.",
    "You are a weather assistant.",
)
