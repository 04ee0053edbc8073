"""The binding's rules (:mod:`model.binding`): from the classifier's runs of request words
(:class:`model.binding.labelling.Labelling`) to the values each parameter may take in the turn's constraint."""

from __future__ import annotations

import dataclasses
import datetime
import math
import re
from collections.abc import Iterator
from typing import Any

import jsonschema

from model.binding.labelling import _NUMBER, _WORD, Labelling, number_text, whole
from model.constraints.grammar import named_tool
from model.constraints.schema import pattern_matches

#: Schema keywords under which a parameter is never pinned: the constraint already fixes or shapes its value.
_KEEP = frozenset({"const", "pattern", "format"})


def _base_type(schema: Any) -> Any:
    """``schema``'s ``type``, the one type besides ``null`` for a list of types (``["string", "null"]``:
    ``"string"``); ``None`` for no schema."""
    kind = schema.get("type") if isinstance(schema, dict) else None
    if isinstance(kind, list):
        rest = [k for k in kind if k != "null"]
        return rest[0] if len(rest) == 1 else None
    return kind


def _is_number(schema: Any) -> bool:
    """Whether ``schema`` is a top-level ``integer`` or ``number`` parameter (or that or ``null``) without an
    ``enum``."""
    return _base_type(schema) in ("integer", "number") and "enum" not in schema


def _is_free_string(schema: Any) -> bool:
    """Whether ``schema`` is a free string: ``type: string`` (or ``["string", "null"]``) without ``enum``,
    ``const``, ``pattern`` or ``format`` (a value the request's words can give)."""
    return _base_type(schema) == "string" and not (_KEEP | {"enum"}) & schema.keys()


def called_tools(
    specs: list[Any], runs: dict[tuple[str, str], list[str]]
) -> Iterator[tuple[Any, dict[str, Any]]]:
    """``(spec, properties)`` of each tool of ``specs`` the turn calls: one with an object of properties and a
    parameter on a run of ``runs`` (a rule that reads the request's own words binds only those tools)."""
    for spec in specs:
        props = (spec.parameters or {}).get("properties")
        if isinstance(props, dict) and any((spec.name, n) in runs for n in props):
            yield spec, props


def single_call(
    runs: dict[tuple[str, str], list[str]],
    arrays: set[tuple[str, str]] | frozenset[tuple[str, str]] = frozenset(),
) -> bool:
    """Whether the binding plans one tool call for the turn: something is bound (a run, or a list of numbers
    held to the request's, whose keys :func:`number_arrays` gives as ``arrays``) and no other parameter is
    labelled on several runs of the request (as "in Berlin and in Paris" would be, a parallel request; a
    list's items are several runs by nature). ``runs``: :func:`binding_runs`' result. The turn's constraint
    then allows one call (``parallel_tool_calls=False``)."""
    return bool(runs or arrays) and all(len(texts) == 1 for key, texts in runs.items() if key not in arrays)


