"""``agentkit mcp list``: a server command or URL, its tools and whether the constraint can enforce each."""

from __future__ import annotations

import json
import os

from mcp_helpers import PY, SERVER, free_port, http_process
from typer.testing import CliRunner

from agentkit.cli import app


def test_list_stdio_json():
    res = CliRunner().invoke(app, ["mcp", "list", PY, SERVER, "--page", "4", "--json"])
    assert res.exit_code == 0, res.output
    rows = {r["name"]: r for r in json.loads(res.stdout)}
    assert len(rows) == 10
    assert rows["add"]["enforceable"] is True and rows["add"]["description"] == "Add two integers."
    neg = rows["negate"]
    assert (neg["enforceable"], neg["keyword"], neg["pointer"]) == (False, "not", "/properties/x")


def test_list_shows_a_tool_whose_name_agentkit_cannot_take():
    # was a traceback: listing made agentkit tools of every tool, and one name it cannot take stopped it
    res = CliRunner().invoke(app, ["mcp", "list", PY, SERVER, "--bad-name", "--json"])
    assert res.exit_code == 0, res.output
    rows = {r["name"]: r for r in json.loads(res.stdout)}
    assert len(rows) == 11 and rows["add"]["enforceable"] is True
    bad = rows["ns:write"]
    assert (bad["enforceable"], bad["keyword"], bad["pointer"]) == (False, "name", "")


def test_list_http_table_and_errors():
    port = free_port()
    with http_process([PY, SERVER, "--http", str(port)], port):
        res = CliRunner().invoke(app, ["mcp", "list", f"http://127.0.0.1:{port}/mcp", "--header", "X-A: b"])
    assert res.exit_code == 0, res.output
    assert "add  [enforceable]  Add two integers." in res.stdout
    assert "negate  [NOT enforceable: keyword 'not' at /properties/x]" in res.stdout
    res = CliRunner().invoke(app, ["mcp", "list", "no-such-mcp-server-x"])
    assert res.exit_code == 2 and "command 'no-such-mcp-server-x' not found" in res.output


def test_run_with_a_toolset_bundle_and_a_server_that_fails(tmp_path):
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"tool_calls": [{"name": "add", "arguments": {"a": 2, "b": 5}}]}, "seven"]))
    ok = tmp_path / "ok.yaml"
    ok.write_text(
        f"agentkit_bundle: 1\nname: b\ntools: []\ntoolsets:\n  - mcp: {{command: python, args: ['{SERVER}']}}\n"
    )
    res = CliRunner().invoke(
        app, ["run", str(ok), "add", "--backend", "scripted", "--model", str(script), "--json"]
    )
    assert res.exit_code == 0, res.output
    calls = [c for s in json.loads(res.stdout)["steps"] for c in s["tool_calls"]]
    assert [(c["name"], c["content"]) for c in calls] == [("add", "7")]
    bad = tmp_path / "bad.yaml"
    bad.write_text(ok.read_text().replace("']}", "', --mode, exit]}"))
    res = CliRunner().invoke(app, ["run", str(bad), "add", "--backend", "scripted", "--model", str(script)])
    assert res.exit_code == 1
    assert (
        f"MCPServerError: MCP server 'mcp_fixture_server' ({bad}:5 toolsets[0].mcp): failed to start: "
        "MCPError: Connection closed (the server exited, or closed its stdout, before answering initialize)"
        in " ".join(res.output.split())
    ), res.output


def test_list_errors_a_new_user_meets():
    runner = CliRunner()
    res = runner.invoke(app, ["mcp", "list", "ftp://127.0.0.1/mcp"])
    assert res.exit_code == 2
    assert "MCP server URL must be http:// or https:// with a host, got 'ftp://127.0.0.1/mcp'" in res.output
    code = "import sys; sys.stderr.write('boom: no config file\\n'); sys.exit(3)"
    res = runner.invoke(app, ["mcp", "list", PY, "-c", code])
    assert res.exit_code == 2
    assert res.output.strip().endswith(
        "failed to start: MCPError: Connection closed (the server exited, or closed its stdout, before "
        "answering initialize); its stderr ends: boom: no config file"
    ), res.output
    assert "Traceback" not in res.output


def test_list_a_script_that_is_not_executable():
    res = CliRunner().invoke(app, ["mcp", "list", SERVER])
    assert res.exit_code == 2
    assert (
        f"command {SERVER!r} is a file but not executable (run it with its interpreter: python {SERVER})"
        in " ".join(res.output.split())
    ), res.output


def test_list_options_for_the_other_kind_of_server_are_refused():
    res = CliRunner().invoke(app, ["mcp", "list", "http://127.0.0.1:1/mcp", "--env", "A=b"])
    assert res.exit_code == 2 and "--env and arguments apply to a server command, not to a URL" in res.output
    res = CliRunner().invoke(app, ["mcp", "list", PY, SERVER, "--header", "A: b"])
    assert res.exit_code == 2 and "--header applies to a URL server, not to a command" in res.output


def test_list_python_is_the_interpreter_agentkit_runs_on(tmp_path, monkeypatch):
    """`mcp list python SERVER.py` runs the server on agentkit's own interpreter (its venv), as a bundle's
    `command: python` does, not on whatever `python` comes first on PATH."""
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 'not this python' >&2\nexit 3\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    res = CliRunner().invoke(app, ["mcp", "list", "python", SERVER, "--json"])
    assert res.exit_code == 0, res.output
    assert len(json.loads(res.stdout)) == 10


NULL_BOUND_SERVER = """
import asyncio, mcp_types as t
from mcp.server.lowlevel.server import Server
from mcp.server.stdio import stdio_server
tool = t.Tool(name="n", input_schema={"type": "object", "properties": {"a": {"type": "number", "maximum": None}}})
async def tools(ctx, params):
    return t.ListToolsResult(tools=[tool])
async def main():
    s = Server("nb", on_list_tools=tools)
    async with stdio_server() as (r, w):
        await s.run(r, w, s.create_initialization_options())
asyncio.run(main())
"""


def test_list_calls_a_schema_that_is_no_json_schema_not_enforceable():
    # a server's `maximum: inf` reaches the client as null: no agent can take the tool, so list says so
    res = CliRunner().invoke(app, ["mcp", "list", PY, "-c", NULL_BOUND_SERVER, "--json"])
    assert res.exit_code == 0, res.output
    (row,) = json.loads(res.stdout)
    assert (row["enforceable"], row["keyword"], row["pointer"]) == (False, "maximum", "/properties/a")
    assert row["reason"].startswith("not a valid JSON Schema: None is not of type 'number'")
