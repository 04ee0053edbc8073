"""Grounded values: a parameter marked x-grounded only takes spans of the conversation (grammar/grounding.py)."""

from __future__ import annotations

import json
import random
import re
import textwrap

import pytest
import torch

from agentkit import Grounded, tool
from agentkit.bundle import BundleError, load_bundle
from agentkit.errors import ToolDefinitionError
from grammar.grounding import MAX_GROUNDED_CHARS, _span_bounds, bounded_texts, grounding_regex
from grammar.llg import new_matcher
from grammar.turn import tool_call_grammar
from model.checkpoint.loading import load_checkpoint
from model.testing import make_tiny_checkpoint
from model.turn.chat import ChatModel, grounding_texts

torch.set_num_threads(1)


def grounding_spans(texts: list[str]) -> set[str]:
    """Every span of ``texts`` a grounded value may take: the strings :func:`grounding_regex` is built from."""
    return {t[i:j] for t in bounded_texts(texts) for i, j in _span_bounds(t, MAX_GROUNDED_CHARS)}


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "find_definition",
            "description": "Find where a name is defined.",
            "parameters": {
                "type": "object",
                "properties": {"name": {"type": "string", "x-grounded": True, "maxLength": 80}},
                "required": ["name"],
            },
        },
    }
]


def _py(rx: str) -> re.Pattern[str]:
    """The grounding regex in Python syntax (``\\u{hex}`` escapes -> escaped characters)."""
    return re.compile(re.sub(r"\\u\{([0-9a-f]+)\}", lambda m: re.escape(chr(int(m.group(1), 16))), rx))


def test_the_regex_matches_exactly_the_spans():
    rng = random.Random(4)
    words = ["load_bundle", "Agent.run", "src/a.py:12", "Berlin", "New York", "(x)", "-3.5", "ünïcode"]
    for _ in range(30):
        text = " ".join(rng.choice(words) for _ in range(rng.randint(1, 6))) + rng.choice(["", "?", "."])
        rx = _py(grounding_regex([text]))
        spans = grounding_spans([text])
        assert spans and all(rx.fullmatch(s) for s in spans)
        # a few strings that are not spans: cut inside a word, leading/trailing space, not in the text
        for bad in ("zzz", " " + text, text + " "):
            assert not rx.fullmatch(bad)
    assert grounding_regex(["   ", ""]) is None
    assert {"load_bundle", "load", "bundle", "agentkit/bundle.py:446"} <= grounding_spans(
        ["Where is load_bundle? See agentkit/bundle.py:446"]
    )
    assert "oad_bundle" not in grounding_spans(["load_bundle"])


def _call_ids(tok, value):
    return tok(
        f'<|tool_call>call:find_definition{{name:<|"|>{value}<|"|>}}<tool_call|><|tool_response>',
        add_special_tokens=False,
    )["input_ids"]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return load_checkpoint(str(make_tiny_checkpoint(tmp_path_factory.mktemp("g"), canvas_length=16)))


def test_the_grammar_accepts_spans_and_refuses_anything_else(ckpt):
    tok = ckpt.tokenizer
    g = tool_call_grammar(TOOLS, "required", grounding=["Where is the function load_bundle defined?"])
    for value, ok in (("load_bundle", True), ("load", True), ("load_bund", False), ("save_bundle", False)):
        ids = _call_ids(tok, value)
        assert (new_matcher(tok, g).validate_tokens(ids) == len(ids)) is ok, value
    # without grounding texts the keyword changes nothing (registration-time compile)
    ids = _call_ids(tok, "save_bundle")
    assert new_matcher(tok, tool_call_grammar(TOOLS, "required")).validate_tokens(ids) == len(ids)


