"""MCP servers as toolsets: an agent on the scripted backend calls a fixture MCP server (stdio and streamable
HTTP), with pagination, include/exclude/prefix, list-changed, isError, timeouts, crashes and broken servers."""

from __future__ import annotations

import asyncio
import json
import time

import jsonschema
import pytest
from mcp_helpers import PY, SERVER, free_port, http_process

from agentkit import Agent
from agentkit.backends.scripted import ScriptedBackend, answer, call
from agentkit.errors import ToolDefinitionError
from agentkit.mcp import MCPSchemaError, MCPServerError, MCPToolset
from agentkit.mcp.client import check_tool_schema


def stdio(*extra: str, **opts):
    return MCPToolset.stdio(PY, [SERVER, *extra], name="fixture", **opts)


async def server_schemas(ts: MCPToolset) -> dict[str, dict]:
    return {t.name: t.input_schema for t in await ts.list_server_tools()}


def run_script(ts: MCPToolset, script: list, **agent_kw):
    backend = ScriptedBackend(script)
    agent = Agent(backend, toolsets=[ts], loop_guard=None, **agent_kw)
    return agent.run("go"), backend, agent


def calls(result):
    return [(c.name, c.content, c.error_kind) for s in result.steps for c in s.tool_calls]


SCRIPT = [
    [call("add", a=2, b=40), call("echo", text="hi")],
    call("stats", n=3),
    call("resource"),
    call("image"),
    answer("done"),
]


def check_run(result) -> None:
    got = calls(result)
    assert got[0] == ("add", "42", None)
    assert got[1] == ("echo", "hi", None)
    assert json.loads(got[2][1]) == {"square": 9, "even": False}  # structured content: output schema declared
    assert got[3][1] == "buy milk"  # an embedded text resource becomes its text
    assert got[4][1] == "a dot\n[image image/png, 70 bytes]"
    assert result.answer == "done"


def test_stdio_agent_end_to_end_and_arguments_match_server_schema():
    ts = stdio(exclude=["negate"])
    result, backend, agent = run_script(ts, list(SCRIPT))
    check_run(result)
    assert not ts.is_open and agent.tools == {}  # a plain run opens and closes the server itself

    async def schemas():
        async with stdio(on_unsupported="skip") as t:
            return await server_schemas(t)

    schemas_by_name = asyncio.run(schemas())
    declared = {d["function"]["name"]: d["function"]["parameters"] for d in backend.requests[0].tools}
    for name, params in declared.items():
        assert params == schemas_by_name[name]
    for s in result.steps:
        for c in s.tool_calls:
            jsonschema.validate(c.arguments, schemas_by_name[c.name])


def test_http_agent_end_to_end():
    port = free_port()
    with http_process([PY, SERVER, "--http", str(port)], port):
        ts = MCPToolset.http(f"http://127.0.0.1:{port}/mcp", headers={"X-Test": "1"}, exclude=["negate"])
        result, _, _ = run_script(ts, list(SCRIPT))
    check_run(result)


def test_async_with_keeps_the_server_across_runs():
    async def main():
        ts = stdio(include=["add"])
        agent = Agent(
            ScriptedBackend([call("add", a=1, b=1), "a", call("add", a=2, b=2), "b"]), toolsets=[ts]
        )
        async with agent:
            client = ts._client
            r1 = await agent.arun("one")
            r2 = await agent.arun("two")
            assert ts._client is client  # the same connection served both runs
        assert not ts.is_open
        return calls(r1) + calls(r2)

    assert asyncio.run(main()) == [("add", "2", None), ("add", "4", None)]


