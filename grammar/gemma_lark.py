"""The schema IR compiled to llguidance Lark rules for Gemma-syntax values (``{key:value,...}``, bare keys in
declaration order, strings between ``<|"|>``), with the bounds llguidance can enforce; :mod:`grammar.turn`
assembles whole-turn grammars from them."""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from typing import Any

from grammar.grounding import MAX_GROUNDED_CHARS, grounding_regex
from grammar.llg import grammar_error
from schema import (
    FORMAT_LIMITS,
    FORMATS,
    Builder,
    SchemaError,
    ir,
    pattern_to_regex,
)
from schema.refs import escape_pointer_token

SYNTAXES = ("gemma", "json")
TOOL_CHOICES = ("auto", "required", "none")
#: What a ``%json`` schema adds so llguidance writes compact JSON (no free whitespace).
NO_FLEX = {"x-guidance": {"whitespace_flexible": False}}

#: Undeclared keys (with the ``:`` after them): no control characters, not starting with ``}``, a ``:`` inside only
#: before a character that cannot start a value, so greedy lexing and the parser split at the same ``:``.
_KEY_COLON = r":[^0-9tfn\-{\[\x00-\x1f]"
KEY_REGEX = rf"(?:[^:}}\x00-\x1f]|{_KEY_COLON})(?:[^:\x00-\x1f]|{_KEY_COLON})*"
#: Without patternProperties, a key is one part without ``:`` or parts without ``:,{}[]`` joined by ``:``
#: (``gdbots:ncr:1``), a rule, so the Earley parser (not the greedy lexer) decides which ``:`` ends it.
KEY1_REGEX = r"[^:}\x00-\x1f][^:\x00-\x1f]*"
KEY_PART_REGEX = r"[^:,{}\[\]\x00-\x1f]+"
#: Any text: string bodies (special tokens never match a terminal, so the ``<|"|>`` token ends the string).
_ANY_TEXT = r"/(?s:.*)/"
_INT_RX = r"-?(?:0|[1-9][0-9]*)"
#: An exponent of at most 2 digits (3 when negative: those only round towards 0).
_EXP_RX = r"[eE](?:\+?[0-9]{1,2}|-[0-9]{1,3})"
#: A JSON number that parses to a finite float: an integer (any length: Python's int is exact), or at most 100
#: integer digits with a fraction and/or an :data:`_EXP_RX` exponent (so below 1e200).
_NUM_RX = rf"-?(?:0|[1-9][0-9]*|(?:0|[1-9][0-9]{{0,99}})(?:\.[0-9]+(?:{_EXP_RX})?|{_EXP_RX}))"
_MAX_OBJECT_STATES = 20_000
#: Bound on the grammar text of one tool list (characters of rule and terminal bodies), which llguidance's compile
#: time grows with (0.46 s for MaskBench's largest grammar under it, docs/BENCHMARKS.md); past it, a
#: :class:`SchemaError` names the subschema being compiled.
MAX_GRAMMAR_CHARS = 500_000


def _size_keyword(node: ir.Node) -> str:
    """The keyword named when ``node``'s subschema trips :data:`MAX_GRAMMAR_CHARS`."""
    if isinstance(node, ir.Str):
        return "pattern" if node.patterns else "format" if node.formats else "maxLength"
    return {ir.Obj: "properties", ir.Arr: "items", ir.AnyOf: "anyOf", ir.Ref: "$ref"}.get(type(node), "type")


def lark_str(text: str) -> str:
    """A Lark string literal for ``text``."""
    return json.dumps(text, ensure_ascii=False)


_SLASH = re.compile(r"\\.|/", re.S)


def _lark_rx(rx: str) -> str:
    """Escape unescaped ``/`` so ``rx`` fits inside a Lark ``/.../`` literal."""
    return _SLASH.sub(lambda m: "\\/" if m.group() == "/" else m.group(), rx)


@dataclass
class _State:
    body: str | None  # alternatives deriving a non-empty string, or None when only "" is possible
    nullable: bool