def test_generated_grounded_values_are_always_spans_of_the_conversation(ckpt):
    """A random-weight model under the constraint, many seeds: every value it writes is a conversation span."""
    cm = ChatModel(ckpt)
    messages = [
        {"role": "user", "content": "Where is parse_config defined? Also check TokenCache."},
        {"role": "tool", "name": "find_definition", "content": {"matches": ["src/cache.py:40"], "total": 1}},
        {"role": "user", "content": "And the helper in src/util.py?"},
    ]
    conversation = grounding_texts(messages)
    # an object response counts as its values, as the model reads them (not as escaped JSON)
    assert conversation == [messages[0]["content"], "src/cache.py:40", "1", messages[2]["content"]]
    spans = grounding_spans(conversation)
    values = []
    for seed in range(12):
        out = cm.chat(messages, tools=TOOLS, tool_choice="required", seed=seed, max_new_tokens=64)
        assert out.tool_calls, out.raw
        for c in out.tool_calls:
            values.append(c.arguments["name"])
    assert values and all(v in spans for v in values), values
    assert all(any(v in t for t in conversation) for v in values)


def test_nothing_to_ground_on(ckpt):
    with pytest.raises(ValueError, match=r"parameter 'name' is grounded"):
        tool_call_grammar(TOOLS, {"name": "find_definition"}, grounding=["   "])
    # words without punctuation are something to ground on
    tok = ckpt.tokenizer
    g = tool_call_grammar(TOOLS, {"name": "find_definition"}, grounding=["hello world"])
    ids = _call_ids(tok, "world")
    assert new_matcher(tok, g).validate_tokens(ids) == len(ids)
    # a span must also fit the parameter's lengths: none of these words is 20 characters long
    long_name = json.loads(json.dumps(TOOLS))
    long_name[0]["function"]["parameters"]["properties"]["name"]["minLength"] = 20
    with pytest.raises(ValueError, match="no span of the conversation"):
        tool_call_grammar(long_name, "required", grounding=["short words only"])
    # an optional grounded parameter with nothing to ground on is left out, the tool stays callable
    opt = json.loads(json.dumps(TOOLS))
    opt[0]["function"]["parameters"]["properties"]["path"] = {
        "type": "string",
        "minLength": 50,
        "x-grounded": True,
    }
    g = tool_call_grammar(opt, "required", grounding=["where is parse_config"])
    ids = _call_ids(tok, "parse_config")
    assert new_matcher(tok, g).validate_tokens(ids) == len(ids)
    bad = tok('<|tool_call>call:find_definition{name:<|"|>parse_config<|"|>,path:', add_special_tokens=False)[
        "input_ids"
    ]
    assert new_matcher(tok, g).validate_tokens(bad) < len(bad)
    # with auto, the tool is left out of the grammar: the model cannot call it
    tok = ckpt.tokenizer
    g = tool_call_grammar(TOOLS, "auto", grounding=[""])
    ids = tok("<|tool_call>call:find_definition", add_special_tokens=False)["input_ids"]
    assert new_matcher(tok, g).validate_tokens(ids) < len(ids)
    cm = ChatModel(ckpt)
    with pytest.raises(ValueError, match="'name' is grounded"):
        cm.chat([{"role": "user", "content": " "}], tools=TOOLS, tool_choice={"name": "find_definition"})


def test_python_api_and_bundles_mark_grounded_parameters(tmp_path):
    @tool
    def lookup(name: Grounded[str], limit: int = 5) -> str:
        """Look a name up.

        Args:
            name: a name from the question.
            limit: at most this many.
        """
        return name

    props = lookup.declaration()["function"]["parameters"]["properties"]
    assert props["name"]["x-grounded"] is True and "x-grounded" not in props["limit"]
    assert tool(lambda_free, grounded=["text"]).parameters["properties"]["text"]["x-grounded"] is True
    with pytest.raises(ToolDefinitionError, match="'limit' must be a string"):
        tool(lookup.function, grounded=["limit"])
    with pytest.raises(ToolDefinitionError, match="not one of its parameters"):
        tool(lookup.function, grounded=["nope"])

    (tmp_path / "b.yaml").write_text(
        textwrap.dedent(
            """\
            agentkit_bundle: 1
            name: g
            tools:
              - name: find
                http: {url: "https://example.invalid/{q}"}
                parameters:
                  type: object
                  properties:
                    q: {type: string, grounded: true}
                  required: [q]
            """
        )
    )
    b = load_bundle(tmp_path / "b.yaml")
    assert b.tools[0].declaration()["function"]["parameters"]["properties"]["q"]["x-grounded"] is True
    (tmp_path / "bad.yaml").write_text(
        (tmp_path / "b.yaml").read_text().replace("grounded: true", "grounded: sometimes")
    )
    with pytest.raises(BundleError, match=r"bad.yaml:\d+.*grounded must be true or false"):
        load_bundle(tmp_path / "bad.yaml")
    shipped = load_bundle("examples/code_search/bundle.yaml")
    fd = next(t for t in shipped.tools if t.name == "find_definition")
    assert fd.declaration()["function"]["parameters"]["properties"]["name"]["x-grounded"] is True


