"""The example bundle (examples/mcp/notes.yaml: the notes MCP server beside it) on the embedded default model:
schema-constrained calls reach the MCP server and its answers come back (CPU, 1 thread, fixed seed)."""

from __future__ import annotations

import asyncio
import json
import pathlib

import jsonschema
import pytest
from mcp_helpers import embedded_test_backend

from agentkit import MaxStepsExceeded, load_bundle

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def backend():
    return embedded_test_backend()


def test_embedded_agent_calls_the_notes_server(backend):
    bundle = load_bundle(ROOT / "examples" / "mcp" / "notes.yaml")
    agent = bundle.make_agent(backend=backend, tool_choice="required", max_steps=1, loop_guard=None)
    try:
        result = agent.run("Save a note titled dentist saying Tuesday at 3pm")
    except MaxStepsExceeded as exc:  # the forced first turn is what is checked
        result = exc.result

    async def schemas():
        async with bundle.toolsets[0].copy() as ts:
            return {t.name: t.input_schema for t in await ts.list_server_tools()}

    by_name = asyncio.run(schemas())
    calls = [c for s in result.steps for c in s.tool_calls]
    assert calls, "tool_choice='required' must produce a call"
    for c in calls:
        jsonschema.validate(c.arguments, by_name[c.name])  # every call matches the server's own schema
        if c.name == "add_note":
            assert c.error is None and json.loads(c.content) == {
                "result": f"saved note {c.arguments['title']!r}"
            }
        elif c.name == "list_notes":
            assert c.error is None and "groceries" in json.loads(c.content)["result"]
        else:  # read_note: the server's text, or its isError for a title it does not have
            assert c.error is None or c.error.startswith("MCPToolError:")
