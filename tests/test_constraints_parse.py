"""Parsing and formatting of tool calls (Gemma 4 native syntax and JSON syntax)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grammar.parse import (
    NotJSONError,
    ParsedCall,
    ToolCallParseError,
    format_tool_call,
    format_value,
    parse_tool_calls,
    parse_value,
)

D = '<|"|>'


def test_parse_gemma_calls_with_thinking_and_prose():
    text = (
        "<|channel>thought\nThe user wants weather.<channel|>"
        "Let me check."
        f"<|tool_call>call:get_weather{{city:{D}Paris, France{D},days:3,ratio:0.5,big:1e3,neg:-7,"
        f"ok:true,no:false,none:null,tags:[{D}a{D},{D}{D}],opts:{{units:{D}C{D},n:[]}},empty:{{}}}}<tool_call|>"
        f"<|tool_call>call:time.now{{}}<tool_call|><|tool_response>"
    )
    out = parse_tool_calls(text)
    assert out.thinking == "The user wants weather."
    assert out.text == "Let me check."
    assert out.calls == [
        ParsedCall(
            "get_weather",
            {
                "city": "Paris, France",
                "days": 3,
                "ratio": 0.5,
                "big": 1000.0,
                "neg": -7,
                "ok": True,
                "no": False,
                "none": None,
                "tags": ["a", ""],
                "opts": {"units": "C", "n": []},
                "empty": {},
            },
        ),
        ParsedCall("time.now", {}),
    ]
    assert type(out.calls[0].arguments["days"]) is int
    assert type(out.calls[0].arguments["big"]) is float


def test_parse_prose_only_and_terminators():
    out = parse_tool_calls("Hello there.<turn|><pad><pad>")
    assert (out.text, out.thinking, out.calls) == ("Hello there.", None, [])
    # Text after the terminator is not part of the turn.
    out = parse_tool_calls("<|tool_call>call:f{a:1}<tool_call|><|tool_response>junk <|tool_call>")
    assert out.calls == [ParsedCall("f", {"a": 1})] and out.text == ""


def test_parse_raw_strings_keep_everything_but_the_delimiter():
    s = 'He said "hi"\n\\n {not:json} [x], <turn|> é☃ '
    out = parse_tool_calls(f"<|tool_call>call:f{{s:{D}{s}{D}}}<tool_call|>")
    assert out.calls[0].arguments == {"s": s}


def test_parse_keys_with_colons_backtrack_to_the_right_split():
    assert parse_value(f"{{a:b:1,x: y:{D}v{D},10:30:2}}") == {"a:b": 1, "x: y": "v", "10:30": 2}


def test_parse_json_syntax():
    text = (
        '<|tool_call>{"name":"get_weather","arguments":{"city":"Paris","days":3}}<tool_call|><|tool_response>'
    )
    out = parse_tool_calls(text, syntax="json")
    assert out.calls == [ParsedCall("get_weather", {"city": "Paris", "days": 3})]


@pytest.mark.parametrize(
    ("text", "offset", "message"),
    [
        (f"<|tool_call>call:f{{a:{D}x}}<tool_call|>", 21, "unterminated string"),
        ("<|tool_call>call:f{a:1}", 23, "not closed"),
        ("<|tool_call>call:f{a:1]<tool_call|>", 22, "expected ',' or '}'"),
        ("<|tool_call>call:f{a:yes}<tool_call|>", 21, "expected a value"),
        ("<|tool_call>f{a:1}<tool_call|>", 12, "call:"),
        ("<|channel>thought never closed", 0, "<channel|>"),
        ("<|tool_call>call:f{a:[1,}<tool_call|>", 24, "expected a value"),
    ],
)
def test_parse_errors_carry_the_offset(text, offset, message):
    with pytest.raises(ToolCallParseError) as ei:
        parse_tool_calls(text)
    assert ei.value.offset == offset
    assert message in str(ei.value)


def test_parse_json_syntax_errors():
    with pytest.raises(ToolCallParseError) as ei:
        parse_tool_calls('<|tool_call>{"name":"f","arguments":{"a":}}<tool_call|>', syntax="json")
    assert ei.value.offset == 41
    with pytest.raises(ToolCallParseError):
        parse_tool_calls('<|tool_call>{"name":"f","args":{}}<tool_call|>', syntax="json")
    with pytest.raises(ValueError):
        parse_tool_calls("x", syntax="xml")


def test_format_examples():
    assert (
        format_value({"a": [1, 2.5, True, None, "x"], "b": {}}) == f"{{a:[1,2.5,true,null,{D}x{D}],b:{{}}}}"
    )
    assert format_value(1.0) == "1.0" and format_value(1e100) == "1e+100" and format_value(-0.0) == "-0.0"
    assert format_tool_call("f", {"q": "hi"}) == f"<|tool_call>call:f{{q:{D}hi{D}}}<tool_call|>"
    assert (
        format_tool_call("f", {"q": "hi"}, syntax="json")
        == '<|tool_call>{"name":"f","arguments":{"q":"hi"}}<tool_call|>'
    )


@pytest.mark.parametrize(
    "bad",
    [
        float("nan"),
        float("inf"),
        {1: 2},
        {"}x": 1},
        {"a:b,c": 1},
        object(),
        {"a": {1, 2}},
    ],
)
def test_format_rejects_what_cannot_round_trip(bad):
    with pytest.raises(ValueError):
        format_value(bad)


def test_format_value_plain_is_the_template_text_and_marked_reads_back():
    value = {"a:b,c": "say <turn|> now", "n": [1, 2.5]}
    # plain: what the chat template writes (training prompts, declarations); no marks, keys as they are
    assert format_value(value, marked=False) == f"{{a:b,c:{D}say <turn|> now{D},n:[1,2.5]}}"
    with pytest.raises(ValueError, match="ambiguous"):
        format_value(value)
    marked = format_value({"k": "say <turn|> now"})
    assert marked == f"{{k:{D}say <\ue000turn|> now{D}}}" and parse_value(marked) == {"k": "say <turn|> now"}
    for mark in (True, False):
        with pytest.raises(NotJSONError, match="not a JSON value: set"):
            format_value({"a": {1}}, marked=mark)
        with pytest.raises(TypeError, match="keys must be strings"):
            format_value({1: 2}, marked=mark)


def test_format_tool_call_rejects_bad_input():
    with pytest.raises(ValueError):
        format_tool_call("bad name", {})
    with pytest.raises(ValueError):
        format_tool_call("f", [1])  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        format_tool_call("f", {}, syntax="yaml")


# Keys: anything the format accepts (filtered below), biased towards the awkward characters.
_keys = st.text(alphabet=st.sampled_from(list("ab:, {}[]_-é\n\"'0123456789tfn<|>")), min_size=0, max_size=6)
_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**20), 10**20)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_keys, children, max_size=4),
    max_leaves=12,
)


def _formattable(v):
    try:
        format_value(v)
    except ValueError:
        return False
    return True


@settings(max_examples=400, deadline=None)
@given(_json.filter(_formattable))
def test_round_trip_value(v):
    assert parse_value(format_value(v)) == v
    # int vs float survives the round trip
    assert json.dumps(parse_value(format_value(v))) == json.dumps(v)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(_keys, _json, max_size=4).filter(_formattable), st.sampled_from(["gemma", "json"]))
def test_round_trip_tool_call(args, syntax):
    text = "Sure." + format_tool_call("ns.tool_1", args, syntax) * 2 + "<|tool_response>"
    out = parse_tool_calls(text, syntax)
    assert out.text == "Sure."
    assert out.calls == [ParsedCall("ns.tool_1", args)] * 2