def typed_runs(
    runs: dict[tuple[str, str], list[str]], specs: list[Any], taken: frozenset[str] | set[str] = frozenset()
) -> dict[tuple[str, str], list[str]]:
    """``runs`` with each ``integer`` or ``number`` top-level parameter of ``specs`` (without an ``enum``) keeping
    only the numbers its runs spell.

    The classifier labels words a number parameter cannot take ("greatest common divisor of 40 and 50" ->
    ``num1``: greatest, common, two, 40); only the numbers are values for it: ``"a=2"`` -> ``"2"``, ``"-3"``, an
    integer parameter only whole ones, each distinct number once, in request order. A number parameter on one
    run that spells no number keeps it (a mention, "rain tomorrow" -> ``days``: :func:`pin_bound_values` makes
    it required and the model writes the number); on several such runs it is left out (its words are no
    value for it, nor the several runs of a parallel request in :func:`single_call`: "the hypotenuse ... two
    sides" -> ``z``). Every other parameter keeps its runs.
    Figures: docs/TRAINING.md, "Experiment 2026-12-04" and "(2)".

    Args:
        runs: :func:`binding_runs`' result, ``{(tool name, parameter): [text, ...]}``.
        specs: the turn's ``model.constraints.schema.ToolSpec`` list.
        taken: numbers (as the request spells them) already given to a list (:attr:`HeldArrays.taken`), no
            value for a number parameter.

    Returns:
        The same shape; ``runs`` is not modified.
    """
    props = {
        (spec.name, name): sub
        for spec in specs
        if isinstance((spec.parameters or {}).get("properties"), dict)
        for name, sub in spec.parameters["properties"].items()
        if isinstance(sub, dict)
    }
    declared = {spec.name: _declared_words(spec) for spec in specs}
    out: dict[tuple[str, str], list[str]] = {}
    for key, texts in runs.items():
        schema = props.get(key, {})
        kind = _base_type(schema)
        if _is_number(schema):
            found = [
                n
                for t in texts
                for n in map(number_text, _NUMBER.findall(t))
                if n not in taken and (kind == "number" or whole(n))
            ]
            texts = list(dict.fromkeys(found)) or (texts if len(texts) == 1 else [])
            if not texts:
                continue
        elif _is_free_string(schema) and len(texts) > 1:
            texts = [
                t for t in texts if not set(_WORD.findall(t.lower())) <= declared.get(key[0], set())
            ] or texts
        out[key] = texts
    return out


#: An example a description gives ("e.g. Boston, MA", "such as Boston"), up to the end of its sentence.
_EXAMPLE = re.compile(r"(?i)\b(?:e\.g\.|i\.e\.|for example|for instance|such as|like)[^.]*")


#: English function words and request verbs: no value on their own ("and", "me", "how", "find").
_FUNCTION_WORDS = frozenset(
    "a an the and or but of in on at to for from by with into about as than me my mine i you your we our us it its"
    " they their them he she his her is are was were be been am do does did can could would should will please"
    " how what which who whom whose where when why that this these those there here find get give show tell"
    " provide retrieve fetch calculate compute look search list let".split()
)


#: A quoted option a description names ("Choices are 'trapezoid' or 'simpson'"): a value, not what a
#: parameter is about.
_QUOTED_OPTION = re.compile(r"(['\"])[^'\"\n]{1,40}?\1")


def _declared_words(spec: Any) -> set[str]:
    """The words (lower case) of a tool's name, description, parameter names and parameter descriptions,
    without the examples and quoted options the descriptions give: what the tool and its parameters are
    about, no value; and the :data:`_FUNCTION_WORDS`."""
    props = (spec.parameters or {}).get("properties")
    texts = [spec.name, spec.description]
    for name, sub in props.items() if isinstance(props, dict) else ():
        texts += [name, str(sub.get("description", "")) if isinstance(sub, dict) else ""]
    text = _QUOTED_OPTION.sub(" ", _EXAMPLE.sub(" ", " ".join(texts)))
    return set(_WORD.findall(text.lower())) | _FUNCTION_WORDS


