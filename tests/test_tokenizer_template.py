"""Tokenizer + Gemma 4 chat template: golden rendering, Python mirror, control tokens kept by decode."""

from __future__ import annotations

import pytest

from grammar import special_tokens as st
from model.checkpoint.tokenizer import build_tokenizer
from model.training.data import Generator
from model.training.render import render_prompt
from model.turn.declarations import format_call, format_value

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_forecast",
            "description": "Daily forecast.",
            "parameters": {
                "type": "object",
                "properties": {
                    "place": {"type": "string", "description": "Place name"},
                    "days": {"type": "integer"},
                    "units": {"type": "string", "enum": ["metric", "imperial"]},
                },
                "required": ["place"],
            },
        },
    }
]
CONVERSATION = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Forecast for Lyon, 3 days?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "get_forecast", "arguments": {"place": "Lyon", "days": 3}},
            }
        ],
    },
    {
        "role": "tool",
        "tool_call_id": "c1",
        "name": "get_forecast",
        "content": {"max_c": 21.5, "sky": "sunny"},
    },
    {"role": "assistant", "content": "Sunny, up to 21.5 C."},
]
Q = '<|"|>'
GOLDEN = (
    "<bos><|turn>system\nBe brief."
    f"<|tool>declaration:get_forecast{{description:{Q}Daily forecast.{Q},parameters:{{properties:{{"
    f"days:{{type:{Q}INTEGER{Q}}},place:{{description:{Q}Place name{Q},type:{Q}STRING{Q}}},"
    f"units:{{enum:[{Q}metric{Q},{Q}imperial{Q}],type:{Q}STRING{Q}}}}},required:[{Q}place{Q}],type:{Q}OBJECT{Q}}}}}<tool|>"
    "<turn|>\n<|turn>user\nForecast for Lyon, 3 days?<turn|>\n<|turn>model\n"
    f"<|tool_call>call:get_forecast{{place:{Q}Lyon{Q},days:3}}<tool_call|>"
    f"<|tool_response>response:get_forecast{{max_c:21.5,sky:{Q}sunny{Q}}}<tool_response|>"
    "Sunny, up to 21.5 C.<turn|>\n"
)


@pytest.fixture(scope="module")
def tok():
    texts = [GOLDEN] * 5 + [render_prompt(e.messages, e.tools) + e.target for e in Generator(3).take(300)]
    return build_tokenizer(texts, vocab_size=1500)


def test_golden_rendering(tok):
    assert tok.apply_chat_template(CONVERSATION, tools=TOOLS, tokenize=False) == GOLDEN


def test_generation_prompt_and_tool_continuation(tok):
    p = tok.apply_chat_template(CONVERSATION[:2], tools=TOOLS, tokenize=False, add_generation_prompt=True)
    assert p.endswith("<|turn>user\nForecast for Lyon, 3 days?<turn|>\n<|turn>model\n")
    # after a tool response the model continues in the same turn: no new turn opener
    p2 = tok.apply_chat_template(CONVERSATION[:4], tools=TOOLS, tokenize=False, add_generation_prompt=True)
    assert p2.endswith("<tool_response|>")
    # a plain string tool result is wrapped as {result:...}
    msgs = [*CONVERSATION[:3], {"role": "tool", "name": "get_forecast", "content": "22 C"}]
    assert tok.apply_chat_template(msgs, tools=TOOLS, tokenize=False).endswith(
        f"<|tool_response>response:get_forecast{{result:{Q}22 C{Q}}}<tool_response|>"
    )


def test_no_system_no_tools_has_no_system_turn(tok):
    s = tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert s == "<bos><|turn>user\nhi<turn|>\n<|turn>model\n"


def test_python_renderer_matches_template(tok):
    assert render_prompt(CONVERSATION, TOOLS, add_generation_prompt=False) == GOLDEN
    for ex in Generator(11).take(60):
        want = tok.apply_chat_template(
            ex.messages, tools=ex.tools or None, tokenize=False, add_generation_prompt=True
        )
        assert render_prompt(ex.messages, ex.tools) == want, ex.kind
    cased = [
        {"name": "g", "parameters": {"type": "object", "properties": {"b": {}, "Zeta": {}, "alpha": {}}}}
    ]
    msgs = [{"role": "user", "content": "hi"}]
    want = tok.apply_chat_template(msgs, tools=cased, tokenize=False, add_generation_prompt=True)
    assert "properties:{alpha:{},b:{},Zeta:{}}" in want  # the template's dictsort folds case
    assert render_prompt(msgs, cased) == want


def test_control_tokens_are_single_ids_and_survive_decode(tok):
    for i, name in enumerate(st.SPECIAL_TOKENS):
        assert tok.convert_tokens_to_ids(name) == i
    text = format_call("f", {"q": "a b", "n": 2}) + st.TOOL_RESPONSE_START
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert ids[0] == st.SPECIAL_IDS[st.TOOL_CALL_START] and ids[-1] == st.SPECIAL_IDS[st.TOOL_RESPONSE_START]
    assert ids.count(st.SPECIAL_IDS[st.STRING_DELIM]) == 2
    assert tok.decode(ids) == text  # decode keeps control tokens by default
    full = tok(GOLDEN, add_special_tokens=False)["input_ids"]
    assert tok.decode(full) == GOLDEN


def test_format_value_syntax():
    assert format_value({"a": "x", "b": [1, 2.5, True, None], "c": {"d": False}}) == (
        f"{{a:{Q}x{Q},b:[1,2.5,true,null],c:{{d:false}}}}"
    )
    with pytest.raises(TypeError):
        format_value(object())


def test_format_value_agrees_with_constraint_parser():
    parse = pytest.importorskip("grammar.parse")
    for args in ({"city": "Paris", "days": 3}, {"x": 1.5, "ok": False, "l": ["a", 2], "o": {"k": None}}):
        assert parse.format_value(args) == format_value(args)
        assert parse.format_tool_call("f", args) == format_call("f", args)
        back = parse.parse_tool_calls(format_call("f", args) + st.TOOL_RESPONSE_START)
        assert [(c.name, dict(c.arguments)) for c in back.calls] == [("f", args)]
