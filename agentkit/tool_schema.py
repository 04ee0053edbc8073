"""How a tool's declaration is written: descriptions from its docstring, grounded parameters, titles
dropped, and the string formats the tool-call grammar enforces (checked for remote models too)."""

from __future__ import annotations

import difflib
import functools
import inspect
import logging
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import pydantic

from agentkit.errors import ToolDefinitionError
from schema import FORMATS, format_matches
from schema.errors import SchemaError
from schema.normalize import drop_titles, map_subschemas_at
from schema.refs import Refs

# --------------------------------------------------------------------------------------------- docstrings


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """``(description, {parameter: description})`` of a docstring, parsed with griffe (Google ``Args:``, Sphinx
    ``:param name:``, NumPy ``Parameters``; lenient, its warnings not logged): the text before the first section,
    paragraphs kept, and each parameter's text with its lines joined."""
    if not doc:
        return "", {}
    from griffe import Docstring

    log = logging.getLogger("griffe")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        sections = Docstring(inspect.cleandoc(doc)).parse("auto")
    finally:
        log.setLevel(level)
    desc: list[str] = []
    params: dict[str, str] = {}
    in_description = True
    for section in sections:
        kind = section.kind.value
        if kind == "text" and in_description:
            desc.append(str(section.value))
            continue
        in_description = False  # text after the first section is not the tool's description
        if kind in ("parameters", "other parameters"):
            for p in section.value:
                params[p.name.lstrip("*")] = " ".join(
                    x.strip() for x in p.description.splitlines() if x.strip()
                )
    return "\n\n".join(desc).strip(), params


# ------------------------------------------------------------------------------------------------ schemas


#: Keyword marking a grounded string parameter (see :class:`Grounded`).
GROUNDED_KEYWORD = "x-grounded"


if TYPE_CHECKING:
    _T = TypeVar("_T")
    #: For type checkers ``Grounded[str]`` is ``str`` (the class below is what runs).
    Grounded = Annotated[_T, GROUNDED_KEYWORD]
else:

    class Grounded:
        """``Grounded[str]``: a string parameter whose value must be a span of the conversation (the user's
        messages and the tool responses so far), declared ``x-grounded: true`` and enforced by the embedded
        backend's constraint; as ``Tool(fn, grounded=[...])``. A type checker reads ``Grounded[X]`` as ``X``."""

        def __class_getitem__(cls, item: Any) -> Any:
            return Annotated[item, pydantic.Field(json_schema_extra={GROUNDED_KEYWORD: True})]


def mark_grounded(tool: str, parameters: dict[str, Any], names: Sequence[str]) -> dict[str, Any]:
    """A copy of ``parameters`` with ``x-grounded: true`` on the top-level string properties ``names``.

    Raises:
        ToolDefinitionError: a name that is not a property, or a property that is not a string.
    """
    props = dict(parameters.get("properties") or {})
    for n in names:
        sub = props.get(n)
        if not isinstance(sub, dict):
            raise ToolDefinitionError(
                f"tool {tool!r}: grounded parameter {n!r} is not one of its parameters ({sorted(props)})"
            )
        types = [sub.get("type")] + [b.get("type") for b in sub.get("anyOf", []) if isinstance(b, dict)]
        if "string" not in types:
            raise ToolDefinitionError(
                f"tool {tool!r}: grounded parameter {n!r} must be a string (a span of the conversation)"
            )
        if sub.get("type") == "string":
            props[n] = {**sub, GROUNDED_KEYWORD: True}
        else:  # Optional[str]: the string branch of the anyOf
            props[n] = {
                **sub,
                "anyOf": [
                    {**b, GROUNDED_KEYWORD: True} if isinstance(b, dict) and b.get("type") == "string" else b
                    for b in sub["anyOf"]
                ],
            }
    return {**parameters, "properties": props}


#: Drop Pydantic's ``title`` keywords from a JSON Schema (:func:`schema.drop_titles`).
clean_schema = drop_titles


def grounded_keyword(
    schema: Any, bad: list[tuple[tuple[str | int, ...], str]], at: tuple[str | int, ...] = ()
) -> Any:
    """A bundle tool's ``parameters`` with the keyword ``grounded`` written as ``x-grounded`` in every subschema;
    appends ``(path after at, message)`` to ``bad`` for a ``grounded`` that is not a boolean and for a property
    or definition name YAML did not read as a string (``off:``, ``1:``)."""
    if not isinstance(schema, dict):
        return schema
    if "grounded" in schema:
        if not isinstance(schema["grounded"], bool):
            bad.append(((*at, "grounded"), "grounded must be true or false"))
        schema = {**{k: v for k, v in schema.items() if k != "grounded"}, "x-grounded": schema["grounded"]}
    for key in ("properties", "patternProperties", "$defs", "definitions"):
        names = schema.get(key)
        for name in names if isinstance(names, dict) else ():
            if not isinstance(name, str):
                why = f"the name {name!r} is not a string (YAML reads off, no, yes, on and numbers as values): quote it"
                bad.append(((*at, key), why))
    return map_subschemas_at(schema, lambda sub, where: grounded_keyword(sub, bad, (*at, *where)))


