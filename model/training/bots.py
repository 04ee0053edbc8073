"""Training dialogues in the example bots' domains (code search, weather) with the bundles' own declarations and
system prompts (snapshot ``bot_tools.json``, checked against the bundles by the tests). Responses have the real
tools' shapes with invented contents drawn from large pools (so the model learns to copy); answers quote them.
The end-to-end tests' questions and the identifier ``load_bundle`` are never produced.
"""

from __future__ import annotations

import datetime as _dt
import json
import random
from pathlib import Path
from typing import Any

from model.training import values as V
from model.training.tables import frozen, load, words

BOT_TOOLS_PATH = Path(__file__).with_name("bot_tools.json")

#: Identifier parts: the value banks' (``values.IDENT_PARTS``), then the code words of ``tables/bots.json``.
CODE_WORDS = (*V.IDENT_PARTS, *words("bots", "CODE_WORDS"))
#: First words of identifiers that name an action (``get_``, ``is_``, ``to_``).
VERB_PREFIXES = words("bots", "VERB_PREFIXES")
#: Weather condition phrases the weather bot answers with.
CONDITIONS = words("bots", "CONDITIONS")
#: Question and answer templates (``str.format``, fields named by each call of :func:`say`), by purpose.
QUESTIONS: dict[str, tuple[str, ...]] = frozen(load("bots")["QUESTIONS"])
ANSWERS: dict[str, tuple[str, ...]] = frozen(load("bots")["ANSWERS"])
#: Pieces of code search results (top directories, class bases, arguments, return annotations).
CODE: dict[str, tuple[str, ...]] = frozen(load("bots")["CODE"])
#: Pieces of weather results and requests (regions, country codes, time zones, imperial-unit phrases).
PLACES: dict[str, tuple[str, ...]] = frozen(load("bots")["PLACES"])

#: Questions the end-to-end tests ask; never generated.
TEST_QUESTIONS = frozenset(
    {"Where is the function load_bundle defined?", "What is the weather in Berlin right now?"}
)
_FORBIDDEN_IDENTIFIERS = frozenset({"load_bundle"})


def say(rng: random.Random, table: dict[str, tuple[str, ...]], purpose: str, **fields: Any) -> str:
    """One of ``table[purpose]``'s templates filled with ``fields`` (``KeyError`` for a missing one)."""
    return rng.choice(table[purpose]).format(**fields)


def load_bot_tools() -> dict[str, dict[str, Any]]:
    """``{"code_search": {"system_prompt", "tools"}, "weather": {...}}`` from the snapshot."""
    data: dict[str, dict[str, Any]] = json.loads(BOT_TOOLS_PATH.read_text(encoding="utf-8"))
    return data


def identifier(rng: random.Random) -> str:
    """A code identifier: ``parse_token_stream``, ``TokenCache``, ``Agent.run``, ``_load``, ``MAX_RETRIES``..."""
    while True:
        n = rng.choice((1, 2, 2, 2, 3, 3))
        parts = [rng.choice(CODE_WORDS) for _ in range(n)]
        if n >= 2 and rng.random() < 0.4:
            parts[0] = rng.choice(VERB_PREFIXES)
        r = rng.random()
        if r < 0.45:
            s = "_".join(parts)
        elif r < 0.6:
            s = parts[0] + "".join(p.capitalize() for p in parts[1:])
        elif r < 0.82:
            s = "".join(p.capitalize() for p in parts)
        elif r < 0.9:
            s = (
                "".join(p.capitalize() for p in parts)
                + "."
                + "_".join(rng.sample(CODE_WORDS, rng.randint(1, 2)))
            )
        elif r < 0.95:
            s = "_" + "_".join(parts)
        else:
            s = "_".join(p.upper() for p in parts)
        if rng.random() < 0.06:
            s += str(rng.randint(2, 64))
        if s not in _FORBIDDEN_IDENTIFIERS and len(s) <= 48:
            return s


def source_path(rng: random.Random, ext: str = "py") -> str:
    """A repository path such as ``agentkit/backends/openai.py`` or ``tests/test_cache.py``."""
    top = rng.choice(CODE["TOP_DIRS"])
    depth = rng.choice((0, 0, 1, 1, 2))
    dirs = [rng.choice(CODE_WORDS) + rng.choice(("", "s")) for _ in range(depth)]
    stem = "_".join(rng.sample(CODE_WORDS, rng.choice((1, 1, 2))))
    if top == "tests":
        stem = "test_" + stem
    return "/".join([top, *dirs, f"{stem}.{ext}"])