def test_concurrent_runs_share_the_servers_and_a_run_on_another_loop_is_refused():
    # runs of one agent at once: the first opens the server, the others share that connection, the last
    # closes it (no "duplicate tool name" from a second opening); a run in another thread (another event loop,
    # which an MCP connection cannot serve) is refused with a message saying so
    def script(messages, tools, tool_choice):
        last = messages[-1]
        return call("echo", text=last["content"]) if last["role"] == "user" else answer(last["content"])

    ts = stdio(include=["echo"])
    agent = Agent(ScriptedBackend(script), toolsets=[ts])
    clients = []

    def run_elsewhere():
        with pytest.raises(RuntimeError) as refused:
            agent.run("four")
        return refused

    async def main():
        results = await asyncio.gather(*(agent.arun(q) for q in ("one", "two", "three")))
        assert not ts.is_open and agent.tools == {}
        async with agent:
            clients.append(ts._client)
            async with agent:  # blocks nest
                other = await asyncio.to_thread(run_elsewhere)
            assert ts.is_open and ts._client is clients[0]
            results.append(await agent.arun("five"))
        assert not ts.is_open
        return [r.answer for r in results], str(other.value)

    answers, refused = asyncio.run(main())
    assert answers == ["one", "two", "three", "five"]
    assert "open on another event loop" in refused and "MCPToolset.copy()" in refused
    assert agent.run("six").answer == "six" and not ts.is_open  # free again for any loop


class SlowClosingToolset:
    """A toolset stand-in whose close waits for the test: to cancel the run that closes it."""

    name = "slow"
    changed = False
    is_open = False

    def __init__(self) -> None:
        self.tools: list = []
        self.closing = asyncio.Event()
        self.may_close = asyncio.Event()

    async def open(self, *, check: bool = True) -> list:
        self.is_open = True
        return []

    async def close(self) -> None:
        self.closing.set()
        await self.may_close.wait()
        self.is_open = False


def test_a_run_cancelled_while_its_servers_close_leaves_the_agent_usable_from_another_loop():
    # the lease kept the finished close task and its event loop: every later run, on a new loop (each
    # agent.run has one), was refused as "open on another event loop"
    ts = SlowClosingToolset()
    agent = Agent(ScriptedBackend(["one", "two"]), toolsets=[ts])

    async def main():
        run = asyncio.create_task(agent.arun("?"))
        await ts.closing.wait()  # the run answered and is closing its toolset
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        ts.may_close.set()
        while ts.is_open:  # the close task, shielded from the cancellation, finishes
            await asyncio.sleep(0)

    asyncio.run(main())
    assert not ts.is_open
    ts.may_close = asyncio.Event()
    ts.may_close.set()
    assert agent.run("?").answer == "two"


def test_pagination_include_exclude_prefix():
    async def main():
        async with stdio(
            "--page", "2", prefix="fx", include=["add", "echo", "stats", "negate"], exclude=["negate"]
        ) as ts:
            listed = await ts.list_server_tools()
            return [t.name for t in listed], [t.name for t in ts.tools]

    listed, tools = asyncio.run(main())
    assert len(listed) == 10  # five pages of two, all followed
    assert tools == ["fx_add", "fx_echo", "fx_stats"]
    result, _, _ = run_script(
        stdio("--page", "3", prefix="fx", include=["add"]), [call("fx_add", a=5, b=6), "ok"]
    )
    assert calls(result) == [("fx_add", "11", None)]


def test_include_or_exclude_naming_no_listed_tool_is_a_warning(caplog):
    async def main():
        async with stdio(include=["add", "ad"], exclude=["negate", "negat"]) as ts:
            return [t.name for t in ts.tools]

    with caplog.at_level("WARNING", logger="agentkit.mcp.client"):
        assert asyncio.run(main()) == ["add"]
    (msg,) = [r.getMessage() for r in caplog.records if "include/exclude" in r.getMessage()]
    assert "'fixture'" in msg and "name no tool it lists: ad, negat (its tools: add, echo," in msg


def test_list_changed_refreshes_before_next_turn():
    ts = stdio(exclude=["negate"])
    result, backend, _ = run_script(ts, [call("grow"), call("extra"), "ok"])
    assert calls(result) == [("grow", "grown", None), ("extra", "extra ran", None)]
    names = [[d["function"]["name"] for d in r.tools] for r in backend.requests]
    assert "extra" not in names[0] and "extra" in names[1]


