"""Tool declarations and their JSON Schemas: normalisation, checks at registration, and a compact schema IR.

``normalize_tool`` accepts the declaration shapes met in practice (OpenAI ``{"type": "function", "function":
{...}}``, bare ``{"name", "description", "parameters"}``, BFCL with ``dict``/``float``/``tuple``/``any`` types,
Pydantic output with ``$defs``/``$ref``/``anyOf``/``title``) and returns a :class:`ToolSpec` whose
``parameters`` are plain JSON Schema (BFCL types translated, titles dropped, non-recursive ``$ref`` inlined).
Every schema is also compiled to the IR below, so an unsupported keyword or an unsatisfiable schema is a
:class:`SchemaError` at registration (naming the keyword and its JSON pointer), never a failure mid-generation.
Compile work is bounded (:data:`MAX_COMPILE_STEPS` here, ``MAX_GRAMMAR_CHARS`` for the grammar text): a schema
past the bound is refused the same way, so registering a tool never hangs.

The IR (:class:`Node` subclasses) is what the grammar compilers in :mod:`model.constraints.grammar` consume:
``allOf`` and sibling keywords are intersected, ``oneOf`` becomes ``anyOf`` when its branches are provably
disjoint, ``enum``/``const`` become literals, patterns are translated from ECMA-262 to llguidance's regex
syntax with JSON Schema's search semantics made explicit. Recursive ``$ref`` cycles stay as :class:`Ref` nodes
(grammar rules). The semantics follow JSON Schema Draft 2020-12 with the same departures as llguidance's JSON
Schema compiler (https://github.com/guidance-ai/llguidance/blob/main/docs/json_schema.md): properties come
in schema order, ``uniqueItems``/``not``/``if``/``contains``/``dependencies``/``propertyNames`` and unknown
string formats are rejected, integers are written without a fraction.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache
from typing import Any
from urllib.parse import unquote

# ----------------------------------------------------------------------------------------------------------
# Errors and the tool declaration
# ----------------------------------------------------------------------------------------------------------


class SchemaError(ValueError):
    """An unsupported keyword or an unsatisfiable schema, found at tool registration.

    Attributes:
        keyword: the JSON Schema keyword at fault (e.g. ``"not"``, ``"minimum"``, ``"$ref"``).
        path: JSON pointer of the schema holding it, relative to the tool's ``parameters``
            (``""`` is the root, e.g. ``"/properties/a/items"``).
    """

    def __init__(self, keyword: str, path: str, message: str) -> None:
        self.keyword = keyword
        self.path = path
        where = path or "/"
        super().__init__(f"{message} (keyword {keyword!r} at {where})")


@dataclass(frozen=True)
class ToolSpec:
    """A normalised tool declaration.

    Attributes:
        name: the tool's name as it appears in calls (``call:NAME{...}``).
        description: free text for the prompt (may be empty).
        parameters: JSON Schema of the arguments object (plain JSON Schema, see :func:`normalize_tool`).
    """

    name: str
    description: str
    parameters: dict[str, Any] = field(hash=False)

    def to_openai(self) -> dict[str, Any]:
        """The declaration as an OpenAI-style tool dict (what the chat template renders)."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


#: Characters a tool name cannot hold: the Gemma call syntax reads the name up to ``{``.
_BAD_NAME = re.compile(r"[{}\s<>:,\[\]\"]")


def normalize_tool(tool: Any) -> ToolSpec:
    """Normalise one tool declaration and check its argument schema.

    Args:
        tool: ``{"type": "function", "function": {"name", "description", "parameters"}}`` (OpenAI),
            ``{"name", "description", "parameters"}`` (bare or BFCL) or a :class:`ToolSpec` (returned as is).

    Returns:
        :class:`ToolSpec` whose ``parameters`` is an object schema with BFCL types translated
        (``dict`` -> ``object``, ``float`` -> ``number``, ``tuple`` -> ``array``, ``any`` -> no type),
        ``title`` keys dropped, BFCL ``optional`` flags dropped, non-recursive local ``$ref`` inlined
        (recursive ones are kept, with their targets collected under a root ``$defs``).

    Raises:
        SchemaError: the declaration is malformed (keyword ``"name"``/``"parameters"``), or its schema uses an
            unsupported keyword or is unsatisfiable (see :func:`build_ir`); ``path`` is relative to
            ``parameters``.
    """
    if isinstance(tool, ToolSpec):
        return tool
    if not isinstance(tool, dict):
        raise SchemaError("name", "", f"tool declaration must be a dict, got {type(tool).__name__}")
    fn = tool.get("function") if tool.get("type") == "function" or "function" in tool else tool
    if not isinstance(fn, dict):
        raise SchemaError("name", "", "tool declaration's 'function' must be a dict")
    name = fn.get("name")
    if not isinstance(name, str) or not name or _BAD_NAME.search(name):
        raise SchemaError(
            "name",
            "",
            f"tool name must be a non-empty string without spaces or any of '{{}}[]<>:,\"': {name!r}",
        )
    description = fn.get("description") or ""
    if not isinstance(description, str):
        raise SchemaError("description", "", f"tool {name!r}: description must be a string")
    params = fn.get("parameters")
    if params is None:
        params = {"type": "object", "properties": {}}
    if not isinstance(params, dict):
        raise SchemaError("parameters", "", f"tool {name!r}: parameters must be a JSON Schema object")
    clean = normalize_schema(params)
    ir = cached_ir(canonical(clean), False)
    if isinstance(object_part(ir.root, ir.defs), Never):
        raise SchemaError("type", "", f"tool {name!r}: parameters must describe a JSON object")
    return ToolSpec(name=name, description=description, parameters=clean)


# ----------------------------------------------------------------------------------------------------------
# Schema clean-up (BFCL types, titles, $ref inlining)
# ----------------------------------------------------------------------------------------------------------

_BFCL_TYPES = {"dict": "object", "float": "number", "tuple": "array", "list": "array", "int": "integer"}
_DROP_KEYS = {"title", "optional"}
#: Keywords whose value is a schema.
_SCHEMA_KEYS = ("items", "additionalProperties", "additionalItems", "not", "if", "then", "else", "contains")
#: Keywords whose value is a list of schemas.
_SCHEMA_LIST_KEYS = ("allOf", "anyOf", "oneOf", "prefixItems")
#: Keywords whose value maps names to schemas.
_SCHEMA_MAP_KEYS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")


def _translate_type(t: Any) -> Any:
    if isinstance(t, str):
        return _BFCL_TYPES.get(t, t)
    if isinstance(t, list):
        return [_BFCL_TYPES.get(x, x) if isinstance(x, str) else x for x in t]
    return t


def _clean(s: Any) -> Any:
    """Recursively translate BFCL types and drop titles (keeps everything else for :func:`build_ir`)."""
    if isinstance(s, list):
        return [_clean(x) for x in s]
    if not isinstance(s, dict):
        return s
    out: dict[str, Any] = {}
    for k, v in s.items():
        if k in _DROP_KEYS and not isinstance(v, dict):
            continue
        if k == "title" and isinstance(v, str):
            continue
        if k == "type":
            t = _translate_type(v)
            if t == "any" or (isinstance(t, list) and "any" in t):
                continue
            out[k] = t
        elif k in _SCHEMA_KEYS:
            out[k] = _clean(v)
        elif k in _SCHEMA_LIST_KEYS or (k == "items" and isinstance(v, list)):
            out[k] = [_clean(x) for x in v] if isinstance(v, list) else v
        elif k in _SCHEMA_MAP_KEYS:
            out[k] = {kk: _clean(vv) for kk, vv in v.items()} if isinstance(v, dict) else v
        else:
            out[k] = v
    return out


def _pointer_get(root: Any, pointer: str) -> Any:
    """Resolve a JSON pointer (``/a/b``) in ``root``; raises ``KeyError`` when missing."""
    cur = root
    if pointer in ("", "/"):
        return cur
    for raw in pointer.lstrip("/").split("/"):
        part = unquote(raw.replace("~1", "/").replace("~0", "~"))
        if isinstance(cur, list):
            cur = cur[int(part)]
        elif isinstance(cur, dict) and part in cur:
            cur = cur[part]
        else:
            raise KeyError(pointer)
    return cur


class _Refs:
    """Resolves local references of one schema document: JSON pointers (``#/a/b``), plain-name anchors
    (``#name`` from ``$anchor`` or a draft-4 ``id: "#name"``) and pointers prefixed with the root's own
    ``$id``/``id``."""

    def __init__(self, root: Any) -> None:
        self.root = root
        self.base = ""
        if isinstance(root, dict):
            rid = root.get("$id", root.get("id"))
            if isinstance(rid, str):
                self.base = rid.split("#", 1)[0]
        self.anchors: dict[str, str] = {}
        self._index(root, "")

    def _index(self, node: Any, path: str) -> None:
        if isinstance(node, list):
            for i, x in enumerate(node):
                self._index(x, f"{path}/{i}")
            return
        if not isinstance(node, dict):
            return
        for key in ("$id", "id", "$anchor"):
            v = node.get(key)
            if isinstance(v, str):
                name = v[1:] if v.startswith("#") else (v if key == "$anchor" else "")
                if name and not name.startswith("/"):
                    self.anchors.setdefault(name, path)
        for k, v in node.items():
            if k not in ("enum", "const", "default", "examples") and isinstance(v, (dict, list)):
                self._index(v, f"{path}/{_esc(k)}")

    def pointer(self, ref: Any, path: str) -> str:
        """The JSON pointer ``ref`` designates in the root document.

        Raises:
            SchemaError: a remote reference or a dangling one (keyword ``"$ref"``).
        """
        if not isinstance(ref, str):
            raise SchemaError("$ref", path, f"$ref must be a string, got {ref!r}")
        r = ref
        if self.base and r.startswith(self.base):
            r = r[len(self.base) :]
        if not r.startswith("#"):
            raise SchemaError("$ref", path, f"only local references ('#...') are supported, got {ref!r}")
        frag = r[1:]
        if frag and not frag.startswith("/"):
            if frag not in self.anchors:
                raise SchemaError("$ref", path, f"reference {ref!r} does not resolve")
            return self.anchors[frag]
        try:
            _pointer_get(self.root, frag)
        except (KeyError, IndexError, ValueError):
            raise SchemaError("$ref", path, f"reference {ref!r} does not resolve") from None
        return frag


