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
from model.binding.labelling import Labelling, label_request

#: Confidence (the tagger's posterior probability, 0..1) at which one candidate is forced, per kind of parameter
#: (``None``: never). Calibrated by ``python -m evals.calibrate_binder`` on two dev sources (the synthetic dev
#: stream and BFCL simple_python): the lowest threshold at which the forced value was right at least
#: :data:`FORCE_PRECISION` of the time on each (curves in docs/TRAINING.md, "Binders").
FORCE_CONFIDENCE: dict[str, float | None] = {"string": 0.8, "number": 0.3, "array": 0.3}
#: A forced value must be right at least this often: the checkpoint's own per-argument accuracy without a binder
#: (held-out split: 0.37 of strings, 0.45 of numbers right), so forcing is kept where it beats the model.
FORCE_PRECISION = 0.45
#: The runner-up's confidence, as a share of the best's, below which the best may be forced (1.0: any lower
#: one). 0.2 gained on the synthetic split (seed 1 calls 0.367 -> 0.393) but lost BFCL dev (0.125 -> 0.115).
FORCE_MARGIN = 1.0
#: At most this many candidates per parameter.
MAX_CANDIDATES = 3

Scored = list[tuple[Any, float]]


def pick(
    scored: Scored, bar: float | None, margin: float = FORCE_MARGIN, most: int = MAX_CANDIDATES
) -> tuple[Any, ...]:
    """The values one parameter is narrowed to, from its candidates ``scored`` (best first, confidences 0..1):
    the best alone when its confidence reaches ``bar`` (``None``: never) and the runner-up's is below ``margin``
    times it; else the best ``most`` when there are two or more; else ``()`` (one unsure candidate leaves the
    model free)."""
    if bar is not None and scored and scored[0][1] >= bar:
        if len(scored) == 1 or scored[1][1] < margin * scored[0][1]:
            return (scored[0][0],)
    return tuple(v for v, _ in scored[:most]) if len(scored) >= 2 else ()


def kind_of(schema: Any) -> str | None:
    """The kind a forcing threshold is set for: ``string``, ``number`` (integer or number) or ``array``."""
    kind = typed.base_type(schema)
    return {"integer": "number"}.get(kind, kind) if kind in ("string", "integer", "number", "array") else None


def _span_tokens(labelling: Labelling, start: int, end: int) -> list[int]:
    """The prompt tokens holding request characters ``start:end`` (offsets into :attr:`Labelling.request`)."""
    lo = labelling.user[0]
    return sorted({labelling.token_at(c) for c in range(lo + start, lo + end)})


def _text_tokens(labelling: Labelling, text: str) -> list[int]:
    """The prompt tokens of the first whole-word occurrence of ``text`` in the request (``[]``: none)."""
    m = re.search(rf"(?i)(?<!\w){re.escape(text)}(?!\w)", labelling.request)
    return _span_tokens(labelling, *m.span()) if m else []


def _numbers(labelling: Labelling, key: tuple[str, str], schema: dict[str, Any], kind: str) -> Scored:
    """The request's numbers (digits, then spelled) that ``schema`` accepts, each with its confidence."""
    found = [(text, labelling.token_score(key, tokens)) for text, tokens in labelling.numbers()]
    found += [(text, 0.0) for text in typed.spelled_numbers(labelling.request)]
    values = [(typed.number_value(text, kind), score) for text, score in found]
    return [(v, c) for v, c in values if v is not None and typed.accepts(schema, v)]


def _number_lists(labelling: Labelling, key: tuple[str, str], schema: dict[str, Any], kind: str) -> Scored:
    """The lists of numbers the request writes that ``schema`` (an array of numbers) accepts."""
    numbers = labelling.numbers()
    out: Scored = []
    for js in labelling.number_lists():
        values = [typed.number_value(numbers[j][0], kind) for j in js]
        if None not in values and typed.accepts(schema, values):
            tokens = [t for j in js for t in numbers[j][1]]
            out.append((values, labelling.token_score(key, tokens)))
    return out


def _string_lists(labelling: Labelling, key: tuple[str, str], schema: dict[str, Any]) -> Scored:
    """An array of strings' candidates: each tagger span read as a list, and several spans in request order."""
    spans = labelling.runs().get(key, {})
    found = [(typed.written_list(text), score) for text, score in spans.items()]
    if len(spans) > 1:
        found.append(([item for text in spans for item in typed.written_list(text)], min(spans.values())))
    return [(v, c) for v, c in found if v and typed.accepts(schema, v)]


