"""Synthetic dialogues for one bundle's own tools (what ``agentkit specialize`` trains on).

Values come from each declared parameter alone (name, type, ``enum``, ``format``, bounds, ``pattern``,
``examples``), requests from the templates of :mod:`model.training.data`; every prompt declares all of the
bundle's tools under its system prompt, as the agent does. No held-out request occurs in the training stream.
"""

from __future__ import annotations

import random
import re
from typing import Any

from model.training import data as D
from model.training import kinds as K
from model.training import values as V
from model.training.catalog import TrainingTool

#: Share of each kind of example in a bundle's stream.
BUNDLE_KIND_WEIGHTS: tuple[tuple[str, float], ...] = (
    ("call", 0.50),
    ("parallel", 0.10),
    ("multi_call", 0.10),
    ("answer_after_tool", 0.14),
    ("followup_call", 0.08),
    ("no_tool", 0.08),
)


def _unwrap(schema: dict[str, Any]) -> dict[str, Any]:
    """``X`` from an optional parameter's ``anyOf: [X, {"type": "null"}]`` (pydantic's ``X | None``)."""
    options = schema.get("anyOf")
    if isinstance(options, list):
        real = [o for o in options if isinstance(o, dict) and o.get("type") != "null"]
        if len(real) == 1:
            merged = {k: v for k, v in schema.items() if k not in ("anyOf", "default")}
            return {**real[0], **merged}
    return schema


_ATOM = re.compile(r"\\d|\[[^\]]+\]|\\.|[^\\\[\]{}()*+?|^$.]")
_COUNT = re.compile(r"\{(\d+)(?:,(\d*))?\}|[*+?]")
_QUANTIFIERS = {"?": (0, 1), "+": (1, 4), "*": (0, 4)}


def pattern_sampler(pattern: str) -> K.Gen | None:
    """A value generator for simple patterns (literals, ``\\d``, ``[A-Z0-9_]`` classes, counts), else ``None``."""
    body = pattern[1:] if pattern.startswith("^") else pattern
    body = body[:-1] if body.endswith("$") else body
    pieces: list[tuple[list[str], int, int]] = []
    i = 0
    while i < len(body):
        m = _ATOM.match(body, i)
        if m is None:
            return None
        atom = m.group(0)
        i = m.end()
        if atom == "\\d":
            chars = [str(d) for d in range(10)]
        elif atom.startswith("["):
            inner = atom[1:-1]
            if inner.startswith("^"):
                return None
            chars = []
            j = 0
            while j < len(inner):
                if j + 2 < len(inner) and inner[j + 1] == "-":
                    chars += [chr(c) for c in range(ord(inner[j]), ord(inner[j + 2]) + 1)]
                    j += 3
                else:
                    chars.append(inner[j + 1] if inner[j] == "\\" and j + 1 < len(inner) else inner[j])
                    j += 2 if inner[j] == "\\" else 1
        elif atom.startswith("\\"):
            chars = [atom[1]]
        else:
            chars = [atom]
        lo = hi = 1
        c = _COUNT.match(body, i)
        if c is not None:
            i = c.end()
            if c.group(0) in _QUANTIFIERS:
                lo, hi = _QUANTIFIERS[c.group(0)]
            else:
                lo = int(c.group(1))
                hi = lo if c.group(2) is None else (int(c.group(2)) if c.group(2) else lo + 4)
        pieces.append((chars, lo, hi))
    if not pieces:
        return None

    def gen(rng: random.Random) -> tuple[Any, str]:
        text = "".join(rng.choice(ch) for ch, lo, hi in pieces for _ in range(rng.randint(lo, hi)))
        return text, text

    return gen


def _time(rng: random.Random) -> tuple[Any, str]:
    h, m = rng.randint(6, 21), rng.choice((0, 15, 30, 45))
    return f"{h:02d}:{m:02d}", f"{h:02d}:{m:02d}"


