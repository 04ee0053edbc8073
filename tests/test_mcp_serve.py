"""``agentkit mcp serve BUNDLE``: the SDK's own client over stdio and streamable HTTP (list, call, schema
violations, a failing tool, the API key, a sandbox call), and a pydantic-ai agent pointed at it."""

from __future__ import annotations

import asyncio
import os
import sys
import textwrap
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters
from mcp_helpers import free_port, http_process
from sandbox_fixtures import docker_client, sandbox_image  # noqa: F401  (fixtures)
from typer.testing import CliRunner

from agentkit import tool
from agentkit.mcp.server import call_tool

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}

TOOLS = """
def add(a: int, b: int) -> int:
    '''Add two integers.

    Args:
        a: first.
        b: second.
    '''
    print("stray output must not corrupt stdio")
    return a + b


def explode(reason: str) -> str:
    '''Always raises.'''
    raise RuntimeError(reason)


def leave(how: str = "exit") -> str:
    '''Calls sys.exit, as an argparse-using tool may, or raises KeyboardInterrupt.'''
    raise SystemExit(3) if how == "exit" else KeyboardInterrupt
"""


@pytest.fixture
def bundle(tmp_path, tools_module) -> str:
    mod = tools_module("mcp_serve_tools", TOOLS)
    path = tmp_path / "bundle.yaml"
    path.write_text(
        textwrap.dedent(f"""\
        agentkit_bundle: 1
        name: served
        description: Tools served over MCP.
        tools:
          - name: add
            python: {mod}:add
          - name: explode
            python: {mod}:explode
          - name: leave
            python: {mod}:leave
          - name: shout
            description: Upper-case a word.
            parameters:
              type: object
              properties: {{word: {{type: string, maxLength: 8}}}}
              required: [word]
            http: {{url: "http://127.0.0.1:1/{{word}}"}}
        """)
    )
    return str(path)


def stdio_params(bundle: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable, args=["-m", "agentkit", "mcp", "serve", bundle], env=ENV
    )


def text(result) -> str:
    return "\n".join(c.text for c in result.content)


async def exercise(client: Client) -> dict:
    listed = await client.list_tools()
    ok = await client.call_tool("add", {"a": 2, "b": 3})
    bad = await client.call_tool("add", {"a": "two", "b": 3})
    extra = await client.call_tool("add", {"a": 1, "b": 2, "c": 3})
    long = await client.call_tool("shout", {"word": "much-too-long"})
    boom = await client.call_tool("explode", {"reason": "on purpose"})
    unknown = await client.call_tool("nope", {})
    # a tool's sys.exit() ended the server (a traceback on its stderr; the client waited on)
    gone = await client.call_tool("leave", {}, read_timeout_seconds=20)
    # a KeyboardInterrupt a tool raises (no Ctrl-C reaches a call: asyncio cancels) ended it too, and it hung
    stopped = await client.call_tool("leave", {"how": "interrupt"}, read_timeout_seconds=20)
    after = await client.call_tool("add", {"a": 1, "b": 1}, read_timeout_seconds=20)
    return {"listed": listed.tools, "results": [ok, bad, extra, long, boom, unknown, gone, stopped, after]}


def check(got: dict) -> None:
    tools = {t.name: t for t in got["listed"]}
    assert sorted(tools) == ["add", "explode", "leave", "shout"]
    assert tools["add"].input_schema["required"] == ["a", "b"]
    assert tools["shout"].input_schema["properties"]["word"] == {"type": "string", "maxLength": 8}
    ok, bad, extra, long, boom, unknown, gone, stopped, after = got["results"]
    assert (ok.is_error, text(ok)) == (False, "5")
    assert bad.is_error and text(bad).startswith("invalid arguments for 'add': a:")
    assert extra.is_error and "c:" in text(extra)
    assert long.is_error and text(long) == "invalid arguments for 'shout': word: 'much-too-long' is too long"
    assert boom.is_error and text(boom) == "tool 'explode' failed: RuntimeError: on purpose"
    assert unknown.is_error and "unknown tool 'nope'" in text(unknown)
    assert gone.is_error and text(gone) == "tool 'leave' failed: SystemExit: the tool called sys.exit(3)"
    assert stopped.is_error and text(stopped) == "tool 'leave' failed: KeyboardInterrupt"
    assert (after.is_error, text(after)) == (False, "2")