def normalize_schema(schema: Any) -> Any:
    """Clean a tool's argument schema: BFCL types, no titles, local ``$ref`` inlined where not recursive.

    Args:
        schema: a JSON Schema (dict or bool).

    Returns:
        A new schema (the input is not modified). Recursive references are rewritten to
        ``{"$ref": "#/$defs/<name>"}`` with the targets under the root's ``$defs``.

    Raises:
        SchemaError: a non-local or dangling ``$ref`` (keyword ``"$ref"``).
    """
    root = _clean(schema)
    refs = _Refs(root)
    recursive = _recursive_targets(root, refs)
    try:
        return _inline_all(root, recursive, refs, _MAX_INLINED_NODES)
    except _TooLarge:
        # Shared definitions referenced along many paths: keep every reference instead of inlining (the
        # result is then no larger than the input, so no limit applies).
        return _inline_all(root, set(recursive) | _all_refs(root, refs), refs, None)


class _TooLarge(Exception):
    pass


#: Inlining stops (and references are kept) beyond this many schema nodes.
_MAX_INLINED_NODES = 20_000


def _direct_refs(node: Any, path: str, out: list[str], refs: _Refs) -> None:
    """Collect the local ``$ref`` pointers found in ``node`` (not following them, skipping definitions)."""
    if isinstance(node, list):
        for i, x in enumerate(node):
            _direct_refs(x, f"{path}/{i}", out, refs)
        return
    if not isinstance(node, dict):
        return
    for k, v in node.items():
        if k == "$ref":
            out.append(refs.pointer(v, path))
        elif k in _SCHEMA_KEYS or k in _SCHEMA_LIST_KEYS:
            _direct_refs(v, f"{path}/{k}", out, refs)
        elif k in _SCHEMA_MAP_KEYS and k not in ("$defs", "definitions") and isinstance(v, dict):
            for name, sub in v.items():
                _direct_refs(sub, f"{path}/{k}/{_esc(name)}", out, refs)


def _all_refs(root: Any, refs: _Refs) -> set[str]:
    out: list[str] = []
    seen: set[str] = set()
    todo = [""]
    while todo:
        ptr = todo.pop()
        if ptr in seen:
            continue
        seen.add(ptr)
        found: list[str] = []
        _direct_refs(_pointer_get(root, ptr), ptr, found, refs)
        out.extend(found)
        todo.extend(found)
    return set(out)


def _recursive_targets(root: Any, refs: _Refs) -> set[str]:
    """Pointers that are targets of back edges in a depth-first walk of the reference graph (cycle breakers).

    Raises:
        SchemaError: a non-local or dangling ``$ref``.
    """
    color: dict[str, int] = {}  # 1 = on the stack, 2 = done
    recursive: set[str] = set()
    stack: list[tuple[str, list[str]]] = []

    def edges(ptr: str) -> list[str]:
        found: list[str] = []
        _direct_refs(_pointer_get(root, ptr), ptr, found, refs)
        return found

    color[""] = 1
    stack.append(("", edges("")))
    while stack:
        ptr, todo = stack[-1]
        if not todo:
            color[ptr] = 2
            stack.pop()
            continue
        nxt = todo.pop(0)
        c = color.get(nxt, 0)
        if c == 1:
            recursive.add(nxt)
        elif c == 0:
            color[nxt] = 1
            stack.append((nxt, edges(nxt)))
    return recursive


def _def_names(ptrs: set[str]) -> dict[str, str]:
    names: dict[str, str] = {}
    used: set[str] = set()
    for ptr in sorted(ptrs):
        base = re.sub(r"[^A-Za-z0-9_]+", "_", ptr.rsplit("/", 1)[-1]) or "root"
        name, i = base, 1
        while name in used:
            i += 1
            name = f"{base}_{i}"
        used.add(name)
        names[ptr] = name
    return names


def _inline_all(root: Any, keep: set[str], refs: _Refs, limit: int | None) -> Any:
    names = _def_names(keep)
    count = [0]

    def inline(node: Any) -> Any:
        """Inline references in a schema (a dict or bool; lists only under list keywords)."""
        count[0] += 1
        if limit is not None and count[0] > limit:
            raise _TooLarge
        if isinstance(node, list):
            return [inline(x) for x in node]
        if not isinstance(node, dict):
            return node
        out: dict[str, Any] = {}
        ref_target: Any = None
        ref_at = -1
        for k, v in node.items():
            if k in ("$defs", "definitions"):
                continue
            if k == "$ref":
                ptr = refs.pointer(v, "")
                if ptr in names:
                    out["$ref"] = f"#/$defs/{names[ptr]}"
                else:
                    ref_target = inline(_pointer_get(root, ptr))
                    ref_at = len(out)
                continue
            if k in _SCHEMA_KEYS or k in _SCHEMA_LIST_KEYS:
                out[k] = inline(v)
            elif k in _SCHEMA_MAP_KEYS and isinstance(v, dict):
                out[k] = {name: inline(sub) for name, sub in v.items()}
            else:
                out[k] = v
        if ref_target is None:
            return out
        # Keep the reference where it was among its siblings (keyword order fixes property order).
        items = list(out.items())
        notes = {k: v for k, v in items if k in _ANNOTATIONS}
        before = {k: v for k, v in items[:ref_at] if k not in _ANNOTATIONS}
        after = {k: v for k, v in items[ref_at:] if k not in _ANNOTATIONS}
        parts = [p for p in (before, ref_target, after) if p != {}]
        if len(parts) == 1 and not notes:
            return parts[0]
        return {**notes, "allOf": parts}

    if "" in names:
        result: Any = {"$ref": f"#/$defs/{names['']}"}
    else:
        result = inline(root)
    if names and isinstance(result, dict):
        result = {**result, "$defs": {name: inline(_pointer_get(root, ptr)) for ptr, name in names.items()}}
    return result


# ----------------------------------------------------------------------------------------------------------
# The IR
# ----------------------------------------------------------------------------------------------------------


class Node:
    """Base class of the schema IR (immutable, hashable, compared structurally)."""

    __slots__ = ()


@dataclass(frozen=True)
class AnyNode(Node):
    """Any JSON value."""


@dataclass(frozen=True)
class Never(Node):
    """No value (``false``, or an unsatisfiable combination). ``keyword``/``path`` say where it came from."""

    reason: str
    keyword: str = ""
    path: str = ""


@dataclass(frozen=True)
class Null(Node):
    """``null``."""


@dataclass(frozen=True)
class Bool(Node):
    """``true``/``false``."""


@dataclass(frozen=True)
class Num(Node):
    """A number; ``integer`` means no fraction or exponent. Bounds are inclusive unless ``excl_*``."""

    integer: bool = False
    minimum: float | None = None
    maximum: float | None = None
    excl_min: float | None = None
    excl_max: float | None = None
    multiple_of: float | None = None

    def json_schema(self) -> dict[str, Any]:
        """The equivalent JSON Schema (for llguidance's number regexes)."""
        out: dict[str, Any] = {"type": "integer" if self.integer else "number"}
        for k, v in (
            ("minimum", self.minimum),
            ("maximum", self.maximum),
            ("exclusiveMinimum", self.excl_min),
            ("exclusiveMaximum", self.excl_max),
            ("multipleOf", self.multiple_of),
        ):
            if v is not None:
                out[k] = _num_out(v)
        return out

    @property
    def bounded(self) -> bool:
        """True when any bound or ``multipleOf`` applies (then llguidance's regexes are needed)."""
        return any(
            v is not None
            for v in (self.minimum, self.maximum, self.excl_min, self.excl_max, self.multiple_of)
        )


@dataclass(frozen=True)
class Str(Node):
    """A string. ``patterns``: ECMA patterns (JSON Schema search semantics); ``formats``: format names;
    ``grounded``: the value must be a span of the conversation (``x-grounded: true``; see
    :mod:`model.constraints.grounding`)."""

    min_len: int = 0
    max_len: int | None = None
    patterns: tuple[str, ...] = ()
    formats: tuple[str, ...] = ()
    grounded: bool = False


@dataclass(frozen=True)
class Lit(Node):
    """One JSON scalar (string, number, bool or null), from ``enum``/``const``."""

    value: Any
    kind: str  # "str" | "int" | "float" | "bool" | "null"

    @staticmethod
    def of(value: Any) -> Lit:
        """Wrap a scalar, tagging its JSON type (``True`` is not ``1``)."""
        if value is None:
            return Lit(None, "null")
        if isinstance(value, bool):
            return Lit(value, "bool")
        if isinstance(value, int):
            return Lit(value, "int")
        if isinstance(value, float):
            return Lit(value, "float")
        if isinstance(value, str):
            return Lit(value, "str")
        raise TypeError(f"not a JSON scalar: {value!r}")


