"""``agentkit serve`` used by real clients: the official openai SDK, pydantic-ai, and agentkit's own openai
backend running the example bundles. A real server on 127.0.0.1 (ephemeral port) over the embedded default
checkpoint; every tool call's arguments must parse and validate against the request's schema."""

from __future__ import annotations

import json

import jsonschema
import pytest
from serve_helpers import ADD, WEATHER, running_server


@pytest.fixture(scope="module")
def base_url(engine):
    with running_server(engine) as (url, _):
        yield url


@pytest.fixture(scope="module")
def client(base_url):
    openai = pytest.importorskip("openai")
    with openai.OpenAI(base_url=base_url + "/v1", api_key="not-needed", max_retries=0, timeout=120) as c:
        yield c


def _valid(call, tool) -> dict:
    args = json.loads(call.function.arguments)
    jsonschema.validate(args, tool["function"]["parameters"])
    return args


def test_models_and_plain_chat(client):
    assert [m.id for m in client.models.list().data] == ["agentkit-tiny"]
    r = client.chat.completions.create(
        model="agentkit-tiny", messages=[{"role": "user", "content": "Hello there"}], seed=1
    )
    choice = r.choices[0]
    assert choice.finish_reason == "stop" and choice.message.tool_calls is None
    assert isinstance(choice.message.content, str) and choice.message.content.strip()
    assert (
        r.usage.prompt_tokens > 0
        and r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    )


def test_a_model_is_retrieved_by_its_id(client):
    import openai

    card = client.models.retrieve("agentkit-tiny")  # GET /v1/models/{id}: was a bare 404 "Not Found"
    assert (card.id, card.object, card.owned_by) == ("agentkit-tiny", "model", "agentkit")
    with pytest.raises(openai.NotFoundError) as info:
        client.models.retrieve("gpt-4o")
    assert info.value.code == "model_not_found" and "agentkit-tiny" in info.value.message


def test_stream_chunks_carry_openais_null_fields(base_url):
    # OpenAI writes finish_reason and logprobs on every chunk's choice (null until the end), and, with
    # include_usage, "usage": null on every chunk but the last; clients reading the JSON directly index them
    import httpx

    body = {
        "model": "agentkit-tiny",
        "messages": [{"role": "user", "content": "Hello there"}],
        "seed": 5,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with httpx.stream("POST", base_url + "/v1/chat/completions", json=body, timeout=120) as r:
        lines = [line[len("data: ") :] for line in r.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    chunks = [json.loads(line) for line in lines[:-1]]
    for c in chunks[:-2]:
        assert c["usage"] is None and c["choices"][0]["finish_reason"] is None, c
        assert c["choices"][0]["logprobs"] is None and c["object"] == "chat.completion.chunk", c
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop" and chunks[-2]["usage"] is None
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] > 0


def test_tool_choice_required_and_named_give_valid_calls(client):
    tools = [WEATHER, ADD]
    r = client.chat.completions.create(
        model="agentkit-tiny",
        messages=[{"role": "user", "content": "What is the weather in Berlin?"}],
        tools=tools,
        tool_choice="required",
        seed=0,
    )
    calls = r.choices[0].message.tool_calls
    assert r.choices[0].finish_reason == "tool_calls" and calls
    by_name = {t["function"]["name"]: t for t in tools}
    for c in calls:
        _valid(c, by_name[c.function.name])
    for name in ("add", "get_weather"):
        r = client.chat.completions.create(
            model="agentkit-tiny",
            messages=[{"role": "user", "content": "What is 17 plus 25?"}],
            tools=tools,
            tool_choice={"type": "function", "function": {"name": name}},
            seed=3,
        )
        calls = r.choices[0].message.tool_calls
        assert calls and all(c.function.name == name for c in calls)
        for c in calls:
            _valid(c, by_name[name])


def test_response_format_json_schema_and_json_object(client):
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1, "maximum": 7}},
        "required": ["city", "days"],
        "additionalProperties": False,
    }
    r = client.chat.completions.create(
        model="agentkit-tiny",
        messages=[{"role": "user", "content": "Forecast for Paris for 3 days, as JSON"}],
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "f", "schema": schema, "strict": True},
        },
        max_tokens=64,
        seed=2,
    )
    value = json.loads(r.choices[0].message.content)
    jsonschema.validate(value, schema)
    r = client.chat.completions.create(
        model="agentkit-tiny",
        messages=[{"role": "user", "content": "Any JSON object"}],
        response_format={"type": "json_object"},
        max_tokens=64,
        seed=2,
    )
    assert isinstance(json.loads(r.choices[0].message.content), dict)


