"""Tool-call grammars for llguidance, generated from tool declarations, and a greedy shortest completion.

:func:`tool_call_grammar` returns an llguidance grammar (Lark syntax, for ``llguidance.LLMatcher(tok,
grammar)``) for one assistant turn:

* optional thinking block ``<|channel>...<channel|>`` first (``allow_thinking``);
* ``tool_choice="none"``: prose, then ``<turn|>``;
* ``"auto"``: optional prose, then either ``<turn|>`` or one or more calls;
* ``"required"`` / ``{"name": NAME}``: one or more calls (of any tool / of that tool);
* calls are concatenated and followed by ``<|tool_response>`` (the token after which a tool result is due),
  so "the matcher is accepting" means "the turn is complete".

Call syntaxes (no flexible whitespace anywhere):

* ``"gemma"`` (Gemma 4 native): ``<|tool_call>call:NAME{key:<|"|>text<|"|>,n:42,flag:true,obj:{...},
  list:[...]}<tool_call|>``. Keys are bare, strings are raw text between ``<|"|>`` tokens (no escaping).
  Strings and keys may hold any text, the text of a control token included (spelled with ordinary
  tokens): special tokens never match a terminal, so the delimiter *token* always ends a string and no
  other control token can occur inside one. The argument grammar is
  compiled here from the schema IR of :mod:`model.constraints.schema` (properties in schema order,
  optional ones skippable, enums/consts as literals, string lengths/patterns/formats as regex terminals,
  bounded numbers through llguidance's JSON number regexes ``%json{...}``, arrays with min/max items,
  ``anyOf`` as alternatives, recursion as rules, min/maxProperties as counted states).
* ``"json"``: ``<|tool_call>{"name":"NAME","arguments":{...}}<tool_call|>``: the same call tokens wrap a
  compact JSON object so the runtime's control tokens still apply; the arguments are constrained by
  llguidance's own JSON Schema compiler (``%json{...}`` with ``whitespace_flexible: false``), fed the same
  IR written back as plain JSON Schema.

Special tokens appear bare in rules (``<|tool_call>``, ``<|"|>``): a quoted literal would only match their
text. Grammars are cached by (tools, tool_choice, syntax, allow_thinking, additional_properties).

Sources: llguidance Lark syntax (https://github.com/guidance-ai/llguidance/blob/main/docs/syntax.md); Gemma 4
tool-call format as rendered by the project's chat template (``model/chat_template.jinja``).
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from model.constraints.schema import (
    FORMATS,
    IR,
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
    Ref,
    SchemaError,
    Str,
    ToolSpec,
    build_ir,
    cached_ir,
    canonical,
    normalize_tool,
    object_part,
    pattern_matches,
    pattern_to_regex,
)

SYNTAXES = ("gemma", "json")
TOOL_CHOICES = ("auto", "required", "none")

#: Keys of the Gemma syntax not declared in ``properties`` (the ``:`` after them is part of the terminal):
#: no control characters, not starting with ``}``, and a ``:`` inside only when the next character cannot
#: start a value (digit, ``-``, ``t``/``f``/``n``, ``{``, ``[``), so that greedy lexing ends the key at the
#: right ``:`` and the parser's backtracking finds the same split.
_KEY_COLON = r":[^0-9tfn\-{\[\x00-\x1f]"
KEY_REGEX = rf"(?:[^:}}\x00-\x1f]|{_KEY_COLON})(?:[^:\x00-\x1f]|{_KEY_COLON})*"
#: Without patternProperties, a key is either one part without ``:`` (``KEY1``) or parts without
#: ``:,{}[]`` joined by ``:`` (``gdbots:ncr:1``): a rule, so the Earley parser (not the greedy lexer)
#: decides which ``:`` ends the key; the parser's backtracking finds the same split.
KEY1_REGEX = r"[^:}\x00-\x1f][^:\x00-\x1f]*"
KEY_PART_REGEX = r"[^:,{}\[\]\x00-\x1f]+"
#: Any text: string bodies (special tokens never match a terminal, so the ``<|"|>`` token ends the string and
#: text spelling it with ordinary tokens stays inside; the parser reads marked text and tells them apart).
_ANY_TEXT = r"/(?s:.*)/"
_INT_RX = r"-?(?:0|[1-9][0-9]*)"
_NUM_RX = r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"
_MAX_OBJECT_STATES = 20_000
#: Bound on the grammar text generated for one tool list (characters of rule and terminal bodies). llguidance's
#: compile time grows with it: 0.46 s (validation + matcher, 4k-token vocabulary) for the largest grammar of
#: MaskBench's schemas under the bound (docs/BENCHMARKS.md); a schema whose grammar would be larger is refused
#: at registration with a :class:`SchemaError` naming the subschema being compiled when the bound was reached.
MAX_GRAMMAR_CHARS = 500_000


def _esc(name: str) -> str:
    """A JSON-pointer token (RFC 6901: ``~`` -> ``~0``, ``/`` -> ``~1``)."""
    return name.replace("~", "~0").replace("/", "~1")


def _size_keyword(node: Node) -> str:
    """The keyword named when ``node``'s subschema trips :data:`MAX_GRAMMAR_CHARS`."""
    if isinstance(node, Obj):
        return "properties"
    if isinstance(node, Arr):
        return "items"
    if isinstance(node, AnyOf):
        return "anyOf"
    if isinstance(node, Ref):
        return "$ref"
    if isinstance(node, Str):
        return "pattern" if node.patterns else "format" if node.formats else "maxLength"
    return "type"


