"""Code-search tools on a temporary repository built in the test (git and plain-directory modes)."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import time
import types

import pytest

from tools import code_search as cs
from tools.code_search import CodeRepo, GitIgnore, PathOutsideRootError

ROOT = pathlib.Path(__file__).resolve().parents[1]

BUNDLES_PY = '''"""Bundles."""
from typing import TYPE_CHECKING


def load_bundle(path: str, *, strict: bool = True) -> "Bundle":
    """Load a bundle from a YAML file.

    More text.
    """
    return Bundle(path)


def _load_bundle_impl(path):
    return path


class Bundle:
    """A bundle."""

    def __init__(self, path: str) -> None:
        self.path = path

    def load(self):
        return load_bundle(self.path)

    class Inner:
        def load(self):
            pass


async def fetch_bundle(url):
    def helper():
        pass
    return url


if TYPE_CHECKING:
    def typed_only() -> None: ...
'''

FILES = {
    "pkg/__init__.py": "",
    "pkg/bundles.py": BUNDLES_PY,
    "tests/test_bundles.py": "def load_bundle():\n    pass\n\n\ndef test_load_bundle():\n    assert load_bundle() is None\n",
    "docs/notes.md": "Call `load_bundle` like this:\n\n    def load_bundle(path): ...\n\nclass Bundle is documented.\n",
    "web/app.js": (
        "export async function loadBundle(url) {\n  return fetch(url);\n}\n"
        "const parseBundle = (x) => x;\n"
        "export default class BundleView extends Base {\n}\n"
    ),
    "go/main.go": (
        "package main\n\ntype Config struct {\n\tName string\n}\n\n"
        "func (s *Server) LoadBundle() error {\n\treturn nil\n}\n"
    ),
    "scripts/run.sh": "#!/bin/sh\nsetup_env() {\n  echo load_bundle\n}\n",
    "broken.py": "def load_bundle_broken(:\n    pass\n",
    ".gitignore": "build/\n*.log\n!keep.log\n",
    "build/gen.py": "def load_bundle_generated():\n    pass\n",
    "debug.log": "load_bundle called\n",
    "keep.log": "load_bundle kept\n",
    "sub/.gitignore": "/local.py\n",
    "sub/local.py": "def load_bundle_local():\n    pass\n",
    "sub/deeper/local.py": "def load_bundle_deeper():\n    pass\n",
    "long.txt": "\n".join(f"line {i}" for i in range(1, 251)) + "\n",
}


def _write_tree(root: pathlib.Path) -> None:
    for rel, text in FILES.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    (root / "blob.bin").write_bytes(b"load_bundle\0\x01\x02")


@pytest.fixture
def outside(tmp_path):
    out = tmp_path / "outside"
    out.mkdir()
    (out / "secret.py").write_text("def load_bundle_outside():\n    pass\n")
    return out


def _add_links(root: pathlib.Path, outside: pathlib.Path) -> None:
    os.symlink(outside / "secret.py", root / "link_out.py")
    os.symlink(outside, root / "linkdir")
    os.symlink(root / "pkg" / "bundles.py", root / "link_in.py")


def _make_tree(root: pathlib.Path, outside: pathlib.Path) -> pathlib.Path:
    """``root`` made and filled with the sample tree and its links; returned."""
    root.mkdir()
    _write_tree(root)
    _add_links(root, outside)
    return root


@pytest.fixture
def git_repo(tmp_path, outside):
    root = _make_tree(tmp_path / "repo", outside)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run(["git", "-C", str(root), "add", "pkg", "tests", "go", ".gitignore"], check=True)
    return CodeRepo(root)


@pytest.fixture
def plain_repo(tmp_path, outside):
    return CodeRepo(_make_tree(tmp_path / "plain", outside))


@pytest.fixture(params=["git", "plain"])
def repo(request):
    return request.getfixturevalue(f"{request.param}_repo")


def test_files_honour_gitignore_and_stay_inside(repo):
    files = repo.files()
    assert "pkg/bundles.py" in files and "web/app.js" in files  # tracked and untracked-not-ignored
    assert "keep.log" in files  # re-included by !keep.log
    assert "sub/deeper/local.py" in files  # "/local.py" is anchored to sub/
    for gone in ("build/gen.py", "debug.log", "sub/local.py", "link_out.py"):
        assert gone not in files
    assert not any(f.startswith(("linkdir/", ".git/")) for f in files)
    assert "link_in.py" not in files  # a link to a listed file would only duplicate its hits


def test_find_definition_exact_python_function_first(repo):
    out = repo.find_definitions("load_bundle", max_results=10)
    first = out["matches"][0]
    assert first == {
        "location": "pkg/bundles.py:5",
        "path": "pkg/bundles.py",
        "line": 5,
        "end_line": 10,
        "kind": "function",
        "name": "load_bundle",
        "qualname": "load_bundle",
        "signature": "def load_bundle(path: str, *, strict: bool=True) -> 'Bundle'",
        "doc": "Load a bundle from a YAML file.",
    }
    locations = [m["location"] for m in out["matches"]]
    # the definitions named load_bundle itself, source before tests; not the names that contain it
    assert locations == ["pkg/bundles.py:5", "tests/test_bundles.py:1"]
    assert out["total"] == 2 and out["truncated"] is False
    # part of a name that names no definition: prefix matches, then substring matches; source before tests,
    # public before private
    out = repo.find_definitions("load_bund", max_results=10)
    assert [(m["name"], m["path"]) for m in out["matches"]] == [
        ("load_bundle_broken", "broken.py"),
        ("load_bundle", "pkg/bundles.py"),
        ("load_bundle_deeper", "sub/deeper/local.py"),
        ("load_bundle", "tests/test_bundles.py"),
        ("_load_bundle_impl", "pkg/bundles.py"),
        ("test_load_bundle", "tests/test_bundles.py"),
    ]
    # nothing from docs, ignored files or outside the root
    assert not any(
        m["path"].endswith((".md", ".log")) or m["path"].startswith("build/") for m in out["matches"]
    )
    names = [m["name"] for m in out["matches"]]
    assert "load_bundle_outside" not in names and "load_bundle_generated" not in names
    assert out["total"] == len(out["matches"]) and out["truncated"] is False


def test_find_definition_module_level_before_methods_of_the_same_name(tmp_path):
    (tmp_path / "core.py").write_text(
        "class Agent:\n    def make(self):\n        def make():\n            pass\n"
    )
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "sub" / "factory.py").write_text("\n\ndef make():\n    pass\n")
    out = CodeRepo(tmp_path).find_definitions("make", max_results=10)
    # the module-level function first, though its path is deeper; then the method, then the nested function
    assert [(m["location"], m["qualname"], m["kind"]) for m in out["matches"]] == [
        ("pkg/sub/factory.py:3", "make", "function"),
        ("core.py:2", "Agent.make", "method"),
        ("core.py:3", "Agent.make.make", "function"),
    ]
    assert out["total"] == 3


def test_find_definition_normalizes_model_style_queries(repo):
    # a span copied from "load_bundle - where is it defined?" ended in " -" and found nothing
    wrapped = ("load_bundle -", "load_bundle?", "`load_bundle`.", "load_bundle():", "- load_bundle,")
    for q in ("def load_bundle()", "`load_bundle`", "load_bundle(path)", "  LOAD_BUNDLE ", *wrapped):
        assert repo.find_definitions(q)["matches"][0]["location"] == "pkg/bundles.py:5", q


def test_find_definition_kinds_and_qualnames(repo):
    classes = repo.find_definitions("bundl", kind="class")["matches"]
    assert [(m["name"], m["path"]) for m in classes] == [
        ("Bundle", "pkg/bundles.py"),
        ("BundleView", "web/app.js"),
    ]
    # "bundle" names the class Bundle (ignoring case): BundleView, which only starts with it, is left out
    assert [m["name"] for m in repo.find_definitions("bundle", kind="class")["matches"]] == ["Bundle"]
    methods = repo.find_definitions("load", kind="method", max_results=50)["matches"]
    assert {m["qualname"] for m in methods} == {"Bundle.load", "Bundle.Inner.load"}
    assert repo.find_definitions("Bundle.load")["matches"][0]["qualname"] == "Bundle.load"
    assert repo.find_definitions("Inner.load")["matches"][0]["line"] == 27
    nested = repo.find_definitions("helper")["matches"][0]
    assert (nested["qualname"], nested["kind"]) == ("fetch_bundle.helper", "function")
    assert repo.find_definitions("fetch_bundle")["matches"][0]["signature"] == "async def fetch_bundle(url)"
    assert repo.find_definitions("typed_only")["matches"][0]["line"] == 38


def test_find_definition_takes_a_module_qualified_name(repo):
    # the dotted import path people write: module path, then the qualified name
    for q in ("pkg.bundles.load_bundle", "bundles.load_bundle", "PKG.BUNDLES.LOAD_BUNDLE"):
        out = repo.find_definitions(q)
        assert [m["location"] for m in out["matches"]] == ["pkg/bundles.py:5"], q
    assert repo.find_definitions("pkg.bundles.Bundle.Inner.load")["matches"][0]["line"] == 27
    assert (
        repo.find_definitions("tests.test_bundles.load_bundle")["matches"][0]["path"]
        == "tests/test_bundles.py"
    )
    # the module part must match whole segments
    assert repo.find_definitions("kg.bundles.load_bundle")["matches"] == []
    assert repo.find_definitions("pkg.other.load_bundle")["matches"] == []


def test_find_definition_module_path_of_a_package_is_its_init(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("def make():\n    pass\n")
    (tmp_path / "pkg" / "other.py").write_text("def make():\n    pass\n")
    out = CodeRepo(tmp_path).find_definitions("pkg.make")
    assert [m["location"] for m in out["matches"]] == ["pkg/__init__.py:1"]


def test_find_definition_as_written_leaves_out_other_cases(tmp_path):
    (tmp_path / "tables.py").write_text(
        "class _Tables:\n    pass\n\n\ndef _tables(tok):\n    return _Tables()\n"
    )
    repo = CodeRepo(tmp_path)
    out = repo.find_definitions("_tables")
    assert [(m["location"], m["name"]) for m in out["matches"]] == [("tables.py:5", "_tables")]
    assert out["total"] == 1
    # no definition has the name as written: both, ignoring case, in line order
    out = repo.find_definitions("_TABLES")
    assert [m["location"] for m in out["matches"]] == ["tables.py:1", "tables.py:5"]
    # a test's fixture named as written does not hide the source's class
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text("def tables():\n    pass\n")
    (tmp_path / "core.py").write_text("class Tables:\n    pass\n")
    out = repo.find_definitions("tables")
    assert [m["location"] for m in out["matches"]] == ["tests/test_x.py:1", "core.py:1"]


def test_find_definition_other_languages_and_broken_python(repo):
    js = repo.find_definitions("loadBundle")["matches"]
    assert [(m["location"], m["kind"]) for m in js][:2] == [
        ("web/app.js:1", "function"),
        ("go/main.go:7", "function"),
    ]
    assert repo.find_definitions("parseBundle")["matches"][0]["location"] == "web/app.js:4"
    assert repo.find_definitions("Config")["matches"][0] == {
        "location": "go/main.go:3",
        "path": "go/main.go",
        "line": 3,
        "end_line": 3,
        "kind": "class",
        "name": "Config",
        "qualname": "Config",
        "signature": "type Config struct {",
        "doc": "",
    }
    assert repo.find_definitions("setup_env")["matches"][0]["location"] == "scripts/run.sh:2"
    assert repo.find_definitions("load_bundle_broken")["matches"][0]["location"] == "broken.py:1"


def test_find_definition_nothing_found_has_hint(repo):
    out = repo.find_definitions("no_such_symbol_xyz")
    assert out["matches"] == [] and out["total"] == 0
    assert "No definition matches 'no_such_symbol_xyz'" in out["hint"]
    with pytest.raises(ValueError, match="empty"):
        repo.find_definitions("()")


def test_find_definition_cap_and_cache(repo):
    out = repo.find_definitions("load_", max_results=2)
    assert len(out["matches"]) == 2 and out["truncated"] is True and out["total"] > 2
    # an edited file is re-parsed (cache keyed on mtime and size)
    p = repo.root / "pkg" / "bundles.py"
    p.write_text(BUNDLES_PY.replace("def load_bundle(", "def load_bundle_v2("))
    st = p.stat()
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert repo.find_definitions("load_bundle_v2")["matches"][0]["location"] == "pkg/bundles.py:5"


def test_search_code_hits_with_context_and_ranking(repo):
    out = repo.search("load_bundle", context_lines=1, max_results=100)
    locs = [m["location"] for m in out["matches"]]
    # definition lines first (source before tests), then the other hits, source before tests/scripts/docs
    assert locs[:6] == [
        "broken.py:1",
        "pkg/bundles.py:5",
        "pkg/bundles.py:13",
        "sub/deeper/local.py:1",
        "tests/test_bundles.py:1",
        "tests/test_bundles.py:5",
    ]
    assert locs.index("pkg/bundles.py:24") < locs.index("tests/test_bundles.py:6")
    assert locs.index("keep.log:1") < locs.index("docs/notes.md:1")
    assert "debug.log:1" not in locs and not any(loc.startswith(("build/", "blob.bin")) for loc in locs)
    hit = next(m for m in out["matches"] if m["location"] == "pkg/bundles.py:24")
    assert hit["text"] == "return load_bundle(self.path)"
    assert hit["context"] == "23:     def load(self):\n24>         return load_bundle(self.path)\n25: "
    assert out["files"] == len({loc.split(":")[0] for loc in locs})
    assert out["truncated"] is False and out["total"] == len(locs)


def test_a_double_star_folder_in_a_glob_may_match_no_folder(repo):
    # as in git and ripgrep: **/*.py takes the files at the root too, a/**/b.py takes a/b.py
    everywhere = {m["path"] for m in repo.search("load_bundle", glob="**/*.py", max_results=50)["matches"]}
    assert (
        "broken.py" in everywhere and "pkg/bundles.py" in everywhere and "sub/deeper/local.py" in everywhere
    )
    assert "sub/local.py" not in everywhere  # ignored by sub/.gitignore, whatever the glob
    assert [m["location"] for m in repo.search(r"^class \w+:", glob="pkg/**/bundles.py")["matches"]] == [
        "pkg/bundles.py:17"
    ]
    defs = repo.find_definitions("load_bundle_broken", glob="**/*.py")
    assert [m["path"] for m in defs["matches"]] == ["broken.py"]
    assert repo.search("load_bundle", glob="**/*.md")["files"] == 1  # docs/notes.md; not debug.log


def test_search_code_options(repo):
    assert {m["path"] for m in repo.search("load_bundle", glob="*.py")["matches"]} <= {
        "pkg/bundles.py",
        "tests/test_bundles.py",
        "broken.py",
        "sub/deeper/local.py",
    }
    assert repo.search("LOAD_BUNDLE", case_sensitive=True)["matches"] == []
    assert repo.search("LOAD_BUNDLE")["total"] > 0
    regex = repo.search(r"^class \w+:", glob="pkg/*")
    assert [m["location"] for m in regex["matches"]] == ["pkg/bundles.py:17"]
    capped = repo.search("load", max_results=3)
    assert len(capped["matches"]) == 3 and capped["truncated"] is True
    literal = repo.search("load_bundle(self.path")  # unbalanced paren: searched as text
    assert "not a valid regular expression" in literal["note"]
    assert [m["location"] for m in literal["matches"]] == ["pkg/bundles.py:24"]
    with pytest.raises(ValueError, match="context_lines"):
        repo.search("x", context_lines=11)


def test_a_pattern_that_backtracks_without_end_stops_at_the_time_budget(tmp_path):
    # (a|a)+$ backtracks 2**n ways on n a's that do not end the line: with `re` this search never ended
    (tmp_path / "m.py").write_text('ok = "aaa"\nx = "' + "a" * 60 + '!"\n')
    out = CodeRepo(tmp_path, time_budget_s=0.2).search("(a|a)+$")
    assert (out["total"], out["truncated"]) == (0, True)
    assert out["note"] == "the pattern took over 0.2 s; the hits so far are listed: simplify it"
    found = CodeRepo(tmp_path, time_budget_s=0.2).search('^ok = "(a|a)+"$')
    assert ([m["location"] for m in found["matches"]], found["truncated"]) == (["m.py:1"], False)


def test_a_glob_of_many_double_stars_fails_at_once(tmp_path):
    deep = tmp_path.joinpath(*["a"] * 30)
    deep.mkdir(parents=True)
    (deep / "b.py").write_text("x = 1\n")
    repo = CodeRepo(tmp_path, time_budget_s=60)
    out = repo.search("x", glob="**/" * 12 + "c.py")  # with re: minutes of backtracking on this one path
    assert (out["total"], out["truncated"]) == (0, False)
    assert repo.search("x", glob="**/" * 12 + "b.py")["matches"][0]["location"] == "a/" * 30 + "b.py:1"


def test_a_glob_naming_a_folder_searches_the_files_under_it(repo):
    for glob in ("pkg", "pkg/", "./pkg/*.py", "/pkg/*", "pkg/bundles.py"):
        out = repo.search("def load_bundle", glob=glob)
        assert [m["location"] for m in out["matches"]] == ["pkg/bundles.py:5"], glob
        assert "note" not in out
    assert repo.search("load", glob="pk")["matches"] == []  # a folder's name whole, not its start
    nothing = repo.search("load_bundle", glob="lib/")
    assert (nothing["total"], nothing["note"]) == (
        0,
        "no file path matches the glob 'lib/'; nothing was searched",
    )
    assert repo.find_definitions("load_bundle", glob="lib")["hint"] == (
        "no file path matches the glob 'lib'; nothing was searched"
    )
    assert repo.find_definitions("load_bundle", glob="pkg")["matches"][0]["location"] == "pkg/bundles.py:5"


def test_a_root_with_too_many_files_is_listed_in_part_and_says_so(tmp_path):
    # a root such as / or a home folder: the listing stops at max_files (or the time budget), not after a walk of all
    for i in range(6):
        (tmp_path / f"m{i}.py").write_text(f"def f{i}():\n    pass\n")
    repo = CodeRepo(tmp_path, max_files=4)
    files, note = repo.listing(time.monotonic() + 60)
    assert files == ["m0.py", "m1.py", "m2.py", "m3.py"]
    assert note == (
        f"the root {str(repo.root)!r} holds too many files to list in 10 s (at most 4); only part of it was "
        "searched: run from the repository, or set $AGENTKIT_CODE_ROOT to it"
    )
    hits = repo.search("def f")
    assert (hits["total"], hits["truncated"], hits["note"]) == (4, True, note)
    found = repo.find_definitions("f1")
    assert (found["matches"][0]["location"], found["truncated"], found["note"]) == ("m1.py:1", True, note)
    assert repo.find_definitions("f5")["hint"] == note  # not "no definition": m5.py was not listed
    assert CodeRepo(tmp_path).listing(time.monotonic() + 60) == ([f"m{i}.py" for i in range(6)], None)
    assert CodeRepo(tmp_path, max_files=6).listing(time.monotonic() + 60)[1] is None  # all of them: no note


def test_read_file_ranges(repo):
    out = repo.read("pkg/bundles.py", 5, 6)
    assert out == {
        "path": "pkg/bundles.py",
        "start_line": 5,
        "end_line": 6,
        "total_lines": 38,
        "content": '5: def load_bundle(path: str, *, strict: bool = True) -> "Bundle":\n'
        '6:     """Load a bundle from a YAML file.',
        "truncated": False,
    }
    default = repo.read("long.txt", 10)
    assert (default["start_line"], default["end_line"], default["total_lines"]) == (10, 109, 250)
    assert default["content"].splitlines()[0] == "10: line 10"
    assert default["truncated"] is False
    tail = repo.read("long.txt", 240, 400)
    assert (tail["end_line"], tail["truncated"]) == (250, False)
    capped = repo.read("long.txt", 1, 250, max_lines=50)
    assert (capped["end_line"], capped["truncated"]) == (50, True)
    assert repo.read("./pkg/../pkg/bundles.py", 1, 1)["path"] == "pkg/bundles.py"
    assert repo.read(str(repo.root / "pkg" / "bundles.py"), 1, 1)["content"] == '1: """Bundles."""'