@dataclass(frozen=True)
class Arr(Node):
    """An array: ``prefix`` item schemas, then ``items`` for the rest (``Never`` = no more items)."""

    min_items: int = 0
    max_items: int | None = None
    prefix: tuple[Node, ...] = ()
    items: Node = AnyNode()


@dataclass(frozen=True)
class Obj(Node):
    """An object. ``props`` in emission order; ``required`` in order (names not in ``props`` come after them,
    valued by ``pattern_props``/``additional``); ``additional`` ``None`` means "not specified" (a compile
    option decides: JSON Schema says any value, tool arguments default to none). ``pattern_props``: ECMA
    pattern -> schema."""

    props: tuple[tuple[str, Node], ...] = ()
    required: tuple[str, ...] = ()
    additional: Node | None = None
    pattern_props: tuple[tuple[str, Node], ...] = ()
    min_props: int = 0
    max_props: int | None = None

    def required_only(self) -> list[str]:
        """Required names not declared in ``props`` (in ``required`` order)."""
        declared = {k for k, _ in self.props}
        return [r for r in self.required if r not in declared]

    def prop(self, name: str) -> Node | None:
        """The declared schema of property ``name`` (``None`` when not declared)."""
        for k, v in self.props:
            if k == name:
                return v
        return None


@dataclass(frozen=True)
class AnyOf(Node):
    """One of several schemas (at least two, none ``Never``/``AnyNode``)."""

    options: tuple[Node, ...]


@dataclass(frozen=True)
class OneOf(Node):
    """``oneOf`` whose branches are not (yet) provably disjoint. Intersections distribute over it and
    re-check; one that survives the whole schema is an error (:func:`build_ir`)."""

    options: tuple[Node, ...]
    path: str = ""


@dataclass(frozen=True)
class Ref(Node):
    """A recursive reference to ``IR.defs[name]``."""

    name: str


def _memo_hash(cls: type) -> None:
    """Give an IR class a memoised structural hash and an equality that checks hashes first.

    The dataclass-generated ``__hash__`` recomputes the hash of the whole subtree on every call; schemas
    with shared definitions (Kubernetes, SchemaStore) build trees of thousands of nodes that are hashed
    again at every dictionary lookup, which made compile time quadratic (16.7 s for one MaskBench schema).
    Nodes are immutable, so the hash is computed once and kept in the instance ``__dict__``.
    """
    structural_hash: Any = cls.__hash__
    structural_eq: Any = cls.__eq__

    def __hash__(self: Any) -> int:
        d = self.__dict__
        h = d.get("_hash")
        if h is None:
            h = d["_hash"] = structural_hash(self)
        return int(h)

    def __eq__(self: Any, other: Any) -> Any:
        if self is other:
            return True
        if other.__class__ is self.__class__ and hash(self) != hash(other):
            return False
        return structural_eq(self, other)

    cls.__hash__ = __hash__  # type: ignore[method-assign,assignment]
    cls.__eq__ = __eq__  # type: ignore[method-assign,assignment]


for _cls in (AnyNode, Never, Null, Bool, Num, Str, Lit, Arr, Obj, AnyOf, OneOf, Ref):
    _memo_hash(_cls)


@dataclass
class IR:
    """A compiled schema: the root node, the definitions its :class:`Ref` nodes point to, and the JSON
    pointer of each definition in the (normalised) schema (``paths``, for error messages)."""

    root: Node
    defs: dict[str, Node]
    paths: dict[str, str] = field(default_factory=dict)


# ----------------------------------------------------------------------------------------------------------
# Patterns and formats
# ----------------------------------------------------------------------------------------------------------

_HEX = "[0-9a-fA-F]"
_DEC_OCTET = "(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[0-9])"
_IPV4 = rf"(?:{_DEC_OCTET}\.){{3}}{_DEC_OCTET}"
_H16 = f"{_HEX}{{1,4}}"
_LS32 = f"(?:{_H16}:{_H16}|{_IPV4})"
_IPV6 = "|".join(
    [
        f"(?:{_H16}:){{6}}{_LS32}",
        f"::(?:{_H16}:){{5}}{_LS32}",
        f"(?:{_H16})?::(?:{_H16}:){{4}}{_LS32}",
        f"(?:(?:{_H16}:){{0,1}}{_H16})?::(?:{_H16}:){{3}}{_LS32}",
        f"(?:(?:{_H16}:){{0,2}}{_H16})?::(?:{_H16}:){{2}}{_LS32}",
        f"(?:(?:{_H16}:){{0,3}}{_H16})?::{_H16}:{_LS32}",
        f"(?:(?:{_H16}:){{0,4}}{_H16})?::{_LS32}",
        f"(?:(?:{_H16}:){{0,5}}{_H16})?::{_H16}",
        f"(?:(?:{_H16}:){{0,6}}{_H16})?::",
    ]
)
_DATE = (
    "[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])"
    "|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-9]))"
)
_TIME = r"(?:[01][0-9]|2[0-3]):[0-5][0-9]:(?:[0-5][0-9]|60)(?:\.[0-9]+)?(?:[zZ]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
_DUR_TIME = "T(?:[0-9]+H(?:[0-9]+M(?:[0-9]+S)?)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S)"
_DUR_DATE = "(?:[0-9]+D|[0-9]+M(?:[0-9]+D)?|[0-9]+Y(?:[0-9]+M(?:[0-9]+D)?)?)"
_LABEL = "[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?"
_ATEXT = r"[a-zA-Z0-9!#$%&'*+\-/=?^_`{|}~]"
_UNRESERVED = r"[a-zA-Z0-9\-._~]"
_PCT = f"%{_HEX}{{2}}"
_SUB_DELIMS = r"[!$&'()*+,;=]"
_PCHAR = f"(?:{_UNRESERVED}|{_PCT}|{_SUB_DELIMS}|[:@])"
_URI = (
    r"[a-zA-Z][a-zA-Z0-9+\-.]*:"
    "(?:"
    f"//(?:(?:{_UNRESERVED}|{_PCT}|{_SUB_DELIMS}|:)*@)?"
    rf"(?:\[(?:{_IPV6}|v{_HEX}+\.(?:{_UNRESERVED}|{_SUB_DELIMS}|:)+)\]|{_IPV4}|(?:{_UNRESERVED}|{_PCT}|{_SUB_DELIMS})*)"
    "(?::[0-9]*)?"
    f"(?:/{_PCHAR}*)*"
    f"|/(?:{_PCHAR}+(?:/{_PCHAR}*)*)?"
    f"|{_PCHAR}+(?:/{_PCHAR}*)*"
    "|"
    ")"
    rf"(?:\?(?:{_PCHAR}|[/?])*)?"
    rf"(?:#(?:{_PCHAR}|[/?])*)?"
)

#: String formats and their regexes (full match), written from the RFCs: date/time/date-time/duration
#: RFC 3339 (+ appendix A), email RFC 5321 mailbox (dot-string or IPv4 literal), hostname RFC 1123,
#: ipv4/ipv6 RFC 3986 section 3.2.2, uuid RFC 4122, uri RFC 3986. The regexes use the subset of syntax
#: shared by Python's ``re`` and llguidance (Rust ``regex``).
FORMATS: dict[str, str] = {
    "date": _DATE,
    "time": _TIME,
    "date-time": f"{_DATE}[tT]{_TIME}",
    "duration": f"P(?:{_DUR_DATE}(?:{_DUR_TIME})?|{_DUR_TIME}|[0-9]+W)",
    "email": rf"{_ATEXT}+(?:\.{_ATEXT}+)*@(?:{_LABEL}(?:\.{_LABEL})*|\[{_IPV4}\])",
    "hostname": f"{_LABEL}(?:\\.{_LABEL})*",
    "ipv4": _IPV4,
    "ipv6": _IPV6,
    "uuid": f"{_HEX}{{8}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{12}}",
    "uri": _URI,
}

_LOOKAROUND = re.compile(r"\(\?(?:=|!|<=|<!)")
_BACKREF = re.compile(r"\\(?:[1-9]|k<)")
_RUST_META = set("\\.+*?()|[]{}^$#&-~")


def _split_top(p: str) -> list[str]:
    """Split ``p`` at top-level ``|`` (outside groups and classes)."""
    parts, depth, in_cls, cur, i = [], 0, False, [], 0
    while i < len(p):
        c = p[i]
        if c == "\\" and i + 1 < len(p):
            cur.append(p[i : i + 2])
            i += 2
            continue
        if in_cls:
            if c == "]":
                in_cls = False
        elif c == "[":
            in_cls = True
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "|" and depth == 0:
            parts.append("".join(cur))
            cur = []
            i += 1
            continue
        cur.append(c)
        i += 1
    parts.append("".join(cur))
    return parts


_QUANT = re.compile(r"\{\d+(?:,\d*)?\}")