def _lark_str(text: str) -> str:
    """A Lark string literal for ``text``."""
    return json.dumps(text, ensure_ascii=False)


def _lark_rx(rx: str) -> str:
    """Escape unescaped ``/`` so ``rx`` fits inside a Lark ``/.../`` literal."""
    out, i = [], 0
    while i < len(rx):
        c = rx[i]
        if c == "\\" and i + 1 < len(rx):
            out.append(rx[i : i + 2])
            i += 2
            continue
        out.append("\\/" if c == "/" else c)
        i += 1
    return "".join(out)


def _json_text(v: Any) -> str:
    """Compact JSON text of a scalar (the Gemma syntax writes numbers, booleans and null as JSON does)."""
    return json.dumps(v, ensure_ascii=False, separators=(",", ":"))


# ----------------------------------------------------------------------------------------------------------
# Gemma syntax: IR -> Lark
# ----------------------------------------------------------------------------------------------------------


@dataclass
class _State:
    body: str | None  # alternatives deriving a non-empty string, or None when only "" is possible
    nullable: bool


class _GemmaCompiler:
    """Compile schema IR to Lark rules for the Gemma value syntax (one instance per grammar)."""

    def __init__(self, additional_default: bool, grounding: tuple[str, ...] | None = None) -> None:
        self.additional_default = additional_default
        self.grounding = grounding
        self._ground_rx: dict[tuple[int, int], str | None] = {}
        self.rules: dict[str, str] = {}
        self.terms: dict[str, str] = {}
        self._term_names: dict[str, str] = {}
        self._node_rules: dict[tuple[int, Node], str] = {}
        self._defs: dict[int, dict[str, Node]] = {}
        self._n = 0
        self._any_done = False
        #: Characters of grammar emitted so far (bounded by MAX_GRAMMAR_CHARS).
        self.size = 0
        #: Per tool (scope): JSON pointer of each recursive definition, for error messages.
        self.def_paths: dict[int, dict[str, str]] = {}
        self._where = ""  # pointer of the subschema being compiled
        self._where_node: Node = AnyNode()

    def _charge(self, text: str, path: str | None = None, node: Node | None = None) -> None:
        """Count emitted grammar against :data:`MAX_GRAMMAR_CHARS` (``path``/``node``: the subschema the
        text belongs to; default the one being compiled).

        Raises:
            SchemaError: the grammar would exceed the bound; keyword and path name the subschema being
                compiled when it was reached.
        """
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

    # -- values ---------------------------------------------------------------------------------------------
    def value(self, node: Node, scope: int, defs: dict[str, Node], path: str = "") -> str:
        """A Lark expression for values valid against ``node`` (``defs``: this tool's recursive definitions;
        ``path``: JSON pointer of ``node``'s schema, for error messages).

        Raises:
            SchemaError: ``node`` is ``Never`` (no value possible), an object needs too many states, or the
                grammar exceeds :data:`MAX_GRAMMAR_CHARS`.
        """
        self._where, self._where_node = path, node
        if isinstance(node, Never):
            raise SchemaError(node.keyword or "type", node.path, f"no value is possible: {node.reason}")
        if isinstance(node, AnyNode):
            return self._any()
        if isinstance(node, Null):
            return '"null"'
        if isinstance(node, Bool):
            return '("true" | "false")'
        if isinstance(node, Lit):
            if node.kind == "str":
                return f'<|"|> {_lark_str(node.value)} <|"|>' if node.value else '<|"|> <|"|>'
            return _lark_str(_json_text(node.value))
        if isinstance(node, Num):
            if not node.bounded:
                return self.term(f"/{_INT_RX if node.integer else _NUM_RX}/")
        if isinstance(node, Str):
            return f'<|"|> {self._str_term(node)} <|"|>'
        key = (scope, node)
        if key in self._node_rules:
            return self._node_rules[key]
        self._defs[scope] = defs
        if isinstance(node, Ref):
            name = f"def{scope}_{node.name}"
            self._node_rules[key] = name
            self.rules[name] = "PENDING"
            dpath = self.def_paths.get(scope, {}).get(node.name, path)
            body = self.value(defs[node.name], scope, defs, dpath)
            self._charge(body, dpath, defs[node.name])
            self.rules[name] = body
            return name
        name = self._name("v")
        self._node_rules[key] = name
        self.rules[name] = "PENDING"
        if isinstance(node, Num):
            schema = {**node.json_schema(), "x-guidance": {"whitespace_flexible": False}}
            body = "%json " + json.dumps(schema)
        elif isinstance(node, AnyOf):
            body = " | ".join(
                self.value(o, scope, defs, f"{path}/anyOf/{i}") for i, o in enumerate(node.options)
            )
        elif isinstance(node, Arr):
            body = self._arr(node, scope, defs, path)
        elif isinstance(node, Obj):
            body = self._obj(node, scope, defs, path)
        else:  # pragma: no cover
            raise TypeError(f"unknown IR node {node!r}")
        self._where, self._where_node = path, node
        self._charge(body, path, node)
        self.rules[name] = body
        return name

    def _any(self) -> str:
        if not self._any_done:
            self._any_done = True
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

    def _str_term(self, node: Str) -> str:
        parts = []
        if node.min_len or node.max_len is not None:
            hi = "" if node.max_len is None else str(node.max_len)
            parts.append(f"/(?s:.{{{node.min_len},{hi}}})/")
        for p in node.patterns:
            parts.append(f"/{pattern_to_regex(p)}/")
        for f in node.formats:
            parts.append(f"/{_lark_rx(FORMATS[f])}/")
        if node.grounded and self.grounding is not None:
            from model.constraints.grounding import MAX_GROUNDED_CHARS, grounding_regex

            lengths = (node.max_len or MAX_GROUNDED_CHARS, node.min_len or 1)
            if lengths not in self._ground_rx:
                self._ground_rx[lengths] = grounding_regex(self.grounding, *lengths)
            rx = self._ground_rx[lengths]
            # no span fits: the empty language (top-level grounded keys without a span are removed before
            # this, see _ground_specs; this covers nested grounded strings)
            parts.append(f"/{_lark_rx(rx)}/" if rx is not None else r"/[^\s\S]/")
        return self.term(" & ".join(parts) if parts else _ANY_TEXT)

    def _arr(self, node: Arr, scope: int, defs: dict[str, Node], path: str) -> str:
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
                if rest:
                    expr += f" {rest}?" if rest_null else f" {rest}"
                elif not rest_null:  # pragma: no cover - a dead tail was pruned by make_arr
                    return "", i >= mn
                return f"({expr})", i >= mn
            if isinstance(node.items, Never):
                return "", i >= mn
            lo = max(0, mn - i)
            hi = None if mx is None else mx - i
            it = self.value(node.items, scope, defs, f"{path}/items")
            if first:
                rep = _rep(f'"," {it}', max(lo - 1, 0), None if hi is None else hi - 1)
                return f"({it}{' ' + rep if rep else ''})", lo == 0
            rep = _rep(f'"," {it}', max(lo, 1), hi)
            return rep, lo == 0

        expr, nullable = tail(0, True)
        inner = f"{expr}?" if (expr and nullable) else expr
        return f'"[" {inner} "]"' if inner else '"[" "]"'

    def _obj(self, node: Obj, scope: int, defs: dict[str, Node], path: str) -> str:
        entries = [(k, v, k in node.required) for k, v in node.props if not isinstance(v, Never)]
        for r in node.required_only():
            v = self._undeclared(node, r)
            if isinstance(v, Never):
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
                            values[i] = self.value(v, scope, defs, f"{path}/properties/{_esc(prop)}")
                        sep = "" if first else '"," '
                        e = f"{sep}{_lark_str(prop + ':')} {values[i]}"
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
        todo = [(0, True, 0)] if top[0] else []
        seen: set[Key] = set(todo)
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
        body, nullable = top
        if not body:
            return '"{" "}"'
        return f'"{{" {body}{"?" if nullable else ""} "}}"'

    def _undeclared(self, node: Obj, name: str) -> Node:
        """The schema of a key not in ``props``: matching patternProperties, else additionalProperties."""
        from model.constraints.schema import pattern_matches

        matched = [sub for p, sub in node.pattern_props if pattern_matches(p, name)]
        if matched:
            out: Node = AnyNode()
            for sub in matched:
                out = _intersect_simple(out, sub)
            return out
        if node.additional is None:
            return AnyNode()
        return node.additional

    def _plain_key(self, taken: list[str]) -> str:
        """Expression for a key that is not one of ``taken`` (no patternProperties involved)."""
        excl = f" & ~({' | '.join(_lark_str(k) for k in taken)})" if taken else ""
        one = self.term(f"/{KEY1_REGEX}/{excl}")
        if any(":" in k for k in taken):
            return one
        part = self.term(f"/{KEY_PART_REGEX}/")
        return f'({one} | {part} (":" {part})+)'

    def _extras(
        self, node: Obj, taken: list[str], scope: int, defs: dict[str, Node], path: str
    ) -> str | None:
        """Rule for one ``key:value`` pair of a key not in ``properties`` (None when none is allowed)."""
        excl = " | ".join(_lark_str(k) for k in taken)
        not_taken = f" & ~({excl})" if taken else ""
        alts = []
        pats = [(pattern_to_regex(p), sub) for p, sub in node.pattern_props]
        if len(pats) > 4:
            raise SchemaError("patternProperties", "", "more than 4 patternProperties are not supported")
        # Partition keys by the set of patterns they match: their value must satisfy all of those schemas.
        for mask in range(1, 1 << len(pats)):
            sub: Node = AnyNode()
            rx_parts = [f"/{KEY_REGEX}/"]
            for j, (rx, s) in enumerate(pats):
                if mask >> j & 1:
                    rx_parts.append(f"/{rx}/")
                    sub = _intersect_simple(sub, s)
                else:
                    rx_parts.append(f"~/{rx}/")
            if isinstance(sub, Never):
                continue
            key = self.term("(" + " & ".join(rx_parts) + not_taken + ') ":"')
            alts.append(f"{key} {self.value(sub, scope, defs, f'{path}/patternProperties')}")
        additional = node.additional
        if additional is None:
            additional = AnyNode() if self.additional_default else Never("additionalProperties")
        if not isinstance(additional, Never):
            if pats:
                rx_parts = [f"/{KEY_REGEX}/"] + [f"~/{rx}/" for rx, _ in pats]
                key = self.term("(" + " & ".join(rx_parts) + not_taken + ') ":"')
                alts.append(f"{key} {self.value(additional, scope, defs, f'{path}/additionalProperties')}")
            else:
                alts.append(
                    f'{self._plain_key(taken)} ":" {self.value(additional, scope, defs, f"{path}/additionalProperties")}'
                )
        if not alts:
            return None
        return self.rule(" | ".join(alts), "kv")

    @staticmethod
    def _extras_state(kv: str | None, first: bool, c: int, mn: int, mx: int | None) -> _State:
        lo = max(0, mn - c)
        hi = None if mx is None else mx - c
        if hi is not None and hi < lo:
            return _State(None, False)
        if kv is None or hi == 0:
            return _State(None, lo == 0)
        if first:
            rep = _rep(f'"," {kv}', max(lo - 1, 0), None if hi is None else hi - 1)
            return _State(f"{kv}{' ' + rep if rep else ''}", lo == 0)
        return _State(_rep(f'"," {kv}', max(lo, 1), hi), lo == 0)


