"""``agentkit serve`` as OpenAI's API behaves on the wire: the nulls it takes, the 400s of a request that does
not fit or answers no tool call, a body that is no JSON object, a route it does not serve; each error names its
cause the way a client wrote the request."""

from __future__ import annotations

import json

import httpx
import jsonschema
import pytest
from serve_helpers import CHECKPOINT, MODEL, WEATHER, chat_body, running_server


@pytest.fixture(scope="module")
def server(engine):
    with running_server(engine, max_body_bytes=64 * 1024) as (url, app):
        yield url, app


def test_a_max_tokens_over_the_context_says_what_fits(server):
    # the message spoke of max_new_tokens (a field no client sends) and said "lower ..." twice
    url, _ = server
    small = httpx.post(url + "/v1/chat/completions", json=chat_body(max_tokens=2), timeout=60).json()
    prompt = small["usage"]["prompt_tokens"]
    for n in (2000, 5000):
        err = httpx.post(url + "/v1/chat/completions", json=chat_body(max_tokens=n)).json()["error"]
        fits = (2048 - prompt) // 64 * 64
        assert err["message"] == (
            f"max_tokens={n} does not fit with this prompt: the prompt is {prompt} tokens of this model's "
            f"2,048 positions, and max_tokens is counted in whole canvases of 64 tokens; lower max_tokens "
            f"to {fits:,} or less"
        )
    # a prompt too long for any budget is the messages' fault, whatever max_tokens says
    r = httpx.post(url + "/v1/chat/completions", json=chat_body(q="word " * 2100, max_tokens=5000))
    err = r.json()["error"]
    assert (r.status_code, err["param"], err["code"]) == (400, "messages", "context_length_exceeded")
    assert err["message"].endswith(
        "but this model takes at most 1,984 (2,048 positions minus one canvas of 64 tokens to answer in)"
    ), err


def test_a_prompt_over_the_default_budget_says_a_max_tokens_fits(server):
    # without max_tokens the budget is the server's default (256 tokens): a prompt that fits beside a smaller
    # one was refused with "this model takes at most 1,792", though max_tokens=64 serves it
    url, _ = server
    r = httpx.post(url + "/v1/chat/completions", json=chat_body(q="word " * 1850))
    err = r.json()["error"]
    assert (r.status_code, err["param"], err["code"]) == (400, "messages", "context_length_exceeded")
    prompt = int(err["message"].split()[3].replace(",", ""))
    assert err["message"] == (
        f"the prompt is {prompt:,} tokens but this model takes at most 1,792 (2,048 positions minus a "
        "generation budget of 256 tokens); that budget is this server's default: a max_tokens of at most "
        f"{(2048 - prompt) // 64 * 64} fits this prompt"
    )