class GemmaCompiler:
    """Compile schema IR to Lark rules for the Gemma value syntax (one instance per grammar)."""

    def __init__(self, additional_default: bool, grounding: tuple[str, ...] | None = None) -> None:
        self.additional_default = additional_default
        self.grounding = grounding
        self._ground_rx: dict[tuple[int, int], str | None] = {}
        self.rules: dict[str, str] = {}
        self.terms: dict[str, str] = {}
        self._term_names: dict[str, str] = {}
        self._node_rules: dict[tuple[int, ir.Node], str] = {}
        self._n = 0
        #: Characters of grammar emitted so far (bounded by MAX_GRAMMAR_CHARS).
        self.size = 0
        #: Per tool (scope): JSON pointer of each recursive definition, for error messages.
        self.def_paths: dict[int, dict[str, str]] = {}
        self._where = ""  # pointer of the subschema being compiled
        self._where_node: ir.Node = ir.AnyNode()

    def _charge(self, text: str, path: str | None = None, node: ir.Node | None = None) -> None:
        """Count emitted grammar; a :class:`SchemaError` past :data:`MAX_GRAMMAR_CHARS` names the subschema
        ``path``/``node`` (default: the one being compiled)."""
        self.size += len(text) + 8
        if self.size > MAX_GRAMMAR_CHARS:
            where, what = (self._where, self._where_node) if path is None or node is None else (path, node)
            raise SchemaError(
                _size_keyword(what),
                where,
                f"schema is too large to compile: its grammar exceeds {MAX_GRAMMAR_CHARS:,} characters (the bound "
                "on compile work, which keeps llguidance's compile under about a second); split the tool or "
                "simplify the schema",
            )

    def _name(self, prefix: str) -> str:
        self._n += 1
        return f"{prefix}{self._n}"

    def term(self, definition: str) -> str:
        """A terminal for ``definition`` (deduplicated)."""
        name = self._term_names.get(definition)
        if name is None:
            self._charge(definition)
            name = f"T{len(self._term_names)}"
            self._term_names[definition] = name
            self.terms[name] = definition
        return name

    def rule(self, body: str, prefix: str = "r") -> str:
        name = self._name(prefix)
        self._charge(body)
        self.rules[name] = body
        return name

    def compile(self, compiled: ir.IR, scope: int) -> str:
        """The Lark expression of ``compiled``'s root (``scope``: one per tool, naming its definitions)."""
        self.def_paths[scope] = compiled.paths
        return self.value(compiled.root, scope, compiled.defs)

    def value(self, node: ir.Node, scope: int, defs: dict[str, ir.Node], path: str = "") -> str:
        """A Lark expression for values valid against ``node`` (``defs``: this tool's recursive definitions;
        ``path``: JSON pointer of ``node``'s schema). Raises :class:`SchemaError` for a ``Never`` node, an object
        needing too many states, or a grammar past :data:`MAX_GRAMMAR_CHARS`."""
        self._where, self._where_node = path, node
        if isinstance(node, ir.Never):
            raise SchemaError(node.keyword or "type", node.path, f"no value is possible: {node.reason}")
        if isinstance(node, ir.AnyNode):
            return self._any()
        if isinstance(node, ir.Null):
            return '"null"'
        if isinstance(node, ir.Bool):
            return '("true" | "false")'
        if isinstance(node, ir.Lit):
            if node.kind == "str":
                return f'<|"|> {lark_str(node.value)} <|"|>' if node.value else '<|"|> <|"|>'
            return lark_str(json.dumps(node.value))  # a number, true, false or null
        if isinstance(node, ir.Num) and not node.bounded:
            return self.term(f"/{_INT_RX if node.integer else _NUM_RX}/")
        if isinstance(node, ir.Str):
            return f'<|"|> {self._str_term(node)} <|"|>'
        key = (scope, node)
        if key in self._node_rules:
            return self._node_rules[key]
        name = f"def{scope}_{node.name}" if isinstance(node, ir.Ref) else self._name("v")
        self._node_rules[key] = name
        self.rules[name] = "PENDING"
        if isinstance(node, ir.Ref):
            path, node = self.def_paths.get(scope, {}).get(node.name, path), defs[node.name]
            body = self.value(node, scope, defs, path)
        elif isinstance(node, ir.Num):
            schema = {**node.json_schema(), **NO_FLEX}
            body = "%json " + json.dumps(schema)
            _check_number(body, node, path)
        elif isinstance(node, ir.AnyOf):
            body = self._any_of(node, scope, defs, path)
        elif isinstance(node, ir.Arr):
            body = self._arr(node, scope, defs, path)
        elif isinstance(node, ir.Obj):
            body = self._obj(node, scope, defs, path)
        else:  # pragma: no cover
            raise TypeError(f"unknown IR node {node!r}")
        self._where, self._where_node = path, node
        self._charge(body, path, node)
        self.rules[name] = body
        return name

    def _any(self) -> str:
        if "any_value" not in self.rules:
            body = self.term(_ANY_TEXT)
            key = self._plain_key([])
            num = self.term(f"/{_NUM_RX}/")
            self.rules["any_value"] = (
                f'"null" | "true" | "false" | {num} | <|"|> {body} <|"|> | any_array | any_object'
            )
            self.rules["any_array"] = '"[" (any_value ("," any_value)*)? "]"'
            self.rules["any_object"] = '"{" (any_kv ("," any_kv)*)? "}"'
            self.rules["any_kv"] = f'{key} ":" any_value'
        return "any_value"

    def _any_of(self, node: ir.AnyOf, scope: int, defs: dict[str, ir.Node], path: str) -> str:
        """The alternatives of ``node``; its non-empty string literals (an ``enum``) as one terminal between one
        pair of quotes: one Earley item per value passed llguidance's 2,000 per row at a 2,000-value enum."""
        words = [o.value for o in node.options if isinstance(o, ir.Lit) and o.kind == "str" and o.value]
        alts = [
            self.value(o, scope, defs, f"{path}/anyOf/{i}")
            for i, o in enumerate(node.options)
            if len(words) < 2 or not (isinstance(o, ir.Lit) and o.kind == "str" and o.value)
        ]
        if len(words) >= 2:
            self._where, self._where_node = path, node  # not the last alternative's
            alts.insert(0, f'<|"|> {self.term(" | ".join(map(lark_str, words)))} <|"|>')
        return " | ".join(alts)

    def _str_term(self, node: ir.Str) -> str:
        parts = []
        if node.min_len or node.max_len is not None:
            hi = "" if node.max_len is None else str(node.max_len)
            parts.append(f"/(?s:.{{{node.min_len},{hi}}})/")
        parts += [f"/{pattern_to_regex(p)}/" for p in node.patterns]
        for f in node.formats:
            parts += [f"/{_lark_rx(rx)}/" for rx in (FORMATS[f], *FORMAT_LIMITS.get(f, ()))]
        if node.grounded and self.grounding is not None:
            lengths = (node.max_len or MAX_GROUNDED_CHARS, node.min_len or 1)
            if lengths not in self._ground_rx:
                self._ground_rx[lengths] = grounding_regex(self.grounding, *lengths)
            rx = self._ground_rx[lengths]
            # no span fits (a nested grounded string: top-level ones were removed by _ground_specs): no value
            parts.append(f"/{_lark_rx(rx)}/" if rx is not None else r"/[^\s\S]/")
        return self.term(" & ".join(parts) if parts else _ANY_TEXT)

    def _arr(self, node: ir.Arr, scope: int, defs: dict[str, ir.Node], path: str) -> str:
        k = len(node.prefix)
        mn, mx = node.min_items, node.max_items

        def tail(i: int, first: bool) -> tuple[str, bool]:
            """(non-empty expression or "", nullable) for the elements from index ``i`` on."""
            sep = "" if first else '"," '
            if mx is not None and i >= mx:
                return "", True
            if i < k:
                rest, rest_null = tail(i + 1, False)
                expr = f"{sep}{self.value(node.prefix[i], scope, defs, f'{path}/prefixItems/{i}')}"
                if rest:  # (a tail that cannot be empty is never dead: make_arr pruned those)
                    expr += f" {rest}?" if rest_null else f" {rest}"
                return f"({expr})", i >= mn
            if isinstance(node.items, ir.Never):
                return "", i >= mn
            lo = max(0, mn - i)
            hi = None if mx is None else mx - i
            it = _items(self.value(node.items, scope, defs, f"{path}/items"), first, lo, hi)
            return (f"({it})" if first else it), lo == 0

        expr, nullable = tail(0, True)
        inner = f"{expr}?" if (expr and nullable) else expr
        return f'"[" {inner} "]"' if inner else '"[" "]"'

    def _obj(self, node: ir.Obj, scope: int, defs: dict[str, ir.Node], path: str) -> str:
        entries = [(k, v, k in node.required) for k, v in node.props if not isinstance(v, ir.Never)]
        for r in node.required_only():
            v = _algebra().prop_schema(node, r)
            if isinstance(v, ir.Never):
                raise SchemaError("required", "", f"required property {r!r} is not allowed by the schema")
            entries.append((r, v, True))
        taken = [k for k, _ in node.props] + node.required_only()
        extras = self._extras(node, taken, scope, defs, path)
        n = len(entries)
        mn, mx = node.min_props, node.max_props
        cap = mx if mx is not None else mn
        if (n + 1) * (cap + 1) * 2 > _MAX_OBJECT_STATES:
            raise SchemaError("maxProperties", "", "minProperties/maxProperties need too many grammar states")
        base = self._name("o")
        # State (i, first, c): properties i.. still to come, nothing emitted yet (first), c emitted so far
        # (capped at cap). Built bottom-up (no recursion: objects may have hundreds of properties); only the
        # states reachable from (0, True, 0) become rules.
        Key = tuple[int, bool, int]
        states: dict[Key, _State] = {}
        uses: dict[Key, list[Key]] = {}
        values: dict[int, str] = {}

        def name(k: Key) -> str:
            return f"{base}_{k[0]}_{int(k[1])}_{k[2]}"

        def ref(k: Key) -> tuple[str, bool] | None:
            """(reference or "", nullable) for state ``k``; None when the state is dead."""
            st_ = states[k]
            if st_.body is None:
                return ("", True) if st_.nullable else None
            return name(k), st_.nullable

        for i in range(n, -1, -1):
            for first, c in [(True, 0)] + [(False, c) for c in range(cap + 1)]:
                key = (i, first, c)
                if i == n:
                    states[key] = self._extras_state(extras, first, c, mn, mx)
                    uses[key] = []
                    continue
                prop, v, required = entries[i]
                alts: list[str] = []
                used: list[Key] = []
                nullable = False
                if mx is None or c + 1 <= mx:
                    nk = (i + 1, False, min(c + 1, cap))
                    nxt = ref(nk)
                    if nxt is not None:
                        if i not in values:
                            values[i] = self.value(
                                v, scope, defs, f"{path}/properties/{escape_pointer_token(prop)}"
                            )
                        sep = "" if first else '"," '
                        e = f"{sep}{lark_str(prop + ':')} {values[i]}"
                        if nxt[0]:
                            e += f" {nxt[0]}?" if nxt[1] else f" {nxt[0]}"
                            used.append(nk)
                        alts.append(e)
                if not required:
                    sk = (i + 1, first, c)
                    skip = ref(sk)
                    if skip is not None:
                        if skip[0]:
                            alts.append(skip[0])
                            used.append(sk)
                        nullable = skip[1]
                states[key] = _State(" | ".join(alts) if alts else None, nullable)
                uses[key] = used
        top = ref((0, True, 0))
        if top is None:
            raise SchemaError("minProperties", "", "no object satisfies the property constraints")
        if top[0]:
            self._emit_reachable((0, True, 0), states, uses, name, path, node)
        body, nullable = top
        return f'"{{" {body}{"?" if nullable else ""} "}}"' if body else '"{" "}"'

    def _emit_reachable(
        self,
        start: tuple[int, bool, int],
        states: dict[Any, _State],
        uses: dict[Any, list[Any]],
        name: Any,
        path: str,
        node: ir.Obj,
    ) -> None:
        """Write a rule for each object state reachable from ``start`` (depth-first over ``uses``)."""
        todo = [start]
        seen = set(todo)
        while todo:
            k = todo.pop()
            body_k = states[k].body
            assert body_k is not None
            self._charge(body_k, path, node)
            self.rules[name(k)] = body_k
            for u in uses[k]:
                if u not in seen:
                    seen.add(u)
                    todo.append(u)

    def _plain_key(self, taken: list[str]) -> str:
        """Expression for a key that is not one of ``taken`` (no patternProperties involved)."""
        one = self.term(f"/{KEY1_REGEX}/{_not_in(taken)}")
        if any(":" in k for k in taken):
            return one
        part = self.term(f"/{KEY_PART_REGEX}/")
        return f'({one} | {part} (":" {part})+)'

    def _extras(
        self, node: ir.Obj, taken: list[str], scope: int, defs: dict[str, ir.Node], path: str
    ) -> str | None:
        """Rule for one ``key:value`` pair of a key not in ``properties`` (None when none is allowed)."""
        not_taken = _not_in(taken)
        pats = [(pattern_to_regex(p), sub) for p, sub in node.pattern_props]
        if len(pats) > 4:
            raise SchemaError("patternProperties", "", "more than 4 patternProperties are not supported")
        additional = node.additional
        if additional is None:
            additional = ir.AnyNode() if self.additional_default else ir.Never("additionalProperties")
        alts = []
        # Partition keys by the set of patterns they match: their value must satisfy all of those schemas (that
        # of additionalProperties when they match none: mask 0, last).
        for mask in [*range(1, 1 << len(pats)), 0] if pats else []:
            sub: ir.Node = ir.AnyNode() if mask else additional
            rx_parts = [f"/{KEY_REGEX}/"]
            for j, (rx, s) in enumerate(pats):
                if mask >> j & 1:
                    rx_parts.append(f"/{rx}/")
                    sub = _algebra().intersect(sub, s, "")
                else:
                    rx_parts.append(f"~/{rx}/")
            if not isinstance(sub, ir.Never):
                key = self.term("(" + " & ".join(rx_parts) + not_taken + ') ":"')
                where = "patternProperties" if mask else "additionalProperties"
                alts.append(f"{key} {self.value(sub, scope, defs, f'{path}/{where}')}")
        if not pats and not isinstance(additional, ir.Never):
            key = f'{self._plain_key(taken)} ":"'
            alts.append(f"{key} {self.value(additional, scope, defs, f'{path}/additionalProperties')}")
        return self.rule(" | ".join(alts), "kv") if alts else None

    @staticmethod
    def _extras_state(kv: str | None, first: bool, c: int, mn: int, mx: int | None) -> _State:
        lo = max(0, mn - c)
        hi = None if mx is None else mx - c
        if hi is not None and hi < lo:
            return _State(None, False)
        return _State(None if kv is None or hi == 0 else _items(kv, first, lo, hi), lo == 0)