def test_read_file_takes_the_location_a_search_returned(repo):
    location = repo.find_definitions("load_bundle")["matches"][0]["location"]
    assert location == "pkg/bundles.py:5"
    out = repo.read(location, end_line=6)
    assert (out["path"], out["start_line"], out["end_line"]) == ("pkg/bundles.py", 5, 6)
    assert out["content"].startswith("5: def load_bundle(")
    assert out["note"] == "read 'pkg/bundles.py:5' as the file 'pkg/bundles.py' from line 5"
    assert repo.read(location, 2, 2)["content"] == "2: from typing import TYPE_CHECKING"  # explicit start
    assert "note" not in repo.read("pkg/bundles.py", 5, 5)
    with pytest.raises(FileNotFoundError, match=r"no file 'pkg/missing\.py:5'"):
        repo.read("pkg/missing.py:5")
    with pytest.raises(ValueError, match="start_line 500 is past the end"):
        repo.read("pkg/bundles.py:500")


@pytest.mark.parametrize(
    ("path", "error", "message"),
    [
        ("../outside/secret.py", PathOutsideRootError, "outside the repository root"),
        ("pkg/../../outside/secret.py", PathOutsideRootError, "outside the repository root"),
        ("link_out.py", PathOutsideRootError, "outside the repository root"),
        ("linkdir/secret.py", PathOutsideRootError, "outside the repository root"),
        ("/etc/passwd", PathOutsideRootError, "outside the repository root"),
        ("pkg/missing.py", FileNotFoundError, "use find_definition or search_code"),
        ("pkg", IsADirectoryError, "__init__.py, bundles.py"),
        ("blob.bin", ValueError, "binary"),
        ("", ValueError, "path is empty"),
    ],
)
def test_read_file_refuses(repo, path, error, message):
    with pytest.raises(error, match=message):
        repo.read(path)


