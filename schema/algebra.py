"""Intersection, acceptance and disjointness of IR nodes: the builder's reasoning about two schemas at once."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

from schema.errors import SchemaError
from schema.formats import format_matches
from schema.ir import (
    AnyNode,
    AnyOf,
    Arr,
    Bool,
    Lit,
    Never,
    Node,
    Null,
    Num,
    Obj,
    OneOf,
    Ref,
    Str,
    any_of,
    make_arr,
    merge_optional,
    multiple_of_error,
)
from schema.regex import pattern_matches, pattern_to_regex

_MAX_INTERSECT_DEPTH = 60
#: Bound on the work of compiling one schema to the IR, in steps of a few microseconds (a subschema built, a pair
#: of nodes intersected, an enum value checked) and :data:`_PATTERN_STEPS` per distinct regex: a schema needing
#: more is a :class:`SchemaError` at registration, so registering a tool never hangs. Of MaskBench's 11,305
#: schemas one needs more (913k steps, an ``anyOf`` of ~500 objects each narrowing a ~500-value ``enum``).
MAX_COMPILE_STEPS = 100_000
#: Steps charged per distinct regex (one llguidance compile to check it, about 2 ms).
_PATTERN_STEPS = 200


def _uniq(t: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(t))


def _num_range(n: Num) -> tuple[float, float]:
    lo = max([x for x in (n.minimum, n.excl_min) if x is not None], default=-math.inf)
    hi = min([x for x in (n.maximum, n.excl_max) if x is not None], default=math.inf)
    return lo, hi


def _num_ok(n: Num, v: float) -> bool:
    return (
        (n.minimum is None or v >= n.minimum)
        and (n.maximum is None or v <= n.maximum)
        and (n.excl_min is None or v > n.excl_min)
        and (n.excl_max is None or v < n.excl_max)
        and (n.multiple_of is None or (Fraction(str(v)) / Fraction(str(n.multiple_of))).denominator == 1)
    )


def num_unsat(n: Num) -> tuple[str, str] | None:
    """``(keyword, message)`` when no number (no integer for an integer) lies within ``n``'s bounds, else ``None``."""
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
        too_big = multiple_of_error(mult)
        if too_big:  # the least common multiple of two supported ones
            raise SchemaError("multipleOf", path, too_big)
    n = Num(
        a.integer or b.integer,
        merge_optional(max, a.minimum, b.minimum),
        merge_optional(min, a.maximum, b.maximum),
        merge_optional(max, a.excl_min, b.excl_min),
        merge_optional(min, a.excl_max, b.excl_max),
        mult,
    )
    err = num_unsat(n)
    return Never(err[1], err[0], path) if err else n


