"""First smoke tests: every package imports, the layering holds, the CLI answers."""

import ast
import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ["agentkit", "model", "grammar", "schema", "dg_kernels", "tools", "sandbox"]
# Allowed project-internal imports (the design card's one-way direction: agentkit -> model -> grammar -> schema).
ALLOWED = {
    "agentkit": {"agentkit", "model", "grammar", "schema", "dg_kernels", "tools", "sandbox"},
    "model": {"model", "grammar", "schema", "dg_kernels"},
    "grammar": {"grammar", "schema"},
    "schema": {"schema"},
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


TORCH_FREE_SAMPLE = """
import json
import sys
from grammar.parse import format_tool_call, parse_tool_calls
from grammar.turn import tool_call_grammar
from schema import normalize_tool

spec = normalize_tool({"type": "function", "function": {"name": "add", "parameters": {"type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"$ref": "#/$defs/n"}}, "required": ["a"],
    "$defs": {"n": {"type": "number", "minimum": 0}}}}})
grammar = tool_call_grammar([spec], tool_choice="required")
call = parse_tool_calls(format_tool_call("add", {"a": 1, "b": 2.5}) + "<|tool_response>").calls[0]
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "transformers", "model", "agentkit"))
print(json.dumps([len(grammar) > 100, call.name, call.arguments, spec.parameters["properties"]["b"], heavy]))
"""


def test_schema_and_grammar_build_a_tool_grammar_without_torch_model_or_agentkit():
    out = subprocess.run(
        [sys.executable, "-c", TORCH_FREE_SAMPLE], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr
    # the $ref inlined, the call formatted and parsed back, and no torch/transformers/model/agentkit loaded
    assert json.loads(out.stdout) == [True, "add", {"a": 1, "b": 2.5}, {"type": "number", "minimum": 0}, []]


def test_the_import_graph_from_schema_and_grammar_reaches_only_them():
    from script_modules import load_script

    structure = load_script("structure")
    graph = structure.import_graph(ROOT, deferred=True)
    todo = [m for m in graph if m.split(".")[0] in ("schema", "grammar")]
    assert "schema.refs" in todo and "grammar.turn" in todo
    seen: set[str] = set()
    while todo:
        mod = todo.pop()
        if mod not in seen:
            seen.add(mod)
            todo.extend(graph[mod])
    assert sorted({m.split(".")[0] for m in seen}) == ["grammar", "schema"]
    assert not any(m.startswith("grammar") for dep in seen if dep.startswith("schema") for m in graph[dep])
    third_party = {"torch", "transformers"}
    bad = []
    for pkg in ("schema", "grammar"):
        for path in (ROOT / pkg).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
                if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    names = [node.module]
                bad += [
                    f"{path.relative_to(ROOT)}:{node.lineno} {n}"
                    for n in names
                    if n.split(".")[0] in third_party
                ]
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
