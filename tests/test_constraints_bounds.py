"""Compile work is bounded: a schema whose tool-call grammar would take too long to build is refused at
registration with a SchemaError naming the keyword and the path, never accepted loosely and never left to
hang. Sizes here sit just past the bounds, so the refusals are quick."""

import llguidance
import pytest

from agentkit import Agent, Tool
from agentkit.backends.embedded import EmbeddedBackend
from agentkit.errors import ToolDefinitionError
from grammar.llg import llg_tokenizer
from grammar.parse import format_tool_call
from grammar.special_tokens import TOOL_RESPONSE_START
from grammar.turn import MAX_GRAMMAR_CHARS, tool_call_grammar
from model.checkpoint.tokenizer import build_tokenizer
from schema import MAX_COMPILE_STEPS, SchemaError


def tool_decl(params):
    return {"type": "function", "function": {"name": "f", "description": "", "parameters": params}}


def azure_pipelines_like(n):
    """The shape of SchemaStore's Azure Pipelines schema (16.7 s before the bound): a property with an enum of
    n task names, and an anyOf of n branches each narrowing it with a pattern: n * n enum checks."""
    names = [f"Task{i}@1" for i in range(n)]
    return {
        "type": "object",
        "properties": {"task": {"enum": names}, "inputs": {"type": "object"}},
        "required": ["task"],
        "anyOf": [
            {"properties": {"task": {"pattern": f"^Task{i}@1$"}, "inputs": {"type": "object"}}}
            for i in range(n)
        ],
    }


def test_multiplying_anyof_and_enum_is_refused_with_keyword_and_path():
    n = 300  # 300 * 300 enum checks + 300 distinct patterns: past MAX_COMPILE_STEPS
    assert n * n + 200 * n > MAX_COMPILE_STEPS
    with pytest.raises(SchemaError) as ei:
        tool_call_grammar([tool_decl(azure_pipelines_like(n))], tool_choice="required")
    err = ei.value
    assert err.keyword in ("anyOf", "enum", "pattern")
    assert err.path in ("", "/properties/task") or err.path.startswith("/anyOf/")
    assert f"needs more than {MAX_COMPILE_STEPS:,} compile steps" in str(err)


def test_the_same_shape_within_the_bound_compiles_and_stays_exact():
    grammar = tool_call_grammar(
        [tool_decl(azure_pipelines_like(20))], tool_choice="required", allow_thinking=False
    )
    corpus = [format_tool_call("f", {"task": f"Task{i}@1", "inputs": {}}) for i in range(25)] * 4
    tok = build_tokenizer(corpus, vocab_size=400, min_frequency=1)
    ll = llg_tokenizer(tok)

    def accepts(task):
        ids = tok.encode(
            format_tool_call("f", {"task": task, "inputs": {}}) + TOOL_RESPONSE_START,
            add_special_tokens=False,
        )
        m = llguidance.LLMatcher(ll, grammar, log_level=0)
        return m.try_consume_tokens(ids) == len(ids) and m.is_accepting()

    assert accepts("Task7@1") and accepts("Task19@1")
    assert not accepts("Task20@1") and not accepts("Task7@2")


def test_huge_enum_is_refused_before_it_is_built():
    params = {"type": "object", "properties": {"code": {"enum": list(range(MAX_COMPILE_STEPS + 1))}}}
    with pytest.raises(SchemaError) as ei:
        tool_call_grammar([tool_decl(params)], tool_choice="required")
    assert (ei.value.keyword, ei.value.path) == ("enum", "/properties/code")


@pytest.mark.parametrize(
    "written, keyword",
    [
        ({"enum": [f"v{i}" for i in range(50_000)]}, "enum"),  # was 'anyOf', the enum's internal form
        ({"anyOf": [{"const": f"v{i}"} for i in range(50_000)]}, "anyOf"),
        # the values join the other branch (was: keyword 'type' at /properties/s/anyOf/0, the integer)
        ({"anyOf": [{"type": "integer"}, {"enum": [f"v{i}" for i in range(50_000)]}]}, "anyOf"),
    ],
)
def test_an_untyped_enum_past_the_grammar_bound_is_named_as_written(written, keyword):
    params = {"type": "object", "properties": {"s": written}}
    with pytest.raises(SchemaError) as ei:
        tool_call_grammar([tool_decl(params)], tool_choice="required")
    assert f"its grammar exceeds {MAX_GRAMMAR_CHARS:,} characters" in str(ei.value)
    assert str(ei.value).endswith(f"(keyword {keyword!r} at /properties/s)")
    assert (ei.value.keyword, ei.value.path) == (keyword, "/properties/s")


def test_grammar_size_bound_names_the_subschema_being_compiled():
    # 20 objects of 1,000 string properties with distinct lengths: within the step bound, but more grammar
    # text than MAX_GRAMMAR_CHARS allows.
    params = {
        "type": "object",
        "properties": {
            f"g{j}": {
                "type": "object",
                "properties": {
                    f"p{i}": {"type": "string", "maxLength": 1000 * j + i + 1} for i in range(1000)
                },
            }
            for j in range(20)
        },
    }
    with pytest.raises(SchemaError) as ei:
        tool_call_grammar([tool_decl(params)], tool_choice="required")
    err = ei.value
    assert err.path.startswith("/properties/g")
    assert err.keyword in ("properties", "maxLength")
    assert f"its grammar exceeds {MAX_GRAMMAR_CHARS:,} characters" in str(err)


def test_schema_with_more_subschemas_than_the_inlining_limit_still_compiles():
    # 25,000 property schemas and no $ref (the reference inliner's node limit once escaped as an internal
    # exception); identical subschemas share their grammar rules, so the grammar stays small.
    group = {f"p{i}": {"type": "string"} for i in range(1000)}
    params = {
        "type": "object",
        "properties": {f"g{j}": {"type": "object", "properties": group} for j in range(25)},
    }
    grammar = tool_call_grammar([tool_decl(params)], tool_choice="required")
    assert len(grammar) < MAX_GRAMMAR_CHARS


def test_registration_refuses_too_large_schemas_with_a_clear_message():
    def run(**kw):
        return "ok"

    t = Tool(run, name="pipeline", parameters=azure_pipelines_like(300))  # fine for a remote server
    with pytest.raises(ToolDefinitionError) as ei:
        Agent(EmbeddedBackend(), tools=[t])
    msg = str(ei.value)
    assert msg.startswith("tool 'pipeline': the tool-call constraint cannot enforce its parameters: ")
    assert "schema is too large to compile" in msg and "(keyword '" in msg
