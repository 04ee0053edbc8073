"""Tool-call grammars for llguidance (Lark syntax), generated from tool declarations.

:func:`tool_call_grammar` is the grammar of one assistant turn: an optional thinking block
``<|channel>...<channel|>``, then by ``tool_choice`` prose and ``<turn|>`` (``"none"``), either of those or calls
(``"auto"``), or calls only (``"required"``, ``{"name": NAME}``); calls (at most one with
``parallel_tool_calls=False``) end with ``<|tool_response>``, so an accepting matcher means a complete turn.
Call syntaxes, without free whitespace: ``"gemma"`` (``<|tool_call>call:NAME{key:<|"|>text<|"|>,...}<tool_call|>``,
compiled from the schema IR by :mod:`grammar.gemma_lark`; special tokens never match a terminal, so the ``<|"|>``
token always ends a string) and ``"json"`` (``<|tool_call>{"name":"NAME","arguments":{...}}<tool_call|>``, the
arguments by llguidance's JSON Schema compiler fed the IR written back as plain JSON Schema). Special tokens
appear bare in rules; grammars are cached by all their arguments. Sources: llguidance's Lark syntax
(https://github.com/guidance-ai/llguidance/blob/main/docs/syntax.md), the Gemma 4 chat template.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Sequence
from typing import Any

from grammar.gemma_lark import MAX_GRAMMAR_CHARS, NO_FLEX, SYNTAXES, TOOL_CHOICES, GemmaCompiler, lark_str
from grammar.grounding import MAX_GROUNDED_CHARS, answer_regex, bounded_texts, has_span
from grammar.llg import grammar_error
from schema import (
    SchemaError,
    ToolSpec,
    build_ir,
    fingerprint,
    ir,
    normalize_tool,
    pattern_matches,
    tool_ir,
)
from schema.refs import unescape_pointer_token


def _put_size_bounds(out: dict[str, Any], what: str, low: int, high: int | None) -> None:
    """Set ``min<what>`` in ``out`` when ``low`` is above 0 and ``max<what>`` when ``high`` is set."""
    if low:
        out[f"min{what}"] = low
    if high is not None:
        out[f"max{what}"] = high


def ir_to_json_schema(compiled: ir.IR, additional_default: bool, ref_prefix: str = "") -> Any:
    """Write ``compiled`` back as plain JSON Schema with the same instances (no ``allOf``/``oneOf``; an unspecified
    ``additionalProperties`` written as ``additional_default``; :class:`Ref` as ``#/$defs/<ref_prefix><name>``,
    the definitions under ``$defs``)."""

    def go(n: ir.Node) -> Any:
        if isinstance(n, (ir.AnyNode, ir.Never)):
            return isinstance(n, ir.AnyNode)
        if isinstance(n, (ir.Null, ir.Bool)):
            return {"type": "null" if isinstance(n, ir.Null) else "boolean"}
        if isinstance(n, ir.Lit):
            return {"const": n.value}
        if isinstance(n, ir.Num):
            return n.json_schema()
        if isinstance(n, ir.Str):
            out: dict[str, Any] = {"type": "string"}
            _put_size_bounds(out, "Length", n.min_len, n.max_len)
            extra = [{"pattern": p} for p in n.patterns] + [{"format": f} for f in n.formats]
            if extra:
                out.update(extra[0])
                if len(extra) > 1:
                    out["allOf"] = extra[1:]
            if n.grounded:
                out["x-grounded"] = True
            return out
        if isinstance(n, ir.Arr):
            out = {"type": "array"}
            if n.prefix:
                out["prefixItems"] = [go(x) for x in n.prefix]
            out["items"] = go(n.items)
            _put_size_bounds(out, "Items", n.min_items, n.max_items)
            return out
        if isinstance(n, ir.Obj):
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
            _put_size_bounds(out, "Properties", n.min_props, n.max_props)
            return out
        if isinstance(n, ir.AnyOf):
            return {"anyOf": [go(o) for o in n.options]}
        if isinstance(n, ir.Ref):
            return {"$ref": f"#/$defs/{ref_prefix}{n.name}"}
        raise TypeError(f"unknown IR node {n!r}")  # pragma: no cover

    out = go(compiled.root)
    defs = {ref_prefix + k: go(v) for k, v in compiled.defs.items()}
    return {**out, "$defs": defs} if defs and isinstance(out, dict) else out


__all__ = [
    "MAX_GRAMMAR_CHARS",
    "answer_value_json",
    "ir_to_json_schema",
    "response_format_grammar",
    "tool_call_grammar",
    "value_grammar",
]


#: The thinking block's rule and the terminal of its text.
_THINKING = "thinking: <|channel> THOUGHT <channel|>"
_THOUGHT = r"/(?s:.*)/ & ~/(?s:.*)<channel\|>(?s:.*)/"


def _choice_key(tool_choice: Any) -> str:
    if isinstance(tool_choice, str) and tool_choice in TOOL_CHOICES:
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
    parallel_tool_calls: bool = True,
    answer_grounding: Sequence[str] | None = None,
    answer_json: str | None = None,
) -> str:
    """The llguidance grammar of one assistant turn with tool calls (see the module docstring).

    Args:
        tools: tool declarations (OpenAI-style, bare or :class:`ToolSpec`); may be empty unless ``"required"``.
        tool_choice: ``"auto" | "required" | "none" | {"name": NAME}``.
        syntax: ``"gemma"`` or ``"json"``.
        allow_thinking: allow a leading ``<|channel>...<channel|>`` block.
        additional_properties: what objects without ``additionalProperties`` allow (tool arguments: ``False``).
        grounding: the texts (user messages, tool responses) grounded strings must be spans of (Gemma syntax;
            ``None``: unconstrained); a tool whose required grounded parameter has no span is left out.
        parallel_tool_calls: ``False``: one call at most.
        answer_grounding: the texts a grounded answer copies its facts from
            (:func:`grammar.grounding.answer_regex`); ``None``: prose is free.
        answer_json: the answer is this JSON value instead of prose (OpenAI's ``response_format``, written by
            :func:`answer_value_json`), ended by ``<turn|>``; under ``"auto"`` the turn is that value or calls.

    Raises:
        SchemaError: a tool's schema is unsupported, unsatisfiable or too large (:data:`schema.MAX_COMPILE_STEPS`,
            :data:`MAX_GRAMMAR_CHARS`); keyword and JSON path named.
        ValueError: unknown ``syntax``/``tool_choice``, an undeclared named tool, duplicate names, ``"required"``
            without tools, or a named (or the only) tool whose required grounded parameter has no span.
    """
    if syntax not in SYNTAXES:
        raise ValueError(f"syntax must be one of {SYNTAXES}, got {syntax!r}")
    choice = _choice_key(tool_choice)
    specs = [normalize_tool(t) for t in (tools or [])]
    ground = None
    if grounding is not None and syntax == "gemma" and any(_has_grounded(s) for s in specs):
        ground = tuple(bounded_texts(grounding))
        specs, blocked = _ground_specs(specs, ground)
        wanted = choice[5:] if choice.startswith("name:") else None
        if wanted in blocked or (choice == "required" and blocked and not specs):
            name = wanted if wanted in blocked else next(iter(blocked))
            raise ValueError(
                f"tool {name!r} cannot be called: its parameter {blocked[name]!r} is grounded (x-grounded) "
                "and no span of the conversation (user messages, tool responses) fits it"
            )
    calls = "many" if parallel_tool_calls else "one"
    answer = None if answer_grounding is None else answer_regex(answer_grounding)
    flags = (bool(allow_thinking), bool(additional_properties))
    return _cached_grammar(specs, choice, syntax, *flags, ground, calls, answer, answer_json)


#: The last 256 grammars built, by the SHA-256 of their arguments: a key holds no schema or description text
#: (an ``lru_cache`` on the specs' JSON kept up to 256 request-sized keys: ~1 GB of 4 MB tool lists in a server).
_GRAMMARS: dict[str, str] = {}
_GRAMMARS_LOCK = threading.Lock()


def _cached_grammar(specs: list[ToolSpec], choice: str, syntax: str, *args: Any) -> str:
    """:func:`_build_grammar`'s text for ``specs``, validated once and cached."""
    key = fingerprint([specs, choice, syntax, args])
    with _GRAMMARS_LOCK:
        grammar = _GRAMMARS.pop(key, None)  # (re-inserted below: the most recent last)
    if grammar is None:
        grammar = _build_grammar(specs, choice, syntax, *args)
        _validate(grammar)
    with _GRAMMARS_LOCK:
        _GRAMMARS[key] = grammar
        while len(_GRAMMARS) > 256:
            del _GRAMMARS[next(iter(_GRAMMARS))]
    return grammar