def _rep(expr: str, lo: int, hi: int | None) -> str:
    """``(expr){lo,hi}`` in Lark ("" when it can only be empty)."""
    if hi is not None and hi <= 0:
        return ""
    if hi is None:
        if lo == 0:
            return f"({expr})*"
        if lo == 1:
            return f"({expr})+"
        return f"({expr}){{{lo},}}"
    if lo == 0 and hi == 1:
        return f"({expr})?"
    if lo == hi:
        return f"({expr}){{{lo}}}"
    return f"({expr}){{{lo},{hi}}}"


def _intersect_simple(a: Node, b: Node) -> Node:
    """Intersection used for overlapping patternProperties (full IR intersection via a throwaway builder)."""
    from model.constraints.schema import _Builder

    return _Builder({}, True).intersect(a, b, "")


# ----------------------------------------------------------------------------------------------------------
# JSON syntax: IR -> JSON Schema for llguidance's compiler
# ----------------------------------------------------------------------------------------------------------


def ir_to_json_schema(node: Node, *, additional_default: bool, ref_prefix: str = "") -> Any:
    """Write IR back as plain JSON Schema (no ``allOf``/``oneOf``; ``additionalProperties`` explicit).

    Args:
        node: IR node.
        additional_default: value of an unspecified ``additionalProperties``.
        ref_prefix: prefix of ``$defs`` names for :class:`Ref` nodes (``#/$defs/<prefix><name>``).

    Returns:
        A JSON Schema (dict or bool) with the same instances as ``node``.
    """

    def go(n: Node) -> Any:
        if isinstance(n, AnyNode):
            return True
        if isinstance(n, Never):
            return False
        if isinstance(n, Null):
            return {"type": "null"}
        if isinstance(n, Bool):
            return {"type": "boolean"}
        if isinstance(n, Lit):
            return {"const": n.value}
        if isinstance(n, Num):
            return n.json_schema()
        if isinstance(n, Str):
            out: dict[str, Any] = {"type": "string"}
            if n.min_len:
                out["minLength"] = n.min_len
            if n.max_len is not None:
                out["maxLength"] = n.max_len
            extra = [{"pattern": p} for p in n.patterns] + [{"format": f} for f in n.formats]
            if extra:
                out.update(extra[0])
                if len(extra) > 1:
                    out["allOf"] = extra[1:]
            if n.grounded:
                out["x-grounded"] = True
            return out
        if isinstance(n, Arr):
            out = {"type": "array"}
            if n.prefix:
                out["prefixItems"] = [go(x) for x in n.prefix]
            out["items"] = go(n.items)
            if n.min_items:
                out["minItems"] = n.min_items
            if n.max_items is not None:
                out["maxItems"] = n.max_items
            return out
        if isinstance(n, Obj):
            props = {k: go(v) for k, v in n.props}
            for r in n.required_only():
                matched = [sub for p, sub in n.pattern_props if pattern_matches(p, r)]
                props[r] = True if matched or n.additional is None else go(n.additional)
            out = {"type": "object", "properties": props}
            if n.required:
                out["required"] = list(n.required)
            if n.pattern_props:
                out["patternProperties"] = {p: go(v) for p, v in n.pattern_props}
            add = n.additional
            out["additionalProperties"] = go(add) if add is not None else bool(additional_default)
            if n.min_props:
                out["minProperties"] = n.min_props
            if n.max_props is not None:
                out["maxProperties"] = n.max_props
            return out
        if isinstance(n, AnyOf):
            return {"anyOf": [go(o) for o in n.options]}
        if isinstance(n, Ref):
            return {"$ref": f"#/$defs/{ref_prefix}{n.name}"}
        raise TypeError(f"unknown IR node {n!r}")  # pragma: no cover

    return go(node)


