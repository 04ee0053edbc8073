"""Tool-call grammars: valid calls reach an accepting state, invalid ones are rejected, in both syntaxes.

Token sequences come from a small byte-level BPE built by ``model.checkpoint.tokenizer.build_tokenizer`` (the control
tokens, ``<|"|>`` included, are single tokens) and are fed to an ``llguidance.LLMatcher``.
"""

from __future__ import annotations

import copy

import jsonschema
import llguidance
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from evals.bfcl import to_json_schema
from grammar import special_tokens as sp
from grammar.completion import shortest_completion
from grammar.llg import llg_tokenizer
from grammar.parse import format_tool_call, format_value, parse_tool_calls
from grammar.turn import tool_call_grammar, value_grammar
from model.checkpoint.tokenizer import build_tokenizer, encode_marked
from model.constraints.denoise import bitmask_to_bool
from schema import SchemaError

CORPUS = [
    "call:get_weather{city:Paris,days:3,units:celsius,tags:[a,b],flag:true,none:null}",
    '{"name":"get_weather","arguments":{"city":"Paris","days":3.5e2,"x":-1}}',
    "The quick brown fox jumps over the lazy dog 0123456789 2024-05-01T12:30:00Z bob@example.com",
] * 20


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer(CORPUS, vocab_size=1024, min_frequency=1)


@pytest.fixture(scope="module")
def ll(tok):
    return llg_tokenizer(tok)


def matcher(ll, grammar):
    m = llguidance.LLMatcher(ll, grammar, log_level=0)
    assert not m.is_error(), m.get_error()
    return m


def accepts(ll, tok, grammar, text, marked=False):
    ids = encode_marked(tok, text) if marked else tok.encode(text, add_special_tokens=False)
    m = matcher(ll, grammar)
    return m.try_consume_tokens(ids) == len(ids) and m.is_accepting()


def call_text(name, args, syntax):
    return format_tool_call(name, args, syntax) + sp.TOOL_RESPONSE_START


def tool(params, name="f"):
    return {"type": "function", "function": {"name": name, "description": "test tool", "parameters": params}}


def test_special_tokens_are_single_tokens(tok, ll):
    ids = tok.encode(
        '<|tool_call>call:f{a:<|"|>x<|"|>}<tool_call|><|tool_response>', add_special_tokens=False
    )
    for name in (sp.TOOL_CALL_START, sp.STRING_DELIM, sp.TOOL_CALL_END, sp.TOOL_RESPONSE_START):
        assert sp.SPECIAL_IDS[name] in ids
    assert llg_tokenizer(tok) is ll  # cached per tokenizer object


