"""How a tool's declaration is written: the function read (signature, type hints, docstring), grounded
parameters, the JSON Schema of a dict[int, V], checks of a written schema, and the string formats the tool-call
grammar enforces (checked for remote models too)."""

from __future__ import annotations

import difflib
import functools
import inspect
import math
import re
import sys
import typing
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

import pydantic
import pydantic.json_schema

from agentkit.errors import ToolDefinitionError
from schema import MAX_NESTING, nesting, too_deep
from schema.errors import SchemaError
from schema.normalize import drop_titles, map_subschemas_at
from schema.refs import Refs, in_place_loop, no_finite_value

# --------------------------------------------------------------------------------------------- docstrings


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """``(description, {parameter: description})`` of a docstring, parsed with griffe (Google ``Args:``, Sphinx
    ``:param name:``, NumPy ``Parameters``; lenient, its warnings not logged): the text before the first section,
    paragraphs kept, and each parameter's text with its lines joined."""
    if not doc:
        return "", {}
    desc, params = _parsed(inspect.cleandoc(doc), "auto")
    if not params:  # griffe reads the first line as the summary: one that opens the parameters section is not
        for style in ("google", "numpy", "sphinx"):
            opening, params = _parsed(inspect.cleandoc("_\n\n" + doc), style)
            if params and opening == "_":
                return "", params
    return desc, params


def _parsed(text: str, style: Literal["auto", "google", "numpy", "sphinx"]) -> tuple[str, dict[str, str]]:
    from griffe import Docstring

    if style == "auto":
        quiet = {s: {"warnings": False} for s in ("google", "numpy", "sphinx")}
        sections = Docstring(text).parse(style, per_style_options=quiet)
    else:
        sections = Docstring(text).parse(style, warnings=False)
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


# ------------------------------------------------------------------------------------------------ functions


def unwrapped(function: Callable[..., Any]) -> tuple[Callable[..., Any], set[str]]:
    """The function a ``functools.partial`` calls and the keywords it binds (``(function, set())`` otherwise)."""
    bound: set[str] = set()
    while isinstance(function, functools.partial):
        bound |= set(function.keywords)
        function = function.func
    return function, bound


def function_docstring(function: Callable[..., Any]) -> str | None:
    """The docstring of ``function`` as written (``inspect.getdoc`` would dedent the lines under a first-line
    ``Args:`` out of its section), of its ``__call__`` for a callable object whose class has none, else inherited."""
    doc = getattr(function, "__doc__", None)
    if doc is None and not inspect.isroutine(function) and not inspect.isclass(function):
        doc = getattr(type(function).__call__, "__doc__", None)
    return doc if isinstance(doc, str) else inspect.getdoc(function)


def signature_and_hints(
    name: str, function: Callable[..., Any], fname: str
) -> tuple[inspect.Signature | None, dict[str, Any]]:
    """The signature (``None`` if unreadable; a partial's without its bound keywords, which the model may not
    replace) and the resolved type hints; raises :class:`ToolDefinitionError` when they cannot be resolved."""
    try:
        sig = inspect.signature(function)
    except (TypeError, ValueError):
        return None, {}
    function, bound = unwrapped(function)
    if bound:  # a partial's keywords are fixed: not declared, not the model's
        sig = sig.replace(parameters=[p for n, p in sig.parameters.items() if n not in bound])
    try:
        return sig, typing.get_type_hints(function, include_extras=True)
    except Exception:
        target = function.__call__ if not inspect.isroutine(function) else function  # type: ignore[operator]
        try:  # also a hint naming a class local to the function that wrote @tool or Agent(tools=...)
            return sig, typing.get_type_hints(target, localns=caller_locals(target), include_extras=True)
        except Exception as exc:
            raise ToolDefinitionError(
                f"tool {name!r}: cannot resolve the type hints of {fname}: {exc}"
            ) from exc


def caller_locals(function: Any) -> dict[str, Any]:
    """The local names of the innermost frame outside agentkit (the code that called ``tool`` or ``Agent``): under
    ``from __future__ import annotations`` a hint naming a class defined in that function is only a string there.
    All of them when ``function`` was defined in that frame, else those missing from its globals (a caller's
    ``Item`` never hides the one of the tool's module)."""
    frame = sys._getframe(1)
    while frame.f_back is not None and frame.f_globals.get("__name__", "").split(".")[0] == "agentkit":
        frame = frame.f_back
    if getattr(function, "__qualname__", "").startswith(f"{frame.f_code.co_qualname}.<locals>."):
        return dict(frame.f_locals)
    own = getattr(function, "__globals__", {})
    return {k: v for k, v in frame.f_locals.items() if k not in own}