def _strings(labelling: Labelling, key: tuple[str, str], schema: dict[str, Any]) -> Scored:
    """A string parameter's candidates: the options the request names (``enum``), the request's values of its
    ``format`` or ``pattern``, else the tagger's spans for it; each one ``schema`` accepts."""
    request = labelling.request
    if "enum" in schema:
        return [
            (o, labelling.token_score(key, _text_tokens(labelling, o)))
            for o in typed.named_options(schema, request)
        ]
    if "pattern" in schema or schema.get("format") in typed.READ_FORMATS:
        if schema.get("format") in ("date", "date-time"):
            return [
                (v, labelling.token_score(key, _span_tokens(labelling, a, b)))
                for v, a, b in typed.dated(request, with_time=schema["format"] == "date-time")
                if typed.accepts(schema, v)
            ]
        return [
            (v, labelling.token_score(key, _text_tokens(labelling, v)))
            for v in typed.shaped_strings(schema, request)
        ]
    out: Scored = []
    spans = labelling.runs().get(key, {})
    for text, score in spans.items():  # a span that is a whole date: also its ISO form
        out += [
            (v, score) for v in (text, typed.whole_date(text)) if v is not None and typed.accepts(schema, v)
        ]
    return out


def _exclusive(scored: dict[tuple[str, str], Scored]) -> dict[tuple[str, str], Scored]:
    """One tool's number candidates with each request number given to one parameter: greedily by confidence,
    each parameter takes its best number no other parameter took first and lists it first; a number another
    parameter took keeps half the taker's confidence at most (a number the request states once fills one
    parameter)."""
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
    """Every top-level parameter's candidate values with their confidence, best first (ties in request order).

    Args:
        labelling: the prompt's :class:`Labelling`.
        specs: the turn's tools, normalised (``schema.ToolSpec``).

    Returns:
        ``{(tool, parameter): [(value, confidence 0..1), ...]}`` for the parameters that have any: numbers and
        integers take the request's numbers within their bounds (each number first for one parameter of a
        tool: :func:`_exclusive`), arrays of numbers the lists the request writes, arrays of strings the tagger's
        spans read as lists (:func:`_string_lists`), strings as :func:`_strings`;
        booleans, objects and ``const`` parameters none.
    """
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
    """The binder of a checkpoint with a copy head (``model.heads.copy_model.DiffusionGemmaWithCopyHead``).

    For each parameter with candidates (:func:`scored_candidates`), the values :func:`pick` keeps: the best one
    alone when its confidence reaches its kind's threshold and no other candidate comes within ``margin`` of it;
    else its best ``max_candidates`` when there are two or more; else nothing. A model without a copy head, or a
    prompt without a user message or declarations, gets no decision.

    Attributes:
        thresholds: confidence (0..1) needed to force one value, per kind (``string``, ``number`` for integers
            and numbers, ``array``; ``None``: never forced); default :data:`FORCE_CONFIDENCE`.
        margin: the runner-up's confidence, as a share of the best's, below which the best may be forced;
            default :data:`FORCE_MARGIN`.
        max_candidates: most candidates per parameter.
    """

    thresholds: Mapping[str, float | None] = dataclasses.field(default_factory=lambda: dict(FORCE_CONFIDENCE))
    margin: float = FORCE_MARGIN
    max_candidates: int = MAX_CANDIDATES
    name = "copy-head"

    def propose(self, inputs: BindingInputs) -> Decision | None:
        """The decision for one turn (:class:`model.binding.Binder`); ``None`` when nothing is proposed."""
        labelling = label_request(
            inputs.model, inputs.tokenizer, inputs.input_ids, inputs.tools, inputs.memory_keys, inputs.hidden
        )
        if labelling is None:
            return None
        kinds = {
            (s.name, p): kind_of(v)
            for s in inputs.specs
            for p, v in (s.parameters.get("properties") or {}).items()
        }
        chosen = {
            key: pick(scored, self.thresholds.get(kinds.get(key) or ""), self.margin, self.max_candidates)
            for key, scored in scored_candidates(labelling, inputs.specs).items()
        }
        chosen = {key: values for key, values in chosen.items() if values}
        return Decision(chosen) if chosen else None


#: Names :func:`resolve_binder` takes.
BINDER_NAMES = ("none", "copy-head")


def resolve_binder(binder: Any) -> Binder | None:
    """A binder from a name or an instance: ``None``/``"none"``/``False`` -> ``None``; ``"copy-head"`` ->
    :class:`CopyHeadBinder`; a :class:`Binder` -> itself.

    Raises:
        ValueError: an unknown name or an object without ``propose``.
    """
    if binder is None or binder is False or binder == "none":
        return None
    if binder == "copy-head":
        return CopyHeadBinder()
    if isinstance(binder, Binder):
        return binder
    raise ValueError(
        f"binder must be one of {', '.join(BINDER_NAMES)} or an object with propose(), got {binder!r}"
    )