# ----------------------------------------------------------------------------------------------------------
# Tool-call grammars
# ----------------------------------------------------------------------------------------------------------

_CACHE: OrderedDict[tuple[str, str, str, bool, bool, tuple[str, ...] | None], str] = OrderedDict()
_CACHE_LOCK = threading.Lock()
_CACHE_SIZE = 256


def _tool_ir(spec: ToolSpec, additional_default: bool) -> IR:
    ir = cached_ir(canonical(spec.parameters), additional_default)
    root = object_part(ir.root, ir.defs)
    if isinstance(root, Never):
        raise SchemaError("type", "", f"tool {spec.name!r}: parameters must describe a JSON object")
    return IR(root, ir.defs, ir.paths)


def _choice_key(tool_choice: Any) -> str:
    if isinstance(tool_choice, str):
        if tool_choice not in TOOL_CHOICES:
            raise ValueError(
                f"tool_choice must be one of {TOOL_CHOICES} or {{'name': NAME}}, got {tool_choice!r}"
            )
        return tool_choice
    if isinstance(tool_choice, dict):
        name = tool_choice.get("name")
        if name is None and isinstance(tool_choice.get("function"), dict):  # OpenAI {"type":"function",...}
            name = tool_choice["function"].get("name")
        if isinstance(name, str):
            return "name:" + name
    raise ValueError(f"tool_choice must be one of {TOOL_CHOICES} or {{'name': NAME}}, got {tool_choice!r}")


