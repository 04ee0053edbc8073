"""Structure figures for the library: size, long functions, long files and import cycles.

Usage::

    .venv/bin/python scripts/structure.py [--json] [--max-function 80] [--max-file 700]

The library is every ``.py`` file under ``agentkit/``, ``model/``, ``grammar/``, ``schema/``, ``dg_kernels/``,
``tools/`` and ``sandbox/``
(tests, benchmarks, scripts and examples are not library code). Figures:

- ``lines``: physical lines of all library files;
- ``long_functions``: functions and methods longer than ``--max-function`` lines (decorators excluded, the
  docstring included), Triton kernel bodies (``@triton.jit``) excepted;
- ``long_files``: library files longer than ``--max-file`` lines;
- ``import_cycles``: strongly connected components of two or more modules in the graph of module-level imports
  (imports inside functions and under ``if TYPE_CHECKING:`` are deferred and cannot form a cycle at import time);
- ``import_cycles_with_deferred``: the same over every import, deferred ones included: the dependency
  tangles a reader sees even where Python never hits them;
- ``private_imports``: ``(importer, imported module, name)`` for every library import of another module's
  ``_private`` name, at module level or inside a function: ``from x.y import _name``, or ``m._name`` where ``m``
  is bound by an import to a library module (``__future__`` and dunder names such as ``__version__`` excluded;
  a package's private submodule, ``from pkg import _sub``, is a module, not a name, and does not count);
- ``function_level_imports``: import statements inside function bodies of library code.

The import graph is read with :mod:`ast`; nothing is imported or run.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("agentkit", "model", "grammar", "schema", "dg_kernels", "tools", "sandbox")


def library_files(root: Path = ROOT) -> list[Path]:
    """Every library ``.py`` file under ``root``, sorted; checkpoints and data folders hold none."""
    return sorted(p for pkg in PACKAGES for p in (root / pkg).rglob("*.py"))


def module_name(path: Path, root: Path = ROOT) -> str:
    """``agentkit/serve/app.py`` -> ``agentkit.serve.app``; a package's ``__init__.py`` is the package."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_triton_kernel(node: ast.AST) -> bool:
    decorators = getattr(node, "decorator_list", [])
    return any("triton" in ast.unparse(d) and "jit" in ast.unparse(d) for d in decorators)


def long_functions(path: Path, limit: int) -> list[tuple[str, int]]:
    """``(qualified name, lines)`` of each function in ``path`` longer than ``limit`` lines."""
    tree = ast.parse(path.read_text(), str(path))
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = (child.end_lineno or child.lineno) - child.lineno + 1
                if n > limit and not _is_triton_kernel(child):
                    found.append((f"{prefix}{child.name}", n))
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")

    visit(tree, "")
    return found


def _imports(tree: ast.Module, module: str, is_package: bool, deferred: bool, modules: set[str]) -> set[str]:
    """Modules ``module`` imports: at import time only, or with ``deferred`` also those imported inside
    functions and under ``if TYPE_CHECKING:`` (the dependencies a reader sees)."""
    names: set[str] = set()

    def absolute(level: int, target: str | None) -> str:
        base = module.split(".") if is_package else module.split(".")[:-1]
        if level > 1:
            base = base[: len(base) - (level - 1)]
        return ".".join([*base, target] if target else base)

    def walk(body: list[ast.stmt]) -> None:
        for stmt in body:
            if isinstance(stmt, ast.Import):
                names.update(a.name for a in stmt.names)
            elif isinstance(stmt, ast.ImportFrom):
                src = absolute(stmt.level, stmt.module) if stmt.level else (stmt.module or "")
                # ``from pkg import sub`` loads the submodule ``pkg.sub``; the package itself counts only when a
                # name is taken from it that is not a submodule.
                for a in stmt.names:
                    names.add(f"{src}.{a.name}" if f"{src}.{a.name}" in modules else src)
            elif isinstance(stmt, ast.If):
                if deferred or "TYPE_CHECKING" not in ast.unparse(stmt.test):
                    walk(stmt.body)
                walk(stmt.orelse)
            elif deferred and isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                walk(stmt.body)
            elif isinstance(stmt, (ast.With, ast.For, ast.While)) and deferred:
                walk(stmt.body)
            elif isinstance(stmt, (ast.Try,)):
                walk(stmt.body)
                for h in stmt.handlers:
                    walk(h.body)
                walk(stmt.orelse)
                walk(stmt.finalbody)

    walk(tree.body)
    return names


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_imports(root: Path = ROOT) -> list[tuple[str, str, str]]:
    """``(importer, imported module, name)`` for each import of another library module's ``_private`` name,
    sorted, one entry per triple (see the module docstring)."""
    modules = {module_name(p, root): p for p in library_files(root)}
    found: set[tuple[str, str, str]] = set()
    for mod, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        base = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
        bound: dict[str, str] = {}  # local name -> library module it is bound to by an import
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                src = node.module or ""
                if node.level:
                    up = base[: len(base) - (node.level - 1)]
                    src = ".".join([*up, src] if src else up)
                for a in node.names:
                    if f"{src}.{a.name}" in modules:
                        bound[a.asname or a.name] = f"{src}.{a.name}"
                    elif _is_private(a.name) and src != mod and src != "__future__":
                        found.add((mod, src, a.name))
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname:
                        bound[a.asname] = a.name
                    else:
                        top = a.name.split(".")[0]
                        bound[top] = top
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and _is_private(node.attr):
                target = ast.unparse(node.value)
                head, _, rest = target.partition(".")
                if head in bound:
                    target = ".".join([bound[head], rest] if rest else [bound[head]])
                    if target in modules and target != mod:
                        found.add((mod, target, node.attr))
    return sorted(found)


