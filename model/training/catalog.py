"""The training tool catalogue: :class:`TrainingTool` (a declaration plus how each parameter is valued and
mentioned), tools generated from the domain tables, the example bots' tools (their bundles' own
declarations, from ``bot_tools.json``) and Glaive function-call schemas from MaskBench."""

from __future__ import annotations

import gzip
import hashlib
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from model.training import values as V
from model.training.bots import load_bot_tools
from model.training.kinds import (
    DOMAINS,
    GENERIC,
    KINDS,
    NUMERIC,
    QUOTED,
    VERB_SPOKEN,
    Gen,
    Kind,
    gen_bool,
    gen_choice,
    gen_date,
    gen_float,
    gen_int,
    gen_int_list,
    gen_list_of,
    gen_str,
)

#: Default location of the Glaive schemas (relative to the repository root).

DEFAULT_MASKBENCH = (
    Path(__file__).resolve().parents[2].parent / "shared" / "data" / "maskbench" / "dev.jsonl.gz"
)


# --------------------------------------------------------------------------------------------------------------
# Tools
# --------------------------------------------------------------------------------------------------------------


@dataclass
class TrainingTool:
    """A tool with per-parameter value generators and mention templates (``kinds``)."""

    name: str
    description: str
    parameters: dict[str, Any]
    kinds: dict[str, Kind]
    action: str  # spoken action phrase, e.g. "get the weather"
    domain: str

    def openai(self) -> dict[str, Any]:
        """OpenAI-style tool declaration."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


def generated_tool(rng: random.Random) -> TrainingTool:
    """A synthetic tool: a random domain's verb and noun with parameters of that domain's kinds."""
    domain = rng.choice(sorted(DOMAINS))
    nouns, verbs, kind_names, prefixes = DOMAINS[domain]
    noun, verb = rng.choice(nouns), rng.choice(verbs)
    base = f"{verb.replace(' ', '_')}_{noun.replace(' ', '_')}"
    style = rng.random()
    if style < 0.2:
        name = f"{rng.choice(prefixes)}.{base}"
    elif style < 0.3:
        parts = base.split("_")
        name = parts[0] + "".join(p.capitalize() for p in parts[1:])
    else:
        name = base
    k = min(len(kind_names), rng.choice((1, 1, 2, 2, 2, 3, 3, 4)))
    chosen = rng.sample(kind_names, k)
    props: dict[str, Any] = {}
    kinds: dict[str, Kind] = {}
    for kn in chosen:
        kind = KINDS[kn]
        pname = rng.choice(kind.names)
        if pname in props:
            continue
        schema = dict(kind.schema)
        if kind.descs and rng.random() < 0.85:
            schema["description"] = rng.choice(kind.descs)
        props[pname] = schema
        kinds[pname] = kind
    names = list(props)
    n_req = rng.randint(1, len(names)) if rng.random() < 0.8 else len(names)
    required = names[:n_req]
    desc = rng.choice(
        (
            f"{verb.capitalize()} the {noun}.",
            f"{verb.capitalize()} {noun} for the given inputs.",
            f"Returns the {noun}.",
            f"{verb.capitalize()} the {noun} using the given parameters.",
        )
    )
    params = {"type": "object", "properties": props, "required": required}
    spoken = rng.choice(VERB_SPOKEN.get(verb, (verb,)))
    action = f"{spoken} {rng.choice(('the ', '', 'the '))}{noun}"
    return TrainingTool(name, desc, params, kinds, action, domain)


_PLACE_D = "Place name, e.g. 'Berlin' or 'Paris, France' (a country or region after a comma narrows it)."
_UNITS_D = "'metric' (°C, km/h, mm) or 'imperial' (°F, mph, inch)."


def _weather_kinds() -> dict[str, Kind]:
    """The parameter kinds of the weather bot's tools (``tools.weather``)."""
    place_k = Kind(("place",), {"type": "string"}, gen_str(V.place), ("in {v}", "for {v}", "at {v}", "{v}"))
    units_k = Kind(
        ("units",),
        {"type": "string", "enum": ["metric", "imperial"]},
        lambda r: (
            lambda u: (
                u,
                r.choice(
                    {
                        "metric": ("in Celsius", "in metric units", "metric"),
                        "imperial": ("in Fahrenheit", "in imperial units", "imperial"),
                    }[u]
                ),
            )
        )(r.choice(("metric", "imperial"))),
        ("{v}",),
    )
    days_k = Kind(
        ("days",),
        {"type": "integer", "minimum": 1, "maximum": 16},
        gen_int(1, 14, 0.3),
        ("for the next {v} days", "for {v} days", "over {v} days"),
    )
    date_k = Kind(("date",), {"type": "string", "format": "date"}, gen_date, ("on {v}", "for {v}"))
    count_k = Kind(
        ("count",),
        {"type": "integer", "minimum": 1, "maximum": 10},
        gen_int(2, 10, 0.3),
        ("top {v} matches", "{v} matches", "up to {v} results"),
    )
    return {"place": place_k, "units": units_k, "days": days_k, "date": date_k, "count": count_k}


