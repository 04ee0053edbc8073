"""What an installed agentkit ships besides its modules."""

import pathlib
import tomllib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_the_typed_packages_ship_a_py_typed_marker():
    # PEP 561: without the marker, a user's mypy or pyright reads an installed agentkit as untyped (Any)
    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"][
        "package-data"
    ]
    for package in ("agentkit", "tools"):
        assert (ROOT / package / "py.typed").is_file()
        assert "py.typed" in data[package]


def test_a_type_checker_reads_grounded_str_as_str(tmp_path):
    # Grounded was a class to mypy: "Grounded" expects no type arguments, and a Grounded[str] parameter was
    # not a str, so a user's type-checked tool module failed on the annotation the docs recommend
    mypy_api = pytest.importorskip("mypy.api")
    user = tmp_path / "user_tools.py"
    user.write_text(
        "from agentkit.tool_schema import Grounded\n\n\n"
        "def find(name: Grounded[str], kind: Grounded[str | None] = None) -> str:\n"
        "    return name.upper()\n\n\n"
        'wrong: Grounded[int] = "s"\n',
        encoding="utf-8",
    )
    out, err, status = mypy_api.run(
        [
            "--no-error-summary",
            "--no-incremental",
            "--follow-imports=skip",
            "--ignore-missing-imports",
            str(ROOT / "agentkit" / "tool_schema.py"),
            str(user),
        ]
    )
    assert status == 1, out + err
    assert out.splitlines() == [
        f'{user}:8: error: Incompatible types in assignment (expression has type "str", variable has type "int")  '
        "[assignment]"
    ]
