"""The OpenAI-compatible backend against a fake server (httpx.MockTransport): wire format, argument
decoding failures sent back to the model, retries on 429/5xx/timeouts."""

import asyncio
import json
import threading

import httpx
import pytest
from openai_fakes import completion
from sample_tools import add, get_weather

from agentkit import Agent
from agentkit.backends.openai import OpenAIBackend
from agentkit.errors import BackendError
from agentkit.messages import decode_arguments, loads_json


class FakeServer:
    """Replays responses (a dict -> 200 JSON, an int -> that status, an exception -> raised) and records requests."""

    def __init__(self, responses):
        self.responses = list(responses)
        self.requests = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        item = self.responses.pop(0)
        if isinstance(item, Exception):
            raise item
        if isinstance(item, int):
            return httpx.Response(item, text=f"status {item}", headers={"retry-after": "0"})
        return httpx.Response(200, json=item)

    def body(self, i):
        return json.loads(self.requests[i].content)


def backend_for(server, **kw):
    kw.setdefault("retry_wait", 0.0)
    return OpenAIBackend(
        "dg-test",
        base_url="http://fake.local/v1",
        api_key="sk-test",
        transport=httpx.MockTransport(server),
        **kw,
    )


def test_request_wire_format_and_response_parsing():
    server = FakeServer(
        [
            completion(tool_calls=[("call_a", "get_weather", '{"city": "Paris"}')], reasoning="need weather"),
            completion(content="Clear in Paris.", usage=(30, 4)),
        ]
    )
    agent = Agent(
        backend_for(server, settings={"temperature": 0.2}), [get_weather], tool_choice={"name": "get_weather"}
    )
    result = agent.run("Weather in Paris?")
    assert result.answer == "Clear in Paris."
    assert result.steps[0].thinking == "need weather"
    assert result.usage.to_dict() == {"input_tokens": 40, "output_tokens": 9, "requests": 2}
    req = server.requests[0]
    assert req.url == "http://fake.local/v1/chat/completions"
    assert req.headers["authorization"] == "Bearer sk-test"
    b0 = server.body(0)
    assert b0["model"] == "dg-test" and b0["temperature"] == 0.2
    assert b0["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert b0["tools"][0]["function"]["name"] == "get_weather"
    assert b0["tools"][0]["function"]["parameters"]["required"] == ["city"]
    b1 = server.body(1)
    assert b1["tool_choice"] == "auto"
    assistant, tool_msg = b1["messages"][-2:]
    assert assistant == {
        "role": "assistant",
        "content": None,
        "reasoning_content": "need weather",
        "tool_calls": [
            {
                "id": "call_a",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    }  # arguments re-encoded as a JSON string, the turn's reasoning sent back under the server's field
    assert tool_msg == {
        "role": "tool",
        "tool_call_id": "call_a",
        "content": '{"city":"Paris","days":1,"sky":"clear"}',
    }


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        ('{"city": "Paris"', "arguments are not valid JSON"),
        (json.dumps(json.dumps({"city": "Paris"})), "arguments were double-encoded"),
        ('["Paris"]', "arguments must be a JSON object, got list"),
        (
            '{"city": "Paris", "days": NaN}',
            "arguments are not valid JSON (NaN is not a JSON number at character 26)",
        ),
    ],
)
def test_bad_arguments_go_back_to_the_model_listing_valid_tools(raw, error):
    server = FakeServer(
        [
            completion(tool_calls=[("c1", "get_weather", raw)]),
            completion(tool_calls=[("c2", "get_weather", '{"city": "Paris"}')]),
            completion(content="Clear."),
        ]
    )
    result = Agent(backend_for(server), [get_weather, add]).run("Weather?")
    assert result.answer == "Clear."
    rec = result.steps[0].tool_calls[0]
    assert rec.error_kind == "decode" and rec.error.startswith(error)
    retry = server.body(1)["messages"][-1]
    assert retry["role"] == "tool" and retry["tool_call_id"] == "c1"
    payload = json.loads(retry["content"])
    assert payload["error"].startswith(error)
    assert payload["valid_tools"] == ["get_weather", "add"]
    assert payload["arguments"] == raw
    # the model's broken call is echoed back verbatim in the transcript
    assert server.body(1)["messages"][-2]["tool_calls"][0]["function"]["arguments"] == raw
    assert result.steps[1].tool_calls[0].content == '{"city":"Paris","days":1,"sky":"clear"}'
    for text in (result.to_json(), server.requests[1].content.decode()):  # strict JSON: no NaN taken in
        loads_json(text)


def test_arguments_nested_past_the_recursion_limit_go_back_as_a_decode_error():
    """They ended the run with json's RecursionError (``agentkit run`` printed its traceback)."""
    raw = '{"city": ' + "[" * 100_000 + "]" * 100_000 + "}"
    server = FakeServer([completion(tool_calls=[("c1", "get_weather", raw)]), completion(content="Sorry.")])
    result = Agent(backend_for(server), [get_weather]).run("Weather?")
    rec = result.steps[0].tool_calls[0]
    assert (result.answer, rec.error_kind) == ("Sorry.", "decode")
    assert (
        rec.error == "arguments are not valid JSON (arrays and objects nest too deep to read at character 0)"
    )
    assert decode_arguments(raw) == ({}, rec.error)


def test_unknown_tool_name_goes_back_listing_valid_tools():
    server = FakeServer(
        [completion(tool_calls=[("c1", "weather", '{"city": "Oslo"}')]), completion(content="ok")]
    )
    Agent(backend_for(server), [get_weather, add]).run("?")
    payload = json.loads(server.body(1)["messages"][-1]["content"])
    assert payload["error"] == "unknown tool 'weather'"
    assert payload["valid_tools"] == ["get_weather", "add"]


def test_429_then_success_is_retried():
    server = FakeServer([429, completion(content="fine")])
    backend = backend_for(server)
    turn = backend.complete([{"role": "user", "content": "hi"}], [])
    assert turn.text == "fine"
    assert turn.usage.requests == 2
    assert len(server.requests) == 2
    assert "tools" not in server.body(0) and "tool_choice" not in server.body(0)


def test_timeouts_and_5xx_are_retried_then_give_up():
    server = FakeServer([httpx.ReadTimeout("slow"), 503, completion(content="ok")])
    assert backend_for(server).complete([{"role": "user", "content": "hi"}], []).text == "ok"
    server = FakeServer([500, 502, 500])
    with pytest.raises(BackendError) as ei:
        backend_for(server, max_retries=2).complete([{"role": "user", "content": "hi"}], [])
    assert ei.value.status_code == 500
    assert "gave up after 3 attempt(s)" in str(ei.value)
    assert "AGENTKIT_OPENAI_BASE_URL" not in str(ei.value)  # the server answered: its address is right
    assert len(server.requests) == 3


def test_refused_connection_names_where_the_address_comes_from():
    server = FakeServer([httpx.ConnectError("refused"), httpx.ConnectError("refused")])
    with pytest.raises(BackendError) as ei:
        backend_for(server, max_retries=1).complete([{"role": "user", "content": "hi"}], [])
    msg = str(ei.value)
    assert "gave up after 2 attempt(s): ConnectError: refused" in msg
    assert "$AGENTKIT_OPENAI_BASE_URL" in msg and ei.value.status_code is None


def test_a_base_url_without_scheme_or_v1_is_named(monkeypatch):
    # without a scheme every request failed after 5 attempts (8 s); a root without /v1 was a bare 404
    monkeypatch.setenv("AGENTKIT_OPENAI_BASE_URL", "127.0.0.1:8000/v1")
    with pytest.raises(ValueError, match=r"must start with http:// or https://, got '127.0.0.1:8000/v1'"):
        OpenAIBackend("m")
    server = FakeServer([404])
    backend = OpenAIBackend("m", base_url="http://fake.local", transport=httpx.MockTransport(server))
    with pytest.raises(
        BackendError,
        match=r"HTTP 404 \(is the base URL 'http://fake.local' the API root\? it usually ends in /v1\)",
    ):
        backend.complete([{"role": "user", "content": "hi"}], [])
    with pytest.raises(BackendError, match=r"HTTP 404: status 404"):  # a /v1 root: no hint
        backend_for(FakeServer([404])).complete([{"role": "user", "content": "hi"}], [])


def test_client_errors_are_not_retried():
    server = FakeServer([400, completion(content="never")])
    with pytest.raises(BackendError, match="HTTP 400") as ei:
        backend_for(server).complete([{"role": "user", "content": "hi"}], [])
    assert ei.value.status_code == 400
    assert len(server.requests) == 1


def test_a_401_says_where_the_key_comes_from(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    server = FakeServer([401, 401])
    unkeyed = OpenAIBackend("m", base_url="http://f/v1", transport=httpx.MockTransport(server))
    with pytest.raises(BackendError) as ei:
        unkeyed.complete([{"role": "user", "content": "hi"}], [])
    assert "HTTP 401 (no API key was sent: pass api_key, or set $OPENAI_API_KEY" in str(ei.value)
    keyed = OpenAIBackend(
        "m", base_url="http://f/v1", api_key_env="MY_KEY", api_key="k", transport=httpx.MockTransport(server)
    )
    with pytest.raises(BackendError) as ei:
        keyed.complete([{"role": "user", "content": "hi"}], [])
    assert "HTTP 401 (the server refused the API key sent, from api_key or $MY_KEY)" in str(ei.value)


def test_response_without_choices():
    server = FakeServer([{"error": "weird"}])
    with pytest.raises(BackendError, match=r"no choices\[0\].message"):
        backend_for(server).complete([{"role": "user", "content": "hi"}], [])


def test_retry_after_is_honoured_up_to_the_cap():
    http = OpenAIBackend("m", base_url="http://x/v1", retry_wait=0.5, retry_wait_max=8.0).http()
    assert http.attempts == 5  # max_retries=4 by default, plus the first attempt
    answer = httpx.Response(429, headers={"retry-after": "3"})
    assert http.wait_seconds(1, answer) == 3.0
    assert http.wait_seconds(1, httpx.Response(429, headers={"retry-after": "100"})) == 8.0
    assert http.wait_seconds(1, httpx.Response(429, headers={"retry-after": "soon"})) == 0.5
    assert http.wait_seconds(3, None) == 2.0  # 0.5 * 2**2


def test_async_path_with_async_transport():
    server = FakeServer(
        [429, completion(tool_calls=[("c1", "add", '{"a": 1, "b": 2}')]), completion(content="3")]
    )

    async def handler(request):
        return server(request)

    backend = OpenAIBackend(
        "m", base_url="http://fake.local/v1", retry_wait=0.0, async_transport=httpx.MockTransport(handler)
    )

    async def main():
        return await Agent(backend, [add]).arun("1+2?")

    result = asyncio.run(main())
    assert result.answer == "3"
    assert result.tool_calls[0].content == "3"
    assert result.usage.requests == 3


def test_api_key_from_environment(monkeypatch):
    monkeypatch.setenv("MY_KEY", "sk-env")
    server = FakeServer([completion(content="hi")])
    OpenAIBackend(
        "m", base_url="http://f/v1", api_key_env="MY_KEY", transport=httpx.MockTransport(server)
    ).complete([{"role": "user", "content": "x"}], [])
    assert server.requests[0].headers["authorization"] == "Bearer sk-env"


def test_decode_arguments_cases():
    assert decode_arguments('{"a": 1}') == ({"a": 1}, None)
    assert decode_arguments({"a": 1}) == ({"a": 1}, None)
    assert decode_arguments("") == ({}, None)
    assert decode_arguments(None) == ({}, None)
    assert decode_arguments('"just text"') == ({}, "arguments must be a JSON object, got a string")
    assert decode_arguments(5)[1] == "arguments must be a JSON object, got int"


class _KeepAliveServer:
    """A real HTTP/1.1 server on 127.0.0.1 answering every POST with one completion; counts open connections."""

    def __init__(self):
        import http.server
        import threading

        outer = self
        self.open = 0
        self.lock = threading.Lock()

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive: the connection stays until the client closes it

            def setup(self):
                super().setup()
                with outer.lock:
                    outer.open += 1

            def finish(self):
                super().finish()
                with outer.lock:
                    outer.open -= 1

            def do_POST(self):
                self.rfile.read(int(self.headers["content-length"]))
                body = json.dumps(completion(content="hi")).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def wait_open(self, n, seconds=5.0):
        import time

        deadline = time.monotonic() + seconds
        while self.open != n and time.monotonic() < deadline:
            time.sleep(0.02)
        return self.open

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def test_async_connections_close_with_their_event_loop():
    # each asyncio.run() used to leave its connection (and its closed loop) alive for good: one socket leaked
    # per run, never collected (the client kept the loop alive)
    server = _KeepAliveServer()
    try:
        backend = OpenAIBackend("m", base_url=server.url, max_retries=0)
        msgs = [{"role": "user", "content": "x"}]

        async def two_turns():
            a = await backend.acomplete(msgs, [])
            b = await backend.acomplete(msgs, [])  # the same loop reuses its connection
            assert server.open == 1
            return a.text + b.text

        for _ in range(3):
            assert asyncio.run(two_turns()) == "hihi"
            assert server.wait_open(0) == 0
        assert asyncio.run(two_turns()) == "hihi"  # a later loop gets a fresh client
    finally:
        server.close()


AGENTKIT_TOO_LONG = {
    "error": {
        "message": "the prompt is 2,490 tokens but this model takes at most 1,984 (2,048 positions minus a "
        "generation budget of 64 tokens)",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
}


def test_a_server_saying_the_prompt_is_too_long_makes_the_agent_trim_history():
    # it was a BackendError: a chat through `agentkit serve` (or OpenAI, vLLM) ended once its history outgrew
    # the context, where the embedded backend drops the oldest turns and asks again
    from agentkit.history import Conversation

    requests = []

    def handler(request):
        requests.append(json.loads(request.content))
        if len(requests) == 1:
            return httpx.Response(400, json=AGENTKIT_TOO_LONG)
        return httpx.Response(200, json=completion(content="fine"))

    backend = OpenAIBackend(
        "m", base_url="http://f/v1", max_retries=0, transport=httpx.MockTransport(handler)
    )
    old = Conversation().with_turn("long ago " * 300, "yes").with_turn("then " * 300, "ok")
    result = Agent(backend).run("now?", history=old)
    assert result.answer == "fine" and len(requests) == 2
    assert [m["content"] for m in requests[1]["messages"]][-1] == "now?"
    assert len(requests[1]["messages"]) < len(requests[0]["messages"])


@pytest.mark.parametrize(
    "message, counts",
    [
        (AGENTKIT_TOO_LONG["error"]["message"], (2490, 1984)),
        (  # agentkit serve, when the request's max_tokens (in whole 64-token canvases) leaves too little room
            "max_tokens=1000 does not fit with this prompt: the prompt is 1,110 tokens of this model's 2,048 "
            "positions, and max_tokens is counted in whole canvases of 64 tokens; lower max_tokens to 896 or less",
            (1110, 1024),
        ),
        (  # OpenAI
            "This model's maximum context length is 128000 tokens. However, your messages resulted in 130511 "
            "tokens. Please reduce the length of the messages.",
            (130511, 128000),
        ),
        (  # vLLM: the completion's share comes off the limit
            "This model's maximum context length is 2048 tokens. However, you requested 2100 tokens (2000 in "
            "the messages, 100 in the completion). Please reduce the length of the messages or completion.",
            (2000, 1948),
        ),
    ],
)
def test_prompt_too_long_messages_of_known_servers_are_read(message, counts):
    from agentkit.backends.base import PromptTooLong
    from agentkit.backends.openai import context_overflow

    body = {"error": {"message": message, "type": "invalid_request_error", "code": None}}
    exc = context_overflow(httpx.Response(400, json=body))
    assert isinstance(exc, PromptTooLong) and (exc.prompt_tokens, exc.limit) == counts
    assert context_overflow(httpx.Response(400, json={"error": {"message": "bad tool_choice"}})) is None
    assert context_overflow(httpx.Response(400, text="not json")) is None


def test_the_sync_client_is_closed_when_the_program_ends(tmp_path):
    # a script that ran an agent on the openai backend left its keep-alive socket to the interpreter's
    # teardown: "ResourceWarning: unclosed <socket.socket ...>" at exit
    import os
    import pathlib
    import subprocess
    import sys

    server = _KeepAliveServer()
    try:
        script = tmp_path / "once.py"
        script.write_text(
            "from agentkit.backends.openai import OpenAIBackend\n"
            f"b = OpenAIBackend('m', base_url={server.url!r}, max_retries=0)\n"
            "print(b.complete([{'role': 'user', 'content': 'x'}], []).text)\n"
        )
        root = str(pathlib.Path(__file__).resolve().parents[1])  # this tree's agentkit, not an installed one
        done = subprocess.run(
            [sys.executable, "-W", "always::ResourceWarning", str(script)],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PYTHONPATH": root},
        )
        assert done.returncode == 0 and done.stdout.strip() == "hi", done.stderr
        assert "ResourceWarning" not in done.stderr, done.stderr
    finally:
        server.close()


def test_two_threads_first_sync_requests_share_one_client(monkeypatch):
    # the lazy client was made without a lock: two threads' first requests could each make (and keep) one
    made = []
    both_arrived = threading.Barrier(2)

    class CountingClient(httpx.Client):
        def __init__(self, **kw):
            made.append(self)
            try:  # the second thread joins here only if it could also see no client yet
                both_arrived.wait(timeout=1.0)
            except threading.BrokenBarrierError:
                pass
            super().__init__(**kw)

    server = FakeServer([completion(content="a"), completion(content="b")])
    backend = backend_for(server)
    monkeypatch.setattr(httpx, "Client", CountingClient)
    turns = []
    threads = [
        threading.Thread(
            target=lambda: turns.append(backend.complete([{"role": "user", "content": "hi"}], []))
        )
        for _ in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(t.text for t in turns) == ["a", "b"]
    assert len(made) == 1 and backend._client is made[0]
    backend.close()
    assert backend._client is None and made[0].is_closed