def _kind_of(name: str) -> str:
    base = name.split(".")[-1].lstrip("_")
    if "." in name:
        return "method"
    return "class" if base[:1].isupper() and not base.isupper() else "function"


def _signature(name: str, kind: str, rng: random.Random) -> str:
    bare = name.split(".")[-1]
    if kind == "class":
        return f"class {bare}" + rng.choice(CODE["CLASS_BASES"])
    args = rng.sample(CODE["ARGUMENTS"], rng.randint(0, 3))
    if kind == "method" and "self" not in args:
        args = ["self", *args]
    ret = rng.choice(CODE["RETURNS"])
    return f"def {bare}({', '.join(args)}){ret}"


def _doc(rng: random.Random) -> str:
    return rng.choice(
        (
            "",
            f"Return the {rng.choice(CODE_WORDS)} for a {rng.choice(CODE_WORDS)}.",
            f"Load and validate a {rng.choice(CODE_WORDS)} file.",
            f"Build the {rng.choice(CODE_WORDS)} {rng.choice(CODE_WORDS)}.",
            f"Check that the {rng.choice(CODE_WORDS)} is valid.",
        )
    )


def find_definition_response(rng: random.Random, name: str, kind: str = "any") -> dict[str, Any]:
    """A ``find_definition`` result shaped like ``tools.code_search.find_definition``'s (none found 10% of the
    time)."""
    if rng.random() >= 0.9:
        return {
            "query": name,
            "matches": [],
            "total": 0,
            "truncated": False,
            "hint": f"No definition matches '{name}'; try a shorter part of the name, another kind, or search_code.",
        }
    k = kind if kind != "any" else _kind_of(name)
    matches = []
    for j in range(rng.choice((1, 1, 2, 3))):
        path = source_path(rng)
        line = rng.randint(1, 900)
        mname = name if j == 0 else f"test_{name.split('.')[-1].lower()}_{rng.choice(CODE_WORDS)}"
        mk = k if j == 0 else "function"
        bare = mname.split(".")[-1]
        matches.append(
            {
                "location": f"{path}:{line}",
                "path": path,
                "line": line,
                "end_line": line + rng.randint(2, 120),
                "kind": mk,
                "name": bare,
                "qualname": mname,
                "signature": _signature(mname, mk, rng),
                "doc": _doc(rng),
            }
        )
    return {"query": name, "matches": matches, "total": len(matches), "truncated": False}


def search_code_response(rng: random.Random, pattern: str) -> dict[str, Any]:
    """A ``search_code`` result shaped like ``tools.code_search.search_code``'s."""
    n = rng.choice((0, 1, 1, 2, 2, 3))
    matches = []
    for _ in range(n):
        path = source_path(rng, rng.choice(("py", "py", "md", "yaml")))
        line = rng.randint(1, 700)
        text = rng.choice(
            (
                f"# {pattern}",
                f"x = {pattern}",
                f"{pattern}(",
                f"from {rng.choice(CODE_WORDS)} import {pattern}",
            )
        )
        matches.append(
            {
                "location": f"{path}:{line}",
                "path": path,
                "line": line,
                "text": text,
                "context": f"{line - 1}: \n{line}> {text}\n{line + 1}:     pass",
            }
        )
    return {"pattern": pattern, "matches": matches, "total": n, "truncated": False}


def read_file_response(rng: random.Random, path: str, start: int, end: int) -> dict[str, Any]:
    """A ``read_file`` result shaped like ``tools.code_search.read_file``'s."""
    end = min(end, start + 4)
    ident = identifier(rng)
    lines = [f"{start}: def {ident.split('.')[-1]}():"] + [
        f"{i}:     return {rng.choice(CODE_WORDS)}" for i in range(start + 1, end + 1)
    ]
    return {
        "path": path,
        "start_line": start,
        "end_line": end,
        "total_lines": end + rng.randint(0, 400),
        "content": "\n".join(lines),
        "truncated": False,
    }


def _units(imperial: bool) -> tuple[str, str, str]:
    return ("°F", "mph", "inch") if imperial else ("°C", "km/h", "mm")