def test_read_file_bad_lines(repo):
    with pytest.raises(ValueError, match="past the end"):
        repo.read("pkg/bundles.py", 999)
    with pytest.raises(ValueError, match="before start_line"):
        repo.read("pkg/bundles.py", 5, 2)


def test_gitignore_matcher_patterns():
    gi = GitIgnore()
    gi.add_lines(
        [
            "# comment",
            "",
            "*.pyc",
            "/top.txt",
            "doc/*.txt",
            "**/cache",
            "a/**/b",
            "[ab].cfg",
            "out/",
            "*.tmp",
            "!important.tmp",
            "\\#hash",
        ]
    )
    gi.add_lines(["*.md", "!README.md"], base="pkg")
    yes = [
        ("x.pyc", False),
        ("deep/x.pyc", False),
        ("top.txt", False),
        ("doc/a.txt", False),
        ("cache", True),
        ("x/y/cache", True),
        ("a/b", False),
        ("a/x/y/b", False),
        ("a.cfg", False),
        ("q/b.cfg", False),
        ("out", True),
        ("x/out", True),
        ("y.tmp", False),
        ("#hash", False),
        ("pkg/notes.md", False),
        ("pkg/sub/notes.md", False),
    ]
    no = [
        ("x.py", False),
        ("sub/top.txt", False),
        ("doc/sub/a.txt", False),
        ("c.cfg", False),
        ("out", False),  # "out/" only matches directories
        ("important.tmp", False),
        ("pkg/README.md", False),
        ("notes.md", False),  # pkg's rules do not apply above pkg
    ]
    for rel, is_dir in yes:
        assert gi.ignored(rel, is_dir), rel
    for rel, is_dir in no:
        assert not gi.ignored(rel, is_dir), rel