def test_unsupported_schema_error_and_skip():
    with pytest.raises(MCPSchemaError) as err:
        asyncio.run(stdio().open())
    msg = str(err.value)
    assert "'fixture'" in msg and "'negate'" in msg and "'not'" in msg and "/properties/x" in msg

    async def skip():
        async with stdio(on_unsupported="skip") as ts:
            return [t.name for t in ts.tools], ts.skipped

    names, skipped = asyncio.run(skip())
    assert "negate" not in names and "add" in names
    assert len(skipped) == 1 and "/properties/x" in skipped[0]


def test_is_error_timeout_and_crash_are_tool_errors_and_the_run_returns():
    ts = stdio(exclude=["negate"], timeout=1.0)
    t0 = time.monotonic()
    result, _, _ = run_script(
        ts, [call("fail"), call("sleep", seconds=30), call("crash"), call("add", a=1, b=2), "end"]
    )
    got = calls(result)
    assert got[0] == (
        "fail",
        json.dumps({"error": "MCPToolError: the disk is full", "tool": "fail", "arguments": {}}),
        "exception",
    )
    assert got[1][2] == "timeout" and "timed out after 1 s" in got[1][1]
    assert got[2][2] == "exception" and "MCP server 'fixture', tool 'crash'" in got[2][1]
    assert got[3][2] == "exception" and "Connection closed" in got[3][1]
    assert result.answer == "end"
    # the 30 s sleep was cut by the 1 s timeout (slack for a loaded machine)
    assert time.monotonic() - t0 < 25


@pytest.mark.parametrize(
    ("args", "why", "wait"),
    [
        (["--mode", "hang"], "no answer to initialize / tools/list within 1.5 s", 1.5),
        # garbage and exit end the start at once, not at the (60 s) timeout: their reasons say so
        (["--mode", "garbage"], "it wrote 'this is not json' on stdout, which is not MCP (JSON-RPC)", 60.0),
        # JSON that is not JSON-RPC: the line itself, not the first line of pydantic's error about it
        (["--mode", "json"], """it wrote '{"ready": 1}' on stdout, which is not MCP (JSON-RPC)""", 60.0),
        (
            ["--mode", "exit"],
            "Connection closed (the server exited, or closed its stdout, before answering",
            60.0,
        ),
    ],
)
def test_broken_servers_fail_clearly(args, why, wait):
    t0 = time.monotonic()
    agent = Agent(ScriptedBackend(["never"]), toolsets=[stdio(*args, startup_timeout=wait)])
    with pytest.raises(MCPServerError) as err:
        agent.run("go")
    assert str(err.value).startswith("MCP server 'fixture': failed to start: ") and why in str(err.value)
    assert time.monotonic() - t0 < 30  # never the 60 s timeout


def test_missing_command_and_unreachable_url():
    with pytest.raises(MCPServerError, match="command 'no-such-mcp-server' not found"):
        asyncio.run(MCPToolset.stdio("no-such-mcp-server").open())
    port = free_port()
    with pytest.raises(MCPServerError, match=r"MCP server '127\.0\.0\.1': failed to start"):
        asyncio.run(MCPToolset.http(f"http://127.0.0.1:{port}/mcp", startup_timeout=3).open())
    with pytest.raises(ValueError, match="http:// or https://"):
        MCPToolset.http("ftp://x/mcp")


def test_http_error_status_is_named(tmp_path):
    import subprocess
    import sys

    bundle = tmp_path / "b.yaml"
    bundle.write_text("agentkit_bundle: 1\nname: b\ntools: []\n")
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "agentkit",
        "mcp",
        "serve",
        str(bundle),
        "--http",
        str(port),
        "--api-key",
        "K",
    ]
    with http_process(cmd, port):
        url = f"http://127.0.0.1:{port}/mcp"
        with pytest.raises(MCPServerError) as err:
            asyncio.run(MCPToolset.http(url, startup_timeout=5).open())
        assert f"(HTTP 401 Unauthorized from {url}; check the URL and the headers)" in str(err.value)
        # the port is taken: a one-line error, exit status 2, no traceback
        taken = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert taken.returncode == 2, taken.stderr
    assert taken.stderr.strip().startswith(f"error: cannot listen on 127.0.0.1:{port}: "), taken.stderr
    assert "Traceback" not in taken.stderr