class Algebra:
    """The builder's two-schema reasoning (a base of ``Builder``, which sets these attributes)."""

    defs: dict[str, Node]
    additional_default: bool
    steps: int
    _depth: int
    _patterns: set[str]

    def resolve(self, node: Node) -> Node:
        """The node a :class:`Ref` stands for (other nodes unchanged)."""
        while isinstance(node, Ref):
            if node.name not in self.defs:
                raise SchemaError(
                    "$ref", "", "circular references combined with sibling keywords are not supported"
                )
            node = self.defs[node.name]
        return node

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
                if not isinstance(b, AnyOf) and all(isinstance(o, Lit) for o in a.options):
                    return self._filter_literals(a, b, path)
                return any_of([self.intersect(o, b, path) for o in a.options])
            if isinstance(b, AnyOf):
                if all(isinstance(o, Lit) for o in b.options):
                    return self._filter_literals(b, a, path)
                return any_of([self.intersect(a, o, path) for o in b.options])
            for lit, other in ((a, b), (b, a)):
                if isinstance(lit, Lit):
                    ok = self.accepts(other, lit.value)
                    return lit if ok else Never("value excluded by another constraint", "enum", path)
            if type(a) is not type(b):
                return Never("incompatible types", "type", path)
            if isinstance(a, (Null, Bool)):
                return a
            if isinstance(a, Num) and isinstance(b, Num):
                return _intersect_num(a, b, path)
            if isinstance(a, Str) and isinstance(b, Str):
                mn = max(a.min_len, b.min_len)
                mx = merge_optional(min, a.max_len, b.max_len)
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
                    merge_optional(min, a.max_items, b.max_items),
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
        """Translate and check ``pattern`` (:func:`pattern_to_regex`), charging :data:`_PATTERN_STEPS` once."""
        if pattern not in self._patterns:
            self._patterns.add(pattern)
            self.charge(_PATTERN_STEPS, keyword, path)
        pattern_to_regex(pattern, path)

    def charge(self, steps: int, keyword: str, path: str) -> None:
        """Count compile work; a :class:`SchemaError` at ``keyword``/``path`` past :data:`MAX_COMPILE_STEPS`."""
        self.steps += steps
        if self.steps > MAX_COMPILE_STEPS:
            raise SchemaError(
                keyword,
                path,
                f"schema is too large to compile: it needs more than {MAX_COMPILE_STEPS:,} compile steps "
                "(subschemas built, node pairs intersected, enum values checked; the bound on compile work); "
                "split the tool or simplify its anyOf/allOf/enum",
            )

    def prop_schema(self, o: Obj, name: str, closed: bool = False, path: str = "") -> Node:
        """The schema ``o`` applies to the value of key ``name`` (declared, pattern or additional); ``closed``:
        an unspecified ``additional`` follows ``additional_default`` (else it allows any value)."""
        node = o.prop(name)
        if node is not None:
            return node
        matched = [pn for p, pn in o.pattern_props if pattern_matches(p, name)]
        if matched:
            out: Node = AnyNode()
            for pn in matched:
                out = self.intersect(out, pn, path)
            return out
        if o.additional is None:
            return Never("additional property") if closed and not self.additional_default else AnyNode()
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
        additional = merge_optional(lambda x, y: self.intersect(x, y, path), a.additional, b.additional)
        merged: dict[str, Node] = {}
        for p, n in a.pattern_props + b.pattern_props:
            merged[p] = self.intersect(merged[p], n, path) if p in merged else n
        mn = max(a.min_props, b.min_props)
        mx = merge_optional(min, a.max_props, b.max_props)
        if mx is not None and mn > mx:
            return Never("minProperties > maxProperties", "minProperties", path)
        return Obj(tuple(props), required, additional, tuple(merged.items()), mn, mx)

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

    def accepts(self, node: Node, v: Any, depth: int = 0) -> bool:
        """Whether JSON scalar ``v`` (a :class:`Lit`'s value: every caller tests one) is valid against ``node``
        (patterns checked with Python's ``re``); ``True`` is not ``1``, nor ``1.0`` ``1``."""
        if depth > 50:
            return True
        node = self.resolve(node)
        if isinstance(node, AnyNode):
            return True
        if isinstance(node, AnyOf):
            return any(self.accepts(o, v, depth + 1) for o in node.options)
        if isinstance(node, OneOf):
            return sum(self.accepts(o, v, depth + 1) for o in node.options) == 1
        if isinstance(node, Lit):
            return type(node.value) is type(v) and node.value == v
        if isinstance(node, Null):
            return v is None
        if isinstance(node, Bool):
            return isinstance(v, bool)
        if isinstance(node, Num):
            kinds = int if node.integer else (int, float)
            return isinstance(v, kinds) and not isinstance(v, bool) and _num_ok(node, v)
        if isinstance(node, Str):
            return (
                isinstance(v, str)
                and len(v) >= node.min_len
                and (node.max_len is None or len(v) <= node.max_len)
                and all(pattern_matches(p, v) is not False for p in node.patterns)
                and all(format_matches(f, v) for f in node.formats)
            )
        return False  # Never, or an array or object (no scalar)

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
                if self.disjoint(a.item(i), b.item(i), depth + 1):
                    return True
            return False
        if isinstance(a, Obj) and isinstance(b, Obj):
            for k in dict.fromkeys(a.required + b.required):
                if self.disjoint(self.prop_schema(a, k, True), self.prop_schema(b, k, True), depth + 1):
                    return True
            return False
        return False