def _place_info(rng: random.Random, place: str) -> dict[str, Any]:
    name = place.split(",")[0].strip()
    return {
        "name": name,
        "region": say(rng, PLACES, "REGIONS", name=name),
        "country": rng.choice(V.COUNTRIES),
        "country_code": rng.choice(PLACES["COUNTRY_CODES"]),
        "latitude": round(rng.uniform(-60, 70), 5),
        "longitude": round(rng.uniform(-170, 170), 5),
        "elevation": float(rng.randint(0, 2500)),
        "timezone": rng.choice(PLACES["TIMEZONES"]),
        "population": rng.randint(2000, 9000000),
    }


def _temp(rng: random.Random, imperial: bool) -> float:
    c = rng.uniform(-15, 38)
    return round(c * 9 / 5 + 32 if imperial else c, 1)


def current_weather_response(rng: random.Random, place: str, units: str = "metric") -> dict[str, Any]:
    """A ``get_current_weather`` result shaped like ``tools.weather.get_current_weather``'s."""
    imp = units == "imperial"
    t_u, w_u, p_u = _units(imp)
    t = _temp(rng, imp)
    return {
        "place": _place_info(rng, place),
        "time": f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:{rng.choice((0, 15, 30, 45)):02d}",
        "temperature": t,
        "apparent_temperature": round(t - rng.uniform(0, 5), 1),
        "relative_humidity": rng.randint(20, 100),
        "precipitation": round(rng.choice((0.0, 0.0, rng.uniform(0, 8))), 1),
        "weather_code": rng.choice((0, 1, 2, 3, 45, 51, 61, 63, 71, 80, 95)),
        "wind_speed": round(rng.uniform(0, 40), 1),
        "wind_direction": rng.randint(0, 359),
        "wind_gusts": round(rng.uniform(5, 70), 1),
        "conditions": rng.choice(CONDITIONS),
        "units": {
            "temperature": t_u,
            "apparent_temperature": t_u,
            "relative_humidity": "%",
            "precipitation": p_u,
            "wind_speed": w_u,
            "wind_direction": "°",
            "wind_gusts": w_u,
        },
    }


def forecast_response(
    rng: random.Random, place: str, days: int, units: str = "metric", date: str | None = None
) -> dict[str, Any]:
    """A ``get_forecast`` result shaped like ``tools.weather.get_forecast``'s."""
    imp = units == "imperial"
    t_u, w_u, p_u = _units(imp)
    first = _dt.date(2026, 1, 1) + _dt.timedelta(days=rng.randint(0, 364))
    rows = []
    n = 1 if date else min(days, 16)
    for i in range(n):
        lo = _temp(rng, imp)
        rows.append(
            {
                "date": date or (first + _dt.timedelta(days=i)).isoformat(),
                "weather_code": rng.choice((0, 1, 2, 3, 45, 61, 63, 71, 80, 95)),
                "temperature_max": round(lo + rng.uniform(2, 12), 1),
                "temperature_min": lo,
                "precipitation_sum": round(rng.choice((0.0, rng.uniform(0, 20))), 1),
                "precipitation_probability_max": rng.randint(0, 100),
                "wind_speed_max": round(rng.uniform(3, 50), 1),
                "wind_gusts_max": round(rng.uniform(10, 90), 1),
                "conditions": rng.choice(CONDITIONS),
            }
        )
    return {
        "place": _place_info(rng, place),
        "days": rows,
        "units": {
            "temperature_max": t_u,
            "temperature_min": t_u,
            "precipitation_sum": p_u,
            "precipitation_probability_max": "%",
            "wind_speed_max": w_u,
            "wind_gusts_max": w_u,
        },
    }


def geocode_response(rng: random.Random, place: str) -> dict[str, Any]:
    """A ``geocode`` result shaped like ``tools.weather.geocode``'s (one match)."""
    return {"matches": [_place_info(rng, place)]}