def _code_kinds() -> dict[str, Kind]:
    """The parameter kinds of the code-search bot's tools (``tools.code_search``)."""
    name_k = Kind(("name",), {"type": "string"}, gen_str(V.identifier), ("{v}", "`{v}`", "the symbol {v}"))
    dkind_k = Kind(
        ("kind",),
        {"type": "string", "enum": ["any", "function", "class", "method"]},
        gen_choice(("function", "class", "method")),
        ("(a {v})", "{v} only", "which is a {v}"),
    )
    maxr_k = Kind(
        ("max_results",),
        {"type": "integer", "minimum": 1, "maximum": 50},
        gen_int(1, 20, 0.2),
        ("at most {v} results", "top {v}", "{v} results max"),
    )
    pattern_k = Kind(
        ("pattern",),
        {"type": "string"},
        gen_str(
            lambda r: r.choice(
                (
                    V.identifier(r),
                    f"TODO {r.choice(V.WORDS)}",
                    f"import {r.choice(V.IDENT_PARTS)}",
                    f"def {V.identifier(r)}",
                )
            )
        ),
        ('"{v}"', "`{v}`", "the text {v}", "the pattern {v}"),
    )
    glob_k = Kind(
        ("glob",),
        {"type": "string"},
        gen_str(lambda r: f"*.{r.choice(V.FILE_EXTS)}"),
        ("in {v} files", "only {v}"),
    )
    case_k = Kind(("case_sensitive",), {"type": "boolean"}, gen_bool, ("{n}: {v}",))
    ctx_k = Kind(
        ("context_lines",),
        {"type": "integer", "minimum": 0, "maximum": 10},
        gen_int(0, 10, 0.2),
        ("with {v} lines of context", "{v} context lines"),
    )
    path_k = Kind(("path",), {"type": "string"}, gen_str(V.file_path), ("{v}", "the file {v}"))
    start_k = Kind(
        ("start_line",),
        {"type": "integer", "minimum": 1},
        gen_int(1, 200, 0.0),
        ("from line {v}", "starting at line {v}"),
    )
    end_k = Kind(
        ("end_line",),
        {"type": "integer", "minimum": 1},
        gen_int(201, 600, 0.0),
        ("to line {v}", "up to line {v}"),
    )

    return {
        "name": name_k,
        "dkind": dkind_k,
        "maxr": maxr_k,
        "pattern": pattern_k,
        "glob": glob_k,
        "case": case_k,
        "ctx": ctx_k,
        "path": path_k,
        "start": start_k,
        "end": end_k,
    }


