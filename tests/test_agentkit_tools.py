"""Tools: schemas from type hints and docstrings, explicit models and JSON Schemas, validation, serialisation."""

import array
import asyncio
import dataclasses
import datetime
import fractions
import json
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Annotated, Literal

import numpy as np
import pydantic
import pydantic.dataclasses
import pytest
import torch
import typing_extensions
from pydantic import BaseModel, Field

from agentkit import Agent
from agentkit.backends.embedded import EmbeddedBackend
from agentkit.backends.scripted import ScriptedBackend, call
from agentkit.errors import ToolDefinitionError
from agentkit.tool_output import serialize_result
from agentkit.tool_schema import misspelt_keywords, non_finite_numbers, parse_docstring, yaml_number_hint
from agentkit.tools import Tool, ToolArgumentsError, ToolContext, tool
from schema.normalize import drop_titles as clean_schema


@tool
def get_weather(
    city: str,
    days: Annotated[int, Field(ge=1, le=7)] = 1,
    units: Literal["metric", "imperial"] = "metric",
    title: str | None = None,
) -> dict:
    """Weather forecast for a city.

    Uses the forecast service.

    Args:
        city: City name,
            e.g. "Paris".
        days (int): Number of days.
        units: Unit system.

    Returns:
        The forecast.
    """
    return {"city": city, "days": days, "units": units, "title": title}


def test_schema_from_hints_and_google_docstring():
    decl = get_weather.declaration()
    assert decl["type"] == "function"
    fn = decl["function"]
    assert fn["name"] == "get_weather"
    assert fn["description"] == "Weather forecast for a city.\n\nUses the forecast service."
    params = fn["parameters"]
    assert params["type"] == "object"
    assert params["required"] == ["city"]
    assert params["additionalProperties"] is False
    props = params["properties"]
    assert list(props) == ["city", "days", "units", "title"]
    assert props["city"] == {"type": "string", "description": 'City name, e.g. "Paris".'}
    assert props["days"] == {
        "type": "integer",
        "minimum": 1,
        "maximum": 7,
        "default": 1,
        "description": "Number of days.",
    }
    assert props["units"]["enum"] == ["metric", "imperial"]
    # the auto-generated "title" keywords are gone, but a *property* called "title" stays
    assert "title" in props
    assert "title" not in params and "title" not in props["city"]


def test_validation_lists_every_problem_by_field():
    with pytest.raises(ToolArgumentsError) as ei:
        get_weather.validate({"days": 9, "units": "kelvin", "colour": "red"})
    msg = str(ei.value)
    assert "city: Field required" in msg
    assert "days: Input should be less than or equal to 7 (got 9)" in msg
    assert "units: Input should be 'metric' or 'imperial' (got 'kelvin')" in msg
    assert "colour: unknown argument" in msg
    with pytest.raises(ToolArgumentsError, match="arguments must be a JSON object, got list"):
        get_weather.validate([1, 2])  # type: ignore[arg-type]


def test_validate_and_call_coerces_and_fills_defaults():
    v = get_weather.validate({"city": "Paris", "days": "3"})
    assert v == {"city": "Paris", "days": 3, "units": "metric", "title": None}
    out = asyncio.run(get_weather.acall(v, ToolContext("get_weather", "c0", 0)))
    assert out == {"city": "Paris", "days": 3, "units": "metric", "title": None}
    # the decorated function is still a function
    assert get_weather("Oslo", days=2)["days"] == 2


def test_parameter_names_shadowing_basemodel_attributes():
    @tool
    def t(json: str, schema: int, model_config: bool = False) -> str:
        return f"{json}-{schema}-{model_config}"

    assert list(t.parameters["properties"]) == ["json", "schema", "model_config"]
    v = t.validate({"json": "a", "schema": 2})
    assert asyncio.run(t.acall(v, ToolContext("t", "c", 0))) == "a-2-False"


def test_a_parameter_alias_is_the_name_the_model_sees():
    # Field(alias="from") on a parameter named from_ was overridden: the model was told "from_", and "from"
    # was refused as an unknown argument
    @tool
    def flights(from_: Annotated[str, Field(alias="from")], to: str) -> str:
        """Flights between two airports.

        Args:
            from_: Departure airport code.
            to: Arrival airport code.
        """
        return f"{from_}->{to}"

    assert flights.parameters["properties"] == {
        "from": {"description": "Departure airport code.", "type": "string"},
        "to": {"description": "Arrival airport code.", "type": "string"},
    }
    assert flights.parameters["required"] == ["from", "to"]
    assert flights.validate({"from": "OSL", "to": "CDG"}) == {"from_": "OSL", "to": "CDG"}
    with pytest.raises(ToolArgumentsError, match="from_: unknown argument"):
        flights.validate({"from_": "OSL", "to": "CDG"})
    result = Agent(ScriptedBackend([call("flights", {"from": "OSL", "to": "CDG"}), "ok"]), [flights]).run("?")
    assert result.tool_calls[0].content == "OSL->CDG"


def test_sphinx_and_numpy_docstrings():
    desc, params = parse_docstring(
        """Add numbers.

        :param a: the first
            number
        :param int b: the second
        :returns: the sum
        """
    )
    assert desc == "Add numbers."
    assert params == {"a": "the first number", "b": "the second"}
    desc, params = parse_docstring(
        """Scale.

        Parameters
        ----------
        x : float
            The value.
        factor
            How much.

        Returns
        -------
        float
        """
    )
    assert desc == "Scale."
    assert params == {"x": "The value.", "factor": "How much."}


def test_a_docstring_griffe_finds_fault_with_is_read_without_a_log_line(caplog):
    caplog.set_level("DEBUG")
    desc, params = parse_docstring(
        """Look up.

        Args:
            x: the key
              indented oddly
            y
        """
    )
    assert desc == "Look up." and params["x"] == "the key indented oddly"
    assert caplog.records == []


class SearchArgs(BaseModel):
    query: str = Field(description="What to look for.")
    limit: int = Field(5, ge=1, le=50)