def tool_call_grammar(
    tools: list[Any] | None,
    tool_choice: Any = "auto",
    syntax: str = "gemma",
    allow_thinking: bool = True,
    *,
    additional_properties: bool = False,
    grounding: Sequence[str] | None = None,
) -> str:
    """The llguidance grammar of one assistant turn with tool calls (see the module docstring).

    Args:
        tools: tool declarations (OpenAI-style dicts, bare/BFCL dicts or :class:`ToolSpec`); may be empty
            for ``tool_choice="none"``/``"auto"`` (then prose only).
        tool_choice: ``"auto" | "required" | "none" | {"name": NAME}``.
        syntax: ``"gemma"`` (native calls) or ``"json"`` (``{"name":...,"arguments":{...}}`` calls).
        allow_thinking: allow a leading ``<|channel>...<channel|>`` block.
        additional_properties: what objects without ``additionalProperties`` allow: ``False`` (default for
            tool arguments: only declared keys) or ``True`` (JSON Schema semantics).
        grounding: the conversation's texts (user messages, tool responses) that grounded string values
            (``x-grounded: true``) must be spans of (:mod:`model.constraints.grounding`; Gemma syntax). ``None``
            leaves grounded strings unconstrained (registration-time checks). A tool whose *required* grounded
            parameter has nothing to ground on is left out of the grammar (the model cannot call it).

    Returns:
        Grammar text for ``llguidance.LLMatcher(llg_tokenizer, grammar)`` (compiles in about a millisecond).
        It ends with ``<|tool_response>`` after calls and ``<turn|>`` after prose.

    Raises:
        SchemaError: a tool's schema is unsupported or unsatisfiable, or too large to compile (more than
            :data:`model.constraints.schema.MAX_COMPILE_STEPS` steps or :data:`MAX_GRAMMAR_CHARS` characters
            of grammar); keyword and JSON path named.
        ValueError: unknown ``syntax``/``tool_choice``, a named tool that is not declared, duplicate tool
            names, or ``"required"`` without tools; a named (or the only, under ``"required"``) tool whose
            required grounded parameter has nothing to ground on (the message names the parameter).
    """
    if syntax not in SYNTAXES:
        raise ValueError(f"syntax must be one of {SYNTAXES}, got {syntax!r}")
    choice = _choice_key(tool_choice)
    specs = [normalize_tool(t) for t in (tools or [])]
    ground = None
    if grounding is not None and syntax == "gemma" and any(_has_grounded(s) for s in specs):
        from model.constraints.grounding import bounded_texts

        ground = tuple(bounded_texts(grounding))
        specs, blocked = _ground_specs(specs, ground)
        wanted = choice[5:] if choice.startswith("name:") else None
        if wanted in blocked or (choice == "required" and blocked and not specs):
            name = wanted if wanted in blocked else next(iter(blocked))
            raise ValueError(
                f"tool {name!r} cannot be called: its parameter {blocked[name]!r} is grounded (x-grounded) "
                "and no span of the conversation (user messages, tool responses) fits it"
            )
    key = (canonical(specs), choice, syntax, bool(allow_thinking), bool(additional_properties), ground)
    with _CACHE_LOCK:
        if key in _CACHE:
            _CACHE.move_to_end(key)
            return _CACHE[key]
    grammar = _build_grammar(specs, choice, syntax, allow_thinking, additional_properties, ground)
    _validate(grammar)
    with _CACHE_LOCK:
        _CACHE[key] = grammar
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    return grammar