def _validate(grammar: str) -> None:
    """Compile ``grammar`` once with llguidance so errors surface at registration: a :class:`SchemaError` when
    it is rejected (e.g. overlapping ``patternProperties`` in the JSON syntax)."""
    err = grammar_error(grammar)
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
    return next((b for b in branches if b.get("x-grounded") is True), None)


def _ground_specs(specs: list[ToolSpec], ground: tuple[str, ...]) -> tuple[list[ToolSpec], dict[str, str]]:
    """``(specs kept, {tool: parameter} of the tools left out)``: an optional grounded top-level parameter no
    span fits is left out of its tool's schema, a tool whose required one no span fits is left out."""
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


def _as_written(keyword: str, path: str, parameters: Any) -> str:
    """``keyword`` of an error at ``path`` in ``parameters``, but ``enum`` where the IR's ``anyOf`` (of an enum's
    values) was written as an ``enum``."""
    node = parameters
    for token in map(unescape_pointer_token, path.split("/")[1:]):
        at_index = isinstance(node, list) and token.isdigit() and int(token) < len(node)
        node = node[int(token)] if at_index else node.get(token) if isinstance(node, dict) else None
    written = isinstance(node, dict) and "enum" in node and "anyOf" not in node
    return "enum" if keyword == "anyOf" and written else keyword


