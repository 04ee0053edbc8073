"""A new user's mistakes (trial 10): each is a one-line error naming the problem and where, never a traceback.
Offline, CPU."""

from typing import Annotated

import pytest
from pydantic import Field
from typer.testing import CliRunner

from agentkit.cli import app
from agentkit.errors import ToolDefinitionError
from agentkit.history import Conversation
from agentkit.tools import tool

runner = CliRunner()


def test_a_pattern_pydantic_cannot_compile_is_a_tool_definition_error():
    def find(code: Annotated[str, Field(pattern="[")]) -> str:
        return code

    with pytest.raises(
        ToolDefinitionError, match=r"^tool 'find': parameter 'code': invalid constraint: regex parse"
    ):
        tool(find)


def test_check_reports_a_python_tool_whose_pattern_does_not_compile(tmp_path, tools_module):
    mod = tools_module(
        "nu_pattern",
        """
        from typing import Annotated
        from pydantic import Field

        def find(code: Annotated[str, Field(pattern="[")]) -> str:
            return code
        """,
    )
    p = tmp_path / "b.yaml"
    p.write_text(f"agentkit_bundle: 1\nname: b\ntools:\n  - name: find\n    python: '{mod}:find'\n")
    res = runner.invoke(app, ["check", str(p)])
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    assert (
        f"{p}:4:5: tools[0]: tool 'find': parameter 'code': invalid constraint: regex parse error"
        in res.output
    )


def test_saving_a_conversation_into_a_missing_folder_names_the_file_asked_for(tmp_path):
    target = tmp_path / "no" / "such" / "conv.json"
    with pytest.raises(FileNotFoundError) as err:
        Conversation().with_turn("q", "a").save(target)
    assert err.value.filename == str(target)
    assert str(err.value) == f"[Errno 2] No such file or directory: '{target}'"
