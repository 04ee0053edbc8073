"""Large bounded repetitions (``minLength: 3000``, ``^.{3000}$``, ``minItems: 2000``...) are enforced exactly
and their shortest completion is found without stepping through every repetition with a bitmask; a whole
``multipleOf`` llguidance would build an automaton of millions of states for is refused at registration, as
are number bounds its regexes cannot express, with the keyword and the path named."""

import gc
import json
import tracemalloc

import llguidance
import pytest

from grammar import special_tokens as sp
from grammar.completion import shortest_completion
from grammar.llg import llg_tokenizer
from grammar.parse import format_tool_call, parse_tool_calls
from grammar.turn import response_format_grammar, tool_call_grammar
from model.checkpoint.tokenizer import build_tokenizer
from schema import MAX_MULTIPLE_OF, SchemaError, build_ir

CORPUS = [
    "call:f{x:[1,2,3],s:abcdefghij}",
    "the quick brown fox jumps over the lazy dog 0123456789 abcdefghijklmnopqrstuvwxyz",
    "aaaaaaaaaaaaaaaa bbbbbbbbbbbbbbbb xxxxxxxxxxxxxxxx 0,0,0,0,0,0,0,0",
] * 20


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer(CORPUS, vocab_size=600, min_frequency=1)


def tool(prop):
    params = {"type": "object", "properties": {"x": prop}, "required": ["x"]}
    return {"type": "function", "function": {"name": "f", "description": "", "parameters": params}}


def new_matcher(tok, grammar):
    m = llguidance.LLMatcher(llg_tokenizer(tok), grammar, log_level=0)
    assert not m.is_error(), m.get_error()
    return m


def accepts(tok, grammar, text):
    ids = tok.encode(text, add_special_tokens=False)
    m = new_matcher(tok, grammar)
    return m.try_consume_tokens(ids) == len(ids) and m.is_accepting()


def call_accepts(tok, prop, value):
    g = tool_call_grammar([tool(prop)], {"name": "f"}, allow_thinking=False)
    return accepts(tok, g, format_tool_call("f", {"x": value}) + sp.TOOL_RESPONSE_START)


def completed_value(tok, grammar):
    """The value of the one call the shortest completion from the start writes, and its token count."""
    m = new_matcher(tok, grammar)
    comp = shortest_completion(m, tok, 4096)
    assert len(comp) < 4096
    assert m.consume_tokens(comp) and m.is_accepting()
    calls = parse_tool_calls(tok.decode(comp, skip_special_tokens=False)).calls
    return calls[0].arguments["x"], len(comp)


@pytest.mark.parametrize(
    ("prop", "ok", "bad"),
    [
        ({"type": "string", "pattern": "^.{3000}$"}, [3000], [2999, 3001]),
        ({"type": "string", "minLength": 3000}, [3000, 3001], [2999]),
        ({"type": "string", "maxLength": 5000}, [0, 4999, 5000], [5001]),
        ({"type": "string", "pattern": "^[a-z]{10,4000}$"}, [10, 4000], [9, 4001]),
    ],
)
def test_long_strings_keep_their_exact_bounds(tok, prop, ok, bad):
    for n in ok:
        assert call_accepts(tok, prop, "a" * n), n
    for n in bad:
        assert not call_accepts(tok, prop, "a" * n), n


def test_long_arrays_keep_their_exact_bounds(tok):
    prop = {"type": "array", "items": {"type": "integer"}, "minItems": 2000, "maxItems": 2001}
    assert call_accepts(tok, prop, [0] * 2000) and call_accepts(tok, prop, [7] * 2001)
    assert not call_accepts(tok, prop, [0] * 1999) and not call_accepts(tok, prop, [0] * 2002)


@pytest.mark.parametrize(
    ("prop", "check"),
    [
        ({"type": "string", "pattern": "^.{3000}$"}, lambda v: len(v) == 3000),
        ({"type": "string", "minLength": 3000}, lambda v: len(v) >= 3000),
        ({"type": "string", "minLength": 300, "pattern": "x$"}, lambda v: len(v) >= 300 and v[-1] == "x"),
        ({"type": "string", "pattern": "^(ab){700}$"}, lambda v: v == "ab" * 700),
    ],
)
def test_shortest_completion_of_a_long_string_is_valid_and_takes_long_tokens(tok, prop, check):
    value, n_tokens = completed_value(
        tok, tool_call_grammar([tool(prop)], {"name": "f"}, allow_thinking=False)
    )
    assert check(value), value[-40:]
    if "minLength" in prop:  # past the first steps, progress takes the longest tokens allowed, not characters
        assert n_tokens < len(value) // 2


def test_shortest_completion_of_a_long_array_writes_exactly_the_items_needed(tok):
    prop = {"type": "array", "items": {"type": "integer"}, "minItems": 1500}
    value, _ = completed_value(tok, tool_call_grammar([tool(prop)], {"name": "f"}, allow_thinking=False))
    assert len(value) == 1500 and all(isinstance(v, int) for v in value)
    obj = {"type": "object", "additionalProperties": {"type": "integer"}, "minProperties": 300}
    g = tool_call_grammar([tool(obj)], {"name": "f"}, allow_thinking=False, additional_properties=True)
    m = new_matcher(tok, g)
    comp = shortest_completion(m, tok, 4096)
    assert m.consume_tokens(comp) and m.is_accepting()


