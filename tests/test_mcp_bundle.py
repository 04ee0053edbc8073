"""Bundles with ``toolsets: - mcp: ...``: a working stdio toolset (``${ENV}``, prefix, include) and errors with
file:line:field (missing command, bad URL, unknown key, unset variable, command and url together)."""

from __future__ import annotations

import pathlib
import subprocess
import sys
import textwrap

import pytest
from mcp_helpers import PY, SERVER

from agentkit import BundleError, load_bundle
from agentkit.backends.scripted import ScriptedBackend, call


def write(tmp_path, toolsets: str) -> str:
    text = "agentkit_bundle: 1\nname: b\ntools: []\ntoolsets:\n" + textwrap.indent(
        textwrap.dedent(toolsets), "  "
    )
    path = tmp_path / "bundle.yaml"
    path.write_text(text)
    return str(path)


def test_stdio_toolset_from_a_bundle_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("FIXTURE_SERVER", SERVER)
    path = write(
        tmp_path,
        """\
        - mcp:
            command: python
            args: ["${FIXTURE_SERVER}", "--page", "2"]
            env: {GREETING: hello}
            prefix: fx
            include: [add, echo]
            timeout: 5
        """,
    )
    bundle = load_bundle(path)
    assert len(bundle.toolsets) == 1 and bundle.toolsets[0].params.args == [SERVER, "--page", "2"]
    agent = bundle.make_agent(backend=ScriptedBackend([call("fx_add", a=3, b=4), "seven"]))
    result = agent.run("3+4?")
    rec = result.steps[0].tool_calls[0]
    assert (rec.name, rec.content, rec.error) == ("fx_add", "7", None)
    assert result.answer == "seven"
    assert not bundle.toolsets[0].is_open  # agents get copies; the bundle's own stay closed


@pytest.mark.parametrize(
    ("toolsets", "line", "field", "message"),
    [
        (
            "- mcp: {command: no-such-mcp-server-x}\n",
            5,
            "toolsets[0].mcp.command",
            "command 'no-such-mcp-server-x' not found",
        ),
        (
            "- mcp:\n    url: ftp://example.com/mcp\n",
            6,
            "toolsets[0].mcp.url",
            "url must be http:// or https://",
        ),
        (
            "- mcp:\n    url: http://127.0.0.1:1/mcp\n    colour: red\n",
            7,
            "toolsets[0].mcp.colour",
            "unknown field 'colour'",
        ),
        (
            '- mcp:\n    command: python\n    args: ["${NO_SUCH_VAR_X}"]\n',
            7,
            "toolsets[0].mcp.args[0]",
            "environment variable NO_SUCH_VAR_X is not set",
        ),
        ("- mcp: {command: python, url: 'http://x/mcp'}\n", 5, "toolsets[0].mcp", "exactly one of 'command'"),
        ("- mcp: {command: python, prefix: 'a b'}\n", 5, "toolsets[0].mcp.prefix", "does not match"),
        # was a run's "failed to start: FileNotFoundError: ..." with no field, and `agentkit check` said ok
        (
            "- mcp: {command: python, cwd: no-such-dir}\n",
            5,
            "toolsets[0].mcp.cwd",
            "folder {dir}/no-such-dir does not exist",
        ),
    ],
)
def test_toolset_errors_name_file_line_and_field(tmp_path, toolsets, line, field, message):
    path = write(tmp_path, toolsets)
    with pytest.raises(BundleError) as ei:
        load_bundle(path)
    issue = ei.value.issues[0]
    assert (issue.file, issue.line, issue.field) == (path, line, field), str(ei.value)
    assert message.format(dir=tmp_path) in issue.message
    assert f"{path}:{line}:" in str(ei.value)


def choice_bundle(tmp_path, name: str) -> str:
    path = tmp_path / "choice.yaml"
    path.write_text(
        "agentkit_bundle: 1\nname: b\ntools: []\n"
        f"toolsets:\n  - mcp: {{command: python, args: ['{SERVER}'], prefix: fx, include: [add, echo]}}\n"
        f"agent:\n  tool_choice:\n    name: {name}\n"
    )
    return str(path)


def test_bundle_tool_choice_may_name_an_mcp_tool(tmp_path):
    bundle = load_bundle(choice_bundle(tmp_path, "fx_add"))
    agent = bundle.make_agent(backend=ScriptedBackend([call("fx_add", a=1, b=2), "three"]))
    assert agent.tool_choice == {"name": "fx_add"}
    result = agent.run("1+2?")
    assert [(c.name, c.content) for s in result.steps for c in s.tool_calls] == [("fx_add", "3")]


def test_bundle_tool_choice_naming_no_tool_is_an_error_at_its_line(tmp_path):
    path = choice_bundle(tmp_path, "fx_sub")
    bundle = load_bundle(path)  # MCP tools are known only once an agent lists them
    agent = bundle.make_agent(backend=ScriptedBackend(["unused"]))
    with pytest.raises(BundleError) as ei:
        agent.run("1-2?")
    issue = ei.value.issues[0]
    assert (issue.file, issue.line, issue.field) == (path, 8, "agent.tool_choice.name")
    assert issue.message == (
        "tool_choice names 'fx_sub', which is no tool of this agent nor of its MCP toolsets "
        "('mcp_fixture_server'); tools: fx_add, fx_echo"
    )
    assert not any(ts.is_open for ts in agent._toolsets)


def test_python_tool_choice_naming_no_tool_after_listing(tmp_path):
    from agentkit import Agent, ToolDefinitionError
    from agentkit.mcp import MCPToolset

    ts = MCPToolset.stdio(PY, [SERVER], include=["add"])
    agent = Agent(ScriptedBackend(["unused"]), tool_choice={"name": "sub"}, toolsets=[ts])
    with pytest.raises(ToolDefinitionError, match=r"names 'sub', which is no tool .*; tools: add$"):
        agent.run("1-2?")
    assert not ts.is_open


def test_example_notes_server_errors_reach_the_model():
    from pathlib import Path

    example = Path(__file__).resolve().parents[1] / "examples" / "mcp" / "notes.yaml"
    script = [call("read_note", title="dentist"), call("read_note", title="groceries"), "done"]
    result = load_bundle(example).make_agent(backend=ScriptedBackend(script)).run("Read my note dentist")
    missing, found = [c for s in result.steps for c in s.tool_calls]
    assert missing.error is not None and missing.error.endswith(
        "Error executing tool read_note: no note titled 'dentist'; titles: groceries"
    )
    assert (found.error, found.content) == (None, '{"result":"milk, eggs, bread"}')  # its output schema


def test_a_bundle_without_toolsets_never_imports_the_mcp_sdk():
    # A subprocess, so modules imported by other tests do not count; the SDK costs about 0.4 s on every run.
    code = (
        "import sys\n"
        "from agentkit import load_bundle\n"
        "load_bundle('examples/code_search/bundle.yaml')\n"
        "print(sorted(m for m in ('mcp', 'agentkit.mcp.client') if m in sys.modules))\n"
    )
    root = pathlib.Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root)
    assert out.stdout.strip() == "[]"