def test_a_server_tool_named_as_the_agents_own_is_refused_and_the_agents_tool_is_kept():
    def add(a: int, b: int) -> str:
        """Local add.

        Args:
            a: first
            b: second
        """
        return f"local {a + b}"

    backend = ScriptedBackend([call("add", a=1, b=2), "done"] * 2)
    agent = Agent(backend, [add], toolsets=[stdio(include=["add"])], loop_guard=None)
    for _ in range(2):  # a second run fails the same way: the failed start did not drop the agent's own 'add'
        with pytest.raises(ToolDefinitionError) as err:
            agent.run("go")
        assert str(err.value) == (
            "MCP server 'fixture': its tool 'add' has the name of one of this agent's own tools "
            "(give the toolset a 'prefix', or 'exclude' the tool)"
        )
        assert list(agent.tools) == ["add"] and agent.tools["add"].description.startswith("Local add")
    result, _, _ = run_script(stdio(include=["add"], prefix="fx"), [call("fx_add", a=1, b=2), "done"])
    assert calls(result) == [("fx_add", "3", None)]


def test_a_tool_name_two_toolsets_list_names_the_other_toolset():
    # it said "has the name of another tool of this agent", naming neither the toolset nor where the other is
    one = MCPToolset.stdio(PY, [SERVER], name="one", include=["add"])
    two = MCPToolset.stdio(PY, [SERVER], name="two", include=["add"])
    agent = Agent(ScriptedBackend([call("add", a=1, b=2), "done"]), toolsets=[one, two], loop_guard=None)
    with pytest.raises(ToolDefinitionError) as err:
        agent.run("go")
    assert str(err.value) == (
        "MCP server 'two': its tool 'add' has the name of a tool of MCP server 'one' "
        "(give the toolset a 'prefix', or 'exclude' the tool)"
    )


def test_a_listing_the_sdk_cannot_read_is_named_in_the_timeout_error():
    agent = Agent(ScriptedBackend(["never"]), toolsets=[stdio("--mode", "deep", startup_timeout=2)])
    with pytest.raises(MCPServerError) as err:
        agent.run("go")
    msg = str(err.value)
    assert msg.startswith(
        "MCP server 'fixture': tools/list failed: no answer to initialize / tools/list within 2 s (it wrote "
        """'{"jsonrpc":"2.0","id":2,"result":{"tools":"""
    )
    assert "(Invalid JSON: recursion limit exceeded at line 1 column " in msg
    assert msg.endswith(" on stdout, which could not be read)")


@pytest.mark.parametrize(
    "defs, pointer",
    [
        (
            {"Node": {"type": "object", "properties": {"n": {"$ref": "#/$defs/Node"}}, "required": ["n"]}},
            "/$defs/Node",
        ),
        ({"A": {"anyOf": [{"$ref": "#/$defs/B"}]}, "B": {"$ref": "#/$defs/A"}}, "/$defs/A/anyOf/0"),
    ],
)
def test_check_tool_schema_names_ref_at_the_place_of_a_loop(defs, pointer):
    # `agentkit mcp list` said "(keyword 'Node' at /$defs)", "(keyword '0' at /$defs/A/anyOf)"
    schema = {
        "type": "object",
        "properties": {"x": {"$ref": "#/$defs/" + next(iter(defs))}},
        "required": ["x"],
    }
    problem = check_tool_schema("f", {**schema, "$defs": defs})
    assert problem is not None and (problem.keyword, problem.path) == ("$ref", pointer)