_AFTER_A_RESULT = [
    {"role": "user", "content": "What is the weather in Berlin?"},
    {
        "role": "assistant",
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Berlin"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": '{"city": "Berlin", "temperature": 4.0}'},
]


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize(
    "messages",
    [[{"role": "user", "content": "Tell me a joke."}], _AFTER_A_RESULT],
    ids=["small-talk", "after-a-result"],
)
def test_response_format_with_tools_answers_in_json_where_the_model_would_answer(client, seed, messages):
    """Under ``auto`` a request the checkpoint answers in prose without ``response_format`` is answered in JSON
    with it, not with a call: the prose it would write votes for the JSON answer (docs/SERVING.md). Without the
    vote it called ``get_weather`` again after the tool's result, so a client's loop never ended."""
    kwargs = dict(model="agentkit-tiny", messages=messages, tools=[WEATHER], max_tokens=64, seed=seed)
    plain = client.chat.completions.create(**kwargs).choices[0]
    assert not plain.message.tool_calls  # the model's own choice: an answer
    r = client.chat.completions.create(**kwargs, response_format={"type": "json_object"}).choices[0]
    assert not r.message.tool_calls and r.finish_reason == "stop"
    assert isinstance(json.loads(r.message.content), dict)


def test_streaming_matches_the_non_streamed_answer(client):
    kwargs = dict(model="agentkit-tiny", messages=[{"role": "user", "content": "Hello there"}], seed=5)
    whole = client.chat.completions.create(**kwargs)
    chunks = list(
        client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kwargs)
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["stop"]
    assert (
        chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    )


def test_streamed_tool_calls_arrive_whole_and_validate(client):
    kwargs = dict(
        model="agentkit-tiny",
        messages=[{"role": "user", "content": "What is the weather in Paris?"}],
        tools=[WEATHER],
        tool_choice="required",
        seed=4,
    )
    whole = client.chat.completions.create(**kwargs)
    with client.chat.completions.stream(**kwargs) as stream:
        final = stream.get_final_completion()
    got = final.choices[0].message.tool_calls
    want = whole.choices[0].message.tool_calls
    assert [(c.function.name, json.loads(c.function.arguments)) for c in got] == [
        (c.function.name, json.loads(c.function.arguments)) for c in want
    ]
    for c in got:
        _valid(c, WEATHER)
    assert final.choices[0].finish_reason == "tool_calls"


def test_pydantic_ai_agent_gets_a_valid_tool_call(base_url):
    pytest.importorskip("openai")
    from pydantic import BaseModel
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    class Forecast(BaseModel):
        city: str
        days: int

    model = OpenAIChatModel("agentkit-tiny", provider=OpenAIProvider(base_url=base_url + "/v1", api_key="x"))
    agent = Agent(model, output_type=Forecast, retries=0)
    result = agent.run_sync("Forecast for Paris for 3 days")
    assert isinstance(result.output, Forecast)  # the output tool's arguments validated on the first try
    calls = [p for m in result.all_messages() for p in getattr(m, "parts", []) if p.part_kind == "tool-call"]
    assert calls and calls[-1].tool_name == "final_result"


def _openai_backend(base_url):
    """agentkit's own openai backend on the test server."""
    from agentkit.backends import make_backend

    return make_backend(
        "openai", "agentkit-tiny", base_url=base_url + "/v1", api_key="x", settings={"seed": 0}
    )


def test_agentkit_openai_backend_runs_the_weather_bundle(base_url):
    from example_bots import ask_weather, tool_calls

    from tools import weather

    result = ask_weather(_openai_backend(base_url))
    calls = tool_calls(result)
    assert calls and calls[0].name == "get_current_weather"
    assert weather.CurrentWeatherArgs(**calls[0].arguments).model_dump() == {
        "place": "Berlin",
        "units": "metric",
    }
    assert calls[0].error is None and calls[0].result["temperature"] == 4.0
    assert result.answer


def test_agentkit_openai_backend_runs_the_code_search_bundle(base_url):
    from example_bots import ask_code_search, tool_calls

    result = ask_code_search(_openai_backend(base_url))
    calls = tool_calls(result)
    assert calls and calls[0].name == "find_definition" and calls[0].error is None
    assert calls[0].arguments["name"] == "load_bundle"
    assert calls[0].result["matches"][0]["location"].startswith("agentkit/bundle.py:")
    assert result.answer