def assign_numbers(
    runs: dict[tuple[str, str], list[str]],
    specs: list[Any],
    labelling: Labelling,
    taken: set[int] | frozenset[int] = frozenset(),
) -> dict[tuple[str, str], list[str]]:
    """``runs`` with the request's numbers shared out among each tool's number parameters by the classifier's
    posteriors: a greedy one-to-one assignment.

    The argmax labels leave a number parameter on several numbers or on words only ("the greatest common
    divisor of 40 and 50": ``num1`` on "greatest, common, two, 40", ``num2`` on "50" and "numbers"), though
    the posteriors still rank the numbers. Within each tool, every ``integer`` or ``number`` top-level
    parameter (without an ``enum``) takes part that is required or that the labels put on some request word.
    Each (parameter, number) pair is ranked first by what names it, then by its score, the highest
    log-posterior of the parameter over the number's tokens: pairs the request names (:meth:`Labelling.names`:
    "a=1", "radius of 4", "7 days") come first, then required parameters, then optional ones. Pairs are taken
    in that order, each parameter and each number at most once (an integer parameter takes whole numbers
    only). A parameter that gets a number is bound to it alone (a percentage as :func:`_rate` reads it); the
    others keep their runs; an optional parameter not labelled takes part only where the request names it. Greedy
    assignment as in slot filling with one value per slot; the figures on the held-out split and BFCL are in
    docs/TRAINING.md, "Experiment 2026-12-04 (2)".

    Args:
        runs: :func:`binding_runs`' result, ``{(tool name, parameter): [text, ...]}`` (not modified).
        specs: the turn's ``model.constraints.schema.ToolSpec`` list (types after normalisation: BFCL's
            ``float`` is ``number``).
        labelling: the same prompt's :class:`Labelling`.
        taken: indexes into :meth:`Labelling.numbers` already given to a list (:attr:`HeldArrays.taken`),
            left out.

    Returns:
        The same shape as ``runs``.
    """
    numbers = labelling.numbers()
    column = labelling.columns
    out = dict(runs)
    for spec in specs:
        props = (spec.parameters or {}).get("properties")
        if not isinstance(props, dict) or not numbers:
            continue
        required = set(spec.parameters.get("required") or [])
        pairs = []
        for name, sub in props.items():
            key = (spec.name, name)
            if key not in column or not _is_number(sub):
                continue
            chosen = key in runs or name in required
            for j, (text, toks) in enumerate(numbers):
                if j not in taken and (_base_type(sub) == "number" or whole(text)):
                    score = float(labelling.logp[toks, column[key]].max())
                    tier = 0 if labelling.names(name, j) else 1 if name in required else 2
                    if chosen or tier == 0:
                        pairs.append((tier, -score, name, j, text))
        done: set[str] = set()
        used: set[int] = set()
        for _, _, name, j, text in sorted(pairs):
            if name not in done and j not in used:
                done.add(name)
                used.add(j)
                out[(spec.name, name)] = [_rate(text, props[name]) if labelling.percent(j) else text]
    return out


def one_string(
    runs: dict[tuple[str, str], list[str]], specs: list[Any], labelling: Labelling, fill: bool = True
) -> dict[tuple[str, str], list[str]]:
    """``runs`` with every free string parameter on at most one run.

    A free string parameter is a top-level ``type: string`` one without ``enum``, ``const``, ``pattern`` or
    ``format``. Within each tool:

    * an optional one on several runs is left out: the request gives it no one value;
    * the others are given one run each, in declaration order, each the highest-scored of its runs
      (:meth:`Labelling.score`) that no parameter declared before it took and that no number parameter holds
      as its number (:func:`typed_runs` already dropped the runs that only name the tool);
    * with ``fill``, a required one left on no run, in a tool where some parameter is on a run (a tool the
      turn calls), takes the request word it scores highest among those no parameter of the tool holds and
      that do not only name the tool (:func:`_declared_words`).

    Before this rule, such parameters were written by the model, and the tiny checkpoint writes garbage there
    (``"}:"``, ``"astest"``): BFCL simple_python 0.1675 -> 0.2775 with :func:`_request_order` (0.31 with
    :func:`named_flags`), docs/TRAINING.md, "Experiment 2026-12-04 (4)".

    Args:
        runs: :func:`typed_runs`' result (not modified).
        specs: the turn's ``model.constraints.schema.ToolSpec`` list.
        labelling: the same prompt's :class:`Labelling`.
        fill: whether to fill required parameters left on no run.

    Returns:
        The same shape as ``runs``.
    """
    out = dict(runs)
    for spec in specs:
        props = (spec.parameters or {}).get("properties")
        if not isinstance(props, dict):
            continue
        required = set(spec.parameters.get("required") or [])
        free = [n for n, sub in props.items() if _is_free_string(sub)]
        for name in free:  # an optional parameter on several runs is no value the request gives
            if name not in required and len(out.get((spec.name, name), [])) > 1:
                del out[(spec.name, name)]
        pairs = sorted(
            (i, -labelling.score((spec.name, n), t), n, t)
            for i, n in enumerate(free)
            for t in out.pop((spec.name, n), [])
        )
        used = {
            t for n in props if n not in free for t in out.get((spec.name, n), []) if _NUMBER.fullmatch(t)
        }
        for _, _, name, text in pairs:
            if (spec.name, name) not in out and text not in used:
                used.add(text)
                out[(spec.name, name)] = [text]
        if fill and any((spec.name, n) in out for n in props):
            held = {t for n in props for t in out.get((spec.name, n), [])}
            for name in free:
                if name in required and (spec.name, name) not in out:
                    word = labelling.best_word((spec.name, name), held | _declared_words(spec))
                    if word:
                        out[(spec.name, name)] = [word]
                        held.add(word)
        _request_order(out, spec, free, labelling)
        _request_order(out, spec, [n for n, sub in props.items() if _is_number(sub)], labelling)
    return out