# (parameters schema, valid arguments, invalid arguments)
CASES = [
    (
        {
            "type": "object",
            "properties": {
                "city": {"type": "string", "minLength": 2, "maxLength": 12},
                "days": {"type": "integer", "minimum": 1, "maximum": 14},
                "units": {"enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
        [
            {"city": "Paris"},
            {"city": "Rio de Janeiro"[:12], "days": 14},
            {"city": "Oslo", "days": 1, "units": "celsius"},
        ],
        [
            {},
            {"days": 3},
            {"city": "P"},
            {"city": "Paris", "days": 0},
            {"city": "Paris", "days": 2.5},
            {"city": "Paris", "units": "kelvin"},
            {"city": "Paris", "extra": 1},  # additionalProperties defaults to false for tool arguments
            {"city": "a" * 13},
        ],
    ),
    (
        {
            "type": "object",
            "properties": {
                "x": {"type": "number", "exclusiveMinimum": 0, "maximum": 10.5},
                "k": {"type": "integer", "multipleOf": 5},
                "c": {"const": "fixed"},
                "m": {"enum": [1, "one", True, None, [1, 2]]},
            },
            "required": ["x"],
        },
        [
            {"x": 10.5},
            {"x": 0.001, "k": -15},
            {"x": 3, "c": "fixed", "m": "one"},
            {"x": 1e-3, "m": None},
            {"x": 5, "m": [1, 2]},
        ],
        [
            {"x": 0},
            {"x": 11},
            {"x": 1, "k": 7},
            {"x": 1, "c": "other"},
            {"x": 1, "m": 2},
            {"x": 1, "m": [1]},
            {"x": "1"},
        ],
    ),
    (
        {
            "type": "object",
            "properties": {
                "tags": {
                    "type": "array",
                    "items": {"type": "string", "pattern": "^[a-z]+$"},
                    "minItems": 1,
                    "maxItems": 3,
                },
                "point": {
                    "type": "array",
                    "prefixItems": [{"type": "number"}, {"type": "number"}],
                    "items": False,
                    "minItems": 2,
                },
                "grid": {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}},
            },
            "required": ["tags"],
        },
        [{"tags": ["a"]}, {"tags": ["a", "bc", "def"], "point": [1.5, -2], "grid": [[], [1, 2], [3]]}],
        [
            {"tags": []},
            {"tags": ["a", "b", "c", "d"]},
            {"tags": ["A"]},
            {"tags": ["a"], "point": [1]},
            {"tags": ["a"], "point": [1, 2, 3]},
            {"tags": ["a"], "grid": [[1.5]]},
        ],
    ),
    (
        {
            "type": "object",
            "properties": {
                "user": {
                    "type": "object",
                    "properties": {"name": {"type": "string"}, "age": {"type": ["integer", "null"]}},
                    "required": ["name"],
                },
                "meta": {"type": "object", "additionalProperties": {"type": "integer"}},
                "opt": {"anyOf": [{"type": "string", "format": "date"}, {"type": "null"}]},
            },
            "required": ["user"],
        },
        [
            {"user": {"name": "Ann"}},
            {"user": {"name": "Ann", "age": None}, "meta": {"a": 1, "b c": 2}, "opt": "2024-02-29"},
            {"user": {"name": "", "age": 30}, "meta": {}, "opt": None},
        ],
        [
            {"user": {}},
            {"user": {"name": "Ann", "age": "30"}},
            {"user": {"name": "A"}, "meta": {"a": "x"}},
            {"user": {"name": "A"}, "opt": "2024-13-01"},
            {"user": {"name": "A", "nick": "x"}},
        ],
    ),
    (  # discriminated union (oneOf with disjoint branches), allOf merge, patternProperties
        {
            "type": "object",
            "properties": {
                "shape": {
                    "oneOf": [
                        {
                            "type": "object",
                            "properties": {"kind": {"const": "circle"}, "r": {"type": "number"}},
                            "required": ["kind", "r"],
                        },
                        {
                            "type": "object",
                            "properties": {"kind": {"const": "square"}, "side": {"type": "number"}},
                            "required": ["kind", "side"],
                        },
                    ]
                },
                "both": {
                    "allOf": [
                        {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                        {"properties": {"b": {"type": "string"}}},
                    ]
                },
                "env": {
                    "type": "object",
                    "patternProperties": {"^[A-Z_]+$": {"type": "string"}},
                    "additionalProperties": False,
                },
            },
        },
        [
            {},
            {"shape": {"kind": "circle", "r": 1}},
            {
                "shape": {"kind": "square", "side": 2},
                "both": {"a": 1, "b": "x"},
                "env": {"HOME": "/root", "A_B": ""},
            },
        ],
        [
            {"shape": {"kind": "circle", "side": 1}},
            {"shape": {"kind": "triangle", "r": 1}},
            {"both": {"b": "x"}},
            {"env": {"home": "x"}},
            {"env": {"HOME": 1}},
        ],
    ),
    (  # Pydantic output: $defs/$ref, titles, Optional as anyOf, recursion
        {
            "$defs": {
                "Node": {
                    "title": "Node",
                    "type": "object",
                    "properties": {
                        "label": {"title": "Label", "type": "string"},
                        "children": {"title": "Children", "type": "array", "items": {"$ref": "#/$defs/Node"}},
                    },
                    "required": ["label"],
                }
            },
            "title": "Args",
            "type": "object",
            "properties": {
                "root": {"$ref": "#/$defs/Node"},
                "note": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
            },
            "required": ["root"],
        },
        [
            {"root": {"label": "a"}},
            {
                "root": {"label": "a", "children": [{"label": "b", "children": [{"label": "c"}]}]},
                "note": None,
            },
        ],
        [{"root": {}}, {"root": {"label": "a", "children": [{}]}}, {"root": {"label": 1}}],
    ),
    (  # BFCL style types, through the BFCL adapter
        to_json_schema(
            {
                "type": "dict",
                "properties": {
                    "ratio": {"type": "float"},
                    "pair": {"type": "tuple", "items": {"type": "integer"}},
                    "blob": {"type": "any"},
                    "cfg": {"type": "dict", "properties": {"on": {"type": "boolean"}}},
                },
                "required": ["ratio"],
            }
        ),
        [{"ratio": 0.5}, {"ratio": 1, "pair": [1, 2], "blob": {"x": [1, "y", None]}, "cfg": {"on": False}}],
        [{"ratio": "0.5"}, {"ratio": 1, "pair": [1.5]}, {"ratio": 1, "cfg": {"on": 1}}],
    ),
    (
        {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "minProperties": 1,
            "maxProperties": 1,
        },
        [{"a": 1}, {"b": 2}],
        [{}, {"a": 1, "b": 2}],
    ),
]


def _jsonschema_valid(params, args):
    from schema import normalize_tool

    spec = normalize_tool(tool(params))
    return jsonschema.Draft202012Validator(
        spec.parameters, format_checker=jsonschema.FormatChecker()
    ).is_valid(args)


@pytest.mark.parametrize("syntax", ["gemma", "json"])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_valid_calls_accepted_invalid_rejected(ll, tok, syntax, case):
    params, valid, invalid = CASES[case]
    g = tool_call_grammar([tool(params)], tool_choice="required", syntax=syntax)
    for args in valid:
        assert _jsonschema_valid(params, args), args
        assert accepts(ll, tok, g, call_text("f", args, syntax)), (syntax, args)
    for args in invalid:
        assert not accepts(ll, tok, g, call_text("f", args, syntax)), (syntax, args)
    # a call must be closed and the turn terminated
    assert not accepts(ll, tok, g, format_tool_call("f", valid[0], syntax))
    assert not accepts(ll, tok, g, format_tool_call("f", valid[0], syntax)[:-1])


@pytest.mark.parametrize("syntax", ["gemma", "json"])
def test_tool_choice_modes(ll, tok, syntax):
    tools = [
        tool({"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}, "search"),
        tool({"type": "object", "properties": {}}, "now"),
    ]
    call = format_tool_call("search", {"q": "x"}, syntax)
    other = format_tool_call("now", {}, syntax)
    prose = "Hello there." + sp.TURN_END
    think = f"{sp.CHANNEL_START}thought\nplan{sp.CHANNEL_END}"
    end = sp.TOOL_RESPONSE_START
    auto = tool_call_grammar(tools, "auto", syntax)
    assert accepts(ll, tok, auto, prose)
    assert accepts(ll, tok, auto, call + end)
    assert accepts(ll, tok, auto, "Let me look." + call + other + end)
    assert accepts(ll, tok, auto, think + call + end)
    assert accepts(ll, tok, auto, sp.TURN_END)
    assert not accepts(ll, tok, auto, "Hello")  # not terminated
    assert not accepts(ll, tok, auto, call + "text" + end)
    none = tool_call_grammar(tools, "none", syntax)
    assert accepts(ll, tok, none, think + prose)
    assert not accepts(ll, tok, none, call + end)
    required = tool_call_grammar(tools, "required", syntax)
    assert accepts(ll, tok, required, call + other + call + end)
    assert not accepts(ll, tok, required, prose)
    assert not accepts(ll, tok, required, end)
    named = tool_call_grammar(tools, {"name": "now"}, syntax)
    assert accepts(ll, tok, named, other + end)
    assert not accepts(ll, tok, named, call + end)
    plain = tool_call_grammar(tools, "required", syntax, allow_thinking=False)
    assert not accepts(ll, tok, plain, think + call + end)
    assert accepts(ll, tok, tool_call_grammar([], "auto", syntax), prose)


def test_gemma_forced_tokens_and_no_whitespace(ll, tok):
    g = tool_call_grammar(
        [
            tool(
                {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
                "get_weather",
            )
        ],
        "required",
        allow_thinking=False,
    )
    m = matcher(ll, g)
    ff = m.compute_ff_tokens()
    assert tok.decode(ff) == '<|tool_call>call:get_weather{city:<|"|>'
    assert not accepts(
        ll, tok, g, '<|tool_call>call:get_weather{city: <|"|>x<|"|>}<tool_call|><|tool_response>'
    )
    assert not accepts(
        ll, tok, g, '<|tool_call>call:get_weather{ city:<|"|>x<|"|>}<tool_call|><|tool_response>'
    )


def test_gemma_strings_hold_control_token_text_but_never_the_token(ll, tok):
    g = tool_call_grammar(
        [tool({"type": "object", "properties": {"s": {"type": "string"}}, "required": ["s"]})], "required"
    )
    m = matcher(ll, g)
    head = tok.encode('<|tool_call>call:f{s:<|"|>', add_special_tokens=False)
    body = tok.encode("a<", add_special_tokens=False) + tok.encode('|"|>b', add_special_tokens=False)
    assert sp.SPECIAL_IDS[sp.STRING_DELIM] not in body
    assert m.try_consume_tokens(head + body) == len(head + body)  # the text <|"|> stays inside the string
    allowed = np.flatnonzero(bitmask_to_bool(m.compute_bitmask(), len(tok)))
    assert [int(i) for i in allowed if i < len(sp.SPECIAL_TOKENS)] == [sp.SPECIAL_IDS[sp.STRING_DELIM]]
    # the special token itself ends the string
    assert accepts(ll, tok, g, '<|tool_call>call:f{s:<|"|>a<b|>"<|"|>}<tool_call|><|tool_response>')


def test_errors_at_registration():
    with pytest.raises(SchemaError) as ei:
        tool_call_grammar(
            [tool({"type": "object", "properties": {"a": {"type": "string", "pattern": "^(?=x)"}}})]
        )
    assert ei.value.keyword == "pattern" and ei.value.path == "/properties/a"
    with pytest.raises(ValueError, match="not declared"):
        tool_call_grammar([tool({"type": "object"})], {"name": "g"})
    with pytest.raises(ValueError, match="duplicate"):
        tool_call_grammar([tool({"type": "object"}), tool({"type": "object"})])
    with pytest.raises(ValueError, match="at least one tool"):
        tool_call_grammar([], "required")
    with pytest.raises(ValueError, match="syntax"):
        tool_call_grammar([], "auto", "xml")
    with pytest.raises(ValueError, match="tool_choice"):
        tool_call_grammar([], "sometimes")
    with pytest.raises(SchemaError) as ei:
        tool_call_grammar([tool({"type": "string"})])
    assert ei.value.keyword == "type"
    overlapping = {
        "type": "object",
        "patternProperties": {"^a": {"type": "integer"}, "b$": {"type": "string"}},
    }
    assert tool_call_grammar([tool(overlapping)], syntax="gemma")
    with pytest.raises(SchemaError) as ei:
        tool_call_grammar([tool(overlapping)], syntax="json")
    assert ei.value.keyword == "patternProperties"


def test_grammar_cache_returns_the_same_text():
    t = [tool({"type": "object", "properties": {"a": {"type": "integer"}}})]
    g1 = tool_call_grammar(t, "auto", "gemma")
    assert tool_call_grammar(copy.deepcopy(t), "auto", "gemma") is g1
    assert tool_call_grammar(t, "required", "gemma") is not g1


# ---------------------------------------------------------------------------------------------------------
# Property: acceptance of the Gemma/JSON rendering == jsonschema validity (JSON Schema semantics)
# ---------------------------------------------------------------------------------------------------------

PROP_SCHEMAS = [
    {
        "type": "object",
        "properties": {
            "a": {"type": "integer", "minimum": -3, "maximum": 7},
            "b": {"type": "string", "maxLength": 3},
        },
        "required": ["a"],
    },
    {
        "type": "object",
        "properties": {
            "a": {"type": "array", "items": {"type": "number"}, "minItems": 1, "maxItems": 2},
            "b": {"enum": ["x", 1, None]},
        },
    },
    {
        "type": "object",
        "properties": {
            "a": {
                "type": "object",
                "properties": {"b": {"type": "boolean"}},
                "required": ["b"],
                "additionalProperties": False,
            }
        },
        "additionalProperties": {"type": "string"},
    },
    {
        "type": "object",
        "properties": {
            "a": {"type": ["string", "null"], "pattern": "^[ab]+$"},
            "b": {"type": "number", "exclusiveMaximum": 2},
        },
        "required": ["a", "b"],
    },
    {
        "type": "object",
        "patternProperties": {"^a": {"type": "integer"}, "b$": {"type": "integer", "minimum": 0}},
        "additionalProperties": False,
    },
]

_INT_ONLY = jsonschema.Draft202012Validator.TYPE_CHECKER.redefine(
    "integer", lambda _c, x: isinstance(x, int) and not isinstance(x, bool)
)
_Validator = jsonschema.validators.extend(jsonschema.Draft202012Validator, type_checker=_INT_ONLY)

_keys = st.sampled_from(["a", "b", "c", "ab", "ba"])
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 9),
    st.floats(-3, 3, allow_nan=False).filter(lambda x: not x.is_integer()),
    st.text(alphabet='abx <>"{}:,', max_size=4).filter(lambda s: "<|" not in s),
)
_values = st.recursive(
    _scalars, lambda c: st.lists(c, max_size=3) | st.dictionaries(_keys, c, max_size=3), max_leaves=6
)


def _ordered(schema, v):
    """``v`` with declared properties first, in schema order (the grammars fix the order)."""
    if isinstance(v, dict) and isinstance(schema, dict):
        props = schema.get("properties", {})
        keys = [k for k in props if k in v] + [k for k in v if k not in props]
        return {k: _ordered(props.get(k, {}), v[k]) for k in keys}
    return v


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.sampled_from(range(len(PROP_SCHEMAS))),
    st.dictionaries(_keys, _values, max_size=3),
    st.sampled_from(["gemma", "json"]),
)
def test_acceptance_matches_jsonschema(ll, tok, idx, args, syntax):
    schema = PROP_SCHEMAS[idx]
    assume(not (idx == 4 and syntax == "json"))  # llguidance's JSON compiler needs disjoint patternProperties
    args = _ordered(schema, args)
    text = format_tool_call("f", args, syntax)  # marked text: control-token spellings in values stay text
    g = tool_call_grammar(
        [tool(schema)], "required", syntax, allow_thinking=False, additional_properties=True
    )
    accepted = accepts(ll, tok, g, text + sp.TOOL_RESPONSE_START, marked=True)
    assert accepted == _Validator(schema).is_valid(args), (
        text,
        schema,
    )


def test_value_grammar_matches_json_values(ll, tok):
    schema = {
        "type": "array",
        "items": {"anyOf": [{"type": "integer"}, {"type": "string", "minLength": 1}]},
        "maxItems": 2,
    }
    g = value_grammar(schema)
    assert accepts(ll, tok, g, format_value([1, "x"]))
    assert not accepts(ll, tok, g, format_value([1, ""]))
    assert not accepts(ll, tok, g, format_value([1, 2, 3]))


# ---------------------------------------------------------------------------------------------------------
# Shortest completion: from any prefix of a valid call, a completion that parses and validates
# ---------------------------------------------------------------------------------------------------------

COMPLETION_TOOLS = [
    (
        {"type": "object", "properties": {"note": {"type": "string"}}, "required": ["note"]},
        {"note": "a long free text argument"},
    ),
    (
        {
            "type": "object",
            "properties": {"n": {"type": "number"}, "k": {"type": "integer", "minimum": 5, "maximum": 9}},
            "required": ["n", "k"],
        },
        {"n": 123.25, "k": 7},
    ),
    (
        {"type": "object", "properties": {"n": {"type": "number", "exclusiveMinimum": 0}}, "required": ["n"]},
        {"n": 0.5},
    ),
    (
        {
            "type": "object",
            "properties": {
                "items": {
                    "type": "array",
                    "minItems": 2,
                    "items": {
                        "type": "object",
                        "properties": {
                            "id": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{3}$"},
                            "tags": {"type": "array", "items": {"type": "string"}},
                        },
                        "required": ["id", "tags"],
                    },
                }
            },
            "required": ["items"],
        },
        {"items": [{"id": "AB-123", "tags": ["x", "y"]}, {"id": "CD-456", "tags": []}]},
    ),
    (
        {
            "type": "object",
            "properties": {
                "mail": {"type": "string", "format": "email"},
                "when": {"type": "string", "format": "date-time"},
            },
            "required": ["mail", "when"],
        },
        {"mail": "bob@example.com", "when": "2024-05-01T12:30:00Z"},
    ),
    (
        {
            "type": "object",
            "properties": {
                "s": {"type": "string", "minLength": 6, "pattern": "x$"},
                "o": {"type": "object", "additionalProperties": {"type": "integer"}},
            },
            "required": ["s", "o"],
        },
        {"s": "abcdefx", "o": {"key": 1}},
    ),
    (  # a patternProperties key may hold ":" (a:b): the ":" before its value is still the way out of the key
        {
            "type": "object",
            "properties": {
                "tags": {
                    "type": "object",
                    "patternProperties": {
                        "^t": {"type": "string"},
                        "^n": {"type": "integer"},
                        "^b": {"type": "boolean"},
                    },
                    "minProperties": 1,
                    "additionalProperties": False,
                }
            },
            "required": ["tags"],
        },
        {"tags": {"topic": "x", "n1": 2, "b": True}},
    ),
]


@pytest.mark.parametrize("syntax", ["gemma", "json"])
@pytest.mark.parametrize("case", range(len(COMPLETION_TOOLS)))
def test_shortest_completion_reaches_a_valid_call(ll, tok, syntax, case):
    params, example = COMPLETION_TOOLS[case]
    g = tool_call_grammar([tool(params)], "required", syntax)
    ids = tok.encode(call_text("f", example, syntax), add_special_tokens=False)
    validator = jsonschema.Draft202012Validator(params, format_checker=jsonschema.FormatChecker())
    for cut in range(0, len(ids), max(1, len(ids) // 12)):
        m = matcher(ll, g)
        assert m.consume_tokens(ids[:cut])
        comp = shortest_completion(m, tok, 200)
        assert len(comp) < 200, (cut, tok.decode(ids[:cut] + comp))
        assert m.consume_tokens(comp) and m.is_accepting(), tok.decode(ids[:cut] + comp)
        out = parse_tool_calls(tok.decode(ids[:cut] + comp, skip_special_tokens=False), syntax)
        assert len(out.calls) == 1 and out.calls[0].name == "f"
        validator.validate(out.calls[0].arguments)


def test_shortest_completion_is_short_and_respects_limit(ll, tok):
    g = tool_call_grammar(
        [
            tool(
                {
                    "type": "object",
                    "properties": {"q": {"type": "string"}, "n": {"type": "integer"}},
                    "required": ["q"],
                }
            )
        ],
        "required",
    )
    prefix = '<|tool_call>call:f{q:<|"|>some text'
    m = matcher(ll, g)
    m.consume_tokens(tok.encode(prefix, add_special_tokens=False))
    comp = shortest_completion(m, tok, 50)
    assert tok.decode(comp, skip_special_tokens=False) == '<|"|>}<tool_call|><|tool_response>'
    assert shortest_completion(m, tok, 2) == comp[:2]
    assert not m.is_accepting()  # the matcher itself was not advanced
    assert m.consume_tokens(comp) and m.is_accepting()
    assert parse_tool_calls(prefix + tok.decode(comp)).calls[0].arguments == {"q": "some text"}


def test_keys_with_colons_parse_the_way_the_grammar_reads_them(ll, tok):
    g = tool_call_grammar(
        [tool({"type": "object", "properties": {"a": {"type": "integer"}}})],
        "required",
        additional_properties=True,
    )
    for args in (
        {"a": 1, "gdbots:ncr:1": True},
        {"x:y": None, "did:persona:123": "s"},
        {"10:30": [1], "k": {"n:1": 2}},
    ):
        text = call_text("f", args, "gemma")
        assert accepts(ll, tok, g, text), text
        assert parse_tool_calls(text).calls[0].arguments == args
    assert not accepts(ll, tok, g, call_text("f", {"a": "x"}, "gemma"))  # a declared key keeps its schema
    assert not accepts(ll, tok, g, call_text("f", {"a:": 1}, "gemma"))  # empty key part


def test_new_matcher_raises_on_grammar_errors(tok):
    from grammar.llg import new_matcher

    m = new_matcher(tok, tool_call_grammar([tool({"type": "object"})], "required"))
    assert not m.is_error()
    with pytest.raises(ValueError, match="does not compile"):
        new_matcher(tok, "start: <|no_such_token|>")


@pytest.mark.parametrize("choice", ["auto", "required", {"name": "f"}])
def test_parallel_tool_calls_false_allows_one_call_only(tok, ll, choice):
    f = tool({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]})
    one = format_tool_call("f", {"a": 1}, "gemma")
    two = one + format_tool_call("f", {"a": 2}, "gemma")
    single = tool_call_grammar([f], tool_choice=choice, parallel_tool_calls=False)
    several = tool_call_grammar([f], tool_choice=choice)
    assert accepts(ll, tok, single, one + sp.TOOL_RESPONSE_START, marked=True)
    assert not accepts(ll, tok, single, two + sp.TOOL_RESPONSE_START, marked=True)
    assert accepts(ll, tok, several, two + sp.TOOL_RESPONSE_START, marked=True)


def test_email_and_hostname_values_end_within_their_rfc_length_limits(ll, tok):
    """RFC 5321: an email's local part is at most 64 characters and the address 254; RFC 1035: a hostname is
    at most 253. The grammar (Gemma syntax) and the remote-argument format checker hold both, so a value the
    model writes cannot run on (a new user saw a 369-character email take 40-94 s)."""
    from schema import format_matches, grammar_format_checker

    g = tool_call_grammar(
        [
            tool(
                {
                    "type": "object",
                    "properties": {"m": {"type": "string", "format": "email"}},
                    "required": ["m"],
                }
            )
        ],
        "required",
        "gemma",
    )
    label = "a" * 63
    cases = {
        "b" * 64 + "@example.com": True,
        "b" * 65 + "@example.com": False,  # local part over 64
        "bob@" + ".".join([label] * 3) + ".c": True,  # 197 characters
        "bob@" + ".".join([label] * 4): False,  # 4 + 255 = 259 characters
    }
    checker = grammar_format_checker()
    for address, ok in cases.items():
        assert format_matches("email", address) is ok, (len(address), ok)
        assert accepts(ll, tok, g, call_text("f", {"m": address}, "gemma"), marked=True) is ok, len(address)
        assert checker.conforms(address, "email") is ok
    assert format_matches("hostname", ".".join([label] * 4)) is False  # 255 characters
    assert format_matches("hostname", ".".join([label] * 3) + ".ab") is True  # 195


@pytest.mark.parametrize("where", ["number", "any", "map"])
def test_an_unbounded_number_always_parses_to_a_finite_value(ll, tok, where):
    # 1e999999 (or 400 digits and a fraction) matched the grammar and parsed to inf, which is no JSON
    x = {"number": {"type": "number"}, "any": {}, "map": {"type": "object", "additionalProperties": {}}}[
        where
    ]
    g = tool_call_grammar([tool({"type": "object", "properties": {"x": x}})], "required", syntax="gemma")

    def parsed(v):
        value = f"{{k:{v}}}" if where == "map" else v
        text = f"{sp.TOOL_CALL_START}call:f{{x:{value}}}{sp.TOOL_CALL_END}{sp.TOOL_RESPONSE_START}"
        if not accepts(ll, tok, g, text, marked=True):
            return "refused"
        got = parse_tool_calls(text).calls[0].arguments["x"]
        return got["k"] if where == "map" else got

    for v in ("1e999999", "1e100", "1.5e300", "9" * 101 + ".5", "1" + "0" * 101 + "e5"):
        assert parsed(v) == "refused", v
    for v, want in (("2e99", 2e99), ("-1.5E+20", -1.5e20), ("1e-400", 0.0), ("9" * 100 + ".5e99", 1e199)):
        got = parsed(v)
        assert got == pytest.approx(want), v
        assert np.isfinite(got), v
    assert parsed("9" * 400) == int("9" * 400)  # an integer of any length is exact


def test_int_keyed_objects_take_only_integer_keys(ll, tok):
    from agentkit.tool_schema import INT_KEY_PATTERN

    m = {
        "type": "object",
        "patternProperties": {INT_KEY_PATTERN: {"type": "string"}},
        "additionalProperties": False,
    }
    g = tool_call_grammar([tool({"type": "object", "properties": {"m": m}})], "required", syntax="gemma")

    def ok(body):
        text = f"{sp.TOOL_CALL_START}call:f{{m:{body}}}{sp.TOOL_CALL_END}{sp.TOOL_RESPONSE_START}"
        return accepts(ll, tok, g, text, marked=True)

    assert ok('{1:<|"|>a<|"|>,-20:<|"|>b<|"|>}') and ok("{}") and ok('{0:<|"|>a<|"|>}')
    assert not ok('{a:<|"|>a<|"|>}') and not ok('{01:<|"|>a<|"|>}') and not ok('{1.5:<|"|>a<|"|>}')
