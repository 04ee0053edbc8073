"""``agentkit mcp list``: a server command or URL, its tools and whether the constraint can enforce each."""

from __future__ import annotations

import json

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


def test_list_http_table_and_errors():
    port = free_port()
    with http_process([PY, SERVER, "--http", str(port)], port):
        res = CliRunner().invoke(app, ["mcp", "list", f"http://127.0.0.1:{port}/mcp", "--header", "X-A: b"])
    assert res.exit_code == 0, res.output
    assert "add  [enforceable]  Add two integers." in res.stdout
    assert "negate  [NOT enforceable: keyword 'not' at /properties/x]" in res.stdout
    res = CliRunner().invoke(app, ["mcp", "list", "no-such-mcp-server-x"])
    assert res.exit_code == 2 and "command 'no-such-mcp-server-x' not found" in res.output