#: The words that set two parameters of one tool in order, as ``start_location`` and ``end_location`` are.
_PAIR_WORDS = frozenset(
    {
        ("start", "end"),
        ("origin", "destination"),
        ("from", "to"),
        ("source", "target"),
        ("departure", "arrival"),
        ("initial", "final"),
        ("base", "target"),
    }
)


def _first_of_pair(a: str, b: str) -> str | None:
    """Which of parameters ``a`` and ``b`` a request states first when they form an ordered pair: names alike
    but for a trailing number (``company1``, ``company2``: the lower) or for one word of :data:`_PAIR_WORDS`
    (``from_timezone``, ``to_timezone``: the first of the pair); ``None`` for two parameters that do not."""
    ma, mb = re.fullmatch(r"(.*?)(\d+)", a), re.fullmatch(r"(.*?)(\d+)", b)
    if ma and mb and ma.group(1) == mb.group(1) and ma.group(2) != mb.group(2):
        return a if int(ma.group(2)) < int(mb.group(2)) else b
    wa, wb = a.lower().split("_"), b.lower().split("_")
    differ = [(x, y) for x, y in zip(wa, wb, strict=False) if x != y] if len(wa) == len(wb) else []
    if len(differ) == 1:
        return a if differ[0] in _PAIR_WORDS else b if differ[0][::-1] in _PAIR_WORDS else None
    return None


def _request_order(
    out: dict[tuple[str, str], list[str]], spec: Any, names: list[str], labelling: Labelling
) -> None:
    """Swap, in ``out``, the values of two parameters among ``names`` (all of one type) of ``spec`` that form
    an ordered pair (:func:`_first_of_pair`) when the request states the second one's value first: "from London
    to New York" gives ``from_timezone`` London, "the GCD of 36 and 24" gives ``number1`` 36; "from" and "to"
    before a value say which end it is whatever the order ("to Paris from Rome"), and so does a number right
    before a value ("How many ounces in 2 pounds": from_unit pounds). The classifier
    often labels both words with both parameters, and its scores then swap them (BFCL simple_python: 5 of 10
    swapped string pairs are such pairs)."""
    request = labelling.request

    def at(value: str) -> int | None:  # where the request states value first, as a whole word or number
        found = re.search(rf"(?<![\w.]){re.escape(value)}(?![\w]|\.\d)", request)
        return None if found is None else found.start()

    def cued(value: str, cue: str) -> bool:  # "from Rome", "to Paris": the words that say which end it is
        return re.search(rf"(?i)\b{cue}\s+(?:the\s+)?{re.escape(value)}(?![\w])", request) is not None

    def counted(value: str) -> bool:  # "2 pounds": the amount's unit is the pair's first end ("from")
        return (
            not _NUMBER.fullmatch(value)
            and re.search(rf"\d\s*{re.escape(value)}(?![\w])", request) is not None
        )

    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            first = _first_of_pair(a, b)
            va, vb = out.get((spec.name, a), []), out.get((spec.name, b), [])
            if first is None or len(va) != 1 or len(vb) != 1 or va == vb:
                continue
            head, tail = (va[0], vb[0]) if first == a else (vb[0], va[0])
            if cued(head, "from") or cued(tail, "to") or (counted(head) and not counted(tail)):
                continue  # the words say it: "to Paris from Rome" keeps from_city Rome
            pa, pb = at(va[0]), at(vb[0])
            if (
                cued(head, "to")
                or cued(tail, "from")
                or (counted(tail) and not counted(head))
                or (pa is not None and pb is not None and (pa > pb) == (first == a))
            ):
                out[(spec.name, a)], out[(spec.name, b)] = vb, va