def test_nulls_openai_allows_are_the_defaults(server):
    # OpenAI's API takes null for n, stream and stream_options.include_usage (the defaults); clients that
    # write every field out send them so
    url, _ = server
    body = chat_body(max_tokens=4, n=None, stream=None, stream_options=None, seed=1)
    r = httpx.post(url + "/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 200 and r.json()["object"] == "chat.completion", r.text
    body = chat_body(max_tokens=4, stream=True, stream_options={"include_usage": None}, seed=1)
    r = httpx.post(url + "/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 200 and r.text.rstrip().endswith("data: [DONE]"), r.text
    assert '"usage":{' not in r.text  # include_usage null: no usage chunk
    tool = {"type": "function", "function": {"name": "ping", "description": None, "parameters": None}}
    r = httpx.post(
        url + "/v1/chat/completions", json=chat_body(tools=[tool], tool_choice="required"), timeout=60
    )
    call = r.json()["choices"][0]["message"]["tool_calls"][0]["function"]
    assert (call["name"], call["arguments"]) == ("ping", "{}"), r.text
    r = httpx.post(url + "/v1/chat/completions", json=chat_body(n=2), timeout=60)
    assert (r.status_code, r.json()["error"]["param"]) == (400, "n")


@pytest.mark.parametrize("stream", [False, None, "absent"])
def test_stream_options_without_stream_is_a_400_as_on_openai(server, stream):
    # it was accepted silently; OpenAI refuses it, naming the field
    url, _ = server
    body = chat_body(max_tokens=4, stream_options={"include_usage": True})
    if stream != "absent":
        body["stream"] = stream
    r = httpx.post(url + "/v1/chat/completions", json=body, timeout=60)
    assert r.json() == {
        "error": {
            "message": "stream_options is only allowed when stream is true",
            "type": "invalid_request_error",
            "param": "stream_options",
            "code": None,
        }
    }
    assert r.status_code == 400


def test_a_schema_whose_shortest_value_overflows_the_context_is_named(server):
    # a forced call (or a response_format value) of 1,000 integers cannot fit: the budget was raised past the
    # context, and the error blamed max_tokens ("lower max_tokens to 1,984", with max_tokens=64) or
    # max_new_tokens (a field no client sends)
    url, _ = server
    ints = {
        "type": "object",
        "properties": {"x": {"type": "array", "items": {"type": "integer"}, "minItems": 1000}},
        "required": ["x"],
    }
    tool = {"type": "function", "function": {"name": "f", "parameters": ints}}
    rf = {"type": "json_schema", "json_schema": {"name": "r", "schema": ints}}
    cases = [
        (chat_body(tools=[tool], tool_choice="required", max_tokens=64), "tools", "tool call"),
        (
            chat_body(tools=[tool], tool_choice={"type": "function", "function": {"name": "f"}}),
            "tools",
            "tool call",
        ),
        (chat_body(response_format=rf), "response_format", "response_format value"),
    ]
    for body, param, what in cases:
        r = httpx.post(url + "/v1/chat/completions", json=body, timeout=60)
        err = r.json()["error"]
        assert (r.status_code, err["param"], err["code"]) == (400, param, "context_length_exceeded"), r.text
        assert err["message"].startswith(f"the shortest {what} the request's schema allows needs "), err
        assert "max_new_tokens" not in err["message"] and "lower max_tokens" not in err["message"], err


def test_a_schema_with_no_short_value_has_one_code_for_tools_and_response_format(server):
    # a tool no call of which can finish was code unsupported_schema, the same schema as response_format null
    url, _ = server
    loop = {
        "type": "object",
        "properties": {"next": {"$ref": "#"}, "v": {"type": "integer"}},
        "required": ["next"],
    }
    tool = {"type": "function", "function": {"name": "f", "parameters": loop}}
    rf = {"type": "json_schema", "json_schema": {"name": "r", "schema": loop}}
    for body, param in (
        (chat_body(tools=[tool]), "tools[0].function.parameters"),
        (chat_body(response_format=rf), "response_format"),
    ):
        err = httpx.post(url + "/v1/chat/completions", json=body, timeout=60).json()["error"]
        assert (err["param"], err["code"]) == (param, "unsupported_schema"), err


def test_a_pattern_properties_tool_with_min_properties_is_called(server):
    # refused with "no call of this tool fits in 4096 tokens": a patternProperties key may hold ':' (a:b), and the
    # shortest-call search never took the ':' before the value as the way out of the key
    url, _ = server
    params = {
        "type": "object",
        "properties": {
            "tags": {
                "type": "object",
                "patternProperties": {"^[a-z]": {"type": "string"}},
                "minProperties": 1,
                "additionalProperties": False,
            }
        },
        "required": ["tags"],
    }
    tool = {"type": "function", "function": {"name": "tag", "parameters": params}}
    body = chat_body(q="Tag it", tools=[tool], tool_choice="required", max_tokens=64, seed=3)
    r = httpx.post(url + "/v1/chat/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    call = r.json()["choices"][0]["message"]["tool_calls"][0]["function"]
    jsonschema.validate(json.loads(call["arguments"]), params)


def test_more_tools_than_openai_takes_are_a_400_before_any_grammar_is_built(server, monkeypatch):
    # 3,000 tools took about 10 s of server CPU to refuse: each tool's grammar was compiled first
    url, app = server
    built = []
    monkeypatch.setattr(app.state.engine.chat_model, "make_constraint", lambda *a, **k: built.append(a))
    tools = [
        {
            "type": "function",
            "function": {"name": f"t{i}", "parameters": {"type": "object", "properties": {}}},
        }
        for i in range(129)
    ]
    r = httpx.post(url + "/v1/chat/completions", json=chat_body(tools=tools), timeout=60)
    err = r.json()["error"]
    assert (r.status_code, err["param"]) == (400, "tools"), r.text
    assert "at most 128" in err["message"], err
    assert built == []


def test_tool_calls_left_unanswered_are_a_400_as_on_openai(server):
    # they used to reach the model, which answered "" with finish_reason "length"
    url, _ = server
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
    }
    user = {"role": "user", "content": "Weather in Oslo?"}
    asked = {"role": "assistant", "content": None, "tool_calls": [call, {**call, "id": "c2"}]}
    answer = {"role": "tool", "tool_call_id": "c1", "content": "sunny"}
    for messages, missing in (([user, asked], "'c1', 'c2'"), ([user, asked, answer, user], "'c2'")):
        r = httpx.post(url + "/v1/chat/completions", json=chat_body(messages=messages, tools=[WEATHER]))
        err = r.json()["error"]
        assert (r.status_code, err["param"]) == (400, "messages[1].tool_calls"), r.text
        assert err["message"] == (
            "messages[1]: an assistant message with 'tool_calls' must be followed by tool messages answering "
            f"each tool_call_id; not answered: {missing}"
        )
    messages = [user, asked, answer, {**answer, "tool_call_id": "c2"}]
    r = httpx.post(
        url + "/v1/chat/completions",
        json=chat_body(messages=messages, tools=[WEATHER], max_tokens=8),
        timeout=60,
    )
    assert r.status_code == 200, r.text


def test_two_tool_calls_with_one_id_are_a_400(server):
    # one tool message answered both, so the second call's answer was never asked for: a 200
    url, _ = server
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
    }
    messages = [
        {"role": "user", "content": "Weather in Oslo and Rome?"},
        {"role": "assistant", "content": None, "tool_calls": [call, call]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ]
    r = httpx.post(url + "/v1/chat/completions", json=chat_body(messages=messages, tools=[WEATHER]))
    err = r.json()["error"]
    assert (r.status_code, err["param"]) == (400, "messages[1].tool_calls[1].id"), r.text
    assert err["message"] == (
        "messages[1].tool_calls[1].id: 'c1' is the id of an earlier call of this message; each tool call "
        "needs its own id"
    )


def test_a_body_that_is_no_json_object_says_so(server):
    # curl -d without -H 'Content-Type: application/json' sends a form: the 400 said only "body: Input should
    # be a valid dictionary or object to extract fields from"
    url, _ = server
    body = json.dumps(chat_body())
    for content_type, sent in (
        ("application/x-www-form-urlencoded", "a body of Content-Type application/x-www-form-urlencoded"),
        ("application/json", "a JSON array"),
    ):
        content = body if content_type != "application/json" else "[1, 2]"
        r = httpx.post(url + "/v1/chat/completions", content=content, headers={"content-type": content_type})
        assert r.status_code == 400 and r.json()["error"]["message"] == (
            f"the request body must be a JSON object, sent with Content-Type: application/json; got {sent}"
        ), r.text
    # not UTF-8 (say, Latin-1): named with the byte and its offset (was one message for all three causes)
    r = httpx.post(
        url + "/v1/chat/completions",
        content='{"model": "café"}'.encode("latin-1"),
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 400 and r.json()["error"]["message"] == (
        "the request body is not UTF-8 (byte 0xe9 at offset 14); send JSON encoded as UTF-8"
    ), r.text
    # nested past the JSON parser; an integer past Python's 4,300 digits
    for content in (b"[" * 60_000, b'{"max_tokens": 1' + b"0" * 5000 + b"}"):
        r = httpx.post(
            url + "/v1/chat/completions", content=content, headers={"content-type": "application/json"}
        )
        assert r.status_code == 400 and r.json()["error"]["message"] == (
            "the request body could not be read as JSON (it nests too deeply, or holds a number of more than "
            "4,300 digits)"
        ), r.text
    # an empty body said "body: Field required"
    r = httpx.post(url + "/v1/chat/completions", content=b"", headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["message"] == (
        "the request body must be a JSON object, sent with Content-Type: application/json; got an empty body"
    ), r.text


def test_a_chunked_body_over_the_cap_is_named_as_one_with_a_length(server):
    # a body sent without Content-Length (chunked) is cut by FastAPI's limit: its 413 said "Content Too
    # Large", code null, where a declared length gets the cap and code request_too_large
    url, _ = server
    body = json.dumps(chat_body(q="x" * 70_000)).encode()
    for chunked in (False, True):
        content = (body[i : i + 4096] for i in range(0, len(body), 4096)) if chunked else body
        r = httpx.post(
            url + "/v1/chat/completions", content=content, headers={"content-type": "application/json"}
        )
        err = r.json()["error"]
        assert (r.status_code, err["code"]) == (413, "request_too_large"), (chunked, r.text)
        assert "over this server's cap of 65,536" in err["message"], (chunked, err)


def test_an_unserved_route_names_the_ones_served(server):
    # the openai SDK's client.responses.create() or a legacy completions call got a bare "Not Found"
    url, _ = server
    r = httpx.post(url + "/v1/responses", json={"model": MODEL, "input": "hi"})
    err = r.json()["error"]
    assert (r.status_code, err["type"]) == (404, "not_found_error")
    assert err["message"] == (
        "no route POST /v1/responses: this server answers POST /v1/chat/completions, GET /v1/models, "
        "GET /v1/models/{id} and GET /health"
    )
    r = httpx.get(url + "/v1/chat/completions")
    assert r.status_code == 405 and r.json()["error"]["message"] == (
        "GET /v1/chat/completions is not allowed: use POST"
    )


def test_health_answers_head_as_load_balancers_send_it(server):
    # HEAD /health was a 405: a load balancer's HEAD check (or curl -I) took the replica for dead
    url, app = server
    r = httpx.head(url + "/health")
    assert (r.status_code, r.content, r.headers["content-type"]) == (200, b"", "application/json")
    app.state.draining = True
    try:
        assert httpx.head(url + "/health").status_code == 503
    finally:
        app.state.draining = False


def _stream_chunks(url, body):
    with httpx.stream("POST", url + "/v1/chat/completions", json={**body, "stream": True}, timeout=120) as r:
        lines = [line[len("data: ") :] for line in r.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(line)["choices"][0]["delta"] for line in lines[:-1]]


def test_a_tool_call_turn_has_null_content_as_on_openai_and_takes_a_response_format(server):
    # the stream opened with {"role": "assistant", "content": ""} whatever the turn; OpenAI's tool-call turn opens
    # with role, content null and the call in one delta. response_format with tool_choice "required" was a 400
    url, _ = server
    rf = {"type": "json_schema", "json_schema": {"name": "f", "schema": {"type": "object"}}}
    body = chat_body(
        q="What is the weather in Paris?", tools=[WEATHER], tool_choice="required", seed=4, response_format=rf
    )
    r = httpx.post(url + "/v1/chat/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    message = r.json()["choices"][0]["message"]
    assert message["content"] is None and message["tool_calls"][0]["function"]["name"] == "get_weather"
    # a turn that must be a call opens at once with content null, its call in the next delta
    first, second, *rest = _stream_chunks(url, body)
    assert first == {"role": "assistant", "content": None}
    assert second["tool_calls"][0]["function"]["name"] == "get_weather" and "content" not in second
    assert rest[-1] == {} and all("role" not in d for d in rest)
    # one that may be either opens with its first delta: role and content null on the call's chunk
    auto = {**body, "tool_choice": "auto", "response_format": None}
    assert httpx.post(url + "/v1/chat/completions", json=auto, timeout=120).json()["choices"][0]["message"][
        "tool_calls"
    ]
    first, *rest = _stream_chunks(url, auto)
    assert (first["role"], first["content"], first["tool_calls"][0]["function"]["name"]) == (
        "assistant",
        None,
        "get_weather",
    )
    assert rest[-1] == {} and all("role" not in d for d in rest)
    # prose opens with its own content "" chunk, as on OpenAI
    first, second, *_ = _stream_chunks(url, chat_body(max_tokens=16, seed=1))
    assert first == {"role": "assistant", "content": ""} and second["content"]


def test_response_format_with_tools_under_auto_may_call_a_tool(server):
    # the response_format grammar replaced the tools' grammar: with tool_choice "auto" no tool was ever called
    url, _ = server
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
    rf = {"type": "json_schema", "json_schema": {"name": "f", "schema": schema}}
    body = chat_body(
        q="What is the weather in Paris?", tools=[WEATHER], tool_choice="auto", seed=4, response_format=rf
    )
    r = httpx.post(url + "/v1/chat/completions", json=body, timeout=120)
    message = r.json()["choices"][0]["message"]
    assert message["content"] is None and message["tool_calls"][0]["function"]["name"] == "get_weather", (
        r.text
    )
    # the answer, with the tools still declared, is the JSON value the schema describes
    call_id = message["tool_calls"][0]["id"]
    body["messages"] += [
        message,
        {"role": "tool", "tool_call_id": call_id, "content": '{"temperature": 4.0}'},
    ]
    r = httpx.post(url + "/v1/chat/completions", json={**body, "tool_choice": "none"}, timeout=120)
    message = r.json()["choices"][0]["message"]
    assert message.get("tool_calls") is None and set(json.loads(message["content"])) == {"answer"}, r.text


def test_a_checkpoint_named_by_a_relative_path_serves_under_its_folder_name(monkeypatch):
    # `agentkit serve --model .` in the checkpoint's folder served the model as '' (Path('.').name)
    from agentkit.serve import load_engine

    if not (CHECKPOINT / "config.json").is_file():
        pytest.skip("the embedded checkpoint is not present")
    monkeypatch.chdir(CHECKPOINT)
    engine = load_engine(".", max_batch=1)
    try:
        assert engine.model_id == "agentkit-tiny"
    finally:
        engine.close(wait=False)