def test_explicit_args_model_receives_instance():
    seen = []

    @tool(args_model=SearchArgs, timeout=5, retries=1)
    def search(args: SearchArgs) -> list[str]:
        """Search the index."""
        seen.append(args)
        return [args.query] * args.limit

    props = search.parameters["properties"]
    assert props["query"] == {"type": "string", "description": "What to look for."}
    assert props["limit"] == {"type": "integer", "default": 5, "minimum": 1, "maximum": 50}
    assert search.timeout == 5 and search.retries == 1
    v = search.validate({"query": "x", "limit": 2})
    assert isinstance(v, SearchArgs)
    assert asyncio.run(search.acall(v, ToolContext("search", "c", 0))) == ["x", "x"]
    with pytest.raises(ToolArgumentsError, match="limit: Input should be less than or equal to 50"):
        search.validate({"query": "x", "limit": 99})


def test_a_misspelt_schema_keyword_is_refused_naming_the_keyword_meant():
    params = {
        "type": "object",
        "properties": {"q": {"type": "string", "maxLenght": 3}, "maxLenght": {"type": "integer"}},
        "requird": ["q"],
    }
    # a property *named* like a misspelling is a name, not a keyword; both keyword typos are found
    assert misspelt_keywords(params) == [
        (("requird",), "unknown keyword 'requird': did you mean 'required'?"),
        (("properties", "q", "maxLenght"), "unknown keyword 'maxLenght': did you mean 'maxLength'?"),
    ]
    with pytest.raises(
        ToolDefinitionError, match=r"tool 'f': parameters at 'requird': .*did you mean 'required'"
    ):
        Tool(lambda **k: k, name="f", parameters=params)
    # keywords with other case or affixes, x- extensions and keys close to no keyword are annotations: kept
    fine = {"type": "object", "properties": {"s": {"type": "string", "readonly": True, "_format": "email"}}}
    assert misspelt_keywords({**fine, "x-maxLenght": 1, "frobnicate": 3, "@type": "Thing"}) == []
    assert Tool(lambda **k: k, name="g", parameters={**fine, "frobnicate": 3}).name == "g"


@pytest.mark.parametrize(
    "schema, where, value",
    [
        ({"type": "number", "maximum": float("inf")}, "properties/x/maximum", "inf"),
        ({"type": "number", "exclusiveMinimum": float("-inf")}, "properties/x/exclusiveMinimum", "-inf"),
        ({"type": "number", "minimum": float("nan")}, "properties/x/minimum", "nan"),
        ({"enum": [1.5, float("inf")]}, "properties/x/enum/1", "inf"),
    ],
)
def test_a_non_finite_number_in_a_schema_is_refused_as_a_bundle_refuses_it(schema, where, value):
    """JSON has no NaN or infinity: such a schema could be sent to no model (a YAML bundle's ``.inf`` is refused
    when it is read); a Python tool's is refused when it is made, naming the tool and the keyword's path."""
    params = {"type": "object", "properties": {"x": schema}, "required": ["x"]}
    with pytest.raises(ToolDefinitionError, match=rf"^tool 'f': parameters at '{where}': .*got {value} "):
        Tool(lambda x: x, name="f", parameters=params)
    with pytest.raises(ToolDefinitionError, match=rf"^tool 'g': parameters at '{where}'"):
        tool(name="g", parameters=params)(lambda x: x)


def test_non_finite_numbers_walks_any_depth_in_document_order():
    """The walk keeps no Python stack per level: a schema nested past the recursion limit is still read."""
    deep: dict = {"type": "object"}
    node = deep
    for _ in range(3000):
        node["properties"] = {"x": {"type": "object"}}
        node = node["properties"]["x"]
    node["maximum"] = float("inf")
    (path, why), *rest = non_finite_numbers(deep)
    assert rest == [] and len(path) == 6001 and path[-1] == "maximum" and "got inf" in why
    flat = {"enum": [float("nan"), 1.0, float("-inf")], "default": float("inf")}
    assert [p for p, _ in non_finite_numbers(flat)] == [("enum", 0), ("enum", 2), ("default",)]


def test_a_non_finite_default_of_a_signature_is_refused_naming_the_parameter():
    def scale(x: float, limit: float = float("inf")) -> float:
        return min(x, limit)

    with pytest.raises(
        ToolDefinitionError, match=r"^tool 'scale': parameters at 'properties/limit/default': .* got inf"
    ):
        tool(scale)
    assert tool(lambda x, limit=1e308: x, name="big").parameters["properties"]["limit"]["default"] == 1e308


def test_yaml_number_hint_names_the_yaml_1_1_spelling_of_a_number_read_as_text():
    assert yaml_number_hint("1e30") == " (YAML reads 1e30 as a string: write 1.0e+30)"
    assert yaml_number_hint("2E-3") == " (YAML reads 2E-3 as a string: write 2.0e-3)"
    assert yaml_number_hint("3.5e7") == " (YAML reads 3.5e7 as a string: write 3.5e+7)"
    # real text, a number YAML already read as one, and YAML 1.1's own float spelling get no hint
    assert [yaml_number_hint(v) for v in ("soon", "1e", 1e30, "1.0e+30")] == ["", "", "", ""]