#: Words of a boolean parameter's name that say what to do with it, not what it is ("include_opponent").
_FLAG_VERBS = frozenset({"include", "is", "has", "with", "show", "use", "get", "return", "enable", "want"})
#: A word that turns what follows it off ("without details", "don't return the full text").
_NEGATION = re.compile(r"(?i)^(?:not|no|without|never|exclude|excluding)$|n't$")


def _same_word(a: str, b: str) -> bool:
    """Whether lower-case words ``a`` and ``b`` are one word in two forms ("detail", "details", "detailed",
    "defines", "definition"): equal, sharing their first five letters, or sharing all but the last letter of the
    shorter one and at least four letters (a crude stemmer: Porter 1980 would be the full one)."""
    common = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    return a == b or common >= 5 or (common >= 4 and common >= min(len(a), len(b)) - 1)


def named_flags(
    runs: dict[tuple[str, str], list[str]], specs: list[Any], labelling: Labelling
) -> dict[tuple[str, str], list[str]]:
    """``runs`` with each boolean parameter the request names set: ``"true"``, or ``"false"`` after a negation.

    In a tool with some parameter on a run (a tool the turn calls), a top-level ``type: boolean`` parameter
    (no ``enum`` or ``const``) is named when every word of its name but :data:`_FLAG_VERBS` is a word of the
    request in some form (:func:`_same_word`: ``details`` in "with details", ``include_opponent`` in
    "including its opponent"); a negation among the three words before the first of them ("without details")
    makes it false. Other parameters keep their runs. The classifier rarely labels a flag's words, and the
    model writes ``false`` where it is left to it (BFCL simple_python: docs/TRAINING.md, "Experiment
    2026-12-04 (4)").

    Args:
        runs: the binding so far, ``{(tool name, parameter): [text, ...]}`` (not modified).
        specs: the turn's ``model.constraints.schema.ToolSpec`` list.
        labelling: the same prompt's :class:`Labelling`.

    Returns:
        The same shape as ``runs``.
    """
    words = labelling.request_words
    out = dict(runs)
    for spec, props in called_tools(specs, runs):
        for name, sub in props.items():
            if not isinstance(sub, dict) or sub.get("type") != "boolean" or {"enum", "const"} & sub.keys():
                continue
            parts = [w for w in re.split(r"[_\W]+", name.lower()) if w and w not in _FLAG_VERBS]
            hits = [next((i for i, r in enumerate(words) if _same_word(w, r)), None) for w in parts]
            if parts and None not in hits:
                first = min(h for h in hits if h is not None)
                negated = any(_NEGATION.search(r) for r in words[max(0, first - 3) : first])
                out[(spec.name, name)] = ["false" if negated else "true"]
    return out


def _name_words(name: str) -> list[str]:
    """The words of a tool name, lower case: ``math.triangle_area_heron`` -> math, triangle, area, heron;
    ``getForecast`` -> get, forecast."""
    return [w.lower() for w in re.findall(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])", name)]


def named_tool_of(specs: list[Any], labelling: Labelling) -> str | None:
    """The one tool whose name the request names best, or ``None`` when no tool's name stands out.

    A tool's score is how many words of its name (:func:`_name_words`, less :data:`_FUNCTION_WORDS`) are words
    of the request in some form (:func:`_same_word`): "the capital of Brazil" names ``country_info.capital``
    (1) over ``country_info.largest_city`` (0). The tool with the highest score is named when it is above 0 and
    above every other tool's; words every tool's name shares ("country", "info") count for none.
    """
    return tool_named_in(specs, labelling.request_words) if len(specs) >= 2 else None


def tool_named_in(specs: list[Any], words: list[str]) -> str | None:
    """The tool of ``specs`` whose name ``words`` (lower case) name best, as :func:`named_tool_of` scores it
    (words of the name less :data:`_FUNCTION_WORDS` and the words every tool's name shares, found in some
    form), when its score is above 0 and above every other tool's; else ``None``."""
    names = {spec.name: set(_name_words(spec.name)) - _FUNCTION_WORDS for spec in specs}
    shared = set.intersection(*names.values()) if names else set()
    scores = sorted(
        (
            (sum(any(_same_word(w, r) for r in words) for w in ws - shared), name)
            for name, ws in names.items()
        ),
        reverse=True,
    )
    if not scores or scores[0][0] == 0 or (len(scores) >= 2 and scores[0][0] == scores[1][0]):
        return None
    return scores[0][1]