def _spec(
    name: str, desc: str, props: dict[str, tuple[Kind, str]], required: list[str], action: str, dom: str
) -> TrainingTool:
    return TrainingTool(
        name,
        desc,
        {
            "type": "object",
            "properties": {k: {**kd.schema, "description": d} for k, (kd, d) in props.items()},
            "required": required,
        },
        {k: kd for k, (kd, _) in props.items()},
        action,
        dom,
    )


def _weather_specs(w: dict[str, Kind]) -> list[TrainingTool]:
    """``geocode``, ``get_current_weather``, ``get_forecast`` (the weather bot)."""
    return [
        _spec(
            "geocode",
            "Find the coordinates of a place by name.",
            {
                "place": (w["place"], _PLACE_D),
                "count": (w["count"], "How many matching places to return, 1-10."),
            },
            ["place"],
            "find the coordinates of",
            "bot_weather",
        ),
        _spec(
            "get_current_weather",
            "Get the current weather at a place: temperature, precipitation, wind and conditions.",
            {"place": (w["place"], _PLACE_D), "units": (w["units"], _UNITS_D)},
            ["place"],
            "get the current weather",
            "bot_weather",
        ),
        _spec(
            "get_forecast",
            "Get the daily weather forecast at a place: min/max temperature, precipitation, wind and conditions.",
            {
                "place": (w["place"], _PLACE_D),
                "days": (w["days"], "Number of forecast days, 1-16, starting today."),
                "units": (w["units"], _UNITS_D),
                "date": (
                    w["date"],
                    "A single day to forecast (YYYY-MM-DD) instead of a number of days; at most 15 days ahead.",
                ),
            },
            ["place"],
            "get the forecast",
            "bot_weather",
        ),
    ]


def _code_specs(c: dict[str, Kind]) -> list[TrainingTool]:
    """``find_definition``, ``search_code``, ``read_file`` (the code-search bot)."""
    return [
        _spec(
            "find_definition",
            "Find where a function, class or method is defined in the repository.",
            {
                "name": (
                    c["name"],
                    "Name or part of a name of a function, class or method, e.g. 'load_bundle' or 'Agent.run'.",
                ),
                "kind": (c["dkind"], "Only this kind of definition: any, function, class or method."),
                "max_results": (c["maxr"], "At most this many results, 1-50."),
            },
            ["name"],
            "find the definition of",
            "bot_code",
        ),
        _spec(
            "search_code",
            "Search the repository's files for a regular expression; returns file:line hits with context.",
            {
                "pattern": (c["pattern"], "Regular expression (Python syntax) to search for."),
                "glob": (c["glob"], "Only files whose path matches this glob, e.g. '*.py'."),
                "case_sensitive": (c["case"], "Match case exactly."),
                "context_lines": (c["ctx"], "Lines of context around each hit, 0-10."),
                "max_results": (c["maxr"], "At most this many hits, 1-100."),
            },
            ["pattern"],
            "search the code for",
            "bot_code",
        ),
        _spec(
            "read_file",
            "Read a range of lines of a file in the repository.",
            {
                "path": (c["path"], "File path relative to the repository root."),
                "start_line": (c["start"], "First line to read (1-based)."),
                "end_line": (c["end"], "Last line to read (inclusive); default start_line + 99."),
            },
            ["path"],
            "read",
            "bot_code",
        ),
    ]


def bot_tools() -> list[TrainingTool]:
    """The example bots' tools (``tools.weather``, ``tools.code_search``) with schemas mirroring their signatures."""
    w, c = _weather_kinds(), _code_kinds()
    specs = [*_weather_specs(w), *_code_specs(c)]
    # The bundles' own declarations (the snapshot in bot_tools.json), so training sees what the bots send.

    real = {t["function"]["name"]: t["function"] for d in load_bot_tools().values() for t in d["tools"]}
    for sp in specs:
        if sp.name in real:
            sp.description = real[sp.name]["description"]
            sp.parameters = real[sp.name]["parameters"]
    return specs