def _translate_body(p: str, path: str) -> str:
    """Translate ECMA-262 regex syntax to llguidance's (Rust ``regex``) inside ``/.../`` of a Lark grammar."""
    out: list[str] = []
    i, in_cls, cls_first = 0, False, False
    while i < len(p):
        c = p[i]
        if c == "\\":
            if i + 1 >= len(p):
                raise SchemaError("pattern", path, f"pattern {p!r} ends with a lone backslash")
            e = p[i + 1]
            i += 2
            cls_first = False
            if e == "d":
                out.append("0-9" if in_cls else "[0-9]")
            elif e == "D" and not in_cls:
                out.append("[^0-9]")
            elif e == "w":
                out.append("0-9A-Za-z_" if in_cls else "[0-9A-Za-z_]")
            elif e == "W" and not in_cls:
                out.append("[^0-9A-Za-z_]")
            elif e == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", p[i : i + 4]):
                out.append("\\u{" + p[i : i + 4] + "}")
                i += 4
            elif e == "0":
                out.append("\\x00")
            elif e == "c" and i < len(p) and p[i].isalpha():
                out.append(f"\\x{ord(p[i].upper()) - 64:02x}")
                i += 1
            elif e == "/":
                out.append("\\/")
            elif e.isalnum() or e in _RUST_META:
                out.append("\\" + e)  # \s \n \t \xHH \p{..}...: llguidance checks the rest
            else:
                out.append(e)  # ECMA identity escape of a character Rust does not allow escaped
            continue
        if in_cls:
            if c == "]" and not cls_first:
                in_cls = False
                out.append("]")
            elif c in "[&~":
                out.append("\\" + c)
            elif c == "/":
                out.append("\\/")
            else:
                out.append(c)
            cls_first = False
            i += 1
            continue
        if c == "[":
            neg = p[i + 1 : i + 2] == "^"
            j = i + (2 if neg else 1)
            if p[j : j + 1] == "]":  # ECMA: "[]" matches nothing, "[^]" any character
                if not neg:
                    raise SchemaError(
                        "pattern", path, f"empty character class in pattern {p!r} is not supported"
                    )
                out.append("(?s:.)")
                i = j + 1
                continue
            out.append("[^" if neg else "[")
            in_cls, cls_first = True, False
            i = j
            continue
        if c == "{":
            m = _QUANT.match(p, i)
            if m and out:
                out.append(m.group(0))
                i = m.end()
                continue
            out.append("\\{")
        elif c == "}":
            out.append("\\}")
        elif c == "/":
            out.append("\\/")
        elif c in "^$":
            raise SchemaError("pattern", path, f"anchor {c!r} inside pattern {p!r} is not supported")
        else:
            out.append(c)
        i += 1
    if in_cls:
        raise SchemaError("pattern", path, f"unterminated character class in pattern {p!r}")
    return "".join(out)


def _groups(b: str) -> list[tuple[int, int]]:
    """(start, end) of the top-level groups of ``b`` (``end`` = index of the closing parenthesis)."""
    spans, depth, in_cls, i, start = [], 0, False, 0, 0
    while i < len(b):
        c = b[i]
        if c == "\\":
            i += 2
            continue
        if in_cls:
            in_cls = c != "]"
        elif c == "[":
            in_cls = True
            if b[i + 1 : i + 2] == "]":
                i += 1
        elif c == "(":
            if depth == 0:
                start = i
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                spans.append((start, i))
        i += 1
    return spans


def _has_anchor(b: str) -> bool:
    i, in_cls = 0, False
    while i < len(b):
        c = b[i]
        if c == "\\":
            i += 2
            continue
        if in_cls:
            in_cls = c != "]"
        elif c == "[":
            in_cls = True
            if b[i + 1 : i + 2] == "^":
                i += 1
        elif c in "^$":
            return True
        i += 1
    return False


def _group_inner(b: str, start: int, end: int) -> str | None:
    """The alternatives text of group ``b[start:end+1]``, or None for lookarounds/named groups we keep."""
    inner = b[start + 1 : end]
    if inner.startswith("?:"):
        return inner[2:]
    if inner.startswith("?<") and not inner.startswith(("?<=", "?<!")):
        close = inner.find(">")
        return inner[close + 1 :] if close > 0 else None
    return None if inner.startswith("?") else inner


def _anchor_branches(p: str, depth: int = 0) -> list[str]:
    """Alternatives of ``p`` with every ``^``/``$`` moved to an alternative's edge where possible."""
    out: list[str] = []
    for b in _split_top(p):
        out.extend(_expand_branch(b, depth))
    return out


def _expand_branch(b: str, depth: int) -> list[str]:
    if depth > 8 or not _has_anchor(b.removeprefix("^").removesuffix("$")):
        return [b]
    spans = _groups(b)
    # A trailing group (no quantifier after it) holding anchors: distribute the prefix over its alternatives.
    if spans and spans[-1][1] == len(b) - 1:
        s0, e0 = spans[-1]
        inner = _group_inner(b, s0, e0)
        if inner is not None and _has_anchor(inner):
            return [x for alt in _split_top(inner) for x in _expand_branch(b[:s0] + alt, depth + 1)]
    if spans and spans[0][0] == 0:
        s0, e0 = spans[0]
        rest = b[e0 + 1 :]
        if not rest[:1] or rest[:1] not in "*+?{":
            inner = _group_inner(b, s0, e0)
            if inner is not None and _has_anchor(inner):
                return [x for alt in _split_top(inner) for x in _expand_branch(alt + rest, depth + 1)]
    return [b]


@lru_cache(maxsize=4096)
def pattern_to_regex(pattern: str, path: str = "") -> str:
    """Translate a JSON Schema ``pattern`` (ECMA-262, unanchored search) to a full-match llguidance regex.

    Top-level alternatives anchored with ``^``/``$`` keep their anchors; unanchored ends get ``(?s:.*)``.
    Anchors inside a group at either end of an alternative are distributed over the group's alternatives
    (``(^a|^b)``, ``^(x|$)``, ``(\\d+$)``).
    ``\\d`` and ``\\w`` are ASCII as in ECMA-262; ``/`` is escaped for Lark's ``/.../`` literals.

    Raises:
        SchemaError: lookaround, backreference, an anchor inside the pattern, or syntax llguidance rejects
            (keyword ``"pattern"``).
    """
    if _LOOKAROUND.search(pattern):
        raise SchemaError("pattern", path, f"lookaround in pattern {pattern!r} is not supported")
    if _BACKREF.search(pattern):
        raise SchemaError("pattern", path, f"backreference in pattern {pattern!r} is not supported")
    branches = []
    for b in _anchor_branches(pattern):
        start = b.startswith("^")
        if start:
            b = b[1:]
        end = b.endswith("$") and not b.endswith("\\$")
        if end:
            b = b[:-1]
        body = _translate_body(b, path)
        branches.append(("" if start else "(?s:.*)") + f"(?:{body})" + ("" if end else "(?s:.*)"))
    rx = branches[0] if len(branches) == 1 else "|".join(f"(?:{b})" for b in branches)
    _check_regex(rx, pattern, path)
    return rx


@lru_cache(maxsize=4096)
def _regex_error(rx: str) -> str:
    import llguidance

    return str(
        llguidance.LLMatcher.validate_grammar(llguidance.LLMatcher.grammar_from_lark(f"start: /{rx}/"))
    )


def _check_regex(rx: str, pattern: str, path: str) -> None:
    err = _regex_error(rx)
    if err:
        raise SchemaError(
            "pattern", path, f"pattern {pattern!r} is not supported: {err.splitlines()[0][:200]}"
        )


@lru_cache(maxsize=4096)
def _py_pattern(pattern: str) -> re.Pattern[str] | None:
    try:
        return re.compile(pattern, re.ASCII)
    except re.error:
        return None


def pattern_matches(pattern: str, text: str) -> bool | None:
    """``re.search`` of a JSON Schema pattern in ``text`` with Python's engine; ``None`` if it cannot compile."""
    rx = _py_pattern(pattern)
    return None if rx is None else rx.search(text) is not None


# ----------------------------------------------------------------------------------------------------------
# Building the IR
# ----------------------------------------------------------------------------------------------------------

_ANNOTATIONS = {
    "$schema",
    "$id",
    "id",
    "$comment",
    "$anchor",
    "$defs",
    "definitions",
    "title",
    "description",
    "default",
    "examples",
    "readOnly",
    "writeOnly",
    "deprecated",
    "contentMediaType",
    "contentEncoding",
    "contentSchema",
    "optional",
    "discriminator",
    "nullable",
    "$vocabulary",
}
_UNSUPPORTED = {
    "not",
    "if",
    "then",
    "else",
    "dependencies",
    "dependentRequired",
    "dependentSchemas",
    "contains",
    "minContains",
    "maxContains",
    "propertyNames",
    "unevaluatedProperties",
    "unevaluatedItems",
    "uniqueItems",
    "$dynamicRef",
    "$recursiveRef",
    "$dynamicAnchor",
    "$recursiveAnchor",
}
_TYPES = ("null", "boolean", "integer", "number", "string", "array", "object")
_NUM_KEYS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")
_STR_KEYS = ("minLength", "maxLength", "pattern", "format", "x-grounded")
_ARR_KEYS = ("items", "prefixItems", "additionalItems", "minItems", "maxItems")
_OBJ_KEYS = (
    "properties",
    "required",
    "additionalProperties",
    "patternProperties",
    "minProperties",
    "maxProperties",
)
_MAX_INTERSECT_DEPTH = 60
#: Bound on the work of compiling one schema to the IR, in steps: one subschema built, one enum value, one
#: pair of nodes intersected or one enum value checked against a constraint (a few microseconds each), and
#: 200 per distinct regex (:data:`_PATTERN_STEPS`). A schema that needs more is refused at registration with
#: a :class:`SchemaError` naming the keyword and path where the bound was reached, so registering a tool
#: never hangs. Of MaskBench's 11,305 schemas (the shared dev file and the hard groups) only one needs more
#: (SchemaStore's Azure Pipelines schema: an ``anyOf`` of ~500 objects each narrowing a ~500-value ``enum``,
#: 913k steps, 4-17 s to compile before this bound, refused after 0.3 s now); the next needs 56k.
MAX_COMPILE_STEPS = 100_000
#: Steps charged per distinct ``pattern``/``patternProperties`` regex (each is compiled once by llguidance to
#: check it, about 2 ms: 200 steps at the ~10 us a step costs on average).
_PATTERN_STEPS = 200
#: Keywords named when a subschema's size trips the bound (the first one it holds).
_SIZE_KEYWORDS = ("$ref", "properties", "items", "prefixItems", "anyOf", "oneOf", "allOf", "enum")
_CONSTRAINT_KEYS = {"type", *_NUM_KEYS, *_STR_KEYS, *_ARR_KEYS, *_OBJ_KEYS}