def _rate(text: str, schema: dict[str, Any]) -> str:
    """A percentage's number ``text`` ("10" of "10%") as the value of a parameter with ``schema``: the fraction
    (``"0.1"``) for a ``number`` parameter whose description does not say it takes a percentage, else
    ``text``. Rates in APIs are fractions unless documented otherwise (BFCL simple_python: 17 of the 19
    questions with a "%" want the fraction, and both others describe the parameter "as a percentage")."""
    if _base_type(schema) != "number" or re.search(r"(?i)percent", str(schema.get("description", ""))):
        return text
    return repr(float(text) / 100)


@dataclasses.dataclass(frozen=True)
class HeldArrays:
    """:func:`number_arrays`' result.

    Attributes:
        specs: the turn's tools, each list of numbers held to the request's numbers (tools untouched are the
            same objects as before).
        held: ``(tool name, parameter)`` of every list held.
        bound: ``{(tool name, parameter): text}`` of the lists fixed to one list the request writes.
        taken: indexes into :meth:`Labelling.numbers` of the numbers those fixed lists hold.
    """

    specs: list[Any]
    held: set[tuple[str, str]]
    bound: dict[tuple[str, str], str]
    taken: set[int]


def _number_items(schema: Any) -> str | None:
    """``"integer"`` or ``"number"`` for an array schema whose items are numbers of that type with no ``enum``
    or ``const`` (on the array or its items), else ``None``."""
    if not isinstance(schema, dict) or schema.get("type") != "array" or {"enum", "const"} & schema.keys():
        return None
    items = schema.get("items")
    if not isinstance(items, dict) or {"enum", "const"} & items.keys():
        return None
    kind = items.get("type")
    return kind if kind in ("integer", "number") else None


def _accepts(schema: dict[str, Any], value: Any) -> bool:
    """Whether ``schema`` (its ``x-grounded`` mark aside) accepts ``value``."""
    try:
        jsonschema.validate(value, {k: v for k, v in schema.items() if k != "x-grounded"})
    except (jsonschema.exceptions.ValidationError, jsonschema.exceptions.SchemaError):
        return False
    return True


def _fixed_lists(
    arrays: list[tuple[str, dict[str, Any], str, bool]], labelling: Labelling, texts: list[str]
) -> dict[str, tuple[list[int], list[Any]]]:
    """The request's written lists (:meth:`Labelling.number_lists`) given one each, in order, to the tool's
    required lists of numbers, or else to all of them, when the counts agree and each list fits its schema:
    ``{parameter: (number indexes, value)}``; ``{}`` otherwise. ``arrays``: ``(parameter, schema, item type,
    required)`` in declaration order; ``texts``: the request's numbers as :meth:`Labelling.numbers` spells them."""
    lists = labelling.number_lists()
    for group in ([a for a in arrays if a[3]], arrays):
        if not group or len(group) != len(lists):
            continue
        out = {}
        for (name, sub, kind, _), js in zip(group, lists, strict=True):
            if kind == "integer" and not all(whole(texts[j]) for j in js):
                return {}
            value = [int(texts[j]) if kind == "integer" else float(texts[j]) for j in js]
            if not all(map(math.isfinite, value)):
                return {}
            if not _accepts(sub, value):
                return {}
            out[name] = (js, value)
        return out
    return {}


