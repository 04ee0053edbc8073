"""First smoke tests: every package imports, the layering holds, the CLI answers."""

import ast
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ["agentkit", "model", "dg_kernels", "tools", "sandbox"]
# Allowed project-internal imports (the design card's one-way direction).
ALLOWED = {
    "agentkit": {"agentkit", "model", "dg_kernels", "tools", "sandbox"},
    "model": {"model", "dg_kernels"},
    "dg_kernels": {"dg_kernels"},
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


@pytest.mark.parametrize("pkg", PACKAGES)
def test_no_installed_distribution_ships_a_package_of_the_same_name(pkg):
    """A top-level package of ours must not shadow another distribution's: ``kernels/`` shadowed Hugging
    Face's ``kernels`` (a dependency of transformers >= 5.25), and ``import transformers.models.diffusion_gemma``
    failed with ``cannot import name 'CUDAProperties' from 'kernels'``."""
    import importlib.metadata

    owners = set(importlib.metadata.packages_distributions().get(pkg, [])) - {"agentkit"}
    assert owners == set(), f"{pkg}/ is also the import name of {sorted(owners)}"


def test_transformers_model_module_imports_from_the_repository_root():
    out = subprocess.run(
        [sys.executable, "-c", "import transformers.models.diffusion_gemma.modeling_diffusion_gemma"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr


def test_cli_help():
    out = subprocess.run(
        [sys.executable, "-m", "agentkit", "--help"], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert "Usage" in out.stdout