def _find_definition_request(rng: random.Random) -> tuple[str, str, dict[str, Any], list[tuple[str, str]]]:
    name = identifier(rng)
    kind = _kind_of(name)
    args: dict[str, Any] = {"name": name}
    binds = [("name", name)]
    t = rng.random()
    if t < 0.75:
        q = say(rng, QUESTIONS, "find_definition", n=name, k=kind)
    else:
        kind_arg = rng.choice(("function", "class", "method"))
        args["kind"] = kind_arg
        binds.append(("kind", kind_arg))
        q = say(rng, QUESTIONS, "find_definition_of_kind", n=name, k=kind_arg)
    if rng.random() < 0.12:
        mr = rng.randint(1, 20)
        args["max_results"] = mr
        binds.append(("max_results", str(mr)))
        q = q.rstrip(".?") + f", at most {mr} results."
    return q, "find_definition", args, binds


def _search_code_request(rng: random.Random) -> tuple[str, str, dict[str, Any], list[tuple[str, str]]]:
    pat = rng.choice(
        (
            identifier(rng),
            f"TODO {rng.choice(CODE_WORDS)}",
            f"import {rng.choice(CODE_WORDS)}",
            identifier(rng),
        )
    )
    args = {"pattern": pat}
    q = say(rng, QUESTIONS, "search_code", p=pat)
    binds = [("pattern", pat)]
    if rng.random() < 0.2:
        g = f"*.{rng.choice(('py', 'md', 'yaml', 'toml'))}"
        args["glob"] = g
        binds.append(("glob", g))
        q = q.rstrip(".?") + f" in {g} files."
    return q, "search_code", args, binds


def _read_file_request(rng: random.Random) -> tuple[str, str, dict[str, Any], list[tuple[str, str]]]:
    path = source_path(rng, rng.choice(("py", "py", "md", "toml")))
    start = rng.randint(1, 300)
    end = start + rng.randint(3, 60)
    if rng.random() < 0.6:
        q = say(rng, QUESTIONS, "read_lines", a=str(start), b=str(end), p=path)
        args = {"path": path, "start_line": start, "end_line": end}
        return q, "read_file", args, [(k, str(v)) for k, v in args.items()]
    q = say(rng, QUESTIONS, "read_file", p=path)
    return q, "read_file", {"path": path}, [("path", path)]


def code_request(rng: random.Random) -> tuple[str, str, dict[str, Any], list[tuple[str, str]]]:
    """A code-search question: ``(question, tool, arguments, [(parameter, spoken)])``."""
    r = rng.random()
    if r < 0.6:
        return _find_definition_request(rng)
    if r < 0.85:
        return _search_code_request(rng)
    return _read_file_request(rng)


_DAY_WORDS = {1: "today", 2: "tomorrow"}


def _forecast_question(
    rng: random.Random, place: str, args: dict[str, Any], binds: list[tuple[str, str]]
) -> str:
    """A forecast question: days, today/tomorrow or a date (written into ``args`` and ``binds``)."""
    t = rng.random()
    if t < 0.55:
        days = rng.randint(2, 14)
        spoken = V.number_words(days) if rng.random() < 0.3 else str(days)
        q = say(rng, QUESTIONS, "forecast_days", p=place, d=spoken)
        args["days"] = days
        binds.append(("days", spoken))
    elif t < 0.8:
        days = rng.choice((1, 2))
        word = _DAY_WORDS[days]
        q = say(rng, QUESTIONS, "forecast_day", p=place, w=word)
        args["days"] = days
        binds.append(("days", word))
    else:
        iso, spoken = V.date_iso(rng)
        iso = "2026" + iso[4:]
        if rng.random() >= 0.5 and spoken[-4:].isdigit():
            spoken = spoken.replace(spoken[-4:], "2026")
        else:
            spoken = iso
        q = say(rng, QUESTIONS, "forecast_date", p=place, d=spoken)
        args["date"] = iso
        binds.append(("date", spoken))
    return q


def weather_request(rng: random.Random) -> tuple[str, str, dict[str, Any], list[tuple[str, str]]]:
    """A weather question: ``(question, tool, arguments, [(parameter, spoken)])``."""
    place = V.place(rng)
    imperial = rng.random() < 0.2
    unit_phrase = rng.choice(PLACES["IMPERIAL"]) if imperial else ""
    r = rng.random()
    binds = [("place", place)]
    args: dict[str, Any] = {"place": place}
    if r >= 0.9:
        return say(rng, QUESTIONS, "geocode", p=place), "geocode", args, binds
    if r < 0.45:
        tool, q = "get_current_weather", say(rng, QUESTIONS, "current_weather", p=place)
    else:
        tool, q = "get_forecast", _forecast_question(rng, place, args, binds)
    q = q.rstrip("?.") + unit_phrase + q[len(q.rstrip("?.")) :]  # the units phrase before the final mark
    if imperial:
        args["units"] = "imperial"
    return q, tool, args, binds