class _CountingMatcher:
    """An ``LLMatcher`` whose copies (and their copies) count into ``copies``."""

    def __init__(self, m, copies):
        self.m, self.copies = m, copies

    def deep_copy(self):
        self.copies.append(1)
        return _CountingMatcher(self.m.deep_copy(), self.copies)

    def __getattr__(self, name):
        return getattr(self.m, name)


def test_shortest_completion_copies_the_matcher_once_not_at_every_step(tok):
    # a copy costs the whole token history: one per step made a 4,096-token probe of a string with no reachable
    # end (minLength 1e9) quadratic, minutes of CPU for one request's tool check in agentkit serve
    g = tool_call_grammar([tool({"type": "string", "minLength": 10**9})], {"name": "f"}, allow_thinking=False)
    copies: list[int] = []
    m = _CountingMatcher(new_matcher(tok, g), copies)
    assert len(shortest_completion(m, tok, 1024)) == 1024
    assert len(copies) == 1


def test_response_format_with_a_long_string_completes_to_the_exact_length(tok):
    g = response_format_grammar(
        {"type": "object", "properties": {"x": {"type": "string", "pattern": "^.{2000}$"}}, "required": ["x"]}
    )
    m = new_matcher(tok, g)
    comp = shortest_completion(m, tok, 4096)
    assert m.consume_tokens(comp) and m.is_accepting()
    text = tok.decode(comp, skip_special_tokens=False).removesuffix(sp.TURN_END)
    assert len(json.loads(text)["x"]) == 2000


@pytest.mark.parametrize("k", [5, 9973, MAX_MULTIPLE_OF, 3_000_000, 0.01])
def test_supported_multiple_of_compiles_and_is_enforced(tok, k):
    prop = {"type": "number" if isinstance(k, float) else "integer", "multipleOf": k}
    assert call_accepts(tok, prop, 0) and call_accepts(tok, prop, k * 3)
    assert not call_accepts(tok, prop, k * 3 + (0.001 if isinstance(k, float) else 1))


@pytest.mark.parametrize(
    ("prop", "path"),
    [
        ({"type": "integer", "multipleOf": 999_983}, "/properties/x"),
        ({"type": "integer", "multipleOf": 2**30}, "/properties/x"),
        ({"type": "number", "multipleOf": 20_011.0}, "/properties/x"),
        ({"allOf": [{"multipleOf": 9973}, {"multipleOf": 9967}], "type": "integer"}, "/properties/x"),
    ],
)
def test_multiple_of_with_a_huge_automaton_is_refused_with_keyword_and_path(prop, path):
    with pytest.raises(SchemaError) as ei:
        tool_call_grammar([tool(prop)], "required")
    assert (ei.value.keyword, ei.value.path) == ("multipleOf", path)
    assert f"up to {MAX_MULTIPLE_OF:,}" in str(ei.value)
    with pytest.raises(SchemaError):
        build_ir({"type": "object", "properties": {"x": prop}})


@pytest.mark.parametrize(
    ("prop", "keyword", "value"),
    [
        ({"type": "number", "minimum": 1e100}, "minimum", "1e+100"),
        ({"type": "number", "minimum": -1.5e20, "maximum": 3.25e20}, "minimum", "-1.5e+20"),
        ({"type": "number", "exclusiveMaximum": -2e18}, "exclusiveMaximum", "-2e+18"),
    ],
)
def test_number_bounds_beyond_llguidance_float_range_name_the_bound(prop, keyword, value):
    # the message was llguidance's "Failed to generate regex for float range: min=Some(1e100), max=None"
    with pytest.raises(SchemaError) as ei:
        tool_call_grammar([tool(prop)], "required")
    assert (ei.value.keyword, ei.value.path) == (keyword, "/properties/x")
    assert str(ei.value) == (
        f"tool 'f': {keyword}={value} is beyond the range the grammar's number bounds support (|{keyword}| < 1e18) "
        f"(keyword {keyword!r} at /properties/x)"
    )
    assert "Some(" not in str(ei.value)
    tool_call_grammar([tool({"type": "number", "minimum": -9.9e17, "maximum": 9.9e17})], "required")


def test_number_bounds_llguidance_cannot_express_name_the_property():
    with pytest.raises(SchemaError) as ei:
        tool_call_grammar([tool({"type": "number", "exclusiveMinimum": 1e-300})], "required")
    assert (ei.value.keyword, ei.value.path) == ("minimum", "/properties/x")
    assert "number bounds not supported by the grammar" in str(ei.value)


def test_an_enum_of_thousands_of_strings_is_one_terminal_not_an_earley_item_per_value(tok):
    # one item per value passed llguidance's 2,000 items per row: the matcher failed at the property ('max is
    # 2000'), and agentkit serve refused the tool as "no call of this tool fits in 4096 tokens"
    prop = {"enum": [f"v{j}" for j in range(2500)] + [7, ""]}
    for ok in ("v0", "v2499", 7, ""):
        assert call_accepts(tok, prop, ok), ok
    assert not call_accepts(tok, prop, "v2500")
    value, _ = completed_value(tok, tool_call_grammar([tool(prop)], {"name": "f"}, allow_thinking=False))
    assert value in prop["enum"]


def test_the_grammar_cache_holds_no_tool_text():
    # keyed by the tool list's JSON, the cache kept up to 256 request-sized keys (a 3.5 MB description each: an
    # agentkit serve process grew ~8 MB a request); now by its SHA-256
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(5):
            t = tool({"type": "string"})
            t["function"]["description"] = f"{i} " + "d" * 1_000_000
            tool_call_grammar([t], {"name": "f"}, allow_thinking=False)
            del t
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held < 500_000
