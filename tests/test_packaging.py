"""What an installed agentkit ships besides its modules."""

import pathlib
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_the_typed_packages_ship_a_py_typed_marker():
    # PEP 561: without the marker, a user's mypy or pyright reads an installed agentkit as untyped (Any)
    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"][
        "package-data"
    ]
    for package in ("agentkit", "tools"):
        assert (ROOT / package / "py.typed").is_file()
        assert "py.typed" in data[package]