def _flat(s: dict[str, Any]) -> bool:
    t = s.get("type")
    if t in ("string", "number", "integer", "boolean"):
        return True
    return (
        t == "array"
        and isinstance(s.get("items"), dict)
        and s["items"].get("type") in ("string", "number", "integer")
    )


def _glaive_kind(pname: str, schema: dict[str, Any], samples: list[Any]) -> Kind:
    t = schema.get("type")
    lname = pname.lower()
    gen: Gen
    if samples:
        pool = tuple(json.dumps(x) for x in samples)

        def gen_sample(rng: random.Random, pool: tuple[str, ...] = pool, t: Any = t) -> tuple[Any, str]:
            v = json.loads(rng.choice(pool))
            if isinstance(v, list):
                return v, ", ".join(map(str, v[:-1])) + (" and " if len(v) > 1 else "") + str(
                    v[-1]
                ) if v else ""
            if isinstance(v, bool):
                return v, "yes" if v else "no"
            if isinstance(v, float):
                return v, V.fmt_float(v)
            return v, str(v)

        gen = gen_sample
    elif "enum" in schema:
        gen = gen_choice(tuple(str(x) for x in schema["enum"]))
    elif t == "integer":
        gen = gen_int(1, 100)
    elif t == "number":
        gen = gen_float(1, 1000)
    elif t == "boolean":
        gen = gen_bool
    elif t == "array":
        gen = (
            gen_list_of(lambda r: r.choice(V.WORDS))
            if schema["items"].get("type") == "string"
            else gen_int_list
        )
    elif "date" in lname:
        gen = gen_date
    elif any(w in lname for w in ("location", "city", "place", "destination", "origin")):
        gen = gen_str(V.place)
    elif "email" in lname:
        gen = gen_str(V.email)
    elif "name" in lname:
        gen = gen_str(V.person)
    else:
        gen = gen_str(V.phrase)
    mentions = (
        NUMERIC if t in ("integer", "number") else (("{n}: {v}",) if t == "boolean" else GENERIC + QUOTED[:2])
    )
    return Kind((pname,), schema, gen, mentions)


def load_glaive_tools(path: Path = DEFAULT_MASKBENCH) -> list[TrainingTool]:
    """Tools from the ``Glaiveai2K`` schemas whose parameters are all scalars or arrays of scalars.

    The function name is the schema id without its hash suffix; argument values come from the schema's valid
    test instances when present. Returns ``[]`` when the file does not exist.

    Raises:
        json.JSONDecodeError: if a line of the file is not JSON.
    """
    if not path.exists():
        return []
    tools: list[TrainingTool] = []
    seen: set[str] = set()
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            o = json.loads(line)
            if o.get("group") != "Glaiveai2K":
                continue
            sc = o["schema"]
            props = sc.get("properties") or {}
            if (
                not props
                or not all(isinstance(v, dict) and _flat(v) for v in props.values())
                or set(sc) - {"properties", "required", "type"}
            ):
                continue
            name = o["id"].split("---", 1)[1].rsplit("_", 1)[0]
            if name in seen:
                continue
            seen.add(name)
            samples: dict[str, list[Any]] = {k: [] for k in props}
            for t in o.get("tests", []):
                if t.get("valid") and isinstance(t.get("data"), dict):
                    for k, v in t["data"].items():
                        if k in samples and v not in (None, "", []):
                            samples[k].append(v)
            kinds = {k: _glaive_kind(k, v, samples[k]) for k, v in props.items()}
            words = V.natural(name)
            desc = words[0].upper() + words[1:] + "."
            params = {
                "type": "object",
                "properties": props,
                "required": [r for r in sc.get("required", []) if r in props],
            }
            tools.append(TrainingTool(name, desc, params, kinds, words, "glaive:" + name.split("_")[0]))
    return tools


def split_of(name: str) -> str:
    """``"heldout"`` for one tool name in ten (a stable hash), else ``"train"``."""
    h = int(hashlib.sha1(name.encode()).hexdigest(), 16)
    return "heldout" if h % 10 == 0 else "train"