def test_json_schema_parameters_validated_with_jsonschema():
    def lookup(**kwargs):
        return kwargs

    t = Tool(
        lookup,
        name="lookup",
        description="Look up.",
        parameters={
            "type": "object",
            "properties": {
                "id": {"type": "integer", "minimum": 0},
                "tags": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["id"],
            "additionalProperties": False,
        },
    )
    assert t.validate({"id": 3}) == {"id": 3}
    with pytest.raises(ToolArgumentsError) as ei:
        t.validate({"id": -1, "tags": ["a", 2], "x": 1})
    msg = str(ei.value)
    assert "id: -1 is less than the minimum of 0" in msg
    assert "tags.1: 2 is not of type 'string'" in msg
    assert "Additional properties are not allowed ('x' was unexpected)" in msg


def test_tool_context_is_injected_and_not_declared():
    @tool
    async def whoami(prefix: str, ctx: ToolContext) -> str:
        return f"{prefix}:{ctx.tool_name}:{ctx.call_id}:{ctx.step}:{ctx.deps}"

    assert whoami.is_async
    assert list(whoami.parameters["properties"]) == ["prefix"]
    v = whoami.validate({"prefix": "p"})
    assert asyncio.run(whoami.acall(v, ToolContext("whoami", "call_7", 2, deps="D"))) == "p:whoami:call_7:2:D"


def test_async_callable_object_detected():
    class Fetch:
        __name__ = "fetch"

        async def __call__(self, url: str) -> str:
            return url.upper()

    t = Tool(Fetch(), name="fetch")
    assert t.is_async
    assert asyncio.run(t.acall(t.validate({"url": "ab"}), ToolContext("fetch", "c", 0))) == "AB"


def _named(x: int) -> int:
    return x


def _renamed(name: str) -> Callable[..., int]:
    def call(x: int) -> int:
        return x

    call.__name__ = name
    return call


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Tool(lambda *a: None, name="f"), r"\*args / \*\*kwargs"),
        (lambda: Tool(lambda x: x, name="bad name!"), "tool '<lambda>': invalid name 'bad name!'"),
        (lambda: tool(name="")(_named), r"tool '_named': invalid name '': use letters"),
        (lambda: tool(name="  ")(_named), r"tool '_named': invalid name '  ': use letters"),
        (lambda: Tool(_named, name=5), r"tool '_named': invalid name 5: use letters"),
        # the function's own name: no "or None" (it was None), no tool name said twice
        (
            lambda: tool(lambda x: x),
            r"^invalid tool name '<lambda>' \(the function's name\): use letters, .*; give name= one that is$",
        ),
        # a wrapper named as its tool (MCP): the name once, no function to fall back on
        (
            lambda: Tool(_renamed("ns:write"), name="ns:write"),
            r"^(?!.*None)invalid tool name 'ns:write': use letters.*'_'$",
        ),
        (lambda: Tool(lambda x: x, name="f", timeout=0), "timeout must be a number > 0"),
        (
            lambda: Tool(lambda x: x, name="f", timeout="5"),
            r"timeout must be a number > 0 \(seconds, within a double's range\) or None, got '5'",
        ),
        (lambda: Tool(lambda x: x, name="f", retries=-1), "retries must be an integer >= 0"),
        (lambda: Tool(lambda x: x, name="f", retries=1.5), "retries must be an integer >= 0, got 1.5"),
        # were: AttributeError "'int' object has no attribute 'strip'"; "grounded parameter 'c' is not one of ..."
        (
            lambda: Tool(lambda x: x, name="f", description=5),
            r"^tool 'f': description must be a string or None, got 5$",
        ),
        # was accepted, and every call then answered "TypeError: 'int' object is not callable"
        (
            lambda: Tool(lambda x: x, name="f", serializer=5),
            r"^tool 'f': serializer must be a function \(return value -> str\) or None, got 5$",
        ),
        (
            lambda: Tool(lambda city: city, name="f", grounded="city"),
            r"^tool 'f': grounded must be a list of parameter names, got 'city': wrap it in a list$",
        ),
        (
            lambda: Tool(lambda x: x, name="f", args_model=SearchArgs, parameters={"type": "object"}),
            "give args_model or parameters, not both",
        ),
        (
            lambda: Tool(
                lambda **k: k, name="f", parameters={"type": "object", "properties": {"a": {"type": "nope"}}}
            ),
            "parameters at 'properties/a/type': not a valid JSON Schema",
        ),
        (lambda: Tool(lambda a, b: a, name="f", args_model=SearchArgs), "exactly one argument"),
    ],
)
def test_bad_definitions_raise_clear_errors(make, message):
    with pytest.raises(ToolDefinitionError, match=message):
        make()