def _check_grounded(s: dict[str, Any], path: str) -> None:
    """``x-grounded: true`` marks a free string (a span of the conversation): refuse it elsewhere.

    Raises:
        SchemaError: on a schema that cannot be a string, or with ``enum``/``const``/``pattern``/``format`` (a
            grounded value is any span; combine the constraints in the tool instead).
    """
    for k in ("enum", "const", "pattern", "format"):
        if k in s:
            raise SchemaError(
                "x-grounded",
                path,
                f"a grounded value is a free span of the conversation: it cannot also have {k!r}",
            )
    types: list[Any] = []
    if "type" in s:
        types = s["type"] if isinstance(s["type"], list) else [s["type"]]
    else:
        for k in ("anyOf", "oneOf"):
            for b in s.get(k) or []:
                if isinstance(b, dict) and "type" in b:
                    types += b["type"] if isinstance(b["type"], list) else [b["type"]]
    if "string" not in types:
        raise SchemaError(
            "x-grounded",
            path,
            f"only strings can be grounded (a span of the conversation), this is {types or 'untyped'}",
        )


def _trivial(key: str, value: Any) -> bool:
    """True when an unsupported keyword's value constrains nothing (e.g. ``uniqueItems: false``)."""
    if key == "uniqueItems":
        return value is False
    if key in ("dependencies", "dependentRequired", "dependentSchemas"):
        return value == {}
    if key in ("propertyNames", "unevaluatedProperties", "unevaluatedItems"):
        return value is True or value == {}
    if key in ("minContains",):
        return value == 0 and True
    return False


def _num_out(v: float) -> float | int:
    return int(v) if isinstance(v, float) and v.is_integer() and abs(v) < 2**53 else v