def number_arrays(specs: list[Any], labelling: Labelling) -> HeldArrays:
    """``specs`` with each top-level list-of-numbers parameter held to the request's numbers.

    The tiny checkpoint fills a list of numbers with numbers it invents, item after item, until the token
    budget runs out (BFCL simple_python: the 20 questions with such a list took 24% of the run's time and none
    was right). The values of a list come from the request, as every other bound value does:

    * when the request writes as many lists of numbers ("[10, 15, 12]", "12, 24, 36 and 48": numbers
      separated only by commas, spaces and "and") as a tool has required list parameters (or list
      parameters), they are given one each in order, and each parameter allows only its list
      (``enum: [[10, 15, 12]]``);
    * any other list may hold only numbers the request spells that its item schema accepts
      (:meth:`Labelling.numbers`; an ``integer`` item only whole ones; not 150 for items of ``maximum: 100``),
      at most as many as the request has.

    A request without a number, an array or item schema with ``enum`` or ``const``, or a list the parameter's
    own schema refuses (``minItems``, ``maxItems``...) leaves the parameter as it is.

    Args:
        specs: the turn's ``model.constraints.schema.ToolSpec`` list (not modified).
        labelling: the same prompt's :class:`Labelling`.

    Returns:
        The :class:`HeldArrays`.
    """
    texts = [text for text, _ in labelling.numbers()]
    written = [t for j, t in enumerate(texts) if not labelling.spelled(j)]  # "the two groups": no item
    out: list[Any] = []
    held: set[tuple[str, str]] = set()
    bound: dict[tuple[str, str], str] = {}
    taken: set[int] = set()
    for spec in specs:
        found = (spec.parameters or {}).get("properties")
        props: dict[str, Any] = found if isinstance(found, dict) else {}
        required = set((spec.parameters or {}).get("required") or [])
        arrays = [
            (name, sub, kind, name in required) for name, sub in props.items() if (kind := _number_items(sub))
        ]
        lists = _fixed_lists(arrays, labelling, texts)
        fixed = {}
        for name, sub, kind, _ in arrays:
            if name in lists:
                js, value = lists[name]
                fixed[name] = {**sub, "enum": [value]}
                bound[(spec.name, name)] = ", ".join(texts[j] for j in js)
                taken.update(js)
                continue
            usable = [
                t
                for t in written
                if (kind == "number" or whole(t))
                and math.isfinite(float(t))
                and _accepts(sub["items"], int(t) if kind == "integer" else float(t))  # "maximum": 100
            ]
            cap = min(len(usable), sub.get("maxItems", len(usable)))
            if usable and sub.get("minItems", 0) <= cap:
                values = list(dict.fromkeys(int(t) if kind == "integer" else float(t) for t in usable))
                fixed[name] = {**sub, "items": {**sub["items"], "enum": values}, "maxItems": cap}
        held.update((spec.name, name) for name in fixed)
        if fixed:
            spec = dataclasses.replace(spec, parameters={**spec.parameters, "properties": {**props, **fixed}})
        out.append(spec)
    return HeldArrays(out, held, bound, taken)


def _spoken_date(text: str) -> str | None:
    """``text`` as an ISO date (``"2022-12-16"``) when it spells one as ``December 16, 2022`` or ``16 December
    2022`` (month names in English, full or abbreviated), else ``None``."""
    for fmt in ("%B %d, %Y", "%d %B %Y", "%b %d, %Y", "%d %b %Y"):
        try:
            return datetime.datetime.strptime(text, fmt).date().isoformat()
        except ValueError:
            continue
    return None


def _shaped(schema: dict[str, Any], value: Any) -> bool:
    """Whether string ``value`` fits ``schema``'s ``pattern`` (``re.search``, as JSON Schema reads it) and its
    ``format`` when that is ``date`` (ISO 8601, ``2025-03-10``); a string of any other format is not read."""
    if "pattern" in schema and not pattern_matches(str(schema["pattern"]), str(value)):
        return False
    if "format" in schema:
        if schema["format"] != "date":
            return False
        try:
            datetime.date.fromisoformat(str(value))
        except ValueError:
            return False
    return True