def _validate(grammar: str) -> None:
    """Compile ``grammar`` once with llguidance (no tokenizer) so errors surface at registration.

    Raises:
        SchemaError: llguidance rejects the grammar (e.g. overlapping ``patternProperties`` in the JSON
            syntax, which llguidance's JSON compiler does not support).
    """
    import llguidance

    from model.constraints.llg import parser_limits

    err = llguidance.LLMatcher.validate_grammar(grammar, limits=parser_limits())
    if err:
        first = err.strip().splitlines()[0]
        keyword = next(
            (k for k in ("patternProperties", "minProperties", "pattern", "format") if k[:10] in first),
            "schema",
        )
        raise SchemaError(keyword, "", f"llguidance rejects the grammar: {first[:300]}")


def _grounded_string(sub: Any) -> dict[str, Any] | None:
    """The string schema of a grounded top-level property (its lengths included), or None if not grounded."""
    if not isinstance(sub, dict):
        return None
    branches = [b for b in sub.get("anyOf", []) if isinstance(b, dict) and b.get("type") == "string"]
    if sub.get("x-grounded") is True:
        return {**(branches[0] if branches else {}), **sub}
    for b in branches:
        if b.get("x-grounded") is True:
            return b
    return None


def _ground_specs(specs: list[ToolSpec], ground: tuple[str, ...]) -> tuple[list[ToolSpec], dict[str, str]]:
    """Tools as the grounding texts allow them: an optional grounded top-level parameter no span fits is left
    out of the tool's schema; a tool whose required grounded parameter no span fits is left out.

    Returns:
        ``(specs kept, {tool: parameter} of the tools left out)``.
    """
    import dataclasses

    from model.constraints.grounding import MAX_GROUNDED_CHARS, has_span

    kept, blocked = [], {}
    for spec in specs:
        params = spec.parameters if isinstance(spec.parameters, dict) else {}
        props = params.get("properties") or {}
        required = set(params.get("required") or [])
        drop = []
        for k, sub in props.items():
            g = _grounded_string(sub)
            if g is None:
                continue
            lo, hi = int(g.get("minLength", 1) or 1), int(g.get("maxLength", MAX_GROUNDED_CHARS))
            if not has_span(ground, hi, lo):
                if k in required:
                    blocked[spec.name] = str(k)
                    break
                drop.append(k)
        if spec.name in blocked:
            continue
        if drop:
            new = {**params, "properties": {k: v for k, v in props.items() if k not in drop}}
            spec = dataclasses.replace(spec, parameters=new)
        kept.append(spec)
    return kept, blocked