def test_module_functions_use_configured_root(git_repo, tmp_path, monkeypatch):
    cs.set_root(git_repo.root)
    try:
        assert cs.find_definition("load_bundle")["matches"][0]["location"] == "pkg/bundles.py:5"
        assert cs.search_code("setup_env", glob="*.sh")["matches"][0]["location"] == "scripts/run.sh:2"
        assert cs.read_file("go/main.go", 3, 3)["content"] == "3: type Config struct {"
        with pytest.raises(
            ValueError, match=r"Invalid arguments: start_line: Input should be greater than or equal to 1"
        ):
            cs.read_file("go/main.go", 0)
        with pytest.raises(ValueError, match=r"Invalid arguments: kind: Input should be 'any', 'function'"):
            cs.find_definition("x", kind="module")
        with pytest.raises(ValueError, match=r"max_results: Input should be less than or equal to 100"):
            cs.search_code("x", max_results=1000)
    finally:
        cs.set_root(None)
    # default: $AGENTKIT_CODE_ROOT, else the current directory at call time
    monkeypatch.setenv(cs.CODE_ROOT_ENV, str(git_repo.root))
    assert cs.get_repo().root == git_repo.root
    monkeypatch.delenv(cs.CODE_ROOT_ENV)
    monkeypatch.chdir(git_repo.root / "pkg")
    assert cs.get_repo().root == git_repo.root / "pkg"
    assert (
        cs.find_definition("load_bundle")["matches"][0]["location"] == "bundles.py:5"
    )  # git, sub-directory root
    with pytest.raises(NotADirectoryError):
        cs.set_root(tmp_path / "nope")


