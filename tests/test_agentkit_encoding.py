"""Encoding (issue 18): tool output that is not valid UTF-8 reaches the model with replacement characters and a
note instead of failing the call; lone surrogates are escaped on the openai backend instead of crashing the run."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import httpx
from pydantic import BaseModel

from agentkit import Agent, tool
from agentkit.backends.openai import OpenAIBackend, escape_lone_surrogates
from agentkit.backends.scripted import ScriptedBackend, answer, call
from agentkit.tool_output import INVALID_UTF8_NOTE, decode_utf8, serialize_result

NOTE_1 = INVALID_UTF8_NOTE.format(n=1)
NOTE_2 = INVALID_UTF8_NOTE.format(n=2)


def test_decode_utf8_counts_replaced_sequences():
    assert decode_utf8(b"ok") == ("ok", 0)
    assert decode_utf8("\ufffd".encode()) == ("\ufffd", 0)  # a real U+FFFD is not counted
    assert decode_utf8(b"a\xff\xfeb\xe2\x82") == ("a\ufffd\ufffdb\ufffd", 3)


def test_serialize_result_decodes_bytes_and_marks_invalid_ones():
    assert serialize_result(b"caf\xc3\xa9") == "café"  # bytes are text, like str
    assert serialize_result(b"\xff\xfeok") == "\ufffd\ufffdok\n" + NOTE_2
    assert serialize_result(bytearray(b"x\x80")) == "x\ufffd\n" + NOTE_1
    assert (
        serialize_result({"data": b"\x80", "ok": [b"fine"]}) == '{"data":"\ufffd","ok":["fine"]}\n' + NOTE_1
    )

    class M(BaseModel):
        blob: bytes

    @dataclasses.dataclass
    class D:
        blob: bytes

    assert serialize_result(M(blob=b"\x80")) == '{"blob":"\ufffd"}\n' + NOTE_1
    assert serialize_result(D(blob=b"\x80")) == '{"blob":"\ufffd"}\n' + NOTE_1


@tool
def read_blob(path: str) -> bytes:
    """Read raw bytes.

    Args:
        path: File path.
    """
    return b"header \xff\xfe payload"


def test_invalid_utf8_tool_output_is_not_a_tool_failure():
    backend = ScriptedBackend([call("read_blob", path="a.bin"), answer("done")])
    result = Agent(backend, [read_blob]).run("Read a.bin")
    rec = result.steps[0].tool_calls[0]
    assert rec.ok and rec.error_kind is None
    assert rec.content == "header \ufffd\ufffd payload\n" + NOTE_2
    sent = backend.requests[1].messages[-1]
    assert sent["role"] == "tool" and sent["content"] == rec.content


@tool
def list_dir(path: str) -> str:
    """List a directory.

    Args:
        path: Directory.
    """
    return "report-\udcff.txt"  # a file name decoded with surrogateescape


def completion(*, content=None, tool_calls=None):
    msg = {"role": "assistant", "content": content}
    if tool_calls:
        msg["tool_calls"] = [
            {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
            for cid, name, args in tool_calls
        ]
    return {"choices": [{"index": 0, "message": msg}], "usage": {"prompt_tokens": 1, "completion_tokens": 1}}


def test_lone_surrogates_are_escaped_on_the_openai_backend():
    replies = [
        completion(tool_calls=[("c1", "list_dir", '{"path": "/data"}')]),
        completion(content="One report."),
    ]
    bodies: list[bytes] = []

    def server(request: httpx.Request) -> httpx.Response:
        bodies.append(request.content)
        return httpx.Response(200, json=replies[len(bodies) - 1])

    backend = OpenAIBackend("m", base_url="http://fake.local/v1", transport=httpx.MockTransport(server))
    result = Agent(backend, [list_dir]).run("What is in /data \udc80?")
    assert result.answer == "One report."
    first, second = (json.loads(b.decode("utf-8")) for b in bodies)  # valid UTF-8 JSON
    assert first["messages"][-1]["content"] == "What is in /data \\udc80?"
    assert second["messages"][-1] == {"role": "tool", "tool_call_id": "c1", "content": "report-\\udcff.txt"}


def test_escape_lone_surrogates_keeps_other_text_and_handles_keys():
    value = {"k\ud800": ["ok é ☃", ("\udfff",)], "n": 1}
    assert escape_lone_surrogates(value) == {"k\\ud800": ["ok é ☃", ["\\udfff"]], "n": 1}
    assert escape_lone_surrogates("plain") == "plain"


def test_lone_surrogates_are_escaped_on_the_async_path():
    bodies: list[bytes] = []

    async def server(request: httpx.Request) -> httpx.Response:
        bodies.append(request.content)
        return httpx.Response(200, json=completion(content="fine"))

    backend = OpenAIBackend("m", base_url="http://f/v1", async_transport=httpx.MockTransport(server))
    turn = asyncio.run(backend.acomplete([{"role": "user", "content": "x\udc80"}], []))
    assert turn.text == "fine"
    assert json.loads(bodies[0])["messages"][0]["content"] == "x\\udc80"


def _strict_json(text: str) -> object:
    """json.loads without Python's extension that reads NaN / Infinity."""

    def refuse(constant: str) -> None:
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def test_nan_and_infinities_in_a_result_are_valid_json():
    # they were sent as the bare NaN / Infinity, which no JSON parser but Python's reads
    text = serialize_result({"mean": float("nan"), "range": [float("-inf"), float("inf")], "n": 2.5})
    assert _strict_json(text) == {"mean": "NaN", "range": ["-Infinity", "Infinity"], "n": 2.5}
    nested = serialize_result({"raw": b"\xff", "x": float("inf")})
    assert _strict_json(nested.split("\n")[0]) == {"raw": "\ufffd", "x": "Infinity"}