def kind_for_parameter(name: str, schema: dict[str, Any]) -> K.Kind:
    """The :class:`Kind` of one declared parameter: ``enum`` values from the enum; the schema's ``examples``
    half of the time when another generator fits (``pattern``, bounds, ``format``, the name), else always."""
    s = _unwrap(schema)
    t = s.get("type")
    lname = name.lower()
    examples = [x for x in s.get("examples") or [] if x is not None and not isinstance(x, (dict, list))]
    own: K.Gen | None = None
    if "enum" in s:
        return K.Kind((name,), s, K.gen_choice(tuple(str(x) for x in s["enum"])), K.GENERIC)
    if t == "integer":
        lo = int(s.get("minimum", s.get("exclusiveMinimum", 0) + (1 if "exclusiveMinimum" in s else 0)))
        hi = int(
            s.get("maximum", s.get("exclusiveMaximum", lo + 101) - (1 if "exclusiveMaximum" in s else 0))
        )
        own = K.gen_int(lo, max(lo, hi))
    elif t == "number":
        flo = float(s.get("minimum", s.get("exclusiveMinimum", 0.0)))
        fhi = float(s.get("maximum", s.get("exclusiveMaximum", flo + 1000.0)))
        own = K.gen_float(max(flo, 0.5) if "exclusiveMinimum" in s else flo, fhi if fhi > flo else flo + 1)
    elif t == "boolean":
        own = K.gen_bool
    elif s.get("format") == "date" or "date" in lname:
        own = K.gen_date
    elif s.get("format") == "time":
        own = _time
    elif s.get("format") == "email" or "email" in lname:
        own = K.gen_str(V.email)
    elif isinstance(s.get("pattern"), str):
        own = pattern_sampler(s["pattern"])
    elif t == "string":
        if any(w in lname for w in ("location", "city", "place", "destination", "origin")):
            own = K.gen_str(V.place)
        elif "name" in lname or "person" in lname or "assignee" in lname:
            own = K.gen_str(V.person)
        elif not examples:
            own = K.gen_str(V.phrase)
    pool = tuple(examples)

    def example(rng: random.Random) -> tuple[Any, str]:
        v = rng.choice(pool)
        return v, V.fmt_float(v) if isinstance(v, float) else str(v)

    gen: K.Gen
    if pool and own is not None:
        base = own

        def mixed(rng: random.Random) -> tuple[Any, str]:
            return example(rng) if rng.random() < 0.5 else base(rng)

        gen = mixed
    else:
        gen = example if pool else (own or K.gen_str(V.phrase))
    mentions = K.NUMERIC if t in ("integer", "number") else K.GENERIC + K.QUOTED[:2]
    return K.Kind((name,), s, gen, mentions)


def tool_specs(declarations: list[dict[str, Any]]) -> list[TrainingTool]:
    """:class:`TrainingTool` s of OpenAI-style declarations, the action spoken as the description's first
    sentence or the name as words (``ValueError`` for a nameless declaration or an object parameter)."""
    specs = []
    for decl in declarations:
        f = decl.get("function", decl)
        name = f.get("name")
        if not isinstance(name, str) or not name:
            raise ValueError(f"a tool declaration has no name: {decl!r}")
        params = f.get("parameters") or {"type": "object", "properties": {}}
        kinds = {}
        for pname, ps in (params.get("properties") or {}).items():
            s = _unwrap(ps)
            nested = s.get("type") == "object" or (
                s.get("type") == "array"
                and isinstance(s.get("items"), dict)
                and s["items"].get("type") == "object"
            )
            if nested:
                raise ValueError(
                    f"tool {name!r}, parameter {pname!r}: objects and arrays of objects are not generated "
                    "(specialize supports scalar and scalar-list parameters)"
                )
            kinds[pname] = kind_for_parameter(pname, ps)
        desc = str(f.get("description") or "").strip()
        first = desc.split(".")[0].strip() if desc else ""
        action = first[0].lower() + first[1:] if first else V.natural(name)
        specs.append(TrainingTool(name, desc, params, kinds, action, "bundle"))
    return specs


class BundleGenerator(D.Generator):
    """:class:`model.training.data.Generator` over one bundle's ``declarations`` (all in every prompt, in order)
    under its ``system_prompt``; ``ValueError``: see :func:`tool_specs`, or an unknown split."""

    def __init__(
        self,
        declarations: list[dict[str, Any]],
        system_prompt: str | None = None,
        seed: int = 0,
        split: str = "train",
    ) -> None:
        if split not in ("train", "heldout"):
            raise ValueError(f"split must be 'train' or 'heldout', got {split!r}")
        self.weights = BUNDLE_KIND_WEIGHTS
        self.rng = random.Random(f"bundle:{seed}:{split}")
        self.bots = []
        self.specs = tool_specs(declarations)
        self.declarations = [dict(d) for d in declarations]
        self.system_prompt = system_prompt

    def tool(self) -> TrainingTool:
        """One of the bundle's tools, uniformly."""
        return self.rng.choice(self.specs)

    def _toolset(self, main: list[TrainingTool], extra_max: int = 3) -> list[TrainingTool]:
        return list(self.specs)

    def _system(self) -> list[dict[str, Any]]:
        return [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []

    def example(self) -> D.Example:
        """One example; its ``tools`` are the bundle's own declarations (exactly what the agent sends)."""
        ex = super().example()
        ex.tools = [dict(d) for d in self.declarations]
        return ex


def _last_user(ex: D.Example) -> str:
    users = [m for m in ex.messages if m.get("role") == "user"]
    return str(users[-1]["content"]) if users else ""


def train_and_heldout(
    declarations: list[dict[str, Any]],
    system_prompt: str | None,
    n_train: int,
    n_heldout: int,
    seed: int = 0,
) -> tuple[list[D.Example], list[D.Example]]:
    """The training and held-out examples, no held-out request in the training ones (``ValueError``: see
    :class:`BundleGenerator`)."""
    train = BundleGenerator(declarations, system_prompt, seed, "train").take(n_train)
    seen = {_last_user(e) for e in train}
    gen = BundleGenerator(declarations, system_prompt, seed, "heldout")
    held: list[D.Example] = []
    for _ in range(n_heldout * 20):
        if len(held) == n_heldout:
            break
        ex = gen.example()
        if _last_user(ex) not in seen:
            held.append(ex)
    return train, held