def _has_grounded(spec: ToolSpec) -> bool:
    return '"x-grounded"' in json.dumps(spec.parameters)


def _build_grammar(
    specs: list[ToolSpec],
    choice: str,
    syntax: str,
    allow_thinking: bool,
    additional: bool,
    grounding: tuple[str, ...] | None = None,
) -> str:
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate tool names: {sorted({n for n in names if names.count(n) > 1})}")
    if choice.startswith("name:"):
        wanted = choice[5:]
        if wanted not in names:
            raise ValueError(f"tool_choice names tool {wanted!r}, which is not declared (tools: {names})")
        callable_specs = [s for s in specs if s.name == wanted]
    else:
        callable_specs = specs if choice != "none" else []
    if choice == "required" and not callable_specs:
        raise ValueError("tool_choice='required' needs at least one tool")

    lines: list[str] = []
    thinking = "thinking? " if allow_thinking else ""
    terms: dict[str, str] = {}
    prose = "PROSE"
    if not callable_specs or choice == "auto":
        # Prose never spells, with ordinary tokens, the tokens a turn ends at or a call starts with: a model
        # that starts writing one as text is steered to the token itself.
        terms["PROSE"] = r"/(?s:.+)/ & ~/(?s:.*)(?:<\|tool_call>|<turn\|>|<\|tool_response>|<eos>)(?s:.*)/"
    if allow_thinking:
        terms["THOUGHT"] = r"/(?s:.*)/ & ~/(?s:.*)<channel\|>(?s:.*)/"
        lines.append("thinking: <|channel> THOUGHT <channel|>")
    if not callable_specs:
        lines.insert(0, f"start: {thinking}{prose}? <turn|>")
    elif choice == "auto":
        lines.insert(0, f"start: {thinking}{prose}? (<turn|> | calls)")
    else:
        lines.insert(0, f"start: {thinking}calls")

    rules: dict[str, str] = {}
    if callable_specs:
        lines.append("calls: call+ <|tool_response>")
        if syntax == "gemma":
            comp = _GemmaCompiler(additional, grounding)
            alts = []
            for i, spec in enumerate(callable_specs):
                ir = _tool_ir(spec, additional)
                comp.def_paths[i] = ir.paths
                try:
                    body = comp.value(ir.root, i, ir.defs)
                except SchemaError as e:
                    message = str(e).rsplit(" (keyword ", 1)[0]  # the new error names keyword and path again
                    raise SchemaError(e.keyword, e.path, f"tool {spec.name!r}: {message}") from None
                alts.append(f"{_lark_str('call:' + spec.name)} {body}")
            lines.append("call: <|tool_call> (" + " | ".join(alts) + ") <tool_call|>")
            rules.update(comp.rules)
            terms.update(comp.terms)
        else:
            options = []
            all_defs: dict[str, Any] = {}
            for i, spec in enumerate(callable_specs):
                ir = _tool_ir(spec, additional)
                prefix = f"t{i}_"
                args = ir_to_json_schema(ir.root, additional_default=additional, ref_prefix=prefix)
                for name, node in ir.defs.items():
                    all_defs[prefix + name] = ir_to_json_schema(
                        node, additional_default=additional, ref_prefix=prefix
                    )
                options.append(
                    {
                        "type": "object",
                        "properties": {"name": {"const": spec.name}, "arguments": args},
                        "required": ["name", "arguments"],
                        "additionalProperties": False,
                    }
                )
            schema: dict[str, Any] = options[0] if len(options) == 1 else {"anyOf": options}
            if all_defs:
                schema = {**schema, "$defs": all_defs}
            schema = {**schema, "x-guidance": {"whitespace_flexible": False}}
            lines.append("call: <|tool_call> call_json <tool_call|>")
            rules["call_json"] = "%json " + json.dumps(schema, ensure_ascii=False)
    out = [*lines, *(f"{k}: {v}" for k, v in rules.items()), *(f"{k}: {v}" for k, v in terms.items())]
    return "\n".join(out) + "\n"