def test_plain_copy_without_git_matches_git_mode(git_repo, tmp_path):
    plain = tmp_path / "copy"
    shutil.copytree(git_repo.root, plain, symlinks=True, ignore=shutil.ignore_patterns(".git"))
    assert CodeRepo(plain).files() == git_repo.files()


def test_finds_real_definition_in_this_project():
    repo = CodeRepo(ROOT)
    out = repo.find_definitions("find_definition", kind="function")
    assert out["matches"][0]["location"].startswith("tools/code_search/__init__.py:")
    assert out["matches"][0]["signature"].startswith("def find_definition(name: SymbolName")
    assert not any(m["path"].startswith(".venv/") for m in out["matches"])


class _FakeRunner:
    """Records what run_python hands to the sandbox; answers like a finished program."""

    def __init__(self, stdout="ok\n", stderr="", exit_code=0):
        self.calls = []
        self.stdout, self.stderr, self.exit_code = stdout, stderr, exit_code

    def __call__(self, code, files, timeout_s):
        self.calls.append((code, files, timeout_s))
        return types.SimpleNamespace(
            stdout=self.stdout,
            stderr=self.stderr,
            exit_code=self.exit_code,
            timed_out=False,
            oom_killed=False,
        )


@pytest.fixture
def runner(git_repo):
    fake = _FakeRunner()
    cs.set_root(git_repo.root)
    cs.set_sandbox_runner(fake)
    yield fake
    cs.set_sandbox_runner(None)
    cs.set_root(None)