#: JSON Schema's keywords (2020-12 and the drafts before it) and OpenAPI's, for :func:`misspelt_keywords`.
_KEYWORDS = frozenset(
    "$schema $id id $ref $defs definitions $anchor $comment $vocabulary $dynamicRef $dynamicAnchor $recursiveRef "
    "$recursiveAnchor type enum const multipleOf maximum exclusiveMaximum minimum exclusiveMinimum maxLength "
    "minLength pattern format maxItems minItems uniqueItems maxContains minContains contains items prefixItems "
    "additionalItems unevaluatedItems maxProperties minProperties required dependentRequired dependencies "
    "properties patternProperties additionalProperties unevaluatedProperties propertyNames dependentSchemas "
    "allOf anyOf oneOf not if then else title description default examples example deprecated readOnly writeOnly "
    "contentEncoding contentMediaType contentSchema nullable discriminator xml externalDocs".split()
)
_FOLDED_KEYWORDS = frozenset(k.lower().strip("_$@") for k in _KEYWORDS)


def misspelt_keywords(schema: Any, at: tuple[str | int, ...] = ()) -> list[tuple[tuple[str | int, ...], str]]:
    """``[(path after at, message)]`` of the keys of ``schema`` and its subschemas that misspell a JSON Schema
    keyword (``maxLenght``), which JSON Schema would silently ignore: ``difflib`` ratio >= 0.85 to a keyword,
    and not a keyword, an ``x-`` extension, or a keyword with other case or ``_``/``$``/``@`` affixes."""
    if not isinstance(schema, dict):
        return []
    out = []
    for key in schema:
        if not isinstance(key, str) or key in _KEYWORDS or key.startswith("x-"):
            continue
        close = difflib.get_close_matches(key, _KEYWORDS, n=1, cutoff=0.85)
        if close and key.lower().strip("_$@") not in _FOLDED_KEYWORDS:
            out.append(((*at, key), f"unknown keyword {key!r}: did you mean {close[0]!r}?"))
    map_subschemas_at(schema, lambda sub, where: out.extend(misspelt_keywords(sub, (*at, *where))))
    return out


#: Keywords whose values are data, not schemas: a ``$ref`` key inside them is no reference.
_DATA_KEYWORDS = frozenset({"enum", "const", "default", "examples"})


def unresolvable_ref(schema: dict[str, Any]) -> tuple[str, str] | None:
    """``(path, message)`` of the first ``$ref`` that does not resolve inside ``schema`` (agentkit fetches none),
    else ``None`` (also for a nested ``$id``, left to jsonschema at call time)."""
    found: list[tuple[str, Any]] = []
    stack: list[tuple[Any, str]] = [(schema, "")]
    while stack:
        node, path = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        if isinstance(node, dict) and node is not schema:
            nested = node.get("$id", node.get("id"))
            if isinstance(nested, str) and not nested.startswith("#"):
                return None
        for k, v in items:
            if k == "$ref" and isinstance(node, dict) and isinstance(v, str):
                found.append((path, v))
            elif k not in _DATA_KEYWORDS:
                stack.append((v, f"{path}/{k}" if path else str(k)))
    refs = Refs(schema)
    for path, ref in sorted(found, key=lambda x: x[0]):
        try:
            refs.pointer(ref, path)
        except SchemaError:
            return (
                path,
                f"$ref {ref!r} does not resolve (a reference must point inside the schema: agentkit fetches none)",
            )
    return None


@functools.cache
def grammar_format_checker() -> Any:
    """A ``jsonschema.FormatChecker`` (built once) of exactly the string formats the tool-call grammar enforces
    (``schema.FORMATS``, with its regexes and length limits), so a remote model is held to what the embedded
    one can write; values that are not strings pass."""
    import jsonschema

    checker = jsonschema.FormatChecker(formats=())
    for fmt in FORMATS:

        def check(value: Any, _fmt: str = fmt) -> bool:
            return not isinstance(value, str) or format_matches(_fmt, value)

        checker.checks(fmt)(check)
    return checker


#: A number as YAML 1.1 (PyYAML) reads it as a *string*: an exponent without a dot or sign (``1e30``, ``2E-5``).
_YAML_STRING_NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


def yaml_number_hint(value: Any) -> str:
    """``" (YAML reads 1e30 as a string: write 1.0e+30)"`` for a number YAML 1.1 read as text, else ``""``."""
    if not isinstance(value, str) or not _YAML_STRING_NUMBER.fullmatch(value.strip()):
        return ""
    mantissa, _, exponent = value.strip().lower().partition("e")
    if "." in mantissa and exponent[:1] in "+-":
        return ""  # YAML 1.1's own spelling: quoted on purpose
    mantissa = mantissa if "." in mantissa else mantissa + ".0"
    exponent = exponent if exponent[:1] in "+-" else "+" + exponent
    return f" (YAML reads {value} as a string: write {mantissa}e{exponent})"