def lambda_free(text: str) -> str:
    """Echo.

    Args:
        text: anything.
    """
    return text


def test_grounding_stays_bounded_on_long_and_odd_conversations(ckpt):
    tok = ckpt.tokenizer
    long = ["where is load_bundle " * 400, "agentkit/bundle.py:446 " * 300, "caf\udce9.txt and more"]
    g = tool_call_grammar(TOOLS, "required", grounding=long)
    assert len(g) < 500_000
    m = new_matcher(tok, g)
    assert not m.is_error()
    ids = _call_ids(tok, "agentkit/bundle.py:446")
    assert new_matcher(tok, g).validate_tokens(ids) == len(ids)
    assert any("\\udce9" in s for s in grounding_spans(long))  # a lone surrogate is kept as its escape text


def test_grounded_keyword_is_refused_where_it_cannot_mean_a_span():
    from schema import SchemaError, build_ir

    for schema, why in (
        ({"type": "integer", "x-grounded": True}, "only strings"),
        ({"type": "string", "enum": ["red", "blue"], "x-grounded": True}, "enum"),
        ({"type": "string", "pattern": "^[0-9]+$", "x-grounded": True}, "pattern"),
        ({"type": "string", "format": "email", "x-grounded": True}, "format"),
        ({"type": "array", "items": {"type": "string"}, "x-grounded": True}, "only strings"),
    ):
        with pytest.raises(SchemaError, match=why):
            build_ir({"type": "object", "properties": {"v": schema}})
    build_ir(
        {
            "type": "object",
            "properties": {"v": {"anyOf": [{"type": "string"}, {"type": "null"}], "x-grounded": True}},
        }
    )


def test_every_printable_character_can_be_grounded(ckpt):
    import string

    text = "say " + string.printable + ' end <|"|> <turn|> ünï 東京'
    g = tool_call_grammar(TOOLS, "required", grounding=[text])
    m = new_matcher(ckpt.tokenizer, g)
    assert not m.is_error()
    assert "東京" in grounding_spans([text]) and '<|"|>' in grounding_spans([text])


def test_an_agent_without_tools_always_answers_in_prose(ckpt):
    """No tools: the prose-only grammar applies, so a random-weight model can never write a call."""
    from agentkit import Agent
    from agentkit.backends.embedded import EmbeddedBackend

    cm = ChatModel(ckpt)
    for seed in range(6):
        out = cm.chat([{"role": "user", "content": "Hello, how are you?"}], seed=seed, max_new_tokens=32)
        assert not out.tool_calls and "<|tool_call>" not in out.raw
    result = Agent(EmbeddedBackend(chat_model=cm, seed=1, max_new_tokens=32), []).run("Hello")
    assert result.stop_reason == "final_answer"


def test_a_forced_call_the_grammar_cannot_complete_is_a_clear_error(ckpt):
    tools = [
        {
            "type": "function",
            "function": {
                "name": "order",
                "description": "",
                "parameters": {
                    "type": "object",
                    "properties": {"id": {"type": "string", "pattern": "[0-9]{3,}"}},
                    "required": ["id"],
                },
            },
        }
    ]
    with pytest.raises(ValueError, match="no completion shorter than 4096 tokens"):
        ChatModel(ckpt).chat(
            [{"role": "user", "content": "order 12345"}], tools=tools, tool_choice={"name": "order"}
        )
