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
from model.training.bots import BOT_TOOLS_PATH, load_bot_tools, say
from model.training.kinds import (
    DOMAINS,
    GENERIC,
    KINDS,
    NUMERIC,
    QUOTED,
    TOOL_WORDS,
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
    kind_of,
)
from model.training.tables import load

_BOTS = load("bots")

#: Default location of the Glaive schemas (``../shared`` beside the repository).
DEFAULT_MASKBENCH = (
    Path(__file__).resolve().parents[2].parent / "shared" / "data" / "maskbench" / "dev.jsonl.gz"
)


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
    desc = say(rng, TOOL_WORDS, "DESCRIPTIONS", Verb=verb.capitalize(), noun=noun)
    params = {"type": "object", "properties": props, "required": required}
    spoken = rng.choice(VERB_SPOKEN.get(verb, (verb,)))
    action = f"{spoken} {rng.choice(('the ', '', 'the '))}{noun}"
    return TrainingTool(name, desc, params, kinds, action, domain)


def _spoken_units(rng: random.Random) -> tuple[Any, str]:
    """``metric`` or ``imperial``, spoken as ``bots.json``'s ``UNITS_SPOKEN`` ("in Fahrenheit")."""
    u = rng.choice(("metric", "imperial"))
    return u, rng.choice(_BOTS["UNITS_SPOKEN"][u])


def _pattern(rng: random.Random) -> str:
    """A ``search_code`` pattern: an identifier, a TODO, an import or a definition."""
    return rng.choice(
        (
            V.identifier(rng),
            f"TODO {rng.choice(V.WORDS)}",
            f"import {rng.choice(V.IDENT_PARTS)}",
            f"def {V.identifier(rng)}",
        )
    )


def bot_tools() -> list[TrainingTool]:
    """The example bots' tools: their bundles' declarations (``bot_tools.json``) with the kinds, actions and
    domains of ``tables/bots.json`` (``KeyError`` for a table tool missing from the snapshot)."""
    own = {
        "units": _spoken_units,
        "pattern": gen_str(_pattern),
        "glob": gen_str(lambda r: f"*.{r.choice(V.FILE_EXTS)}"),
    }
    kinds = {name: kind_of(name, e, own.get(name)) for name, e in _BOTS["KINDS"].items()}
    real = {t["function"]["name"]: t["function"] for d in load_bot_tools().values() for t in d["tools"]}
    out = []
    for name, t in _BOTS["TOOLS"].items():
        if name not in real:
            raise KeyError(f"bot tool {name!r} of tables/bots.json is not in the snapshot {BOT_TOOLS_PATH}")
        f = real[name]
        params = {p: kinds[p] for p in t["params"]}
        out.append(TrainingTool(name, f["description"], f["parameters"], params, t["action"], t["domain"]))
    return out


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
                return v, V.and_list([str(x) for x in v])
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
    """Tools of the ``Glaiveai2K`` schemas whose parameters are all scalars or scalar arrays, named by the schema
    id without its hash, valued from its valid test instances when present; ``[]`` without the file."""
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
