"""First smoke tests: every package imports, the layering holds, the CLI answers."""

import ast
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ["agentkit", "model", "kernels", "tools", "sandbox"]
# Allowed project-internal imports (the design card's one-way direction).
ALLOWED = {
    "agentkit": {"agentkit", "model", "kernels", "tools", "sandbox"},
    "model": {"model", "kernels"},
    "kernels": {"kernels"},
    "tools": {"tools", "sandbox"},
    "sandbox": {"sandbox"},
}


@pytest.mark.parametrize("pkg", PACKAGES)
def test_package_imports(pkg):
    mod = __import__(pkg)
    assert mod.__doc__ and len(mod.__doc__) > 20


@pytest.mark.parametrize("pkg", PACKAGES)
def test_import_direction(pkg):
    bad = []
    for path in (ROOT / pkg).rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                if top in PACKAGES and top not in ALLOWED[pkg]:
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {name}")
    assert bad == []


def test_cli_help():
    out = subprocess.run(
        [sys.executable, "-m", "agentkit", "--help"], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert "Usage" in out.stdout