def refuse_unbound_method(
    name: str, function: Callable[..., Any], sig: inspect.Signature, hints: dict[str, Any]
) -> None:
    """Refuse a method taken from its class: it would ask the model for ``self`` or ``cls``."""
    first = next(iter(sig.parameters.values()), None)
    qualname = getattr(function, "__qualname__", "")
    in_class = "." in qualname and qualname.split(".")[-2] != "<locals>"
    if (
        first is not None
        and first.name in ("self", "cls")
        and first.name not in hints
        and inspect.isfunction(function)
        and in_class
    ):
        raise ToolDefinitionError(
            f"tool {name!r}: {qualname}() takes {first.name!r} first: a method taken from its class (@tool in a "
            f"class body, tool(Class.method)) would ask the model for {first.name!r}; make the tool from the bound "
            "method instead: tool(instance.method), Agent(tools=[instance.method])"
        )


def field_alias(annotation: Any) -> str | None:
    """The ``alias`` of an ``Annotated[..., Field(alias=NAME)]`` parameter (``from`` for ``from_``), or ``None``."""
    if typing.get_origin(annotation) is typing.Annotated:
        for meta in typing.get_args(annotation)[1:]:
            if isinstance(meta, pydantic.fields.FieldInfo) and isinstance(meta.alias, str):
                return meta.alias
    return None


def keywords_taken(sig: inspect.Signature | None) -> frozenset[str] | None:
    """The keyword arguments a function takes, ``None`` for any (``**kwargs``, or no readable signature)."""
    if sig is None or any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
        return None
    return frozenset(
        n for n, p in sig.parameters.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    )