class _Builder:
    def __init__(self, root: Any, additional_default: bool) -> None:
        self.root = root
        self.refs = _Refs(root)
        self.defs: dict[str, Node] = {}
        self.additional_default = additional_default
        self._ref_nodes: dict[str, Node] = {}
        self._in_progress: set[str] = set()
        self._ref_names: dict[str, str] = {}
        self._depth = 0
        self._union = 0  # > 0 while building anyOf/oneOf branches
        self.steps = 0  # compile work so far (see charge)
        self._refs_memo: dict[Node, frozenset[str]] = {}
        self._patterns: set[str] = set()

    # -- references -------------------------------------------------------------------------------------
    def ref(self, ref: Any, path: str) -> Node:
        ptr = self.refs.pointer(ref, path)
        if ptr in self._ref_nodes:
            return self._ref_nodes[ptr]
        if ptr not in self._ref_names:
            self._ref_names[ptr] = f"d{len(self._ref_names)}"
        name = self._ref_names[ptr]
        if ptr in self._in_progress:
            return Ref(name)
        try:
            target = _pointer_get(self.root, ptr)
        except (KeyError, IndexError, ValueError):
            raise SchemaError("$ref", path, f"reference {ref!r} does not resolve") from None
        self._in_progress.add(ptr)
        node = self.build(target, ptr)
        self._in_progress.discard(ptr)
        self.defs[name] = node
        # A reference that was used recursively while being built stays a rule; others are inlined.
        result: Node = Ref(name) if self._is_referenced(name, node) else node
        self._ref_nodes[ptr] = result
        return result

    def _is_referenced(self, name: str, node: Node) -> bool:
        return name in self._free_refs(node)

    def _free_refs(self, n: Node) -> frozenset[str]:
        """Names of the :class:`Ref` nodes inside ``n`` (not following them), memoised per node: walking
        every definition's tree again for each reference was quadratic in the number of definitions."""
        hit = self._refs_memo.get(n)
        if hit is not None:
            return hit
        subs: list[Node] = []
        if isinstance(n, Ref):
            out = frozenset((n.name,))
        else:
            if isinstance(n, (AnyOf, OneOf)):
                subs = list(n.options)
            elif isinstance(n, Arr):
                subs = [*n.prefix, n.items]
            elif isinstance(n, Obj):
                subs = [v for _, v in n.props] + [v for _, v in n.pattern_props]
                if n.additional is not None:
                    subs.append(n.additional)
            out = frozenset().union(*(self._free_refs(x) for x in subs)) if subs else frozenset()
        self._refs_memo[n] = out
        return out

    def unsat(self, keyword: str, path: str, message: str) -> Never:
        """A contradiction among a schema's own keywords: an error, unless the schema is an ``anyOf``/``oneOf``
        branch (then that branch simply matches nothing, as JSON Schema says).

        Raises:
            SchemaError: outside ``anyOf``/``oneOf`` branches.
        """
        if self._union:
            return Never(message, keyword, path)
        raise SchemaError(keyword, path, message)

    def resolve(self, node: Node) -> Node:
        """The node a :class:`Ref` stands for (other nodes unchanged)."""
        while isinstance(node, Ref):
            if node.name not in self.defs:
                raise SchemaError(
                    "$ref", "", "circular references combined with sibling keywords are not supported"
                )
            node = self.defs[node.name]
        return node

    # -- schemas ----------------------------------------------------------------------------------------
    def build(self, s: Any, path: str) -> Node:
        if s is True or s == {}:
            return AnyNode()
        if s is False:
            return Never("schema is false", "false", path)
        if not isinstance(s, dict):
            raise SchemaError(
                "type", path, f"a schema must be an object or a boolean, got {type(s).__name__}"
            )
        for k, v in s.items():
            if k in _UNSUPPORTED and not _trivial(k, v):
                raise SchemaError(k, path, f"keyword {k!r} is not supported")
        if s.get("x-grounded") is True:
            _check_grounded(s, path)
        self.charge(1, next((k for k in _SIZE_KEYWORDS if k in s), "type"), path)
        # Keywords are applied in the order they appear, as llguidance does (property order follows it):
        # runs of plain keywords form one part (with the schema's type, and the names of all its properties
        # when the run holds additionalProperties), each applicator ($ref, allOf, anyOf, oneOf, enum, const)
        # is one part; parts are intersected left to right.
        parts: list[Node] = []
        batch: dict[str, Any] = {}

        def flush() -> None:
            if not batch:
                return
            b = dict(batch)
            for k in ("type", "nullable"):
                if k in s:
                    b[k] = s[k]
            if (
                "additionalProperties" in b
                and "properties" not in b
                and isinstance(s.get("properties"), dict)
            ):
                b["properties"] = {k: True for k in s["properties"]}
            if ("items" in b or "additionalItems" in b) and "prefixItems" not in b and "prefixItems" in s:
                b["prefixItems"] = (
                    [True] * len(s["prefixItems"]) if isinstance(s["prefixItems"], list) else []
                )
            parts.append(self._own(b, path))
            batch.clear()

        for k, v in s.items():
            if k in ("$ref", "allOf", "anyOf", "oneOf", "enum", "const"):
                flush()
                if k == "$ref":
                    parts.append(self.ref(v, path))
                elif k in ("enum", "const"):
                    if k == "const" or "const" not in s:
                        parts.append(self._enum(s, path))
                else:
                    if not isinstance(v, list) or not v:
                        raise SchemaError(k, path, f"{k} must be a non-empty list")
                    self._union += k != "allOf"
                    try:
                        subs = [self.build(x, f"{path}/{k}/{i}") for i, x in enumerate(v)]
                    finally:
                        self._union -= k != "allOf"
                    if k == "allOf":
                        parts.extend(subs)
                    elif k == "anyOf":
                        parts.append(any_of(subs))
                    else:
                        parts.append(self.one_of(subs, path))
            elif k in _CONSTRAINT_KEYS:
                batch[k] = v
        flush()
        if not parts and s.get("nullable") is True:
            parts.append(self._own(s, path))
        node: Node = AnyNode()
        for p in parts:
            node = self.intersect(node, p, path)
        return node

    def _enum(self, s: dict[str, Any], path: str) -> Node:
        if "const" in s:
            values = [s["const"]]
            kw = "const"
        else:
            values = s["enum"]
            kw = "enum"
            if not isinstance(values, list):
                raise SchemaError("enum", path, "enum must be a list")
            if not values:
                return self.unsat("enum", path, "enum is empty: no value can match")
            self.charge(len(values), "enum", path)
        return any_of([literal(v) for v in values]) if values else Never("empty enum", kw, path)

    def _types(self, s: dict[str, Any], path: str) -> list[str]:
        t = s.get("type")
        if t is None:
            types = list(_TYPES)
        else:
            tl = [t] if isinstance(t, str) else t
            if not isinstance(tl, list) or not tl or not all(isinstance(x, str) for x in tl):
                raise SchemaError("type", path, f"type must be a type name or a list of them, got {t!r}")
            for x in tl:
                if x not in _TYPES:
                    raise SchemaError("type", path, f"unknown type {x!r}")
            types = [x for x in _TYPES if x in tl]
            if "number" in types and "integer" in types:
                types.remove("integer")
        if s.get("nullable") is True and "null" not in types:
            types.insert(0, "null")
        return types

    def _own(self, s: dict[str, Any], path: str) -> Node:
        """The node for ``type`` and the type-specific keywords of ``s`` (no applicators)."""
        types = self._types(s, path)
        has_kw = {
            "number": any(k in s for k in _NUM_KEYS),
            "string": any(k in s for k in _STR_KEYS),
            "array": any(k in s for k in _ARR_KEYS),
            "object": any(k in s for k in _OBJ_KEYS),
        }
        if "type" not in s and not any(has_kw.values()) and s.get("nullable") is not True:
            return AnyNode()
        opts: list[Node] = []
        for t in types:
            if t == "null":
                opts.append(Null())
            elif t == "boolean":
                opts.append(Bool())
            elif t in ("integer", "number"):
                opts.append(self._num(s, path, t == "integer"))
            elif t == "string":
                opts.append(self._str(s, path))
            elif t == "array":
                opts.append(self._arr(s, path))
            else:
                opts.append(self._obj(s, path))
        return any_of(opts)

    def _number_kw(self, s: dict[str, Any], k: str, path: str) -> float | None:
        v = s.get(k)
        if v is None or isinstance(v, bool):
            return None
        if not isinstance(v, (int, float)) or (isinstance(v, float) and not math.isfinite(v)):
            raise SchemaError(k, path, f"{k} must be a finite number, got {v!r}")
        return v

    def _num(self, s: dict[str, Any], path: str, integer: bool) -> Node:
        mn = self._number_kw(s, "minimum", path)
        mx = self._number_kw(s, "maximum", path)
        emn = self._number_kw(s, "exclusiveMinimum", path)
        emx = self._number_kw(s, "exclusiveMaximum", path)
        if integer:
            for k, v in (
                ("minimum", mn),
                ("maximum", mx),
                ("exclusiveMinimum", emn),
                ("exclusiveMaximum", emx),
            ):
                if v is not None and abs(v) > 2**59:  # llguidance's integer-range regex fails from 2**60
                    raise SchemaError(
                        k, path, f"integer bound {k}={v!r} is beyond +-2**59, which the grammar supports"
                    )
        if s.get("exclusiveMinimum") is True and mn is not None:  # draft 4
            mn, emn = None, mn
        if s.get("exclusiveMaximum") is True and mx is not None:
            mx, emx = None, mx
        mult = self._number_kw(s, "multipleOf", path)
        if mult is not None and mult <= 0:
            raise SchemaError("multipleOf", path, f"multipleOf must be > 0, got {mult}")
        node = Num(integer, mn, mx, emn, emx, mult)
        err = _num_unsat(node)
        if err:
            return self.unsat(err[0], path, err[1])
        return node

    def _int_kw(self, s: dict[str, Any], k: str, path: str) -> int | None:
        v = s.get(k)
        if v is None:
            return None
        if (
            isinstance(v, bool)
            or not isinstance(v, (int, float))
            or v < 0
            or (isinstance(v, float) and not v.is_integer())
        ):
            raise SchemaError(k, path, f"{k} must be a non-negative integer, got {v!r}")
        return int(v)

    def _str(self, s: dict[str, Any], path: str) -> Node:
        mn = self._int_kw(s, "minLength", path) or 0
        mx = self._int_kw(s, "maxLength", path)
        if mx is not None and mn > mx:
            return self.unsat("minLength", path, f"minLength ({mn}) is greater than maxLength ({mx})")
        patterns: tuple[str, ...] = ()
        if "pattern" in s:
            p = s["pattern"]
            if not isinstance(p, str):
                raise SchemaError("pattern", path, "pattern must be a string")
            self.check_pattern(p, path, "pattern")
            patterns = (p,)
        formats: tuple[str, ...] = ()
        if "format" in s:
            f = s["format"]
            if f not in FORMATS:
                raise SchemaError(
                    "format", path, f"string format {f!r} is not supported (known: {sorted(FORMATS)})"
                )
            formats = (f,)
        grounded = s.get("x-grounded", False)
        if not isinstance(grounded, bool):
            raise SchemaError("x-grounded", path, f"x-grounded must be true or false, got {grounded!r}")
        return Str(mn, mx, patterns, formats, grounded)

    def _arr(self, s: dict[str, Any], path: str) -> Node:
        mn = self._int_kw(s, "minItems", path) or 0
        mx = self._int_kw(s, "maxItems", path)
        if mx is not None and mn > mx:
            return self.unsat("minItems", path, f"minItems ({mn}) is greater than maxItems ({mx})")
        items = s.get("items")
        prefix: list[Node] = []
        rest: Node = AnyNode()
        if isinstance(items, list):  # draft 4-2019 tuple form
            prefix = [self.build(x, f"{path}/items/{i}") for i, x in enumerate(items)]
            if "additionalItems" in s:
                rest = self.build(s["additionalItems"], f"{path}/additionalItems")
        else:
            if "prefixItems" in s:
                pi = s["prefixItems"]
                if not isinstance(pi, list):
                    raise SchemaError("prefixItems", path, "prefixItems must be a list")
                prefix = [self.build(x, f"{path}/prefixItems/{i}") for i, x in enumerate(pi)]
            if items is not None:
                rest = self.build(items, f"{path}/items")
        return make_arr(mn, mx, tuple(prefix), rest)

    def _obj(self, s: dict[str, Any], path: str) -> Node:
        props_in = s.get("properties", {})
        if not isinstance(props_in, dict):
            raise SchemaError("properties", path, "properties must be an object")
        req = s.get("required", [])
        if not isinstance(req, list):  # draft 3 boolean "required" inside a property: no effect
            req = []
        for r in req:
            if not isinstance(r, str):
                raise SchemaError("required", path, f"required must list property names, got {r!r}")
        pp_in = s.get("patternProperties", {})
        if not isinstance(pp_in, dict):
            raise SchemaError("patternProperties", path, "patternProperties must be an object")
        pattern_props = []
        for p, sub in pp_in.items():
            self.check_pattern(p, f"{path}/patternProperties", "patternProperties")
            pattern_props.append((p, self.build(sub, f"{path}/patternProperties/{_esc(p)}")))
        additional: Node | None = None
        if "additionalProperties" in s:
            additional = self.build(s["additionalProperties"], f"{path}/additionalProperties")
        mn = self._int_kw(s, "minProperties", path) or 0
        mx = self._int_kw(s, "maxProperties", path)
        if mx is not None and mn > mx:
            return self.unsat(
                "minProperties", path, f"minProperties ({mn}) is greater than maxProperties ({mx})"
            )
        props: list[tuple[str, Node]] = []
        for name, sub in props_in.items():
            node = self.build(sub, f"{path}/properties/{_esc(name)}")
            for p, pn in pattern_props:
                if pattern_matches(p, name):
                    node = self.intersect(node, pn, path)
            props.append((name, node))
        names = {n for n, _ in props}
        for r in req:
            if r in names:
                continue
            node = AnyNode() if additional is None else additional
            matched = [pn for p, pn in pattern_props if pattern_matches(p, r)]
            if matched:
                node = AnyNode()
                for pn in matched:
                    node = self.intersect(node, pn, path)
            if isinstance(node, Never):
                return self.unsat(
                    "required",
                    path,
                    f"required property {r!r} is not in properties and additionalProperties forbids it",
                )
        for name, node in props:
            if name in req and isinstance(node, Never):
                return self.unsat(
                    "required", path, f"required property {name!r} can have no value ({node.reason})"
                )
        req = list(dict.fromkeys(req))
        if mx is not None and len(req) > mx:
            return self.unsat(
                "maxProperties", path, f"{len(req)} required properties exceed maxProperties ({mx})"
            )
        return Obj(tuple(props), tuple(req), additional, tuple(pattern_props), mn, mx)

    # -- intersection -----------------------------------------------------------------------------------
    def intersect(self, a: Node, b: Node, path: str) -> Node:
        """The schema of values valid against both ``a`` and ``b`` (``Never`` when none)."""
        if isinstance(a, AnyNode):
            return b
        if isinstance(b, AnyNode) or a == b:
            return a
        if isinstance(a, Never):
            return a
        if isinstance(b, Never):
            return b
        self.charge(
            1, "anyOf" if isinstance(a, (AnyOf, OneOf)) or isinstance(b, (AnyOf, OneOf)) else "allOf", path
        )
        self._depth += 1
        try:
            if self._depth > _MAX_INTERSECT_DEPTH:
                raise SchemaError("allOf", path, "schema intersection is too deep (recursive allOf/$ref)")
            if isinstance(a, Ref) or isinstance(b, Ref):
                return self.intersect(self.resolve(a), self.resolve(b), path)
            if isinstance(a, OneOf):
                return self.one_of([self.intersect(o, b, path) for o in a.options], a.path)
            if isinstance(b, OneOf):
                return self.one_of([self.intersect(a, o, path) for o in b.options], b.path)
            if isinstance(a, AnyOf) and isinstance(b, AnyOf) and len(a.options) * len(b.options) > 1:
                self.charge(len(a.options) * len(b.options), "anyOf", path)
            if isinstance(a, AnyOf):
                if not isinstance(b, (AnyOf, Ref)) and all(isinstance(o, Lit) for o in a.options):
                    return self._filter_literals(a, b, path)
                return any_of([self.intersect(o, b, path) for o in a.options])
            if isinstance(b, AnyOf):
                if not isinstance(a, Ref) and all(isinstance(o, Lit) for o in b.options):
                    return self._filter_literals(b, a, path)
                return any_of([self.intersect(a, o, path) for o in b.options])
            if isinstance(a, Lit):
                return (
                    a
                    if self.accepts(b, a.value)
                    else Never("value excluded by another constraint", "enum", path)
                )
            if isinstance(b, Lit):
                return (
                    b
                    if self.accepts(a, b.value)
                    else Never("value excluded by another constraint", "enum", path)
                )
            if type(a) is not type(b):
                return Never("incompatible types", "type", path)
            if isinstance(a, (Null, Bool)):
                return a
            if isinstance(a, Num) and isinstance(b, Num):
                return _intersect_num(a, b, path)
            if isinstance(a, Str) and isinstance(b, Str):
                mn = max(a.min_len, b.min_len)
                mx = _opt(min, a.max_len, b.max_len)
                if mx is not None and mn > mx:
                    return Never("minLength > maxLength", "minLength", path)
                return Str(
                    mn,
                    mx,
                    _uniq(a.patterns + b.patterns),
                    _uniq(a.formats + b.formats),
                    a.grounded or b.grounded,
                )
            if isinstance(a, Arr) and isinstance(b, Arr):
                n = max(len(a.prefix), len(b.prefix))
                pa = list(a.prefix) + [a.items] * (n - len(a.prefix))
                pb = list(b.prefix) + [b.items] * (n - len(b.prefix))
                prefix = tuple(self.intersect(x, y, path) for x, y in zip(pa, pb, strict=True))
                return make_arr(
                    max(a.min_items, b.min_items),
                    _opt(min, a.max_items, b.max_items),
                    prefix,
                    self.intersect(a.items, b.items, path),
                )
            if isinstance(a, Obj) and isinstance(b, Obj):
                return self._intersect_obj(a, b, path)
            return Never("incompatible types", "type", path)  # pragma: no cover
        finally:
            self._depth -= 1

    def _filter_literals(self, lits: AnyOf, other: Node, path: str) -> Node:
        """``lits`` (an ``enum``) intersected with ``other``: the literals ``other`` accepts."""
        self.charge(len(lits.options), "enum", path)
        kept: list[Node] = [o for o in lits.options if isinstance(o, Lit) and self.accepts(other, o.value)]
        return any_of(kept) if kept else Never("value excluded by another constraint", "enum", path)

    def check_pattern(self, pattern: str, path: str, keyword: str) -> None:
        """Translate and check ``pattern`` (:func:`pattern_to_regex`: one llguidance regex compile, about
        2 ms); each distinct pattern costs :data:`_PATTERN_STEPS` of the compile bound."""
        if pattern not in self._patterns:
            self._patterns.add(pattern)
            self.charge(_PATTERN_STEPS, keyword, path)
        pattern_to_regex(pattern, path)

    def charge(self, steps: int, keyword: str, path: str) -> None:
        """Count compile work against :data:`MAX_COMPILE_STEPS`.

        Raises:
            SchemaError: the schema needs more steps than the bound; ``keyword``/``path`` say where the bound
                was reached (an ``anyOf``/``allOf``/``enum`` whose branches multiply, or the subschema
                being built when there are simply too many).
        """
        self.steps += steps
        if self.steps > MAX_COMPILE_STEPS:
            raise SchemaError(
                keyword,
                path,
                f"schema is too large to compile: it needs more than {MAX_COMPILE_STEPS:,} compile steps "
                "(subschemas built, node pairs intersected, enum values checked; the bound on compile work); "
                "split the tool or simplify its anyOf/allOf/enum",
            )

    def prop_schema(self, o: Obj, name: str) -> Node:
        """The schema ``o`` applies to the value of key ``name`` (declared, pattern or additional)."""
        node = o.prop(name)
        if node is not None:
            return node
        matched = [pn for p, pn in o.pattern_props if pattern_matches(p, name)]
        if matched:
            out: Node = AnyNode()
            for pn in matched:
                out = self.intersect(out, pn, "")
            return out
        if o.additional is None:
            return AnyNode()
        return o.additional

    def _intersect_obj(self, a: Obj, b: Obj, path: str) -> Node:
        props: list[tuple[str, Node]] = []
        for k, v in a.props:
            props.append((k, self.intersect(v, self.prop_schema(b, k), path)))
        for k, v in b.props:
            if a.prop(k) is None:
                props.append((k, self.intersect(self.prop_schema(a, k), v, path)))
        required = tuple(dict.fromkeys(a.required + b.required))
        declared = {k for k, _ in props}
        for k, v in props:
            if k in required and isinstance(v, Never):
                return Never(f"required property {k!r} can have no value", "required", path)
        for k in required:
            if k not in declared:
                v = self.intersect(self.prop_schema(a, k), self.prop_schema(b, k), path)
                if isinstance(v, Never):
                    return Never(f"required property {k!r} can have no value", "required", path)
        additional: Node | None
        if a.additional is None:
            additional = b.additional
        elif b.additional is None:
            additional = a.additional
        else:
            additional = self.intersect(a.additional, b.additional, path)
        pattern_props = tuple(dict(a.pattern_props + b.pattern_props).items())
        if len(pattern_props) < len(a.pattern_props) + len(b.pattern_props):
            merged: dict[str, Node] = {}
            for p, n in a.pattern_props + b.pattern_props:
                merged[p] = self.intersect(merged[p], n, path) if p in merged else n
            pattern_props = tuple(merged.items())
        mn = max(a.min_props, b.min_props)
        mx = _opt(min, a.max_props, b.max_props)
        if mx is not None and mn > mx:
            return Never("minProperties > maxProperties", "minProperties", path)
        return Obj(tuple(props), required, additional, pattern_props, mn, mx)

    def one_of(self, options: list[Node], path: str) -> Node:
        """``oneOf``: an ``anyOf`` when the live branches are pairwise disjoint, else a :class:`OneOf`."""
        live = [o for o in options if not isinstance(o, Never)]
        if not live:
            return any_of(options)
        for i, x in enumerate(live):
            for y in live[i + 1 :]:
                if not self.disjoint(x, y):
                    return OneOf(tuple(live), path)
        return any_of(live)

    # -- membership and disjointness ---------------------------------------------------------------------
    def accepts(self, node: Node, v: Any, depth: int = 0) -> bool:
        """Whether JSON value ``v`` is valid against ``node`` (patterns checked with Python's ``re``)."""
        if depth > 50:
            return True
        node = self.resolve(node)
        if isinstance(node, AnyNode):
            return True
        if isinstance(node, Never):
            return False
        if isinstance(node, AnyOf):
            return any(self.accepts(o, v, depth + 1) for o in node.options)
        if isinstance(node, OneOf):
            return sum(self.accepts(o, v, depth + 1) for o in node.options) == 1
        if isinstance(node, Lit):
            return _json_eq(node.value, v)
        if isinstance(node, Null):
            return v is None
        if isinstance(node, Bool):
            return isinstance(v, bool)
        if isinstance(node, Num):
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                return False
            if node.integer and not isinstance(v, int):
                return False
            return _num_ok(node, v)
        if isinstance(node, Str):
            if not isinstance(v, str):
                return False
            n = len(v)
            if n < node.min_len or (node.max_len is not None and n > node.max_len):
                return False
            for p in node.patterns:
                if pattern_matches(p, v) is False:
                    return False
            return all(re.fullmatch(FORMATS[f], v) is not None for f in node.formats)
        if isinstance(node, Arr):
            if not isinstance(v, list):
                return False
            if len(v) < node.min_items or (node.max_items is not None and len(v) > node.max_items):
                return False
            for i, x in enumerate(v):
                sub = node.prefix[i] if i < len(node.prefix) else node.items
                if not self.accepts(sub, x, depth + 1):
                    return False
            return True
        if isinstance(node, Obj):
            if not isinstance(v, dict):
                return False
            if not set(node.required) <= set(v):
                return False
            if len(v) < node.min_props or (node.max_props is not None and len(v) > node.max_props):
                return False
            for k, x in v.items():
                sub = self.prop_schema(node, k)
                if node.prop(k) is None and node.additional is None and not self.additional_default:
                    if not any(pattern_matches(p, k) for p, _ in node.pattern_props):
                        return False
                if not self.accepts(sub, x, depth + 1):
                    return False
            return True
        return True  # pragma: no cover

    def disjoint(self, a: Node, b: Node, depth: int = 0) -> bool:
        """True only when no value can be valid against both ``a`` and ``b`` (a sound, incomplete test)."""
        if depth > 20:
            return False
        a, b = self.resolve(a), self.resolve(b)
        if isinstance(a, Never) or isinstance(b, Never):
            return True
        if isinstance(a, AnyNode) or isinstance(b, AnyNode):
            return False
        if isinstance(a, (AnyOf, OneOf)):
            return all(self.disjoint(o, b, depth + 1) for o in a.options)
        if isinstance(b, (AnyOf, OneOf)):
            return all(self.disjoint(a, o, depth + 1) for o in b.options)
        if isinstance(a, Lit) and isinstance(b, Lit):
            return not _json_eq(a.value, b.value)
        if isinstance(a, Lit):
            return not self.accepts(b, a.value)
        if isinstance(b, Lit):
            return not self.accepts(a, b.value)
        if type(a) is not type(b):
            return True
        if isinstance(a, Num) and isinstance(b, Num):
            lo_a, hi_a = _num_range(a)
            lo_b, hi_b = _num_range(b)
            return hi_a < lo_b or hi_b < lo_a
        if isinstance(a, Arr) and isinstance(b, Arr):
            if a.max_items is not None and a.max_items < b.min_items:
                return True
            if b.max_items is not None and b.max_items < a.min_items:
                return True
            n = min(max(a.min_items, b.min_items), max(len(a.prefix), len(b.prefix)))
            for i in range(n):
                x = a.prefix[i] if i < len(a.prefix) else a.items
                y = b.prefix[i] if i < len(b.prefix) else b.items
                if self.disjoint(x, y, depth + 1):
                    return True
            return False
        if isinstance(a, Obj) and isinstance(b, Obj):
            for k in dict.fromkeys(a.required + b.required):
                if self.disjoint(self._key_schema(a, k), self._key_schema(b, k), depth + 1):
                    return True
            return False
        return False

    def _key_schema(self, o: Obj, k: str) -> Node:
        node = o.prop(k)
        if node is not None:
            return node
        if any(pattern_matches(p, k) for p, _ in o.pattern_props):
            return self.prop_schema(o, k)
        if o.additional is None:
            return AnyNode() if self.additional_default else Never("additional property")
        return o.additional