def test_run_python_copies_named_files(runner, git_repo):
    out = cs.run_python("print(1)", files=["pkg/bundles.py", "./go/../go/main.go"], timeout=5)
    assert out == {
        "exit_code": 0,
        "stdout": "ok\n",
        "stderr": "",
        "timed_out": False,
        "oom_killed": False,
        "files": ["go/main.go", "pkg/bundles.py"],
    }
    ((code, files, timeout_s),) = runner.calls
    assert code == "print(1)" and timeout_s == 5.0
    assert files == {
        "pkg/bundles.py": BUNDLES_PY.encode(),
        "go/main.go": FILES["go/main.go"].encode(),
    }


def test_run_python_counts_a_file_named_twice_once(runner, git_repo, monkeypatch):
    # a file listed twice (or by two spellings) counted twice against the size limit and was refused
    size = len(BUNDLES_PY.encode())
    monkeypatch.setattr(cs, "MAX_SNIPPET_FILE_BYTES", size + 10)
    out = cs.run_python("print(1)", files=["pkg/bundles.py", "pkg/bundles.py", "./pkg/bundles.py"])
    assert out["files"] == ["pkg/bundles.py"]
    assert runner.calls[0][1] == {"pkg/bundles.py": BUNDLES_PY.encode()}


def test_run_python_reports_failures_and_cuts_long_output(runner):
    runner.exit_code, runner.stdout, runner.stderr = 1, "x" * 5000, "Traceback...\nZeroDivisionError"
    out = cs.run_python("1/0")
    assert out["exit_code"] == 1 and out["stderr"].endswith("ZeroDivisionError")
    assert out["stdout"] == "[... cut]\n" + "x" * 4000
    assert runner.calls[0][1] == {} and runner.calls[0][2] == 20.0


