"""Whether any offered tool fits a request, for declining (issue #40; docs/TRAINING.md, "Declining when no tool
fits"): no, when the request shares no content word with any declaration and the model, asked for a tool name before
the grammar narrows it (``model.turn.prefill.Prefill.draft``), names none that resembles the offered ones."""

from __future__ import annotations

import difflib
import re
from typing import Any

from schema import normalize_tool

#: English function words: never evidence that a request is about a tool.
FUNCTION_WORDS = frozenset(
    "the and for with from into over out about that this these those what which who whom how when where why "
    "are was were been does did have has had can could would should will shall may might must you your our its "
    "there here then than not yes all any some please tell give show get find let make just also".split()
)
#: A drafted name resembling no offered name above this (0..1) names another tool (calibrated on the dev draw).
DECLINE_FIT = 0.45
#: What a tool name may hold; the model's draft ends at the first other character.
TOOL_NAME = re.compile(r"[A-Za-z0-9_.\-]*")


def words(text: str) -> list[str]:
    """Lower-case words (letters of any script) of ``text``, ``camelCase`` and ``snake_case`` split, in order."""
    return re.findall(r"[^\W\d_]+|\d+", re.sub(r"([a-z])([A-Z])", r"\1 \2", text).lower())


def content_words(text: str) -> set[str]:
    """:func:`words` of ``text`` of 3+ letters that are not :data:`FUNCTION_WORDS`."""
    return {w for w in words(text) if len(w) >= 3 and w.isalpha() and w not in FUNCTION_WORDS}


def _schema_texts(node: Any) -> Any:
    """Every property name, ``description`` and ``enum`` string in a JSON Schema, at any depth."""
    if isinstance(node, dict):
        yield from node.get("properties") or ()
        yield from (str(x) for x in [node.get("description"), *(node.get("enum") or [])] if x)
    for child in node.values() if isinstance(node, dict) else node if isinstance(node, list) else ():
        yield from _schema_texts(child)


def shares_a_word(request: str, specs: list[Any]) -> bool:
    """Whether ``request`` and a ``schema.ToolSpec`` share a :func:`content_words` word (equal, or both 5+ letters
    with the same first five). A declaration's words: its name after the first (the verb), its description and
    :func:`_schema_texts` of its parameters."""
    mine, theirs = content_words(request), set()
    for s in specs:
        names = " ".join(words(s.name.rsplit(".", 1)[-1])[1:])
        theirs |= content_words(" ".join([names, s.description or "", *_schema_texts(s.parameters)]))
    return bool(mine & theirs or {w[:5] for w in mine if len(w) > 4} & {w[:5] for w in theirs if len(w) > 4})


def name_fit(drafted: str, offered: list[str]) -> float:
    """How much ``drafted`` resembles the closest ``offered`` name, 0..1: 1 when a word after the first (the verb)
    is shared (4+ letters may match as a prefix), else the best :class:`difflib.SequenceMatcher` ratio against a
    name or its last dotted part."""
    mine = words(drafted.rsplit(".", 1)[-1])[1:]
    theirs = {w for n in offered for w in words(n.rsplit(".", 1)[-1])[1:]}
    if any(
        x == y or (min(len(x), len(y)) >= 4 and (x.startswith(y) or y.startswith(x)))
        for x in mine
        for y in theirs
    ):
        return 1.0
    forms = {f for n in offered for f in (n, n.rsplit(".", 1)[-1])}
    return max((difflib.SequenceMatcher(None, drafted, f).ratio() for f in forms), default=0.0)


def no_tool_fits(inputs: Any, request: str) -> bool:
    """True when no offered tool fits ``request`` (the user's last message) in ``inputs``, a turn's
    ``BindingInputs`` right after it under ``tool_choice`` "auto", Gemma calls, a prefill, every tool described (as
    ``tools`` render it: an agent's ``specs`` have none): no shared word, then a name below :data:`DECLINE_FIT`."""
    if not (inputs.request_turn and inputs.tool_choice in ("auto", None) and inputs.syntax == "gemma"):
        return False
    decls = [normalize_tool(t) for t in inputs.tools]
    if inputs.prefill is None or not all(d.description for d in decls) or shares_a_word(request, decls):
        return False
    drafted = inputs.prefill.draft(inputs.model, inputs.tokenizer, "<|tool_call>call:", TOOL_NAME)
    return name_fit(drafted, [s.name for s in decls]) < DECLINE_FIT