UNENFORCEABLE = [
    (
        {"type": "object", "properties": {"a": {"not": {}}}},
        r"constraint cannot enforce its parameters: .*keyword 'not' at /properties/a",
    ),
    (
        {"type": "object", "properties": {"n": {"type": "integer", "minimum": 10**20}}},
        r"minimum=100000000000000000000 is beyond .*keyword 'minimum' at /properties/n",
    ),
    (  # the constraint made every call write "b" with any value, which the function then refused as unknown
        {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a", "b"]},
        r"tool 'f': the tool-call constraint cannot enforce its parameters: required parameter 'b' is not in "
        r"properties \(keyword 'required' at /\)",
    ),
]


@pytest.mark.parametrize(("parameters", "message"), UNENFORCEABLE)
def test_schemas_the_constraint_cannot_enforce_are_refused_by_an_embedded_agent(parameters, message):
    # Defining the tool is fine (a remote server may take any JSON Schema); assembling an agent on the
    # embedded backend refuses it, before any model loads.
    t = Tool(lambda **k: k, name="f", parameters=parameters)
    assert t.parameters["properties"] == parameters["properties"]
    backend = EmbeddedBackend()
    with pytest.raises(ToolDefinitionError, match=message):
        Agent(backend, tools=[t])
    assert backend._chat_model is None  # no checkpoint was loaded to decide
    agent = Agent(ScriptedBackend([]), tools=[t])  # a backend without the constraint takes it
    assert [d["function"]["name"] for d in agent.declarations()] == ["f"]


def test_defining_a_tool_does_not_import_the_constraint_compiler():
    # A subprocess, so modules imported by other tests do not count.
    code = (
        "import sys\n"
        "from agentkit import tool\n"
        "@tool\n"
        "def add(a: int, b: int) -> int:\n"
        "    'Add two integers.'\n"
        "    return a + b\n"
        "print(sorted(m for m in ('llguidance', 'torch', 'grammar.turn') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_generator_tools_answer_with_their_items_collected_on_the_worker_thread():
    # an async generator's answer was "<async_generator object ...>"; a generator's body ran on the event loop's
    # thread while the result was serialised, outside the tool's thread and its timeout
    threads = []

    @tool
    def numbers(n: int):
        """Counts."""
        threads.append(threading.current_thread())
        yield from range(n)

    @tool
    async def anumbers(n: int):
        """Counts, async."""
        for i in range(n):
            await asyncio.sleep(0)
            yield {"i": i}

    backend = ScriptedBackend([[call("numbers", n=3), call("anumbers", n=2)], "done"])
    result = Agent(backend, [numbers, anumbers]).run("?")
    assert [(c.content, c.error) for c in result.tool_calls] == [
        ("[0,1,2]", None),
        ('[{"i":0},{"i":1}]', None),
    ]
    assert result.tool_calls[0].result == [0, 1, 2]
    assert threads and threads[0] is not threading.main_thread()


def test_a_call_that_never_got_a_tool_thread_says_so(monkeypatch):
    # every tool thread held by a hung call: later sync calls queued and timed out as if they had hung themselves
    from agentkit import tool_output

    monkeypatch.setattr(tool_output, "_POOL", type(tool_output._POOL)(max_workers=1))
    release = threading.Event()

    @tool(timeout=0.2)
    def hangs() -> str:
        """Hangs until the test ends."""
        release.wait(30)
        return "late"

    @tool(timeout=0.2)
    def quick() -> str:
        """Answers at once."""
        return "now"

    try:
        backend = ScriptedBackend([call("hangs"), call("quick"), "done"])
        result = Agent(backend, [hangs, quick]).run("?")
    finally:
        release.set()
    hung, queued = result.tool_calls
    assert hung.error == "tool 'hangs' timed out after 0.2 s"
    assert queued.error_kind == "timeout"
    assert queued.error.startswith(
        "tool 'quick' timed out after 0.2 s (it never started: all 1 of agentkit's tool threads are held by sync "
        "tool calls still running past their timeouts"
    )


def test_parameters_nested_too_deeply_are_a_definition_error():
    # a parameters= schema 300 arrays deep ended the definition (or an MCP server's listing) in a RecursionError
    deep: dict = {"type": "string"}
    for _ in range(300):
        deep = {"type": "array", "items": deep}
    with pytest.raises(ToolDefinitionError, match=r"tool 't': parameters: nested too deeply: 303 levels"):
        Tool(lambda **k: k, name="t", parameters={"type": "object", "properties": {"a": deep}})


def test_objects_nested_too_deeply_say_what_the_levels_count():
    # 200 nested object schemas were "401 levels of objects and arrays": the count of JSON levels, unexplained
    deep: dict = {"type": "string"}
    for _ in range(200):
        deep = {"type": "object", "properties": {"a": deep}}
    with pytest.raises(ToolDefinitionError) as info:
        Tool(lambda **k: k, name="t", parameters=deep)
    assert str(info.value) == (
        "tool 't': parameters: nested too deeply: 401 levels of JSON objects and arrays, at most 128 (a schema "
        "under 'properties' takes two levels: the mapping and the schema)"
    )


class Counter:
    """A service whose methods become tools."""

    def __init__(self) -> None:
        self.total = 10

    def add(self, n: int) -> int:
        """Adds n to the total."""
        self.total += n
        return self.total


def test_a_method_taken_from_its_class_is_refused_and_a_bound_method_works():
    # tool(Class.method), or @tool in a class body, declared `self` to the model as a parameter to fill
    with pytest.raises(
        ToolDefinitionError, match=r"Counter\.add\(\) takes 'self' first: .* tool\(instance\.method\)"
    ):
        tool(Counter.add)
    with pytest.raises(ToolDefinitionError, match="takes 'self' first"):

        class Service:
            @tool
            def ping(self) -> str:
                """Pings."""
                return "pong"

    counter = Counter()
    bound = tool(counter.add)
    assert list(bound.parameters["properties"]) == ["n"]
    result = Agent(ScriptedBackend([call("add", n=5), "done"]), [counter.add]).run("?")
    assert result.tool_calls[0].content == "15" and counter.total == 15


def test_serialize_result():
    class M(BaseModel):
        a: int

    @dataclasses.dataclass
    class D:
        x: float

    assert serialize_result("plain text") == "plain text"
    assert serialize_result({"b": [1, 2], "c": None}) == '{"b":[1,2],"c":null}'
    assert serialize_result(M(a=1)) == '{"a":1}'
    assert serialize_result(D(1.5)) == '{"x":1.5}'
    assert serialize_result(None) == "null"
    assert serialize_result(datetime.date(2026, 1, 2)) == '"2026-01-02"'

    class Weird:
        def __str__(self) -> str:
            return "weird"

    assert serialize_result({"o": Weird()}) == '{"o":"weird"}'


def test_clean_schema_keeps_property_named_title():
    s = {"title": "X", "type": "object", "properties": {"title": {"title": "Title", "type": "string"}}}
    assert clean_schema(s) == {"type": "object", "properties": {"title": {"type": "string"}}}


def test_tool_decorator_keywords_reach_the_tool_and_an_unknown_one_is_refused():
    made = tool(timeout=5, retries=1, name="twice")(lambda x: 2 * x)
    assert (made.name, made.timeout, made.retries) == ("twice", 5, 1)
    with pytest.raises(TypeError, match="timout"):
        tool(timout=5)(lambda x: x)


@pytest.mark.parametrize(
    "ref, where",
    [("http://example.com/s.json", "properties/x"), ("#/$defs/nope", "properties/x/items")],
)
def test_a_ref_that_cannot_resolve_is_refused_at_definition(ref, where):
    # it used to pass, then end the run with referencing's Unresolvable at the tool's first call (on a
    # backend without the constraint check: openai, scripted; an MCP server's schema)
    x = {"type": "array", "items": {"$ref": ref}} if ref.startswith("#") else {"$ref": ref}
    with pytest.raises(ToolDefinitionError) as info:
        Tool(lambda **k: k, name="f", parameters={"type": "object", "properties": {"x": x}})
    assert f"tool 'f': parameters at '{where}': $ref {ref!r} does not resolve" in str(info.value)


def test_a_ref_that_is_no_string_is_refused_naming_the_tool():
    # draft 4's meta-schema allows it: this was a bare SchemaError from the reference-loop checks
    params = {"$schema": "http://json-schema.org/draft-04/schema#", "properties": {"a": {"$ref": 5}}}
    with pytest.raises(ToolDefinitionError) as info:
        Tool(lambda **k: k, name="f", parameters={"type": "object", **params})
    assert "tool 'f': parameters at 'properties/a': $ref must be a string, got 5" in str(info.value)


def test_a_ref_left_to_resolve_at_call_time_is_a_tool_error_not_a_crash():
    from agentkit.backends.scripted import ScriptedBackend, answer, call

    # a nested $id: where the reference points depends on it, so it is left to jsonschema at call time
    params = {
        "type": "object",
        "properties": {"x": {"$id": "http://example.com/x.json", "$ref": "other.json"}},
    }
    tool = Tool(lambda **k: "ran", name="f", parameters=params)
    result = Agent(ScriptedBackend([call("f", x=1), answer("done")]), [tool]).run("go")
    record = result.tool_calls[0]
    assert (record.error_kind, result.answer) == ("invalid_arguments", "done")
    assert "does not resolve" in record.content and "other.json" in record.content


def test_parameters_must_fit_the_function_called_with_them():
    def send(to: str, ctx: ToolContext, body: str = "") -> str:
        return to

    schema = {"type": "object", "properties": {"to": {"type": "string"}, "body": {"type": "string"}}}
    with pytest.raises(ToolDefinitionError, match=r"send\(\) needs 'to', which parameters does not list"):
        Tool(send, parameters=schema)
    with pytest.raises(
        ToolDefinitionError, match=r"declares 'cc', which send\(\) does not take \(its parameters: to, body\)"
    ):
        Tool(
            send, parameters={**schema, "properties": {**schema["properties"], "cc": {}}, "required": ["to"]}
        )
    fits = Tool(send, parameters={**schema, "required": ["to"]})  # the ToolContext parameter is not declared
    assert fits.parameters["required"] == ["to"]


def test_a_partial_is_described_by_its_function_and_its_bound_keywords_stay_fixed():
    import functools

    def search(query: str, api_key: str, limit: int = 3) -> str:
        """Search the web.

        Args:
            query: What to search for.
            api_key: The service's key.
            limit: How many hits.
        """
        return f"{query}:{api_key}:{limit}"

    t = tool(functools.partial(search, api_key="SECRET-123"))
    # was: name 'partial', the description of functools.partial itself, untyped parameters, and the key
    # declared to the model as a default it could replace
    assert (t.name, t.description) == ("search", "Search the web.")
    assert t.parameters["properties"] == {
        "query": {"description": "What to search for.", "type": "string"},
        "limit": {"default": 3, "description": "How many hits.", "type": "integer"},
    }
    assert "SECRET" not in json.dumps(t.declaration())
    with pytest.raises(ToolArgumentsError, match="api_key"):
        t.validate({"query": "x", "api_key": "other"})
    assert t(query="x") == "x:SECRET-123:3"


def test_a_callable_object_is_described_by_its_call_method():
    class Store:
        def __call__(self, item: str) -> str:
            """Look an item up.

            Args:
                item: The item's name.
            """
            return item

    t = tool(Store())
    assert (t.name, t.description) == ("Store", "Look an item up.")
    assert t.parameters["properties"]["item"] == {"description": "The item's name.", "type": "string"}


def test_a_parameters_schema_that_allows_other_properties_still_refuses_what_the_function_cannot_take():
    open_schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}

    @tool(parameters=open_schema)
    def only_a(a):
        """Take a."""
        return a

    @tool(parameters=open_schema)
    def any_more(a, **rest):
        """Take a and anything else."""
        return [a, rest]

    with pytest.raises(ToolArgumentsError, match=r"^b: unknown argument; c: unknown argument$"):
        only_a.validate({"a": 1, "b": 2, "c": 3})
    assert only_a.validate({"a": 1}) == {"a": 1}
    assert any_more.validate({"a": 1, "b": 2}) == {"a": 1, "b": 2}  # **rest takes them


def test_arrays_in_a_result_are_sent_whole_as_json_lists():
    # str() of a numpy array over 1,000 items elides its middle with "...": the values would be lost
    assert serialize_result(np.arange(2000)) == json.dumps(list(range(2000)), separators=(",", ":"))
    assert serialize_result({"m": np.eye(2, dtype=np.float32), "n": np.int64(3), "ok": np.bool_(True)}) == (
        '{"m":[[1.0,0.0],[0.0,1.0]],"n":3,"ok":true}'
    )
    assert serialize_result({"t": torch.tensor([1.5, 2.0]), "a": array.array("i", [1, 2])}) == (
        '{"t":[1.5,2.0],"a":[1,2]}'
    )
    assert serialize_result(fractions.Fraction(1, 3)) == '"1/3"'  # other unknown types: str()


def test_int_keyed_dict_parameters_declare_integer_keys():
    # dict[int, str] was declared as an object of any keys, so the grammar let the model write {"a": ...}
    from agentkit.tool_schema import INT_KEY_PATTERN

    @tool
    def f(m: dict[int, str], n: dict[int, int] | None = None, k: dict[str, int] | None = None) -> str:
        """x"""
        return ""

    props = f.declaration()["function"]["parameters"]["properties"]
    int_keys = {"type": "object", "patternProperties": {INT_KEY_PATTERN: {"type": "string"}}}
    assert props["m"] == {**int_keys, "additionalProperties": False}
    assert props["n"]["anyOf"][0]["patternProperties"] == {INT_KEY_PATTERN: {"type": "integer"}}
    assert props["k"]["anyOf"][0] == {"type": "object", "additionalProperties": {"type": "integer"}}
    assert f.validate({"m": {"1": "a", "-20": "b"}}) == {"m": {1: "a", -20: "b"}, "n": None, "k": None}


def test_tool_on_a_tool_changes_its_settings_and_keeps_the_rest():
    # tool(t, ...) on a Tool wrapped the Tool object itself: a tool named 'Tool', with the Tool class's docstring
    # as its description and untyped parameters
    class Q(BaseModel):
        query: str
        limit: int = 2

    @tool(args_model=Q, timeout=3, serializer=lambda v: f"n={len(v)}")
    def search(q: Q) -> list[str]:
        """Search things."""
        return [q.query] * q.limit

    again = tool(retries=1)(search)
    assert (again.name, again.description, again.timeout, again.retries) == ("search", "Search things.", 3, 1)
    assert again.parameters == search.parameters
    assert tool(name="find")(search).name == "find"
    registered = Agent(ScriptedBackend([])).tool(timeout=5)(search)  # @agent.tool(...) on a Tool, likewise
    assert (registered.name, registered.timeout, registered.parameters) == ("search", 5, search.parameters)
    result = Agent(ScriptedBackend([call("search", query="a"), "ok"]), [again]).run("q")
    assert result.tool_calls[0].content == "n=2"
    schema = {"type": "object", "properties": {"q": {"type": "object"}}, "required": ["q"]}
    assert search.replace(parameters=schema).parameters == schema  # parameters replaces args_model
    with pytest.raises(
        ToolDefinitionError, match=r"Tool\(name='search'.* is a Tool already: change its settings"
    ):
        Tool(search)


def test_unknown_keys_in_an_args_model_or_a_nested_model_are_refused():
    # pydantic ignores unknown keys by default: a misspelt optional argument ('limt') was dropped silently and
    # its default used, although the model is told that unknown arguments are refused
    class Place(BaseModel):
        city: str

    class Q(BaseModel):
        query: str
        limit: int = 2
        near: Place | None = None

    class Open(BaseModel):
        model_config = {"extra": "allow"}
        a: int

    by_model = Tool(lambda q: q, name="m", args_model=Q)
    with pytest.raises(ToolArgumentsError, match=r"^limt: unknown argument$"):
        by_model.validate({"query": "x", "limt": 5})
    with pytest.raises(ToolArgumentsError, match=r"^near\.town: unknown argument$"):
        by_model.validate({"query": "x", "near": {"city": "Oslo", "town": "y"}})
    assert by_model.parameters["additionalProperties"] is False
    assert by_model.parameters["$defs"]["Place"]["additionalProperties"] is False

    @tool
    def f(place: Place, o: Open | None = None) -> str:
        """x"""
        return place.city

    assert f.validate({"place": {"city": "a"}, "o": {"a": 1, "b": 2}})["o"].b == 2  # Open allows its own
    assert f.parameters["$defs"]["Open"]["additionalProperties"] is True

    class Counts(pydantic.RootModel[dict[str, int]]):
        pass

    @tool
    def g(c: Counts) -> int:
        """x"""
        return len(c.root)

    assert g.parameters["$defs"]["Counts"] == {"type": "object", "additionalProperties": {"type": "integer"}}
    assert g.validate({"c": {"a": 1}})["c"].root == {"a": 1}


def test_a_dataclass_or_typed_dict_that_sets_extra_keeps_it():
    # only models were read for their own `extra`: a pydantic dataclass or TypedDict set to extra="allow" (declared
    # additionalProperties: true) had its keys refused by the forbid override, and an unset dataclass was refused
    # them while declared open
    @pydantic.dataclasses.dataclass(config=pydantic.ConfigDict(extra="allow"))
    class Open:
        a: int

    class Loose(typing_extensions.TypedDict):
        __pydantic_config__ = pydantic.ConfigDict(extra="allow")  # type: ignore[misc]
        a: int

    @pydantic.dataclasses.dataclass
    class Shut:
        a: int

    @tool
    def f(o: Open, t: Loose, s: Shut | None = None) -> int:
        """x"""
        return o.a

    got = f.validate({"o": {"a": 1, "b": 2}, "t": {"a": 3, "c": 4}})
    assert (got["o"].a, got["t"]) == (1, {"a": 3, "c": 4})
    defs = f.parameters["$defs"]
    assert [defs[k]["additionalProperties"] for k in ("Open", "Loose", "Shut")] == [True, True, False]

    @tool
    def g(s: Shut) -> int:
        """x"""
        return s.a

    with pytest.raises(ToolArgumentsError, match=r"^s\.b: "):
        g.validate({"s": {"a": 1, "b": 2}})


def test_a_set_parameter_is_an_array_an_embedded_agent_takes():
    # set[str] was declared uniqueItems: true, which the embedded constraint refuses, so the tool could not be
    # used on the default backend although validation merely drops duplicates
    @tool
    def tag(tags: set[str], ids: frozenset[int] = frozenset()) -> list[str]:
        """x"""
        return sorted(tags)

    props = tag.parameters["properties"]
    assert props["tags"] == {"type": "array", "items": {"type": "string"}}
    assert "uniqueItems" not in props["ids"]
    Agent(EmbeddedBackend(), tools=[tag])  # no ToolDefinitionError
    assert tag.validate({"tags": ["a", "a", "b"]}) == {"tags": {"a", "b"}, "ids": frozenset()}


def test_a_circular_result_is_an_error_that_says_so():
    # the retry that decodes nested bytes recursed forever: the model was told "RecursionError: maximum recursion
    # depth exceeded" instead of pydantic's own reason
    loop: list = [1]
    loop.append(loop)

    @tool
    def circular() -> list:
        """x"""
        return loop

    record = Agent(ScriptedBackend([call("circular"), "ok"]), [circular]).run("q").tool_calls[0]
    assert record.error_kind == "exception"
    assert json.loads(record.content)["error"] == (
        "PydanticSerializationError: Error serializing to JSON: ValueError: Circular reference detected (id repeated)"
    )


@pytest.mark.parametrize(
    "doc",
    [
        "\n    Args:\n        city: City name.\n        days: Days ahead.\n    ",
        "Parameters\n----------\ncity : str\n    City name.\ndays : int\n    Days ahead.",
        ":param city: City name.\n:param days: Days ahead.",
    ],
)
def test_a_docstring_that_opens_with_its_parameters_describes_them(doc):
    # griffe reads a docstring's first line as its summary: the whole Args: section became the tool's description
    # ("Args:\ncity: City name. ...") and the parameters had none
    def f(city: str, days: int = 1) -> str:
        return city

    f.__doc__ = doc
    t = Tool(f)
    assert t.description == ""
    assert {k: v.get("description") for k, v in t.parameters["properties"].items()} == {
        "city": "City name.",
        "days": "Days ahead.",
    }


@pytest.mark.parametrize(
    "defs, where, chain",
    [
        (
            {"A": {"$ref": "#/$defs/B"}, "B": {"$ref": "#/$defs/A"}},
            "$defs/A",
            "#/$defs/B -> #/$defs/A -> #/$defs/B",
        ),
        (
            {"A": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/A"}]}},
            "$defs/A/anyOf/1",
            "#/$defs/A -> #/$defs/A",
        ),
    ],
)
def test_a_ref_loop_that_reaches_no_property_or_item_is_refused_at_definition(defs, where, chain):
    # it used to pass, then agent.run() ended in jsonschema's RecursionError at the tool's first call (and the
    # embedded backend wrote a call that could not parse)
    params = {"type": "object", "$defs": defs, "properties": {"x": {"$ref": "#/$defs/A"}}, "required": ["x"]}
    with pytest.raises(ToolDefinitionError) as info:
        Tool(lambda **k: k, name="f", parameters=params)
    assert f"tool 'f': parameters at '{where}': $ref '#/$defs/" in str(info.value)
    assert f"leads into a loop of references that reaches no property or item ({chain})" in str(info.value)


def test_a_draft_7_loop_beside_a_ref_is_ignored_as_jsonschema_ignores_it():
    # drafts 4 to 7 ignore the keywords beside a $ref: this was refused as a loop jsonschema never follows
    a = {"$ref": "#/definitions/S", "anyOf": [{"$ref": "#/properties/a"}]}
    params = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {"a": a},
        "definitions": {"S": {"type": "string"}},
    }
    made = Tool(lambda **k: k, name="f", parameters=params)
    assert made.validate({"a": "x"}) == {"a": "x"}
    with pytest.raises(ToolArgumentsError, match="is not of type 'string'"):
        made.validate({"a": 5})


def test_a_ref_that_recurses_through_a_property_is_still_a_tool():
    node = {"type": "object", "properties": {"v": {"type": "integer"}, "next": {"$ref": "#/$defs/Node"}}}
    params = {"type": "object", "$defs": {"Node": node}, "properties": {"x": {"$ref": "#/$defs/Node"}}}
    made = Tool(lambda **k: k, name="f", parameters=params)
    assert made.validate({"x": {"v": 1, "next": {"v": 2}}}) == {"x": {"v": 1, "next": {"v": 2}}}


def _node_tool(node: dict, required: bool = True) -> dict:
    """Parameters with one property ``node`` (required unless told) of the definition ``Node``."""
    ref = {"$ref": "#/$defs/Node"}
    return {
        "type": "object",
        "$defs": {"Node": node},
        "properties": {"node": ref},
        "required": ["node"] * required,
    }


_NEXT = {"type": "object", "properties": {"v": {"type": "integer"}, "next": {"$ref": "#/$defs/Node"}}}


@pytest.mark.parametrize(
    "params, where, why",
    [
        (
            _node_tool({**_NEXT, "required": ["v", "next"]}),
            "$defs/Node",
            "every value of it needs a 'next' that is again a Node: no finite value satisfies it (make 'next' "
            "optional or allow null)",
        ),
        (  # the loop runs through two definitions
            {
                "type": "object",
                "$defs": {
                    "A": {"type": "object", "properties": {"b": {"$ref": "#/$defs/B"}}, "required": ["b"]},
                    "B": {"type": "object", "properties": {"a": {"$ref": "#/$defs/A"}}, "required": ["a"]},
                },
                "properties": {"x": {"$ref": "#/$defs/A"}},
                "required": ["x"],
            },
            "$defs/A",
            "every value of it needs a 'b' that is a B, which needs an 'a' that is again an A: no finite value "
            "satisfies it (make 'b' optional or allow null)",
        ),
        (  # the root itself
            {"type": "object", "properties": {"next": {"$ref": "#"}}, "required": ["next"]},
            "",
            "every value of it needs a 'next' that is again the whole schema: no finite value satisfies it",
        ),
        (  # every anyOf branch recurses
            _node_tool(
                {
                    "anyOf": [
                        {**_NEXT, "required": ["next"]},
                        {"type": "array", "items": {"$ref": "#/$defs/Node"}, "minItems": 2},
                    ]
                }
            ),
            "$defs/Node",
            "every value of it matches one of its anyOf branches, each without a finite value; the first needs "
            "a 'next' that is again a Node: no finite value satisfies it (give its anyOf a branch that does not "
            "recurse)",
        ),
        (  # an array that needs an item
            _node_tool(
                {
                    "type": "object",
                    "properties": {
                        "kids": {"type": "array", "items": {"$ref": "#/$defs/Node"}, "minItems": 1}
                    },
                    "required": ["kids"],
                }
            ),
            "$defs/Node",
            "every value of it needs a 'kids' that needs at least 1 item, the first of which is again a Node",
        ),
    ],
)
def test_a_schema_that_only_recursion_could_satisfy_is_refused_at_definition(params, where, why):
    # agentkit check said ok; a forced call ended in "found no completion shorter than 4096 tokens" and with
    # tool_choice auto the tool was silently never called
    with pytest.raises(ToolDefinitionError) as info:
        Tool(lambda **k: k, name="f", parameters=params)
    at = f" at '{where}'" if where else ""
    assert f"tool 'f': parameters{at}: {why}" in str(info.value)


class _Endless(BaseModel):
    v: int
    next: "_Endless"


class _Linked(BaseModel):
    v: int
    next: "_Linked | None" = None


def test_a_pydantic_model_that_needs_itself_is_refused_and_one_with_an_end_is_a_tool():
    def walk(n: _Endless) -> int:
        return n.v

    with pytest.raises(ToolDefinitionError) as info:
        tool(walk)
    assert str(info.value) == (
        "tool 'walk': parameters at '$defs/_Endless': every value of it needs a 'next' that is again a _Endless: "
        "no finite value satisfies it (make 'next' optional or allow null)"
    )

    def follow(n: _Linked) -> int:
        return n.v

    assert tool(follow).validate({"n": {"v": 1, "next": {"v": 2}}}) == {"n": _Linked(v=1, next=_Linked(v=2))}


@pytest.mark.parametrize(
    "params",
    [
        _node_tool({**_NEXT, "required": ["v"]}),  # next optional
        _node_tool({**_NEXT, "type": ["object", "null"], "required": ["v", "next"]}),  # a null ends it
        _node_tool({**_NEXT, "nullable": True, "required": ["v", "next"]}),  # OpenAPI's null
        _node_tool(  # next may be null
            {
                "type": "object",
                "properties": {"next": {"anyOf": [{"$ref": "#/$defs/Node"}, {"type": "null"}]}},
                "required": ["next"],
            }
        ),
        _node_tool({"anyOf": [{"type": "integer"}, {**_NEXT, "required": ["next"]}]}),  # a base case
        _node_tool({"oneOf": [{"type": "integer"}, {**_NEXT, "required": ["next"]}]}),
        _node_tool(  # an empty array of Nodes
            {
                "type": "object",
                "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/Node"}, "minItems": 0}},
                "required": ["kids"],
            }
        ),
        _node_tool({"properties": {"next": {"$ref": "#/$defs/Node"}}, "required": ["next"]}),  # 1 is a value
        _node_tool({**_NEXT, "required": ["v", "next"], "enum": [1]}),  # enum: not looked into
        _node_tool({**_NEXT, "required": ["v", "next"]}, required=False),  # {} calls the tool
        {  # draft 7 ignores the keywords beside a $ref: x is any object
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "definitions": {"B": {"type": "object"}},
            "properties": {
                "x": {
                    "$ref": "#/definitions/B",
                    "required": ["n"],
                    "properties": {"n": {"$ref": "#/properties/x"}},
                }
            },
            "required": ["x"],
        },
    ],
)
def test_a_recursive_schema_with_a_finite_value_is_still_a_tool(params):
    assert Tool(lambda **k: k, name="f", parameters=params).parameters == params