def _items(item: str, first: bool, lo: int, hi: int | None) -> str:
    """``lo`` to ``hi`` more list items (at least one), each after ``,`` but the first when ``first``."""
    if not first:
        return _rep(f'"," {item}', max(lo, 1), hi)
    rep = _rep(f'"," {item}', max(lo - 1, 0), None if hi is None else hi - 1)
    return f"{item} {rep}" if rep else item


def _not_in(taken: list[str]) -> str:
    """What a key terminal adds to exclude the keys ``taken`` ("" for none)."""
    return f" & ~({' | '.join(lark_str(k) for k in taken)})" if taken else ""


def _rep(expr: str, lo: int, hi: int | None) -> str:
    """``(expr){lo,hi}`` in Lark ("" when it can only be empty)."""
    if hi is not None and hi <= 0:
        return ""
    quantifier = {(0, None): "*", (1, None): "+", (0, 1): "?"}.get((lo, hi))
    if quantifier is None:
        quantifier = f"{{{lo}}}" if lo == hi else f"{{{lo},{'' if hi is None else hi}}}"
    return f"({expr}){quantifier}"


@functools.lru_cache(maxsize=1024)
def _number_error(body: str) -> str:
    return grammar_error(f"start: {body}\n", limited=False)


def _check_number(body: str, node: ir.Num, path: str) -> None:
    """Raise a :class:`SchemaError` at ``path`` when llguidance cannot build a bounded number's regex: at the
    bound beyond its float range (``minimum: 1e100``: whatever is within +-1e18 works), else at ``multipleOf``
    when the message names it, else at ``minimum`` (``exclusiveMinimum: 1e-300``: the regex nests too deep)."""
    err = _number_error(body)
    for k, v in node.json_schema().items() if "for float range" in err else ():  # name the bound at fault
        if k not in ("type", "multipleOf") and _number_error(
            f"%json {json.dumps({'type': 'number', k: v, **NO_FLEX})}"
        ):
            raise SchemaError(
                k, path, f"{k}={v!r} is beyond the range the grammar's number bounds support (|{k}| < 1e18)"
            )
    if err:
        lines = err.strip().splitlines()
        first = lines[0].split("failed to compile JSON schema: ", 1)[-1]
        if first.endswith(":"):  # a regex parse error: the reason is on its own line, after the regex
            first += " " + next((x[7:] for x in lines if x.startswith("error: ")), "")
        keyword = "multipleOf" if "multipleOf" in first and node.multiple_of is not None else "minimum"
        raise SchemaError(keyword, path, f"number bounds not supported by the grammar: {first[:200]}")


def _algebra() -> Builder:
    """A throwaway builder: the IR algebra for undeclared keys' schemas (overlapping patternProperties)."""
    return Builder({}, True)