def function_level_imports(root: Path = ROOT) -> int:
    """Import statements inside function bodies of library code (nested functions counted once)."""
    count = 0
    for path in library_files(root):
        tree = ast.parse(path.read_text(), str(path))
        seen: set[int] = set()
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(fn):
                    if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in seen:
                        seen.add(id(node))
                        count += 1
    return count


def import_graph(root: Path = ROOT, deferred: bool = False) -> dict[str, set[str]]:
    """Library module -> the library modules it imports (see :func:`_imports` for ``deferred``)."""
    files = library_files(root)
    modules = {module_name(p, root): p for p in files}
    graph: dict[str, set[str]] = {}
    for mod, path in modules.items():
        imported = _imports(
            ast.parse(path.read_text()), mod, path.name == "__init__.py", deferred, set(modules)
        )
        graph[mod] = {m for m in imported if m in modules and m != mod}
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with two or more modules (Tarjan's algorithm), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0

    def connect(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))
    for v in sorted(graph):
        if v not in index:
            connect(v)
    return sorted(out)


def figures(root: Path = ROOT, max_function: int = 80, max_file: int = 700) -> dict[str, object]:
    """All figures as one JSON-ready dict (see the module docstring)."""
    files = library_files(root)
    sizes = {str(p.relative_to(root)): len(p.read_text().splitlines()) for p in files}
    longs = [
        {"function": f"{p.relative_to(root)}:{name}", "lines": n}
        for p in files
        for name, n in long_functions(p, max_function)
    ]
    return {
        "files": len(files),
        "lines": sum(sizes.values()),
        "long_files": sorted(
            ({"file": f, "lines": n} for f, n in sizes.items() if n > max_file),
            key=lambda d: -int(d["lines"]),
        ),
        "long_functions": sorted(longs, key=lambda d: -int(d["lines"])),
        "import_cycles": import_cycles(import_graph(root)),
        "import_cycles_with_deferred": import_cycles(import_graph(root, deferred=True)),
        "private_imports": [list(t) for t in private_imports(root)],
        "function_level_imports": function_level_imports(root),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--max-function", type=int, default=80, help="longest allowed function, lines")
    ap.add_argument("--max-file", type=int, default=700, help="longest allowed file, lines")
    args = ap.parse_args()
    fig = figures(ROOT, args.max_function, args.max_file)
    if args.json:
        print(json.dumps(fig, indent=1))
        return
    print(f"library: {fig['files']} files, {fig['lines']} lines")
    long_files = fig["long_files"]
    long_funcs = fig["long_functions"]
    cycles = fig["import_cycles"]
    assert isinstance(long_files, list) and isinstance(long_funcs, list) and isinstance(cycles, list)
    print(f"files over {args.max_file} lines: {len(long_files)}")
    for d in long_files:
        print(f"  {d['lines']:5d}  {d['file']}")
    print(f"functions over {args.max_function} lines: {len(long_funcs)}")
    for d in long_funcs:
        print(f"  {d['lines']:5d}  {d['function']}")
    deferred = fig["import_cycles_with_deferred"]
    assert isinstance(deferred, list)
    print(f"import cycles at import time: {len(cycles)}")
    for c in cycles:
        print("  " + ", ".join(c))
    print(f"import cycles counting deferred imports (in functions, under TYPE_CHECKING): {len(deferred)}")
    for c in deferred:
        print("  " + ", ".join(c))
    private = fig["private_imports"]
    assert isinstance(private, list)
    print(f"imports of another module's _private name: {len(private)}")
    for importer, imported, name in private:
        print(f"  {importer} <- {imported}.{name}")
    print(f"imports inside functions: {fig['function_level_imports']}")


if __name__ == "__main__":
    main()
