"""The schema IR (:class:`Node` subclasses) that the grammar compilers consume, and its constructors."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from schema.errors import SchemaError


def _num_out(v: float) -> float | int:
    return int(v) if isinstance(v, float) and v.is_integer() and abs(v) < 2**53 else v


#: The numeric keywords, in the order of :class:`Num`'s fields.
NUM_KEYWORDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")


class Node:
    """Base class of the schema IR (immutable, compared structurally). The hash (that of the fields' tuple, as a
    dataclass's) is computed once and kept in the instance ``__dict__``, and equality compares hashes first: a
    dataclass hash walks the whole subtree on every call, which made compiling shared definitions quadratic."""

    __slots__ = ()

    def _fields(self) -> tuple[Any, ...]:
        return tuple(map(self.__dict__.__getitem__, self.__dataclass_fields__))  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        h = self.__dict__.get("_hash")
        if h is None:
            h = self.__dict__["_hash"] = hash(self._fields())
        return int(h)

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if other.__class__ is not self.__class__:
            return NotImplemented
        return hash(self) == hash(other) and self._fields() == other._fields()  # type: ignore[attr-defined]


@dataclass(frozen=True, eq=False)
class AnyNode(Node):
    """Any JSON value."""


@dataclass(frozen=True, eq=False)
class Never(Node):
    """No value (``false``, or an unsatisfiable combination). ``keyword``/``path`` say where it came from."""

    reason: str
    keyword: str = ""
    path: str = ""


@dataclass(frozen=True, eq=False)
class Null(Node):
    """``null``."""


@dataclass(frozen=True, eq=False)
class Bool(Node):
    """``true``/``false``."""


@dataclass(frozen=True, eq=False)
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
        values = (self.minimum, self.maximum, self.excl_min, self.excl_max, self.multiple_of)
        bounds = {k: _num_out(v) for k, v in zip(NUM_KEYWORDS, values, strict=True) if v is not None}
        return {"type": "integer" if self.integer else "number", **bounds}

    @property
    def bounded(self) -> bool:
        """True when any bound or ``multipleOf`` applies (then llguidance's regexes are needed)."""
        return len(self.json_schema()) > 1


@dataclass(frozen=True, eq=False)
class Str(Node):
    """A string. ``patterns``: ECMA patterns (JSON Schema search semantics); ``formats``: format names;
    ``grounded``: the value must be a span of the conversation (``x-grounded: true``; see
    :mod:`grammar.grounding`)."""

    min_len: int = 0
    max_len: int | None = None
    patterns: tuple[str, ...] = ()
    formats: tuple[str, ...] = ()
    grounded: bool = False


@dataclass(frozen=True, eq=False)
class Lit(Node):
    """One JSON scalar (string, number, bool or null), from ``enum``/``const``."""

    value: Any
    kind: str  # "str" | "int" | "float" | "bool" | "null"

    @staticmethod
    def of(value: Any) -> Lit:
        """Wrap a scalar, tagging its JSON type (``True`` is not ``1``)."""
        for cls, kind in ((type(None), "null"), (bool, "bool"), (int, "int"), (float, "float"), (str, "str")):
            if isinstance(value, cls):
                return Lit(value, kind)
        raise TypeError(f"not a JSON scalar: {value!r}")


@dataclass(frozen=True, eq=False)
class Arr(Node):
    """An array: ``prefix`` item schemas, then ``items`` for the rest (``Never`` = no more items)."""

    min_items: int = 0
    max_items: int | None = None
    prefix: tuple[Node, ...] = ()
    items: Node = AnyNode()

    def item(self, i: int) -> Node:
        """The schema of item ``i``."""
        return self.prefix[i] if i < len(self.prefix) else self.items


@dataclass(frozen=True, eq=False)
class Obj(Node):
    """An object: ``props`` in emission order, ``required`` in order (undeclared names after them, valued by
    ``pattern_props``, ECMA pattern -> schema, or ``additional``); ``additional=None``: not specified (a compile
    option decides: JSON Schema says any value, tool arguments none)."""

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
        return next((v for k, v in self.props if k == name), None)


@dataclass(frozen=True, eq=False)
class AnyOf(Node):
    """One of several schemas (at least two, none ``Never``/``AnyNode``)."""

    options: tuple[Node, ...]


@dataclass(frozen=True, eq=False)
class OneOf(Node):
    """``oneOf`` whose branches are not (yet) provably disjoint; one left in the built schema is an error."""

    options: tuple[Node, ...]
    path: str = ""


@dataclass(frozen=True, eq=False)
class Ref(Node):
    """A recursive reference to ``IR.defs[name]``."""

    name: str


@dataclass
class IR:
    """A compiled schema: the root, the definitions its :class:`Ref` nodes name, and each definition's JSON
    pointer (``paths``, for error messages)."""

    root: Node
    defs: dict[str, Node]
    paths: dict[str, str] = field(default_factory=dict)


#: Largest whole ``multipleOf`` the grammar takes once its factors of ten are divided out (``3000000`` counts as
#: 3): llguidance builds an automaton of about k states per matcher (1 s at 99,991, minutes at 2**30).
MAX_MULTIPLE_OF = 20_000


def multiple_of_error(mult: float) -> str | None:
    """Why a ``multipleOf`` of ``mult`` is refused (past :data:`MAX_MULTIPLE_OF`), or ``None`` when supported."""
    if not float(mult).is_integer():
        return None
    k = int(mult)
    while k and k % 10 == 0:
        k //= 10
    if k <= MAX_MULTIPLE_OF:
        return None
    return (
        f"multipleOf {_num_out(mult)!r} is not supported: the grammar enforces a whole multipleOf up to "
        f"{MAX_MULTIPLE_OF:,} (after dividing out factors of ten), whose automaton has that many states"
    )


def merge_optional(f: Any, x: Any, y: Any) -> Any:
    """``f(x, y)`` of two optional bounds; ``x`` or ``y`` alone when the other is ``None``."""
    return y if x is None else x if y is None else f(x, y)


def make_arr(mn: int, mx: int | None, prefix: tuple[Node, ...], items: Node) -> Node:
    """An :class:`Arr`, or ``Never`` when no length is possible (prefix items that cannot be met)."""
    cap = len(prefix) if isinstance(items, Never) else None
    mx = merge_optional(min, mx, cap)
    for i, p in enumerate(prefix):
        if isinstance(p, Never):
            mx = merge_optional(min, mx, i)
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


def children(n: Node) -> list[Node]:
    """The nodes directly inside ``n`` (a :class:`Ref` is not followed)."""
    if isinstance(n, (AnyOf, OneOf)):
        return list(n.options)
    if isinstance(n, Arr):
        return [*n.prefix, n.items]
    if isinstance(n, Obj):
        return [v for _, v in (*n.props, *n.pattern_props)] + ([] if n.additional is None else [n.additional])
    return []


def object_part(node: Node, defs: dict[str, Node]) -> Node:
    """The part of ``node``, a built IR node (no :class:`OneOf`: :func:`schema.build_ir` refuses those), that
    accepts objects (``Never`` when it accepts none)."""
    if isinstance(node, Ref) and node.name in defs:
        return object_part(defs[node.name], defs)
    if isinstance(node, AnyNode):
        return Obj()
    if isinstance(node, (Obj, Ref)):
        return node
    if isinstance(node, AnyOf):
        return any_of([object_part(o, defs) for o in node.options])
    return Never("not an object", "type")
