"""``agentkit mcp serve BUNDLE`` with the SDK's client: a tool returning ``ToolContent`` is sent as text and image
content; the bundle's own ``toolsets:`` are re-served (prefix / include / exclude honoured, errors passed on),
their servers started with the serve process and stopped with it (stdin closed, SIGTERM, SIGKILL)."""

from __future__ import annotations

import asyncio
import base64
import os
import signal
import subprocess
import textwrap
import time
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters
from mcp_helpers import PY, SERVER, free_port, wait_gone, wait_port
from typer.testing import CliRunner

from agentkit.cli import app

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
PNG_1PX = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)

TOOLS = """
from agentkit import ToolContent, ToolImage

PNG = bytes.fromhex("PNG_HEX")


def snapshot(label: str) -> ToolContent:
    '''A labelled picture.

    Args:
        label: its caption.
    '''
    return ToolContent(f"picture of {label}", (ToolImage(PNG, "image/png"), ToolImage(PNG, "image/jpeg")))


def blank() -> ToolContent:
    '''A picture without text.'''
    return ToolContent("", (ToolImage(PNG, "image/png"),))
""".replace("PNG_HEX", PNG_1PX.hex())


def write_bundle(tmp_path: Path, tools_module, pidfile: Path) -> str:
    mod = tools_module("mcp_serve_img", TOOLS)
    path = tmp_path / "bundle.yaml"
    path.write_text(
        textwrap.dedent(f"""\
        agentkit_bundle: 1
        name: pictures
        tools:
          - name: snapshot
            python: {mod}:snapshot
          - name: blank
            python: {mod}:blank
        toolsets:
          - mcp:
              command: python
              args: ["{SERVER}", "--pidfile", "{pidfile}"]
              prefix: fx
              include: [add, image, fail, echo]
              exclude: [echo]
        """)
    )
    return str(path)


def stdio(bundle: str) -> StdioServerParameters:
    return StdioServerParameters(command=PY, args=["-m", "agentkit", "mcp", "serve", bundle], env=ENV)


def blocks(result) -> list[tuple[str, str]]:
    out = []
    for c in result.content:
        if c.type == "text":
            out.append(("text", c.text))
        else:
            out.append((c.mime_type, base64.b64decode(c.data).hex()))
    return out


