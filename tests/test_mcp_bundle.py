"""Bundles with ``toolsets: - mcp: ...``: a working stdio toolset (``${ENV}``, prefix, include) and errors with
file:line:field (missing command, bad URL, unknown key, unset variable, command and url together)."""

from __future__ import annotations

import textwrap

import pytest
from mcp_helpers import SERVER

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
    ],
)
def test_toolset_errors_name_file_line_and_field(tmp_path, toolsets, line, field, message):
    path = write(tmp_path, toolsets)
    with pytest.raises(BundleError) as ei:
        load_bundle(path)
    issue = ei.value.first
    assert (issue.file, issue.line, issue.field) == (path, line, field), str(ei.value)
    assert message in issue.message
    assert f"{path}:{line}:" in str(ei.value)