def check_schema_fits(name: str, fname: str, sig: inspect.Signature | None, schema: dict[str, Any]) -> None:
    """Raise :class:`ToolDefinitionError` unless each property is a keyword the function takes and each of
    its parameters without a default is ``required`` (else every call would fail with a ``TypeError``)."""
    if sig is None:
        return
    named = [p for p in sig.parameters.values() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    takes = ", ".join(p.name for p in named) or "none"
    keywords = keywords_taken(sig)
    if keywords is not None:
        extra = [k for k in schema.get("properties") or {} if k not in keywords]
        if extra:
            raise ToolDefinitionError(
                f"tool {name!r}: parameters declares {', '.join(map(repr, extra))}, which {fname}() does not "
                f"take (its parameters: {takes})"
            )
    required = set(schema.get("required") or [])
    needed = [p.name for p in named if p.default is p.empty and p.name not in required]
    if needed:
        raise ToolDefinitionError(
            f"tool {name!r}: {fname}() needs {', '.join(map(repr, needed))}, which parameters does not list "
            "in 'required' (or give it a default in the function)"
        )


# ------------------------------------------------------------------------------------------------ schemas


#: A JSON object key pydantic reads as a ``dict[int, ...]`` key: an integer's digits.
INT_KEY_PATTERN = r"^-?(0|[1-9][0-9]*)$"


class ToolJsonSchema(pydantic.json_schema.GenerateJsonSchema):
    """Pydantic's JSON Schema of a tool's arguments, with a ``dict[int, V]``'s keys written as integers' digits
    (``patternProperties`` {:data:`INT_KEY_PATTERN`: V}, no other key) rather than any string, a set as an
    array (its duplicates are dropped, not refused) and a model, pydantic dataclass or TypedDict that leaves
    ``extra`` unset closed (``additionalProperties: false``); ``keeps_extra``: one sets it to ``allow`` or
    ``ignore``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.keeps_extra = False

    def set_schema(self, schema: Any) -> Any:
        # pydantic drops a set's duplicate items: no `uniqueItems`, which the embedded constraint cannot enforce
        return {k: v for k, v in super().set_schema(schema).items() if k != "uniqueItems"}

    frozenset_schema = set_schema

    def model_schema(self, schema: Any) -> Any:
        return self._closed(super().model_schema(schema), schema["cls"].model_config.get("extra"))

    # pydantic dataclasses and TypedDicts set ``extra`` in ``__pydantic_config__``, which the override also beats
    def dataclass_schema(self, schema: Any) -> Any:
        config = getattr(schema["cls"], "__pydantic_config__", None) or {}
        return self._closed(super().dataclass_schema(schema), config.get("extra"))

    def typed_dict_schema(self, schema: Any) -> Any:
        config = getattr(schema.get("cls"), "__pydantic_config__", None) or {}
        return self._closed(super().typed_dict_schema(schema), config.get("extra"))

    def _closed(self, out: Any, extra: str | None) -> Any:
        if extra is None and out.get("type") == "object":  # a RootModel of a dict keeps its values' schema
            out.setdefault("additionalProperties", False)  # an unknown key is refused (arguments_schema)
        self.keeps_extra |= extra in ("allow", "ignore")
        return out

    def dict_schema(self, schema: Any) -> Any:
        out = super().dict_schema(schema)
        keys = schema.get("keys_schema", {})
        if keys.get("type") == "int" and "patternProperties" not in out and "propertyNames" not in out:
            out["patternProperties"] = {INT_KEY_PATTERN: out.pop("additionalProperties", True)}
            out["additionalProperties"] = False
        return out


def arguments_schema(model: type[pydantic.BaseModel]) -> tuple[dict[str, Any], Literal["forbid"] | None]:
    """The JSON Schema a tool declares for ``model`` (:class:`ToolJsonSchema`, titles dropped) and the ``extra``
    its arguments are validated with: ``"forbid"`` (an unknown key, nested ones too, is an error) unless one of
    its models sets ``extra`` itself. Raises what ``model_json_schema`` raises."""
    gen = ToolJsonSchema()
    schema = drop_titles(model.model_json_schema(schema_generator=lambda **_: gen))  # type: ignore[arg-type]
    return schema, None if gen.keeps_extra else "forbid"


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


def unresolvable_ref(schema: dict[str, Any]) -> tuple[tuple[str | int, ...], str] | None:
    """``(path, message)`` of the first ``$ref`` that does not resolve inside ``schema`` (agentkit fetches none)
    or that leads back to itself in place (:func:`schema.refs.in_place_loop`), or the definition where a loop that
    leaves no finite value begins (:func:`schema.refs.no_finite_value`), else ``None`` (also for a nested ``$id``,
    left to jsonschema at call time)."""
    found: list[tuple[tuple[str | int, ...], Any]] = []
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(schema, ())]
    while stack:
        node, path = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        if isinstance(node, dict) and node is not schema:
            nested = node.get("$id", node.get("id"))
            if isinstance(nested, str) and not nested.startswith("#"):
                return None
        for k, v in items:
            if k == "$ref" and isinstance(node, dict):
                found.append((path, v))
            elif k not in _DATA_KEYWORDS:
                stack.append((v, (*path, k)))
    refs = Refs(schema)
    found.sort(key=lambda x: [str(p) for p in x[0]])
    targets = []  # each reference's resolved pointer, in the order of ``found``
    for path, ref in found:
        try:
            targets.append(refs.pointer(ref, "/".join(map(str, path))))
        except SchemaError as exc:
            return path, exc.message if not isinstance(ref, str) else (
                f"$ref {ref!r} does not resolve (a reference must point inside the schema: agentkit fetches none)"
            )
    if loop := in_place_loop(refs, targets):
        path, ref = found[targets.index(loop[0])]
        chain = " -> ".join(f"#{p}" for p in loop)
        return (
            path,
            f"$ref {ref!r} leads into a loop of references that reaches no property or item ({chain}): no value "
            "can be checked against it",
        )
    return no_finite_value(refs)


def leaves(node: Any, path: tuple[str | int, ...] = ()) -> Iterator[tuple[tuple[str | int, ...], Any]]:
    """``(path, value)`` of every value in ``node`` that is not a mapping or a list, in order (an explicit stack:
    no depth limit)."""
    stack: list[tuple[tuple[str | int, ...], Any]] = [(path, node)]
    while stack:
        at, value = stack.pop()
        if isinstance(value, (dict, list)):
            items = value.items() if isinstance(value, dict) else enumerate(value)
            stack.extend(((*at, k), v) for k, v in reversed(list(items)))
        else:
            yield at, value


def non_finite_numbers(schema: Any) -> list[tuple[tuple[str | int, ...], str]]:
    """``[(path, why)]`` of each NaN or infinity in ``schema`` (a bound, an ``enum`` value, a ``default``...):
    JSON has none, so no model could be sent the schema (a bundle refuses them when it is read)."""
    return [
        (path, f"must be a finite number, got {v} (JSON has no NaN or infinity)")
        for path, v in leaves(schema)
        if isinstance(v, float) and not math.isfinite(v)
    ]


def schema_problems(parameters: Any) -> list[tuple[tuple[str | int, ...], str]]:
    """``[(path, why)]`` of a written ``parameters`` schema (a tool's or a bundle's): not an object schema,
    nested deeper than ``schema.MAX_NESTING``, a NaN or an infinity; else each way it is not valid JSON Schema;
    else each misspelt keyword and a ``$ref`` that does not resolve inside it; ``[]`` when none."""
    import jsonschema

    if not isinstance(parameters, dict) or parameters.get("type", "object") != "object":
        return [(("type",) if isinstance(parameters, dict) else (), "must be a JSON Schema of type 'object'")]
    if (depth := nesting(parameters)) > MAX_NESTING:  # before anything recurses into it
        return [((), too_deep(depth))]
    if not_json := non_finite_numbers(parameters):
        return not_json
    # every error of the meta-schema, not only check_schema's first
    cls = jsonschema.validators.validator_for(parameters, default=jsonschema.Draft202012Validator)
    meta = jsonschema.validators.validator_for(cls.META_SCHEMA, default=cls)
    errors = meta(cls.META_SCHEMA, format_checker=meta.FORMAT_CHECKER).iter_errors(parameters)
    if invalid := [
        (tuple(e.path), f"not a valid JSON Schema: {e.message}{yaml_number_hint(e.instance)}") for e in errors
    ]:
        return invalid
    bad_ref = unresolvable_ref(parameters)
    return misspelt_keywords(parameters) + ([] if bad_ref is None else [bad_ref])


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
