"""Structure rules read from the code (beside ``test_smoke.test_import_direction``): no import cycles, the
inference path never reaches the training code, no library file over 700 lines and no function over 80, no module
imports another module's ``_private`` name. The figures come from ``scripts/structure.py``."""

from pathlib import Path

from script_modules import load_script

ROOT = Path(__file__).resolve().parents[1]
structure = load_script("structure")

# None: a bundle loads to a spec (``agentkit.bundle_load``), which imports no agent; ``Agent.from_bundle`` builds
# from the spec and ``agentkit.bundle`` (``Bundle.make_agent``) imports the agent, one way.
ALLOWED_DEFERRED_CYCLES: list[list[str]] = []

INFERENCE_ENTRY_POINTS = [
    "agentkit",
    "agentkit.agent",
    "agentkit.backends.embedded",
    "agentkit.serve.app",
    "agentkit.serve.engine",
    "model.turn.chat",
    "model.runtime",
    "model.runtime.batcher",
]


def test_no_import_cycles():
    graph = structure.import_graph(ROOT)
    assert len(graph) > 50  # the graph was read (a broken reader would find no cycle either)
    assert structure.import_cycles(graph) == []


def test_no_import_cycles_counting_deferred_imports():
    graph = structure.import_graph(ROOT, deferred=True)
    assert structure.import_cycles(graph) == ALLOWED_DEFERRED_CYCLES


def test_the_cycle_finder_finds_cycles():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert structure.import_cycles(graph) == [["a", "b", "c"]]


def test_the_inference_path_does_not_import_training_or_test_code():
    graph = structure.import_graph(ROOT, deferred=True)
    seen: set[str] = set()
    todo = list(INFERENCE_ENTRY_POINTS)
    while todo:
        mod = todo.pop()
        if mod not in seen:
            seen.add(mod)
            todo.extend(graph.get(mod, ()))
    assert "model.checkpoint.loading" in seen and "grammar.turn" in seen
    bad = sorted(m for m in seen if m.startswith("model.training") or m == "model.testing")
    assert bad == []


def test_no_library_file_over_700_lines_and_no_function_over_80():
    figures = structure.figures(ROOT)
    assert figures["files"] > 50
    assert figures["long_files"] == []
    assert figures["long_functions"] == []
    # the counter counts: a 90-line function in a throwaway file is found
    assert structure.long_functions(_write_long_function(), 80) == [("long", 91)]


def test_no_library_module_imports_another_modules_private_name():
    assert structure.private_imports(ROOT) == []


def test_the_private_import_detector_finds_a_constructed_case(tmp_path: Path):
    pkg = tmp_path / "agentkit"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from __future__ import annotations\n__version__ = '1'\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "_impl.py").write_text("X = 1\n")
    (pkg / "a.py").write_text("_helper = 1\n_other = 2\n_own = 3\nprint(_own)\n")
    (pkg / "b.py").write_text(
        "from agentkit import __version__\n"
        "from agentkit.a import _helper\n"
        "from agentkit.sub import _impl\n"  # a private submodule is a module, not a name
        "from . import a as mod_a\n"
        "def f():\n"
        "    from .a import _helper as h\n"
        "    return h, mod_a._other\n"
    )
    assert structure.private_imports(tmp_path) == [
        ("agentkit.b", "agentkit.a", "_helper"),
        ("agentkit.b", "agentkit.a", "_other"),
    ]
    assert structure.function_level_imports(tmp_path) == 1


def _write_long_function() -> Path:
    import tempfile

    body = "".join(f"    x{i} = {i}\n" for i in range(89))
    path = Path(tempfile.mkdtemp()) / "long.py"
    path.write_text("def long():\n" + body + "    return 0\n")
    return path