def test_a_long_loop_of_definitions_is_named_by_its_start_and_end():
    defs = {
        f"D{i}": {"type": "object", "properties": {"n": {"$ref": f"#/$defs/D{(i + 1) % 50}"}}}
        for i in range(50)
    }
    params = {"type": "object", "$defs": defs, "properties": {"x": {"$ref": "#/$defs/D0"}}, "required": ["x"]}
    for d in defs.values():
        d["required"] = ["n"]
    with pytest.raises(ToolDefinitionError) as info:
        Tool(lambda **k: k, name="f", parameters=params)
    assert str(info.value) == (
        "tool 'f': parameters at '$defs/D0': every value of it needs a 'n' that is a D1, which needs a 'n' that is "
        "a D2, which ... (47 more) ..., which needs a 'n' that is again a D0: no finite value satisfies it (make "
        "'n' optional or allow null)"
    )


def test_a_hint_naming_a_class_local_to_the_defining_function_resolves():
    # as `from __future__ import annotations` writes every hint: `item: Item` with Item defined in this function
    # was "cannot resolve the type hints of add: name 'Item' is not defined" (Pydantic resolves it for a model)
    class Item(BaseModel):
        name: str

    def add(item: "Item", n: "int" = 1) -> str:
        """Add an item."""
        return f"{type(item).__name__} {item.name} {n}"

    backend = ScriptedBackend([call("add", item={"name": "x"}), "ok"])
    result = Agent(backend, [add]).run("q")
    assert result.tool_calls[0].content == "Item x 1"
    assert tool(add).parameters["properties"]["item"] == {"$ref": "#/$defs/Item"}

    def missing(item: "NoSuchItem") -> str:  # type: ignore[name-defined]  # noqa: F821
        """Refused."""
        return ""

    with pytest.raises(ToolDefinitionError, match="name 'NoSuchItem' is not defined"):
        tool(missing)