def test_stdio_with_the_sdk_client(bundle):
    async def main():
        async with Client(stdio_params(bundle), mode="legacy") as client:
            assert client.server_info is not None and client.server_info.name == "served"
            return await exercise(client)

    check(asyncio.run(main()))


def test_http_with_the_sdk_client_and_api_key(bundle):
    port = free_port()
    cmd = [sys.executable, "-m", "agentkit", "mcp", "serve", bundle, "--http", str(port), "--api-key", "k3y"]
    with http_process(cmd, port):
        url = f"http://127.0.0.1:{port}/mcp"
        import httpx2

        async def main(key: str):
            http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"})
            from mcp.client.streamable_http import streamable_http_client

            async with http, Client(streamable_http_client(url, http_client=http)) as client:
                return await exercise(client)

        check(asyncio.run(main("k3y")))
        r = httpx2.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
        assert r.status_code == 401


def test_non_loopback_without_key_refused(bundle, monkeypatch):
    from agentkit.cli import app

    monkeypatch.delenv("AGENTKIT_API_KEY", raising=False)
    res = CliRunner().invoke(app, ["mcp", "serve", bundle, "--http", "0", "--host", "0.0.0.0"])
    assert res.exit_code == 2 and "API key" in res.output


def test_pydantic_ai_agent_calls_the_served_tools(bundle):
    pytest.importorskip("fastmcp")
    from pydantic_ai import Agent as PAgent
    from pydantic_ai.mcp import MCPToolset as PMCPToolset
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import FunctionModel

    def model(messages, info):
        names = sorted(t.name for t in info.function_tools)
        returns = [p for m in messages for p in getattr(m, "parts", []) if isinstance(p, ToolReturnPart)]
        if not returns:
            return ModelResponse(parts=[ToolCallPart("add", {"a": 20, "b": 22})])
        return ModelResponse(parts=[TextPart(f"{names} -> {returns[0].content}")])

    port = free_port()
    with http_process([sys.executable, "-m", "agentkit", "mcp", "serve", bundle, "--http", str(port)], port):
        agent = PAgent(FunctionModel(model), toolsets=[PMCPToolset(f"http://127.0.0.1:{port}/mcp")])
        result = agent.run_sync("add")
    assert result.output == "['add', 'explode', 'leave', 'shout'] -> 42"


def test_sandbox_tool_served(tmp_path, docker_client, sandbox_image):  # noqa: F811 (fixtures)
    path = tmp_path / "sb.yaml"
    path.write_text(
        textwrap.dedent("""\
        agentkit_bundle: 1
        name: sb
        tools:
          - name: square
            description: Square a number in the sandbox.
            parameters: {type: object, properties: {n: {type: integer}}, required: [n]}
            sandbox:
              timeout: 30
              code: |
                print(args["n"] ** 2)
        """)
    )

    async def main():
        async with Client(stdio_params(str(path)), mode="legacy") as client:
            return await client.call_tool("square", {"n": 12}, read_timeout_seconds=60)

    result = asyncio.run(main())
    assert (result.is_error, text(result).strip()) == (False, "144")


def test_what_a_module_prints_at_import_goes_to_stderr_over_stdio(tmp_path, tools_module):
    import subprocess

    mod = tools_module(
        "mcp_loud_tools", "print('loaded!')\n\ndef ping() -> str:\n    '''Pong.'''\n    return 'pong'\n"
    )
    path = tmp_path / "loud.yaml"
    path.write_text(f"agentkit_bundle: 1\nname: loud\ntools:\n  - name: ping\n    python: {mod}:ping\n")
    # stdin closed at once: the server starts, reads end of input and stops; its stdout is the protocol's alone
    got = subprocess.run(
        [sys.executable, "-m", "agentkit", "mcp", "serve", str(path)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=ENV,
        timeout=120,
    )
    assert got.returncode == 0, got.stderr
    assert got.stdout == "" and "loaded!" in got.stderr


@pytest.mark.parametrize("returned", [b"s", None, 5])
def test_a_serializer_returning_no_str_is_an_is_error_result(returned):
    # None raised pydantic's ValidationError out of the call; bytes were coerced into the text
    @tool(serializer=lambda v: returned)
    def stamp(x: int) -> str:
        """Stamp."""
        return "s"

    result = asyncio.run(call_tool({"stamp": stamp}, "stamp", {"x": 1}, "1"))
    assert result.is_error and result.content[0].text == (
        f"tool 'stamp' failed: TypeError: the serializer of tool 'stamp' returned {type(returned).__name__}, not str"
    )
