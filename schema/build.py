"""Building the IR from a JSON Schema: every keyword checked, the compile work bounded."""

from __future__ import annotations

import functools
import json
import math
from typing import Any

from schema.algebra import Algebra, num_unsat
from schema.errors import SchemaError
from schema.formats import FORMATS, FREE_FORMATS
from schema.ir import (
    IR,
    NUM_KEYWORDS,
    AnyNode,
    Bool,
    Never,
    Node,
    Null,
    Num,
    Obj,
    OneOf,
    Ref,
    Str,
    any_of,
    children,
    literal,
    make_arr,
    multiple_of_error,
)
from schema.normalize import check_nesting
from schema.refs import Refs, escape_pointer_token
from schema.regex import pattern_matches

#: Keywords refused, each with the values that constrain nothing and so are let through (``uniqueItems: false``).
_UNSUPPORTED: dict[str, tuple[Any, ...]] = {
    **dict.fromkeys(("not", "if", "then", "else", "contains", "maxContains"), ()),
    **dict.fromkeys(("$dynamicRef", "$recursiveRef", "$dynamicAnchor", "$recursiveAnchor"), ()),
    **dict.fromkeys(("dependencies", "dependentRequired", "dependentSchemas"), ({},)),
    **dict.fromkeys(("propertyNames", "unevaluatedProperties", "unevaluatedItems"), (True, {})),
    "uniqueItems": (False,),
    "minContains": (0, False),
}
_TYPES = ("null", "boolean", "integer", "number", "string", "array", "object")
_STR_KEYS = ("minLength", "maxLength", "pattern", "format", "x-grounded")
_ARR_KEYS = ("items", "prefixItems", "additionalItems", "minItems", "maxItems")
_OBJ_KEYS = "properties required additionalProperties patternProperties minProperties maxProperties".split()
#: Keywords named when a subschema's size trips the bound (the first one it holds).
_SIZE_KEYWORDS = ("$ref", "properties", "items", "prefixItems", "anyOf", "oneOf", "allOf", "enum")
_CONSTRAINT_KEYS = {"type", *NUM_KEYWORDS, *_STR_KEYS, *_ARR_KEYS, *_OBJ_KEYS}


def _check_grounded(s: dict[str, Any], path: str) -> None:
    """Refuse ``x-grounded: true`` (a free span of the conversation) on a schema that cannot be a string or
    that also has ``enum``/``const``/``pattern``/``format``."""
    for k in ("enum", "const", "pattern", "format"):
        if k in s:
            raise SchemaError(
                "x-grounded",
                path,
                f"a grounded value is a free span of the conversation: it cannot also have {k!r}",
            )
    typed = (
        [s] if "type" in s else [b for k in ("anyOf", "oneOf") for b in s.get(k) or [] if isinstance(b, dict)]
    )
    types = [
        t for b in typed if "type" in b for t in (b["type"] if isinstance(b["type"], list) else [b["type"]])
    ]
    if "string" not in types:
        raise SchemaError(
            "x-grounded",
            path,
            f"only strings can be grounded (a span of the conversation), this is {types or 'untyped'}",
        )


def _trivial(key: str, value: Any) -> bool:
    """True when an unsupported keyword's value constrains nothing (``True`` is not ``1``)."""
    return any(value == t and isinstance(value, bool) == isinstance(t, bool) for t in _UNSUPPORTED[key])