def test_images_and_toolsets_served_over_stdio(tmp_path, tools_module):
    pidfile = tmp_path / "upstream.pid"
    bundle = write_bundle(tmp_path, tools_module, pidfile)

    async def main():
        async with Client(stdio(bundle), mode="legacy") as client:
            listed = {t.name: t for t in (await client.list_tools()).tools}
            calls = [
                await client.call_tool("snapshot", {"label": "a dot"}),
                await client.call_tool("blank", {}),
                await client.call_tool("fx_add", {"a": 3, "b": 4}),
                await client.call_tool("fx_image", {}),
                await client.call_tool("fx_fail", {}),
                await client.call_tool("fx_add", {"a": "x", "b": 4}),
            ]
            return listed, calls, int(pidfile.read_text())

    listed, calls, upstream = asyncio.run(main())
    assert sorted(listed) == ["blank", "fx_add", "fx_fail", "fx_image", "snapshot"]
    assert listed["fx_add"].input_schema["required"] == ["a", "b"]
    assert listed["fx_add"].description == "Add two integers."
    png = PNG_1PX.hex()
    snap, blank, add, image, fail, bad = calls
    assert not snap.is_error
    assert blocks(snap) == [("text", "picture of a dot"), ("image/png", png), ("image/jpeg", png)]
    assert blocks(blank) == [("image/png", png)]
    assert (add.is_error, blocks(add)) == (False, [("text", "7")])
    assert (image.is_error, blocks(image)) == (False, [("text", "a dot"), ("image/png", png)])
    assert (fail.is_error, blocks(fail)) == (True, [("text", "the disk is full")])
    assert (bad.is_error, blocks(bad)) == (
        True,
        [("text", "invalid arguments for 'fx_add': a: 'x' is not of type 'integer'")],
    )
    assert wait_gone(upstream), "the re-served MCP server outlived `agentkit mcp serve`"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_http_serve_stops_its_toolsets_servers(tmp_path, tools_module, sig):
    pidfile = tmp_path / "upstream.pid"
    bundle = write_bundle(tmp_path, tools_module, pidfile)
    port = free_port()
    proc = subprocess.Popen(
        [PY, "-m", "agentkit", "mcp", "serve", bundle, "--http", str(port)],
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        wait_port(port, proc, timeout=30)
        from mcp.client.streamable_http import streamable_http_client

        async def main():
            async with Client(streamable_http_client(f"http://127.0.0.1:{port}/mcp")) as client:
                return await client.call_tool("fx_add", {"a": 20, "b": 22})

        assert blocks(asyncio.run(main())) == [("text", "42")]
        upstream = int(pidfile.read_text())
        proc.send_signal(sig)
        proc.wait(15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stderr = proc.stderr.read().decode() if proc.stderr else ""
    assert "5 tools on http://127.0.0.1:" in stderr or sig == signal.SIGKILL, stderr
    assert "Traceback" not in stderr, stderr
    assert wait_gone(upstream), f"the re-served MCP server outlived `agentkit mcp serve` ({sig.name})"


def test_a_toolset_that_fails_or_clashes_is_a_clear_error(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "agentkit_bundle: 1\nname: b\ntools: []\ntoolsets:\n"
        f"  - mcp: {{command: python, args: ['{SERVER}', --mode, exit]}}\n"
    )
    res = CliRunner().invoke(app, ["mcp", "serve", str(bad)])
    assert res.exit_code == 2, res.output
    assert f"error: MCP server 'mcp_fixture_server' ({bad}:5 toolsets[0].mcp): failed to start" in res.output
    clash = tmp_path / "clash.yaml"
    clash.write_text(
        "agentkit_bundle: 1\nname: b\ntools: []\ntoolsets:\n"
        f"  - mcp: {{command: python, args: ['{SERVER}'], include: [add]}}\n"
        f"  - mcp: {{command: python, args: ['{SERVER}'], include: [add], name: other}}\n"
    )
    res = CliRunner().invoke(app, ["mcp", "serve", str(clash), "--http", "0"])
    assert res.exit_code == 2, res.output
    assert (  # both named with their lines, as start errors are
        f"tool 'add' of MCP server 'other' ({clash}:6 toolsets[1].mcp) has the name of a tool of MCP server "
        f"'mcp_fixture_server' ({clash}:5 toolsets[0].mcp)"
    ) in res.output.replace("\n", "")


def test_a_toolset_tool_whose_name_agentkit_cannot_take_is_a_clear_error(tmp_path):
    # was a traceback (MCPSchemaError escaped the command), saying "the embedded tool-call constraint
    # cannot enforce" and "keyword 'schema'" for a name, with no model in sight
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "agentkit_bundle: 1\nname: b\ntools: []\ntoolsets:\n"
        f"  - mcp: {{command: python, args: ['{SERVER}', --bad-name]}}\n"
    )
    res = CliRunner().invoke(app, ["mcp", "serve", str(bad)])
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    assert "error: agentkit cannot use these tools (on_unsupported: skip leaves them out):\n" in res.output
    assert f"MCP server 'mcp_fixture_server' ({bad}:5 toolsets[0].mcp), tool 'ns:write': " in res.output
    assert "(keyword 'name' at /)" in res.output
    assert "constraint" not in res.output


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_stdio_serve_ends_on_a_signal_and_stops_its_toolsets(tmp_path, tools_module, sig):
    pidfile = tmp_path / "upstream.pid"
    bundle = write_bundle(tmp_path, tools_module, pidfile)
    proc = subprocess.Popen(
        [PY, "-m", "agentkit", "mcp", "serve", bundle],
        env=ENV,
        stdin=subprocess.PIPE,  # left open: only the signal ends it
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not pidfile.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        upstream = int(pidfile.read_text())
        time.sleep(1.0)  # the start finishes (the signal handlers are in place before it)
        proc.send_signal(sig)
        proc.wait(15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stderr = proc.stderr.read().decode() if proc.stderr else ""
    assert proc.returncode == 128 + sig, stderr
    assert "Traceback" not in stderr, stderr
    assert wait_gone(upstream), f"the re-served MCP server outlived `agentkit mcp serve` ({sig.name})"


def test_serve_a_folder_names_its_yaml_files():
    folder = ROOT / "examples" / "mcp"
    res = CliRunner().invoke(app, ["mcp", "serve", str(folder)])
    assert res.exit_code == 2
    assert f"{folder} is a folder; give a bundle's YAML file (YAML files there: {folder / 'notes.yaml'})" in (
        " ".join(res.output.split())
    ), res.output