@pytest.mark.parametrize(
    ("files", "error", "message"),
    [
        (["../outside/secret.py"], PathOutsideRootError, "outside the repository root"),
        (["link_out.py"], PathOutsideRootError, "outside the repository root"),
        (["pkg/missing.py"], FileNotFoundError, "no file"),
        (["pkg"], IsADirectoryError, "^'pkg' is a directory, not a file; list the files in it to copy$"),
        (["blob.bin"], ValueError, "binary"),
        ([f"f{i}.py" for i in range(21)], ValueError, "files: List should have at most 20 items"),
    ],
)
def test_run_python_refuses_bad_files(runner, files, error, message):
    with pytest.raises(error, match=message):
        cs.run_python("print(1)", files=files)
    assert runner.calls == []


def test_run_python_bad_timeout(runner):
    with pytest.raises(ValueError, match="timeout: Input should be less than or equal to 60"):
        cs.run_python("print(1)", timeout=61)


def test_find_definition_finds_module_level_variables_and_falls_back_to_other_kinds(tmp_path):
    (tmp_path / "limits.py").write_text(
        "MAX_ITEMS = 10\nlimit: int = 3\nclass Box:\n    size = 1\n\n\ndef max_items_for(box):\n    local = 2\n"
        "    return MAX_ITEMS\n"
    )
    repo = CodeRepo(tmp_path)
    found = repo.find_definitions("MAX_ITEMS")
    assert [(m["location"], m["kind"], m["signature"]) for m in found["matches"]] == [
        ("limits.py:1", "variable", "MAX_ITEMS = 10")
    ]
    assert repo.find_definitions("limit")["matches"][0]["signature"] == "limit: int = 3"
    for q in (
        "variable MAX_ITEMS",
        "constant MAX_ITEMS",
        "const MAX_ITEMS",
        "MAX_ITEMS constant",
    ):  # kind words
        assert repo.find_definitions(q)["matches"][0]["location"] == "limits.py:1", q
    # a function of a longer name ranks before a variable of the same rank; locals and class attributes are no
    # module-level variables
    assert [m["name"] for m in repo.find_definitions("max_item")["matches"]] == ["max_items_for", "MAX_ITEMS"]
    assert repo.find_definitions("local")["matches"] == [] and repo.find_definitions("size")["matches"] == []
    # asked as a function: no function has the name, so its definitions of other kinds, with a note
    as_function = repo.find_definitions("MAX_ITEMS", kind="function")
    assert [m["location"] for m in as_function["matches"]] == ["limits.py:1"]
    assert "No function definition matches 'MAX_ITEMS'" in as_function["note"]
    assert repo.find_definitions("max_items_for", kind="class")["matches"][0]["kind"] == "function"
    # without the name itself, the kind asked for; a part of a name never brings in another kind
    assert [m["name"] for m in repo.find_definitions("max_item", kind="function")["matches"]] == [
        "max_items_for"
    ]
    assert repo.find_definitions("MAX_IT", kind="class")["matches"] == []