class Builder(Algebra):
    """Builds the schema IR of one schema document (``root``); one instance per schema."""

    def __init__(self, root: Any, additional_default: bool) -> None:
        self.refs = Refs(root)
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

    def ref(self, ref: Any, path: str) -> Node:
        ptr = self.refs.pointer(ref, path)
        if ptr in self._ref_nodes:
            return self._ref_nodes[ptr]
        name = self._ref_names.setdefault(ptr, f"d{len(self._ref_names)}")
        if ptr in self._in_progress:
            return Ref(name)
        self._in_progress.add(ptr)
        node = self.build(self.refs.at[ptr], ptr)
        self._in_progress.discard(ptr)
        self.defs[name] = node
        # A reference that was used recursively while being built stays a rule; others are inlined.
        result: Node = Ref(name) if name in self._free_refs(node) else node
        self._ref_nodes[ptr] = result
        return result

    def _free_refs(self, n: Node) -> frozenset[str]:
        """Names of the :class:`Ref` nodes inside ``n`` (not following them), memoised per node."""
        hit = self._refs_memo.get(n)
        if hit is None:
            subs = map(self._free_refs, children(n))
            hit = self._refs_memo[n] = (
                frozenset((n.name,)) if isinstance(n, Ref) else frozenset().union(*subs)
            )
        return hit

    def unsat(self, keyword: str, path: str, message: str) -> Never:
        """A contradiction among a schema's own keywords: a :class:`SchemaError`, but inside an
        ``anyOf``/``oneOf`` branch a ``Never`` (that branch matches nothing, as JSON Schema says)."""
        if self._union:
            return Never(message, keyword, path)
        raise SchemaError(keyword, path, message)

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
        # Keywords apply in order, as llguidance's do (property order follows): a run of plain keywords is one
        # part (with the type, and all property names when it holds additionalProperties), each applicator
        # ($ref, allOf, anyOf, oneOf, enum, const) one part; parts are intersected left to right.
        parts: list[Node] = []
        batch: dict[str, Any] = {}

        def flush() -> None:
            if not batch:
                return
            b = {**batch, **{k: s[k] for k in ("type", "nullable") if k in s}}
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
        start: Node = AnyNode()
        return functools.reduce(lambda x, y: self.intersect(x, y, path), parts, start)

    def _enum(self, s: dict[str, Any], path: str) -> Node:
        values = [s["const"]] if "const" in s else s["enum"]
        if "const" not in s:
            if not isinstance(values, list):
                raise SchemaError("enum", path, "enum must be a list")
            if not values:
                return self.unsat("enum", path, "enum is empty: no value can match")
            self.charge(len(values), "enum", path)
        return any_of([literal(v) for v in values])

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
        if not s.keys() & _CONSTRAINT_KEYS and s.get("nullable") is not True:
            return AnyNode()
        make = {
            "null": Null,
            "boolean": Bool,
            "integer": lambda: self._num(s, path, True),
            "number": lambda: self._num(s, path, False),
            "string": lambda: self._str(s, path),
            "array": lambda: self._arr(s, path),
            "object": lambda: self._obj(s, path),
        }
        return any_of([make[t]() for t in types])

    def _number_kw(self, s: dict[str, Any], k: str, path: str) -> float | None:
        v = s.get(k)
        if v is None or isinstance(v, bool):
            return None
        if not isinstance(v, (int, float)) or (isinstance(v, float) and not math.isfinite(v)):
            raise SchemaError(k, path, f"{k} must be a finite number, got {v!r}")
        return v

    def _num(self, s: dict[str, Any], path: str, integer: bool) -> Node:
        bounds = {k: self._number_kw(s, k, path) for k in NUM_KEYWORDS[:4]}
        for k, v in bounds.items():  # llguidance's integer-range regex fails from 2**60
            if integer and v is not None and abs(v) > 2**59:
                raise SchemaError(
                    k, path, f"integer bound {k}={v!r} is beyond +-2**59, which the grammar supports"
                )
        mn, mx, emn, emx = bounds.values()
        if s.get("exclusiveMinimum") is True and mn is not None:  # draft 4
            mn, emn = None, mn
        if s.get("exclusiveMaximum") is True and mx is not None:
            mx, emx = None, mx
        mult = self._number_kw(s, "multipleOf", path)
        if mult is not None and mult <= 0:
            raise SchemaError("multipleOf", path, f"multipleOf must be > 0, got {mult}")
        if mult is not None and (too_big := multiple_of_error(mult)):
            raise SchemaError("multipleOf", path, too_big)
        node = Num(integer, mn, mx, emn, emx, mult)
        if err := num_unsat(node):
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
        f = s.get("format", "")
        if not isinstance(f, str):
            raise SchemaError("format", path, f"format must be a string, got {f!r}")
        if f and f not in FORMATS and f not in FREE_FORMATS:  # a free format names no syntax: any string
            raise SchemaError(
                "format", path, f"string format {f!r} is not supported (known: {sorted(FORMATS)})"
            )
        grounded = s.get("x-grounded", False)
        if not isinstance(grounded, bool):
            raise SchemaError("x-grounded", path, f"x-grounded must be true or false, got {grounded!r}")
        return Str(mn, mx, patterns, (f,) if f in FORMATS else (), grounded)

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
            pattern_props.append((p, self.build(sub, f"{path}/patternProperties/{escape_pointer_token(p)}")))
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
            node = self.build(sub, f"{path}/properties/{escape_pointer_token(name)}")
            for p, pn in pattern_props:
                if pattern_matches(p, name):
                    node = self.intersect(node, pn, path)
            props.append((name, node))
        names = {n for n, _ in props}
        shell = Obj(additional=additional, pattern_props=tuple(pattern_props))
        for r in req:
            if r not in names and isinstance(self.prop_schema(shell, r, path=path), Never):
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


def build_ir(schema: Any, *, additional_properties: bool = True) -> IR:
    """Compile a JSON Schema (dict or bool; local ``$ref`` resolved against it) to the :class:`IR`, checking every
    keyword. ``additional_properties``: what an object without ``additionalProperties`` allows when deciding
    whether ``oneOf`` branches are disjoint (JSON Schema: ``True``; tool arguments: ``False``).

    Raises:
        SchemaError: an unsupported keyword (``not``, ``uniqueItems``, an unknown ``format``, lookaround in a
            ``pattern``...), a non-local ``$ref``, a non-disjoint ``oneOf``, an unsatisfiable schema or
            subschema (``minimum > maximum``, empty ``enum``...), or one too large to compile
            (:data:`MAX_COMPILE_STEPS`, :data:`schema.normalize.MAX_NESTING`).
    """
    check_nesting(schema)
    b = Builder(schema, additional_properties)
    root = b.build(schema, "")
    if isinstance(root, Never):
        raise SchemaError(root.keyword or "type", root.path, f"schema is unsatisfiable: {root.reason}")
    _reject_one_of([root, *b.defs.values()])
    return IR(root, b.defs, {name: ptr for ptr, name in b._ref_names.items()})


def _reject_one_of(nodes: list[Node]) -> None:
    """Raise for a ``oneOf`` left whose branches could not be shown disjoint (shared subtrees walked once)."""
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
        todo.extend(children(n))


@functools.lru_cache(maxsize=512)
def cached_ir(schema_json: str, additional_properties: bool) -> IR:
    """:func:`build_ir` of ``json.loads(schema_json)``, memoised (the IR is immutable)."""
    return build_ir(json.loads(schema_json), additional_properties=additional_properties)