def test_a_docstring_that_opens_with_its_args_section_keeps_the_parameter_descriptions():
    # inspect.getdoc dedents the lines under a first-line "Args:" to its level, so griffe read no parameter and the
    # whole section became the tool's description: 'Args:\na: Row count.'
    def rows(a: int, b: str = "") -> str:
        """Args:
        a: Row count.
        b: Table name,
            e.g. "users".
        """
        return ""

    t = tool(rows)
    assert t.description == ""
    assert t.parameters["properties"]["a"]["description"] == "Row count."
    assert t.parameters["properties"]["b"]["description"] == 'Table name, e.g. "users".'


class Shadowed(BaseModel):
    a: int


def _takes_shadowed(item: "Shadowed", n: "Count") -> str:  # type: ignore[name-defined]  # noqa: F821
    """Take one."""
    return ""


def test_a_callers_local_name_never_hides_the_tool_modules_own():
    # the caller's `Shadowed` replaced this module's when the hints were resolved: {"b": string}, not {"a": int}
    class Shadowed(BaseModel):
        b: str

    Count = int  # read by the hint of _takes_shadowed, missing from this module
    params = tool(_takes_shadowed).parameters
    assert params["$defs"]["Shadowed"]["properties"] == {"a": {"type": "integer"}}
    assert params["properties"]["n"] == {"type": "integer"}

    def local(item: "Shadowed", n: "Count") -> str:  # defined here: the local class is the one it names
        """Take one."""
        return ""

    assert tool(local).parameters["$defs"]["Shadowed"]["properties"] == {"b": {"type": "string"}}