def _gemma_calls(
    specs: list[ToolSpec], additional: bool, grounding: tuple[str, ...] | None
) -> tuple[list[str], dict[str, str], dict[str, str]]:
    """Each tool's call body in the Gemma syntax (``"call:NAME" {...}``), with the rules and terminals of every
    tool's arguments."""
    comp = GemmaCompiler(additional, grounding)
    alts = []
    for i, spec in enumerate(specs):
        try:
            body = comp.compile(tool_ir(spec.name, spec.parameters, additional), i)
        except SchemaError as e:
            message = str(e).rsplit(" (keyword ", 1)[0]  # the new error names keyword and path again
            keyword = _as_written(e.keyword, e.path, spec.parameters)
            raise SchemaError(keyword, e.path, f"tool {spec.name!r}: {message}") from None
        alts.append(f"{lark_str('call:' + spec.name)} {body}")
    return alts, dict(comp.rules), dict(comp.terms)


def _json_call(specs: list[ToolSpec], additional: bool) -> str:
    """A ``%json`` terminal of ``{"name", "arguments"}`` over ``specs`` (one call of any of them) in the JSON
    syntax."""
    options = []
    all_defs: dict[str, Any] = {}
    for i, spec in enumerate(specs):
        args = ir_to_json_schema(tool_ir(spec.name, spec.parameters, additional), additional, f"t{i}_")
        all_defs.update(args.pop("$defs", {}))
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
    return "%json " + json.dumps({**schema, **NO_FLEX}, ensure_ascii=False)


