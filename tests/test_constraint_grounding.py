"""Grounded values: a parameter marked x-grounded only takes spans of the conversation (model/constraints/grounding.py)."""

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
from model.chat import ChatModel, grounding_texts
from model.constraints.grammar import tool_call_grammar
from model.constraints.grounding import grounding_regex, grounding_spans
from model.constraints.llg import new_matcher
from model.loading import load_checkpoint
from model.testing import make_tiny_checkpoint

torch.set_num_threads(1)

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
    assert conversation[1] == json.dumps({"matches": ["src/cache.py:40"], "total": 1})
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