def _esc(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")


def _uniq(t: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(t))


def _opt(f: Any, x: Any, y: Any) -> Any:
    if x is None:
        return y
    if y is None:
        return x
    return f(x, y)


def _json_eq(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b and type(a) is type(b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_eq(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_eq(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def _num_range(n: Num) -> tuple[float, float]:
    lo = max([x for x in (n.minimum, n.excl_min) if x is not None], default=-math.inf)
    hi = min([x for x in (n.maximum, n.excl_max) if x is not None], default=math.inf)
    return lo, hi


def _num_ok(n: Num, v: float) -> bool:
    if n.minimum is not None and v < n.minimum:
        return False
    if n.maximum is not None and v > n.maximum:
        return False
    if n.excl_min is not None and v <= n.excl_min:
        return False
    if n.excl_max is not None and v >= n.excl_max:
        return False
    if n.multiple_of is not None:
        q = Fraction(str(v)) / Fraction(str(n.multiple_of))
        if q.denominator != 1:
            return False
    return True


def _num_unsat(n: Num) -> tuple[str, str] | None:
    lo, hi = _num_range(n)
    if lo > hi:
        return ("minimum", f"minimum ({lo}) is greater than maximum ({hi})")
    if lo == hi and (n.excl_min == lo or n.excl_max == hi):
        return ("exclusiveMinimum", f"exclusive bounds leave no number between {lo} and {hi}")
    if n.integer and math.isfinite(lo) and math.isfinite(hi):
        first = math.floor(lo) + 1 if n.excl_min == lo else math.ceil(lo)
        last = math.ceil(hi) - 1 if n.excl_max == hi else math.floor(hi)
        if first > last:
            return ("minimum", f"no integer lies between {lo} and {hi}")
    return None


def _intersect_num(a: Num, b: Num, path: str) -> Node:
    mult: float | None
    if a.multiple_of is None or b.multiple_of is None:
        mult = a.multiple_of if b.multiple_of is None else b.multiple_of
    else:
        fa, fb = Fraction(str(a.multiple_of)), Fraction(str(b.multiple_of))
        num = math.lcm(fa.numerator * fb.denominator, fb.numerator * fa.denominator)
        lcm = Fraction(num, fa.denominator * fb.denominator)
        mult = int(lcm) if lcm.denominator == 1 else float(lcm)
    n = Num(
        a.integer or b.integer,
        _opt(max, a.minimum, b.minimum),
        _opt(min, a.maximum, b.maximum),
        _opt(max, a.excl_min, b.excl_min),
        _opt(min, a.excl_max, b.excl_max),
        mult,
    )
    err = _num_unsat(n)
    return Never(err[1], err[0], path) if err else n


def make_arr(mn: int, mx: int | None, prefix: tuple[Node, ...], items: Node) -> Node:
    """An :class:`Arr`, or ``Never`` when no length is possible (prefix items that cannot be met)."""
    cap = len(prefix) if isinstance(items, Never) else None
    mx = _opt(min, mx, cap)
    for i, p in enumerate(prefix):
        if isinstance(p, Never):
            mx = _opt(min, mx, i)
            break
    if mx is not None and mn > mx:
        return Never("minItems > the number of items allowed", "minItems")
    if mx is not None:
        prefix = prefix[:mx]
    return Arr(mn, mx, prefix, items)


def literal(v: Any) -> Node:
    """The IR of a constant JSON value: a :class:`Lit`, or an :class:`Arr`/:class:`Obj` of literals."""
    if isinstance(v, list):
        return Arr(len(v), len(v), tuple(literal(x) for x in v), Never("no more items"))
    if isinstance(v, dict):
        return Obj(
            tuple((k, literal(x)) for k, x in v.items()), tuple(v), Never("no other keys"), (), 0, None
        )
    if isinstance(v, float) and not math.isfinite(v):
        raise SchemaError("enum", "", f"non-finite number {v!r} in enum/const")
    return Lit.of(v)


def any_of(options: list[Node]) -> Node:
    """Union of ``options`` (flattened, ``Never`` dropped, duplicates removed, ``AnyNode`` absorbing)."""
    flat: dict[Node, None] = {}
    never: Never | None = None
    for o in options:
        if isinstance(o, AnyNode):
            return o
        if isinstance(o, Never):
            never = never or o
            continue
        for x in o.options if isinstance(o, AnyOf) else (o,):
            flat[x] = None
    if not flat:
        return never or Never("anyOf has no satisfiable option", "anyOf")
    nodes = list(flat)
    return nodes[0] if len(nodes) == 1 else AnyOf(tuple(nodes))


def object_part(node: Node, defs: dict[str, Node] | None = None) -> Node:
    """The part of ``node`` that accepts objects (``Never`` when it accepts none)."""
    if isinstance(node, Ref) and defs is not None and node.name in defs:
        return object_part(defs[node.name], defs)
    if isinstance(node, AnyNode):
        return Obj()
    if isinstance(node, (Obj, Ref)):
        return node
    if isinstance(node, AnyOf):
        return any_of([object_part(o, defs) for o in node.options])
    if isinstance(node, OneOf):
        parts = [object_part(o, defs) for o in node.options]
        live = [p for p in parts if not isinstance(p, Never)]
        return OneOf(tuple(live), node.path) if len(live) > 1 else any_of(parts)
    return Never("not an object", "type")


def build_ir(schema: Any, *, additional_properties: bool = True) -> IR:
    """Compile a JSON Schema to the IR, checking every keyword.

    Args:
        schema: JSON Schema (dict or bool); local ``$ref`` are resolved against it.
        additional_properties: what an object without ``additionalProperties`` allows when deciding whether
            ``oneOf`` branches are disjoint (JSON Schema: ``True``; tool arguments are compiled with
            ``False``). :class:`Obj` keeps ``additional=None`` for the compiler to decide.

    Returns:
        :class:`IR` (root node and the recursive definitions).

    Raises:
        SchemaError: unsupported keyword (``not``, ``if``, ``uniqueItems``, ``contains``, unknown ``format``,
            lookaround in ``pattern``...), non-local ``$ref``, non-disjoint ``oneOf``, or unsatisfiable
            (``minimum > maximum``, ``minItems > maxItems``, ``minLength > maxLength``, empty ``enum``,
            required property forbidden by ``additionalProperties: false``, or the whole schema), or too
            large to compile (more than :data:`MAX_COMPILE_STEPS` steps).
    """
    b = _Builder(schema, additional_properties)
    root = b.build(schema, "")
    if isinstance(root, Never):
        raise SchemaError(root.keyword or "type", root.path, f"schema is unsatisfiable: {root.reason}")
    _reject_one_of([root, *b.defs.values()])
    return IR(root, b.defs, {name: ptr for ptr, name in b._ref_names.items()})


def _reject_one_of(nodes: list[Node]) -> None:
    """Raise for a ``oneOf`` left whose branches could not be shown disjoint (one walk over all the trees:
    shared subtrees are visited once)."""
    seen: set[int] = set()
    todo = nodes[::-1]
    while todo:
        n = todo.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        if isinstance(n, OneOf):
            raise SchemaError(
                "oneOf", n.path, "oneOf is supported only when its branches are provably disjoint"
            )
        if isinstance(n, AnyOf):
            todo.extend(n.options)
        elif isinstance(n, Arr):
            todo.extend(n.prefix)
            todo.append(n.items)
        elif isinstance(n, Obj):
            todo.extend(v for _, v in n.props)
            todo.extend(v for _, v in n.pattern_props)
            if n.additional is not None:
                todo.append(n.additional)


@lru_cache(maxsize=512)
def cached_ir(schema_json: str, additional_properties: bool) -> IR:
    """:func:`build_ir` of ``json.loads(schema_json)``, memoised (tool registration and grammar building
    compile the same schema; the IR is immutable)."""
    return build_ir(json.loads(schema_json), additional_properties=additional_properties)


def canonical(obj: Any) -> str:
    """A stable text key for caching schemas and tool lists (property order preserved)."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False, default=_default)


def _default(o: Any) -> Any:
    if isinstance(o, ToolSpec):
        return {"name": o.name, "description": o.description, "parameters": o.parameters}
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