def bot_response(rng: random.Random, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    """A response of bot tool ``tool`` to ``args`` (``KeyError`` for another tool or missing arguments)."""
    if tool == "find_definition":
        return find_definition_response(rng, args["name"], args.get("kind", "any"))
    if tool == "search_code":
        return search_code_response(rng, args["pattern"])
    if tool == "read_file":
        return read_file_response(rng, args["path"], args.get("start_line", 1), args.get("end_line", 20))
    if tool == "get_current_weather":
        return current_weather_response(rng, args["place"], args.get("units", "metric"))
    if tool == "get_forecast":
        return forecast_response(
            rng, args["place"], args.get("days", 3), args.get("units", "metric"), args.get("date")
        )
    if tool == "geocode":
        return geocode_response(rng, args["place"])
    raise KeyError(tool)


def bot_answer(rng: random.Random, tool: str, args: dict[str, Any], resp: dict[str, Any]) -> str:
    """The final answer to ``resp`` (ends without the end-of-turn marker), citing its locations or figures."""
    if tool == "find_definition":
        if not resp["matches"]:
            return say(rng, ANSWERS, "definition_missing", name=args["name"])
        m = resp["matches"][0]
        return say(rng, ANSWERS, "definition", **{**m, "name": args["name"], "loc": m["location"]})
    if tool == "search_code":
        pattern, locs = args["pattern"], [m["location"] for m in resp["matches"]]
        if not locs:
            return say(rng, ANSWERS, "search_none", pattern=pattern)
        if len(locs) == 1:
            return say(rng, ANSWERS, "search_one", pattern=pattern, loc=locs[0])
        return say(rng, ANSWERS, "search_many", pattern=pattern, listed=V.and_list(locs), n=str(len(locs)))
    if tool == "read_file":
        first = resp["content"].split("\n", 1)[0]
        return f"Lines {resp['start_line']}-{resp['end_line']} of {resp['path']} start with `{first.split(': ', 1)[-1]}`."
    if tool == "get_current_weather":
        p, u = resp["place"]["name"], resp["units"]
        t, tu, c = resp["temperature"], u["temperature"], resp["conditions"]
        w, wu, feels = resp["wind_speed"], u["wind_speed"], resp["apparent_temperature"]
        return say(rng, ANSWERS, "current_weather", p=p, t=t, tu=tu, c=c, w=w, wu=wu, feels=feels)
    if tool == "get_forecast":  # up to three days quoted
        tu = resp["units"]["temperature_max"]
        bits = [
            f"{r['date']}: {r['conditions']}, {r['temperature_min']} to {r['temperature_max']} {tu}"
            for r in resp["days"][:3]
        ]
        more = f" ({len(resp['days'])} days in total)" if len(resp["days"]) > 3 else ""
        return say(rng, ANSWERS, "forecast_lead", p=resp["place"]["name"]) + "; ".join(bits) + more + "."
    return say(rng, ANSWERS, "geocode", **resp["matches"][0])


def bot_example_parts(rng: random.Random) -> dict[str, Any]:
    """One bot-domain exchange: ``system_prompt``, ``tools`` (OpenAI-style), ``question``, ``tool``, ``arguments``
    (in the declaration's order), ``bindings`` (``[(parameter, spoken)]``), ``response`` and ``answer``."""
    bots = load_bot_tools()
    domain = rng.choice(("code_search", "weather"))
    while True:
        q, tool, args, binds = (code_request if domain == "code_search" else weather_request)(rng)
        if q not in TEST_QUESTIONS:
            break
    declared = next(t["function"] for t in bots[domain]["tools"] if t["function"]["name"] == tool)
    args = {k: args[k] for k in declared["parameters"].get("properties", {}) if k in args}
    resp = bot_response(rng, tool, args)
    return {
        "system_prompt": bots[domain]["system_prompt"],
        "tools": bots[domain]["tools"],
        "question": q,
        "tool": tool,
        "arguments": args,
        "bindings": binds,
        "response": resp,
        "answer": bot_answer(rng, tool, args, resp),
    }