def test_find_definition_another_kinds_name_in_another_case_leaves_the_kinds_partial_matches(tmp_path):
    (tmp_path / "budget.py").write_text("def tool_output_budget():\n    pass\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_b.py").write_text("BUDGET = 3\n")
    repo = CodeRepo(tmp_path)
    as_function = repo.find_definitions("budget", kind="function")  # was the test's BUDGET, with a note
    assert [m["name"] for m in as_function["matches"]] == ["tool_output_budget"] and "note" not in as_function
    # the name as written, or no partial match of the kind, still brings in the other kinds
    assert [m["name"] for m in repo.find_definitions("BUDGET", kind="function")["matches"]] == ["BUDGET"]
    assert [m["name"] for m in repo.find_definitions("budget", kind="class")["matches"]] == ["BUDGET"]


def test_find_definition_variable_signatures_count_lines_as_python_does(tmp_path):
    (tmp_path / "ff.py").write_text("A = 1\n\x0c\nB = 2\nS = 'x\u2028y'\nC = 3\r\nD = 4\n")
    repo = CodeRepo(tmp_path)
    signatures = [repo.find_definitions(n)["matches"][0]["signature"] for n in "ABCD"]
    assert signatures == ["A = 1", "B = 2", "C = 3", "D = 4"]  # were 'A = 1', '', "S = 'x", ...