def response_format_grammar(schema: Any | None, *, strict: bool = True, allow_thinking: bool = True) -> str:
    """The llguidance grammar of one assistant turn whose text is a JSON value (OpenAI ``response_format``).

    Args:
        schema: the JSON Schema the value must match (``response_format={"type": "json_schema", ...}``), or
            ``None`` for any JSON object (``{"type": "json_object"}``).
        strict: objects without ``additionalProperties`` are closed (OpenAI's strict mode); ``False`` keeps
            JSON Schema's default (open objects).
        allow_thinking: allow a leading ``<|channel>...<channel|>`` block (not part of the value).

    Returns:
        Grammar text: optional thinking, the compact JSON text (no free whitespace), then ``<turn|>``.

    Raises:
        SchemaError: an unsupported keyword or an unsatisfiable schema (keyword and JSON pointer named), or a
            schema llguidance's JSON compiler rejects.
    """
    if schema is None:
        json_schema: Any = {"type": "object"}
    else:
        ir = build_ir(schema, additional_properties=not strict)
        json_schema = ir_to_json_schema(ir.root, additional_default=not strict)
        if ir.defs:
            defs = {k: ir_to_json_schema(v, additional_default=not strict) for k, v in ir.defs.items()}
            json_schema = {**json_schema, "$defs": defs} if isinstance(json_schema, dict) else json_schema
    if isinstance(json_schema, dict):
        json_schema = {**json_schema, "x-guidance": {"whitespace_flexible": False}}
    lines = [f"start: {'thinking? ' if allow_thinking else ''}value <turn|>"]
    lines.append("value: %json " + json.dumps(json_schema, ensure_ascii=False))
    if allow_thinking:
        lines.append("thinking: <|channel> THOUGHT <channel|>")
        lines.append(r"THOUGHT: /(?s:.*)/ & ~/(?s:.*)<channel\|>(?s:.*)/")
    grammar = "\n".join(lines) + "\n"
    _validate(grammar)
    return grammar


def value_grammar(schema: Any, *, additional_properties: bool = True) -> str:
    """Lark grammar whose language is the Gemma-syntax rendering of JSON values valid against ``schema``.

    Used by the MaskBench benchmark and tests (tool calls use :func:`tool_call_grammar`).

    Raises:
        SchemaError: unsupported keyword or unsatisfiable schema.
    """
    ir = build_ir(schema, additional_properties=additional_properties)
    comp = _GemmaCompiler(additional_properties)
    comp.def_paths[0] = ir.paths
    body = comp.value(ir.root, 0, ir.defs)
    out = [f"start: {body}", *(f"{k}: {v}" for k, v in comp.rules.items())]
    out += [f"{k}: {v}" for k, v in comp.terms.items()]
    return "\n".join(out) + "\n"