def _build_grammar(
    specs: list[ToolSpec],
    choice: str,
    syntax: str,
    allow_thinking: bool,
    additional: bool,
    grounding: tuple[str, ...] | None = None,
    calls: str = "many",
    answer: str | None = None,
    answer_json: str | None = None,
) -> str:
    """The grammar text of :func:`tool_call_grammar`; ``answer``: the regex prose must match (``None``: any);
    ``answer_json``: the ``%json`` schema of an answer that is a JSON value (then no prose, nor prose before calls)."""
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

    thinking = "thinking? " if allow_thinking else ""
    terms: dict[str, str] = {}
    if answer_json is None and (not callable_specs or choice == "auto"):
        # Prose never spells, with ordinary tokens, the tokens a turn ends at or a call starts with: a model
        # that starts writing one as text is steered to the token itself.
        text = "(?s:.+)" if answer is None else answer
        terms["PROSE"] = f"/{text}/ & ~/(?s:.*)(?:<\\|tool_call>|<turn\\|>|<\\|tool_response>|<eos>)(?s:.*)/"
    ending = "<turn|>" if not callable_specs else "(<turn|> | calls)" if choice == "auto" else None
    lines = [f"start: {thinking}PROSE? {ending}" if ending else f"start: {thinking}calls"]
    if answer_json is not None and ending:
        lines = [f"start: {thinking}{'(value <turn|> | calls)' if callable_specs else 'value <turn|>'}"]
        lines.append(f"value: %json {answer_json}")
    if allow_thinking:
        terms["THOUGHT"] = _THOUGHT
        lines.append(_THINKING)

    rules: dict[str, str] = {}
    if callable_specs:  # calls: "one" (at most one call) or "many"
        lines.append(f"calls: call{'' if calls == 'one' else '+'} <|tool_response>")
        if syntax == "gemma":
            alts, rules, call_terms = _gemma_calls(callable_specs, additional, grounding)
            lines.append("call: <|tool_call> (" + " | ".join(alts) + ") <tool_call|>")
            terms.update(call_terms)
        else:
            lines.append("call: <|tool_call> call_json <tool_call|>")
            rules = {"call_json": _json_call(callable_specs, additional)}
    out = [*lines, *(f"{k}: {v}" for k, v in rules.items()), *(f"{k}: {v}" for k, v in terms.items())]
    return "\n".join(out) + "\n"


def answer_value_json(schema: Any | None, *, strict: bool = True) -> str:
    """The ``%json`` schema (JSON text) of an answer that is a compact JSON value (OpenAI ``response_format``).
    ``schema``: the JSON Schema it must match (``None``: any object); ``strict``: objects without
    ``additionalProperties`` are closed (OpenAI's strict mode). SchemaError: a schema :func:`schema.build_ir`
    refuses."""
    json_schema: Any = {"type": "object"}
    if schema is not None:
        json_schema = ir_to_json_schema(build_ir(schema, additional_properties=not strict), not strict)
    if isinstance(json_schema, dict):
        json_schema = {**json_schema, **NO_FLEX}
    return json.dumps(json_schema, ensure_ascii=False)


def response_format_grammar(schema: Any | None, *, strict: bool = True) -> str:
    """The grammar of one assistant turn whose text is a compact JSON value (:func:`answer_value_json`):
    optional thinking, the value, ``<turn|>``; no tools.

    Raises:
        SchemaError: a schema :func:`schema.build_ir` or llguidance's JSON compiler refuses.
    """
    return tool_call_grammar([], "none", answer_json=answer_value_json(schema, strict=strict))


def value_grammar(schema: Any) -> str:
    """The Lark grammar of the Gemma-syntax rendering of JSON values valid against ``schema`` (for MaskBench and
    tests); a :class:`SchemaError` for a schema :func:`schema.build_ir` refuses."""
    comp = GemmaCompiler(True)
    body = comp.compile(build_ir(schema), 0)
    out = [f"start: {body}", *(f"{k}: {v}" for k, v in comp.rules.items())]
    out += [f"{k}: {v}" for k, v in comp.terms.items()]
    return "\n".join(out) + "\n"
