"""The copy head's binder: candidates for each declared parameter from the binding tagger's spans and the
request's typed values, ranked by the tagger's confidence (:class:`CopyHeadBinder`)."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from typing import Any

from model.binding import typed
from model.binding.decision import Binder, BindingInputs, Decision
from model.binding.fit import no_tool_fits
from model.binding.labelling import Labelling, label_request

#: The tagger's confidence at which one candidate is forced, per kind (``None``: never): the lowest at which a
#: forced value was right :data:`FORCE_PRECISION` of the time on two dev sources (``evals.calibrate_binder``).
FORCE_CONFIDENCE: dict[str, float | None] = {"string": 0.8, "number": 0.3, "array": 0.3}
#: A forced value must be right this often: the checkpoint's own per-argument accuracy without a binder.
FORCE_PRECISION = 0.45
#: Kinds whose only candidate is forced at any confidence (a string's lone candidate: docs/TRAINING.md, issue #40).
FORCE_LONE = ("string",)
#: At most this many candidates per parameter.
MAX_CANDIDATES = 3

Scored = list[tuple[Any, float]]


def pick(
    scored: Scored, bar: float | None, most: int = MAX_CANDIDATES, lone: bool = False
) -> tuple[Any, ...]:
    """The values one parameter is narrowed to, from ``scored`` (best first, confidences 0..1): the best alone when
    it reaches ``bar`` (``None``: never) and no runner-up ties with it, or when it is the only one and ``lone``; else
    the best ``most`` when there are two or more; else ``()``."""
    runner_up = scored[1][1] if len(scored) >= 2 else -1.0
    if scored and ((lone and len(scored) == 1) or (bar is not None and runner_up < scored[0][1] >= bar)):
        return (scored[0][0],)
    return tuple(v for v, _ in scored[:most]) if len(scored) >= 2 else ()


def kind_of(schema: Any) -> str | None:
    """The kind a forcing threshold is set for: ``string``, ``number`` (integer or number) or ``array``."""
    kind = typed.base_type(schema)
    return {"integer": "number"}.get(kind, kind) if kind in ("string", "integer", "number", "array") else None


def _span_tokens(labelling: Labelling, start: int, end: int) -> list[int]:
    """The prompt tokens holding request characters ``start:end``."""
    lo = labelling.user[0]
    return sorted({labelling.token_at(c) for c in range(lo + start, lo + end)})


def _text_tokens(labelling: Labelling, text: str) -> list[int]:
    """The prompt tokens of the first whole-word occurrence of ``text`` in the request."""
    m = re.search(rf"(?i)(?<!\w){re.escape(text)}(?!\w)", labelling.request)
    return _span_tokens(labelling, *m.span()) if m else []


def _numbers(labelling: Labelling, key: tuple[str, str], schema: dict[str, Any], kind: str) -> Scored:
    """The request's numbers (digits, then spelled) that ``schema`` accepts, with their confidence."""
    found = [(text, labelling.token_score(key, tokens)) for text, tokens in labelling.numbers()]
    found += [(text, 0.0) for text in typed.spelled_numbers(labelling.request)]
    values = [(typed.number_value(text, kind), score) for text, score in found]
    return [(v, c) for v, c in values if v is not None and typed.accepts(schema, v)]


def _number_lists(labelling: Labelling, key: tuple[str, str], schema: dict[str, Any], kind: str) -> Scored:
    """The lists of numbers the request writes that ``schema`` accepts."""
    numbers = labelling.numbers()
    out: Scored = []
    for js in labelling.number_lists():
        values = [typed.number_value(numbers[j][0], kind) for j in js]
        if None not in values and typed.accepts(schema, values):
            tokens = [t for j in js for t in numbers[j][1]]
            out.append((values, labelling.token_score(key, tokens)))
    return out


def _string_lists(labelling: Labelling, key: tuple[str, str], schema: dict[str, Any]) -> Scored:
    """Each tagger span read as a list, and several spans in request order, that ``schema`` accepts."""
    spans = labelling.runs.get(key, {})
    found = [(typed.written_list(text), score) for text, score in spans.items()]
    if len(spans) > 1:
        found.append(([item for text in spans for item in typed.written_list(text)], min(spans.values())))
    return [(v, c) for v, c in found if v and typed.accepts(schema, v)]


def _strings(labelling: Labelling, key: tuple[str, str], schema: dict[str, Any]) -> Scored:
    """A string's candidates: named ``enum`` options, ``format``/``pattern`` values, else the tagger's spans."""
    request = labelling.request
    if "enum" in schema:
        return [
            (o, labelling.token_score(key, _text_tokens(labelling, o)))
            for o in typed.named_options(schema, request)
        ]
    if "pattern" in schema or schema.get("format") in typed.READ_FORMATS:
        if schema.get("format") == "date":
            return [
                (v, labelling.token_score(key, _span_tokens(labelling, a, b)))
                for v, a, b in typed.dated(request)
                if typed.accepts(schema, v)
            ]
        return [
            (v, labelling.token_score(key, _text_tokens(labelling, v)))
            for v in typed.shaped_strings(schema, request)
        ]
    out: Scored = []
    spans = labelling.runs.get(key, {})
    for text, score in spans.items():  # a span that is a whole date: also its ISO form
        out += [
            (v, score) for v in (text, typed.whole_date(text)) if v is not None and typed.accepts(schema, v)
        ]
    return out