def _pinned(schema: dict[str, Any], text: str) -> dict[str, Any] | None:
    """``schema`` allowing only the value(s) ``text`` states, or ``None`` to leave it as it is. A ``pattern`` or
    ``date`` string is pinned to a value that fits its shape (:func:`_shaped`: "AB12345" for
    ``^[A-Z]{2}[0-9]{5}$``), the shape then dropped (an ``enum`` of fitting values says more)."""
    if "const" in schema:
        return None
    if {"pattern", "format"} & schema.keys():
        if schema.get("type") != "string" or "enum" in schema:
            return None
        shaped = [v for v in dict.fromkeys([_spoken_date(text) or text, text]) if _shaped(schema, v)]
        rest = {k: v for k, v in schema.items() if k not in ("pattern", "format", "x-grounded")}
        fitting = [v for v in shaped if _accepts(rest, v)]
        return {**rest, "enum": fitting} if fitting else None
    if "enum" in schema:  # narrowed to the one option the words name, if they name exactly one
        enum = schema["enum"]
        words = set(re.findall(r"[a-z0-9]+", text.lower()))
        named = (
            [o for o in enum if isinstance(o, str) and o.lower() in words] if isinstance(enum, list) else []
        )
        return {**schema, "enum": named} if len(named) == 1 and len(enum) > 1 else None
    kind = _base_type(schema)
    values: list[Any]
    if kind == "string":
        iso = _spoken_date(text)
        values = [text] if iso is None else [iso, text]
    elif kind in ("integer", "number"):
        try:
            values = [int(text) if kind == "integer" else float(text)]
        except ValueError:
            return None
        if not math.isfinite(values[0]):  # "1e400": no JSON number
            return None
    elif kind == "boolean" and text in ("true", "false"):
        values = [text == "true"]
    else:
        return None
    ok = [value for value in values if _accepts(schema, value)]
    return {**{k: v for k, v in schema.items() if k != "x-grounded"}, "enum": ok} if ok else None


def _bound_spec(spec: Any, spans: dict[tuple[str, str], str]) -> tuple[Any, int]:
    """One tool's spec under the binding (the rules of the module docstring) and how many values it pins."""
    props = (spec.parameters or {}).get("properties")
    if not isinstance(props, dict):
        return spec, 0
    bound = [name for name in props if (spec.name, name) in spans]
    if not bound:
        return spec, 0
    fixed = {}
    for name in bound:
        new = _pinned(props[name], spans[(spec.name, name)]) if isinstance(props[name], dict) else None
        if new is not None:
            fixed[name] = new
    required = list(spec.parameters.get("required") or [])
    required += [n for n in bound if n not in required]
    props = {n: fixed.get(n, v) for n, v in props.items() if n in required}
    params = {**spec.parameters, "properties": props, "required": required}
    return dataclasses.replace(spec, parameters=params), len(fixed)


def pin_bound_values(
    specs: list[Any], spans: dict[tuple[str, str], str], tool_choice: Any = "auto"
) -> tuple[list[Any], int]:
    """The turn's normalised tools as the constraint should enforce them under the binding ``spans``.

    Args:
        specs: ``model.constraints.schema.ToolSpec`` list (not modified).
        spans: :func:`bound_spans`' result, ``{(tool name, parameter): text}``.
        tool_choice: the turn's ``tool_choice``; a named tool (``{"name": NAME}``, OpenAI's
            ``{"type": "function", "function": {"name": NAME}}``) is never left out.

    Returns:
        ``(specs, pinned)``. In each tool with a bound top-level parameter: a bound string parameter has
        ``enum: [text]`` (plus the ISO date when ``text`` spells a date; ``x-grounded`` dropped: the span is of
        the conversation), a bound integer or number parameter ``enum: [value]`` when ``text`` parses as one,
        a bound ``enum`` parameter the one option ``text`` names as a whole word; a value the parameter's own
        schema refuses, a ``const``/``pattern``/``format`` parameter or another type keeps its schema. Bound
        parameters are added to ``required`` and optional unbound ones are removed. When ``spans`` binds
        anything, tools without a bound parameter are left out (except the named one). ``pinned`` counts the
        values fixed. Tools untouched are returned as the same objects.
    """
    out, pinned = [], 0
    for spec in specs:
        new, n = _bound_spec(spec, spans)
        out.append(new)
        pinned += n
    named = named_tool(tool_choice)
    hit = {tool for (tool, _) in spans} & {s.name for s in specs}
    if hit:
        out = [s for s in out if s.name in hit or s.name == named]
    return out, pinned
