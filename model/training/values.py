"""Value banks and natural-language helpers for the synthetic function-calling data (no BFCL text).

Everything here is hand-written for this project: entity lists (places, people, companies, files, ...),
number-to-word conversion and small phrase helpers used by :mod:`model.training.data`.
"""

from __future__ import annotations

import random
import re
import string

CITIES = (
    "Paris",
    "London",
    "Berlin",
    "Madrid",
    "Rome",
    "Lisbon",
    "Vienna",
    "Prague",
    "Warsaw",
    "Oslo",
    "Stockholm",
    "Helsinki",
    "Dublin",
    "Amsterdam",
    "Brussels",
    "Zurich",
    "Geneva",
    "Athens",
    "Istanbul",
    "Cairo",
    "Nairobi",
    "Lagos",
    "Accra",
    "Casablanca",
    "Cape Town",
    "Johannesburg",
    "Dubai",
    "Doha",
    "Mumbai",
    "Delhi",
    "Bangalore",
    "Chennai",
    "Karachi",
    "Dhaka",
    "Bangkok",
    "Hanoi",
    "Jakarta",
    "Manila",
    "Singapore",
    "Kuala Lumpur",
    "Seoul",
    "Busan",
    "Tokyo",
    "Osaka",
    "Kyoto",
    "Beijing",
    "Shanghai",
    "Shenzhen",
    "Hong Kong",
    "Taipei",
    "Sydney",
    "Melbourne",
    "Perth",
    "Auckland",
    "Wellington",
    "Toronto",
    "Montreal",
    "Vancouver",
    "Calgary",
    "Chicago",
    "Boston",
    "Seattle",
    "Denver",
    "Austin",
    "Dallas",
    "Houston",
    "Miami",
    "Atlanta",
    "Phoenix",
    "San Diego",
    "Los Angeles",
    "San Francisco",
    "New York",
    "Philadelphia",
    "Detroit",
    "Portland",
    "Mexico City",
    "Guadalajara",
    "Bogota",
    "Lima",
    "Santiago",
    "Buenos Aires",
    "Montevideo",
    "Sao Paulo",
    "Rio de Janeiro",
    "Reykjavik",
    "Tallinn",
    "Riga",
    "Vilnius",
    "Kyiv",
    "Budapest",
    "Bucharest",
    "Sofia",
    "Belgrade",
    "Zagreb",
    "Ljubljana",
    "Marseille",
    "Lyon",
    "Munich",
    "Hamburg",
    "Milan",
    "Naples",
    "Porto",
    "Seville",
    "Valencia",
    "Edinburgh",
    "Glasgow",
    "Manchester",
    "Bristol",
    "Antwerp",
    "Rotterdam",
    "Krakow",
    "Gdansk",
)
COUNTRIES = (
    "France",
    "Germany",
    "Spain",
    "Italy",
    "Portugal",
    "Austria",
    "Poland",
    "Norway",
    "Sweden",
    "Finland",
    "Ireland",
    "Netherlands",
    "Belgium",
    "Switzerland",
    "Greece",
    "Turkey",
    "Egypt",
    "Kenya",
    "Nigeria",
    "Ghana",
    "Morocco",
    "South Africa",
    "India",
    "Pakistan",
    "Bangladesh",
    "Thailand",
    "Vietnam",
    "Indonesia",
    "Philippines",
    "Malaysia",
    "Japan",
    "China",
    "South Korea",
    "Australia",
    "New Zealand",
    "Canada",
    "United States",
    "Mexico",
    "Colombia",
    "Peru",
    "Chile",
    "Argentina",
    "Brazil",
    "Iceland",
    "Estonia",
    "Latvia",
    "Hungary",
    "Romania",
    "Bulgaria",
    "Croatia",
    "Uruguay",
    "Nepal",
    "Sri Lanka",
)
STATES = ("CA", "NY", "TX", "WA", "IL", "MA", "FL", "CO", "OR", "GA", "AZ", "NV", "OH", "MI", "PA")
FIRST_NAMES = (
    "Alice",
    "Bob",
    "Carla",
    "David",
    "Elena",
    "Farid",
    "Grace",
    "Hiro",
    "Ingrid",
    "Jamal",
    "Kofi",
    "Lena",
    "Marco",
    "Nadia",
    "Omar",
    "Priya",
    "Quentin",
    "Rosa",
    "Sven",
    "Tariq",
    "Uma",
    "Victor",
    "Wen",
    "Ximena",
    "Yusuf",
    "Zoe",
    "Anya",
    "Bruno",
    "Chen",
    "Dara",
    "Emeka",
    "Fatima",
    "Gustavo",
    "Hana",
    "Ivan",
    "Julia",
    "Kai",
    "Leila",
    "Mateo",
    "Noor",
    "Olga",
    "Pablo",
    "Rahul",
    "Sara",
    "Tom",
)
LAST_NAMES = (
    "Smith",
    "Garcia",
    "Muller",
    "Rossi",
    "Nakamura",
    "Okafor",
    "Kowalski",
    "Silva",
    "Andersson",
    "Dubois",
    "Novak",
    "Haddad",
    "Patel",
    "Kim",
    "Nguyen",
    "Lopez",
    "Schmidt",
    "Ivanova",
    "Mensah",
    "Jensen",
    "Costa",
    "Tanaka",
    "Moreau",
    "Fischer",
    "Ahmed",
    "Brown",
    "Wilson",
    "Clark",
    "Lee",
)
COMPANIES = (
    "Acme Corp",
    "Globex",
    "Initech",
    "Umbrella Labs",
    "Stark Industries",
    "Wayne Enterprises",
    "Hooli",
    "Vandelay Imports",
    "Soylent",
    "Cyberdyne",
    "Tyrell",
    "Wonka Foods",
    "Oscorp",
    "Massive Dynamic",
    "Blue Sun",
    "Aperture Science",
    "Gringotts",
    "Monarch Solutions",
    "Northwind Traders",
    "Contoso",
)
TICKERS = (
    "AAPL",
    "MSFT",
    "GOOG",
    "AMZN",
    "TSLA",
    "NVDA",
    "META",
    "IBM",
    "ORCL",
    "INTC",
    "AMD",
    "NFLX",
    "SAP",
    "ASML",
    "TSM",
    "BABA",
    "SONY",
    "UBER",
    "SHOP",
    "ADBE",
)
CURRENCIES = (
    "USD",
    "EUR",
    "GBP",
    "JPY",
    "CHF",
    "CAD",
    "AUD",
    "INR",
    "CNY",
    "BRL",
    "MXN",
    "SEK",
    "NOK",
    "KRW",
    "ZAR",
    "SGD",
    "NZD",
    "PLN",
    "TRY",
    "AED",
)
LANGUAGES = (
    "English",
    "French",
    "German",
    "Spanish",
    "Italian",
    "Portuguese",
    "Dutch",
    "Polish",
    "Swedish",
    "Japanese",
    "Korean",
    "Chinese",
    "Hindi",
    "Arabic",
    "Turkish",
    "Greek",
    "Swahili",
)
COLORS = ("red", "blue", "green", "black", "white", "yellow", "purple", "orange", "grey", "pink")
GENRES = (
    "comedy",
    "drama",
    "thriller",
    "horror",
    "documentary",
    "science fiction",
    "romance",
    "animation",
    "jazz",
    "rock",
    "classical",
    "hip hop",
    "fantasy",
    "mystery",
    "biography",
)
CUISINES = (
    "Italian",
    "Mexican",
    "Thai",
    "Indian",
    "Japanese",
    "Ethiopian",
    "Greek",
    "Vietnamese",
    "Lebanese",
    "French",
    "Korean",
    "Peruvian",
    "Spanish",
    "Turkish",
    "Chinese",
)
FOODS = (
    "pasta",
    "chicken curry",
    "tacos",
    "sushi",
    "pancakes",
    "lentil soup",
    "pizza",
    "falafel",
    "ramen",
    "paella",
    "risotto",
    "dumplings",
    "omelette",
    "burrito",
    "salad",
)
PRODUCTS = (
    "laptop",
    "headphones",
    "running shoes",
    "coffee maker",
    "desk lamp",
    "backpack",
    "smartphone",
    "monitor",
    "keyboard",
    "water bottle",
    "camera",
    "tablet",
    "blender",
    "office chair",
    "jacket",
)
TOPICS = (
    "climate change",
    "machine learning",
    "renewable energy",
    "space exploration",
    "public health",
    "electric cars",
    "remote work",
    "ancient history",
    "quantum computing",
    "ocean pollution",
    "urban planning",
    "nutrition",
    "cybersecurity",
    "photography",
    "chess openings",
)
SPORTS_TEAMS = (
    "Lakers",
    "Celtics",
    "Real Madrid",
    "Barcelona",
    "Arsenal",
    "Bayern Munich",
    "Juventus",
    "Yankees",
    "Dodgers",
    "Patriots",
    "Warriors",
    "Ajax",
    "Benfica",
    "Galatasaray",
)
AIRPORTS = (
    "JFK",
    "LAX",
    "LHR",
    "CDG",
    "FRA",
    "AMS",
    "MAD",
    "FCO",
    "DXB",
    "HND",
    "SIN",
    "SYD",
    "ORD",
    "SFO",
    "YYZ",
    "GRU",
    "IST",
    "ZRH",
    "CPH",
    "DEL",
)
ANIMALS = ("tiger", "elephant", "penguin", "dolphin", "wolf", "koala", "eagle", "octopus", "giraffe", "owl")
UNITS_LEN = ("meters", "kilometers", "miles", "feet", "inches", "centimeters")
UNITS_TEMP = ("celsius", "fahrenheit", "kelvin")
WORDS = (
    "apple",
    "river",
    "mountain",
    "signal",
    "garden",
    "rocket",
    "pixel",
    "harbor",
    "lantern",
    "meadow",
    "crystal",
    "falcon",
    "orbit",
    "canyon",
    "ember",
    "glacier",
    "maple",
    "quartz",
    "violet",
)
IDENT_PARTS = (
    "user",
    "order",
    "cache",
    "parse",
    "load",
    "config",
    "item",
    "token",
    "session",
    "buffer",
    "render",
    "index",
    "query",
    "event",
    "handler",
    "client",
    "server",
    "stream",
    "model",
    "path",
)
FILE_EXTS = ("py", "rs", "ts", "go", "md", "json", "yaml", "toml", "c", "js")
DIRS = ("src", "lib", "tests", "docs", "app", "pkg", "core", "utils", "scripts", "model")
MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
SMALL_NUMBER_WORDS = (
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
)


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
        return rng.choice(
            [
                "Meet at noon",
                "Call me back",
                "Happy birthday",
                "Project update",
                "Quarterly report",
                "Lunch on Friday",
                "Reminder about the invoice",
                "Flight delayed",
            ]
        )
    return f"{rng.choice(FOODS)} recipe"


def number_words(n: int) -> str:
    """Spell small non-negative integers (0..12) as English words; larger numbers stay digits."""
    return SMALL_NUMBER_WORDS[n] if 0 <= n < len(SMALL_NUMBER_WORDS) else str(n)


def natural(name: str) -> str:
    """Turn an identifier into words: ``"maxResults"``/``"max_results"`` -> ``"max results"``."""
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name.split(".")[-1])
    return re.sub(r"[_\-]+", " ", s).strip().lower()


def fmt_float(x: float) -> str:
    """Format a float the way a user types it (no trailing zeros beyond one decimal)."""
    s = f"{x:.2f}".rstrip("0")
    return s + "0" if s.endswith(".") else s