def _exclusive(scored: dict[tuple[str, str], Scored]) -> dict[tuple[str, str], Scored]:
    """One tool's number candidates with each request number given first to one parameter (greedily)."""
    order = sorted(((c, k, json.dumps(v)) for k, s in scored.items() for v, c in s), key=lambda x: -x[0])
    owner: dict[str, tuple[tuple[str, str], float]] = {}
    mine: dict[tuple[str, str], str] = {}
    for conf, key, value in order:
        if key not in mine and value not in owner:
            mine[key], owner[value] = value, (key, conf)
    out = {}
    for key, s in scored.items():
        ranked = []
        for v, c in s:
            taker = owner.get(json.dumps(v))
            if taker is not None and taker[0] != key:
                c = min(c, taker[1] / 2)
            ranked.append((json.dumps(v) != mine.get(key), -c, v))
        out[key] = [(v, -c) for _, c, v in sorted(ranked, key=lambda r: r[:2])]
    return out


def scored_candidates(labelling: Labelling, specs: list[Any]) -> dict[tuple[str, str], Scored]:
    """Every top-level parameter's candidate values with their confidence, best first.

    Args:
        labelling: the prompt's :class:`Labelling`.
        specs: the turn's tools, normalised (``schema.ToolSpec``).

    Returns:
        ``{(tool, parameter): [(value, confidence 0..1), ...]}`` for the parameters that have any: numbers take the
        request's numbers (:func:`_exclusive`), arrays the lists it writes, strings as :func:`_strings`; booleans,
        objects and ``const`` parameters none."""
    out: dict[tuple[str, str], Scored] = {}
    for spec in specs:
        numbers: dict[tuple[str, str], Scored] = {}
        props = (spec.parameters or {}).get("properties")
        for name, declared in (props or {}).items():
            schema = typed.non_null(declared)
            if not isinstance(schema, dict) or "const" in schema:
                continue
            key, kind = (spec.name, name), typed.base_type(schema)
            items = typed.item_type(schema)
            if kind in ("integer", "number") and "enum" not in schema:
                found = _numbers(labelling, key, schema, kind)
            elif items == "string":
                found = _string_lists(labelling, key, schema)
            elif items is not None:
                found = _number_lists(labelling, key, schema, items)
            elif kind == "string":
                found = _strings(labelling, key, schema)
            else:
                continue
            unique: dict[str, tuple[Any, float]] = {}
            for value, score in found:  # one entry per value, its best score
                k = json.dumps(value)
                if k not in unique or unique[k][1] < score:
                    unique[k] = (value, score)
            if unique:
                out[key] = sorted(unique.values(), key=lambda vs: -vs[1])
                if kind in ("integer", "number"):
                    numbers[key] = out[key]
        out.update(_exclusive(numbers))
    return out


@dataclasses.dataclass(frozen=True)
class CopyHeadBinder:
    """The binder of a checkpoint with a copy head: for each parameter, the values :func:`pick` keeps from
    :func:`scored_candidates`. No decision without a copy head, a user message or declared parameters. A request
    no offered tool fits (:func:`model.binding.fit.no_tool_fits`) is declined instead.

    Attributes:
        thresholds: confidence needed to force one value per kind (``None``: never); default
            :data:`FORCE_CONFIDENCE`.
        lone: kinds whose only candidate is forced at any confidence; default :data:`FORCE_LONE`.
        max_candidates: most candidates per parameter.
        decline: whether to decline requests no offered tool fits."""

    thresholds: Mapping[str, float | None] = dataclasses.field(default_factory=lambda: dict(FORCE_CONFIDENCE))
    lone: tuple[str, ...] = FORCE_LONE
    max_candidates: int = MAX_CANDIDATES
    decline: bool = True
    name = "copy-head"

    def propose(self, inputs: BindingInputs) -> Decision | None:
        """The decision for one turn; ``None`` when nothing is proposed."""
        labelling = label_request(
            inputs.model, inputs.tokenizer, inputs.input_ids, inputs.tools, inputs.memory_keys, inputs.hidden
        )
        if labelling is None:
            return None
        if self.decline and no_tool_fits(inputs, labelling.request):
            return Decision({}, decline=True)
        kinds = {
            (s.name, p): kind_of(v)
            for s in inputs.specs
            for p, v in (s.parameters.get("properties") or {}).items()
        }
        chosen: dict[tuple[str, str], tuple[Any, ...]] = {}
        for key, scored in scored_candidates(labelling, inputs.specs).items():
            kind = kinds.get(key) or ""
            if values := pick(scored, self.thresholds.get(kind), self.max_candidates, kind in self.lone):
                chosen[key] = values
        return Decision(chosen) if chosen else None


#: Names :func:`resolve_binder` takes.
BINDER_NAMES = ("none", "copy-head")


def resolve_binder(binder: Any) -> Binder | None:
    """A binder from a name or an instance: ``None``/``"none"``/``False`` -> ``None``; ``"copy-head"`` ->
    :class:`CopyHeadBinder`; a :class:`Binder` -> itself. ValueError otherwise."""
    if binder is None or binder is False or binder == "none":
        return None
    if binder == "copy-head":
        return CopyHeadBinder()
    if isinstance(binder, Binder):
        return binder
    raise ValueError(
        f"binder must be one of {', '.join(BINDER_NAMES)} or an object with propose(), got {binder!r}"
    )
