"""Code-search tools over a local repository: find definitions, full-text regex search, read a file range.

The repository root is configurable (:func:`set_root`, the ``AGENTKIT_CODE_ROOT`` environment variable, or
the current directory at call time). Which files are searched:

- inside a git work tree: ``git ls-files --cached --others --exclude-standard`` (tracked files plus untracked
  files that ``.gitignore`` / ``.git/info/exclude`` / the global excludes do not ignore);
- otherwise: a walk of the root that honours every ``.gitignore`` on the way (:class:`GitIgnore`, gitignore(5)
  as the ``pathspec`` library implements it) and skips ``.git``.

Paths never escape the root: every path (given by the model or listed) is resolved, symlinks and ``..``
included, and must lie under the resolved root; listed files that resolve outside are skipped, and a path
argument that does raises :class:`PathOutsideRootError`. Binary files (a NUL byte in the first 8 KiB) and
files over ``max_file_bytes`` are skipped.

Definitions come from Python's :mod:`ast` for ``.py`` files (functions, async functions, classes, methods,
with qualified names, signatures and the first docstring line) and from a language-agnostic regular
expression over declaration keywords (``def``, ``class``, ``function``, ``fn``, ``func``, ``struct``,
``interface``, ``trait``, ``enum``, ``type``, ...) for other source files and for Python files that do not parse.

The tool functions (:func:`find_definition`, :func:`search_code`, :func:`read_file`) are plain typed functions
with Pydantic argument models (:class:`FindDefinitionArgs`, :class:`SearchCodeArgs`, :class:`ReadFileArgs`)
returning JSON-ready dicts; results are ranked and capped.
"""

from __future__ import annotations

import ast
import fnmatch
import os
import re
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Literal

import pathspec
from pydantic import BaseModel, ConfigDict, Field, ValidationError

__all__ = [
    "CODE_ROOT_ENV",
    "CodeRepo",
    "Definition",
    "FindDefinitionArgs",
    "GitIgnore",
    "PathOutsideRootError",
    "ReadFileArgs",
    "SearchCodeArgs",
    "find_definition",
    "get_repo",
    "read_file",
    "run_python",
    "search_code",
    "set_root",
    "set_sandbox_runner",
]

CODE_ROOT_ENV = "AGENTKIT_CODE_ROOT"

#: Extensions never scanned by the definition fallback (prose and data, whose "class X" lines are not code).
_NON_CODE_SUFFIXES = frozenset(
    ".md .markdown .rst .txt .adoc .json .jsonl .yaml .yml .toml .ini .cfg .csv .tsv .lock .xml .html .htm "
    ".svg .log .ipynb .jinja .j2".split()
)
_DOC_SUFFIXES = frozenset(".md .markdown .rst .txt .adoc".split())

_DECL_RE = re.compile(
    r"""^[ \t]*
    (?:(?:export|default|public|private|protected|internal|static|async|abstract|final|pub(?:\([^)]*\))?|
        unsafe|extern|inline|virtual|override|open|sealed|data|suspend|declare|const)[ \t]+)*
    (?P<kw>function\*?|def|class|fn|func|struct|enum|interface|trait|type|module|impl|object|record|macro|
        sub|proc|local[ \t]+function)
    [ \t]+(?:\([^)]*\)[ \t]*)?          # Go receiver: func (r *T) Name
    (?P<name>[A-Za-z_$][\w$]*)""",
    re.VERBOSE,
)
_ASSIGNED_FN_RE = re.compile(
    r"^[ \t]*(?:export[ \t]+)?(?:const|let|var)[ \t]+(?P<name>[A-Za-z_$][\w$]*)[ \t]*=[ \t]*"
    r"(?:async[ \t]+)?(?:function\b|\([^)]*\)[ \t]*=>|[A-Za-z_$][\w$]*[ \t]*=>)"
)
_SHELL_FN_RE = re.compile(r"^[ \t]*(?:function[ \t]+)?(?P<name>[A-Za-z_][\w.-]*)[ \t]*\(\)[ \t]*\{?")
_CLASS_KWS = frozenset("class struct enum interface trait type module impl object record".split())
_PY_DEF_LINE_RE = re.compile(r"^\s*(?:async\s+def|def|class)\s")

Kind = Literal["function", "class", "method"]
KindFilter = Literal["any", "function", "class", "method"]


class PathOutsideRootError(ValueError):
    """A path resolves (after ``..`` and symlinks) to a place outside the repository root."""


# ---------------------------------------------------------------------------------------------------------
# .gitignore matching (used when the root is not in a git work tree)


class GitIgnore:
    """A matcher for the ``.gitignore`` files of a tree, on :class:`pathspec.GitIgnoreSpec` (gitignore(5)).

    Rules are added per directory with :meth:`add_file`; :meth:`ignored` answers for one path relative to the
    root (POSIX separators). As in git, the last matching rule wins, rules of a deeper ``.gitignore`` come
    later, and a file inside an ignored directory cannot be re-included (the walk never enters it).
    """

    def __init__(self) -> None:
        self.specs: list[tuple[str, pathspec.GitIgnoreSpec]] = []

    def add_lines(self, lines: list[str], base: str = "") -> None:
        """Add the rules of one ``.gitignore`` whose directory is ``base`` (relative, POSIX, "" = root)."""
        self.specs.append((base, pathspec.GitIgnoreSpec.from_lines(lines)))

    def add_file(self, path: Path, base: str = "") -> None:
        """Read a ``.gitignore`` file (undecodable bytes replaced) and add its rules under ``base``."""
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return
        self.add_lines(text.splitlines(), base)

    def ignored(self, rel: str, is_dir: bool) -> bool:
        """Whether the path ``rel`` (relative to the root, POSIX) is ignored."""
        result = False
        for base, spec in self.specs:
            if base and not rel.startswith(base + "/"):
                continue
            sub = rel[len(base) + 1 :] if base else rel
            include = spec.check_file(sub + "/" if is_dir else sub).include
            if include is not None:
                result = include
        return result


# ---------------------------------------------------------------------------------------------------------
# Definitions


@dataclass(frozen=True)
class Definition:
    """One definition found in a file.

    Attributes:
        path: file path relative to the root (POSIX).
        line: 1-based line of the ``def``/``class`` keyword (decorators excluded); ``end_line`` its last line
            (equal to ``line`` for the regex fallback).
        kind: ``"function"``, ``"class"`` or ``"method"`` (a function defined directly in a class).
        name: the bare name; ``qualname``: dotted with the enclosing classes/functions (``Agent.run``).
        signature: e.g. ``def load_bundle(path: str | Path) -> Bundle`` (Python) or the declaration line.
        doc: first line of the docstring ("" if none or not Python).
    """

    path: str
    line: int
    end_line: int
    kind: Kind
    name: str
    qualname: str
    signature: str
    doc: str

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form, with ``location`` = ``"path:line"``."""
        return {
            "location": f"{self.path}:{self.line}",
            "path": self.path,
            "line": self.line,
            "end_line": self.end_line,
            "kind": self.kind,
            "name": self.name,
            "qualname": self.qualname,
            "signature": self.signature,
            "doc": self.doc,
        }


def _py_signature(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> str:
    if isinstance(node, ast.ClassDef):
        bases = [ast.unparse(b) for b in node.bases] + [ast.unparse(k) for k in node.keywords]
        return f"class {node.name}" + (f"({', '.join(bases)})" if bases else "")
    prefix = "async def" if isinstance(node, ast.AsyncFunctionDef) else "def"
    sig = f"{prefix} {node.name}({ast.unparse(node.args)})"
    if node.returns is not None:
        sig += f" -> {ast.unparse(node.returns)}"
    return sig if len(sig) <= 300 else sig[:297] + "..."


def _python_definitions(rel: str, text: str) -> list[Definition]:
    """All function/class/method definitions of a Python source (raises SyntaxError/ValueError if bad)."""
    tree = ast.parse(text)
    out: list[Definition] = []

    def visit(body: list[ast.stmt], prefix: str, in_class: bool) -> None:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                qual = f"{prefix}{node.name}"
                kind: Kind = (
                    "class" if isinstance(node, ast.ClassDef) else ("method" if in_class else "function")
                )
                doc = ast.get_docstring(node, clean=True) or ""
                out.append(
                    Definition(
                        path=rel,
                        line=node.lineno,
                        end_line=node.end_lineno or node.lineno,
                        kind=kind,
                        name=node.name,
                        qualname=qual,
                        signature=_py_signature(node),
                        doc=doc.strip().splitlines()[0][:200] if doc.strip() else "",
                    )
                )
                visit(node.body, qual + ".", isinstance(node, ast.ClassDef))
            elif isinstance(node, ast.If | ast.Try | ast.With | ast.AsyncWith | ast.For | ast.While):
                # definitions under `if TYPE_CHECKING:`, `try:` etc. belong to the enclosing scope
                for field in ("body", "orelse", "finalbody"):
                    visit(getattr(node, field, []) or [], prefix, in_class)
                for handler in getattr(node, "handlers", []) or []:
                    visit(handler.body, prefix, in_class)

    visit(tree.body, "", False)
    return out


def _regex_definitions(rel: str, text: str) -> list[Definition]:
    """Language-agnostic definitions: declaration-keyword lines, JS function assignments, shell functions."""
    out: list[Definition] = []
    shellish = rel.endswith((".sh", ".bash", ".zsh")) or PurePosixPath(rel).suffix == ""
    for lineno, line in enumerate(text.splitlines(), 1):
        if len(line) > 500:
            continue
        kind: Kind
        m = _DECL_RE.match(line)
        if m:
            kw = m.group("kw").split()[-1].rstrip("*")
            kind = "class" if kw in _CLASS_KWS else "function"
            name = m.group("name")
        else:
            m = _ASSIGNED_FN_RE.match(line)
            if m is None and shellish:
                m = _SHELL_FN_RE.match(line)
            if m is None:
                continue
            kind, name = "function", m.group("name")
        out.append(Definition(rel, lineno, lineno, kind, name, name, line.strip()[:300], ""))
    return out


def _normalize_query(name: str) -> str:
    """Strip what a model may wrap around a name: ``def``/``class`` keywords, ``()``, backticks, spaces."""
    q = name.strip().strip("`'\"").strip()
    q = re.sub(r"^(?:async\s+def|def|class|function|func|fn)\s+", "", q)
    q = re.sub(r"\(.*\)?$", "", q).strip()
    return q


def _match_score(query: str, d: Definition) -> int | None:
    """0 exact name, 1 exact ignoring case, 2 qualname match, 3 prefix, 4 substring, None no match."""
    ql = query.casefold()
    if "." in query:
        qn = d.qualname.casefold()
        if d.qualname == query:
            return 0
        if qn == ql or qn.endswith("." + ql):
            return 2
        return 4 if ql in qn else None
    if d.name == query:
        return 0
    nl = d.name.casefold()
    if nl == ql:
        return 1
    if nl.startswith(ql):
        return 3
    if ql in nl:
        return 4
    return None


def _path_rank(rel: str) -> int:
    """0 source, 1 tests/examples/benchmarks/scripts, 2 docs."""
    p = PurePosixPath(rel)
    if p.suffix in _DOC_SUFFIXES:
        return 2
    parts = {part.casefold() for part in p.parts[:-1]}
    if parts & {"tests", "test", "testing", "examples", "benchmarks", "scripts"} or p.name.startswith(
        "test_"
    ):
        return 1
    return 0


# ---------------------------------------------------------------------------------------------------------
# The repository


@dataclass
class _FileDefs:
    mtime_ns: int
    size: int
    defs: list[Definition]


class CodeRepo:
    """A local repository the tools read. Thread-safe for concurrent tool calls.

    Args:
        root: the repository root (default: the current directory); resolved once, symlinks included.
        max_file_bytes: files larger than this (bytes) are skipped by searches and refused by :meth:`read`.
        time_budget_s: wall-clock seconds a search may spend scanning before it returns what it has
            (``truncated`` is then true).

    Raises:
        NotADirectoryError: ``root`` is not an existing directory.
    """

    def __init__(
        self,
        root: str | os.PathLike[str] | None = None,
        *,
        max_file_bytes: int = 1_000_000,
        time_budget_s: float = 10.0,
    ) -> None:
        path = Path(root if root is not None else os.getcwd()).expanduser().resolve()
        if not path.is_dir():
            raise NotADirectoryError(f"code-search root {str(path)!r} is not a directory")
        self.root = path
        self.max_file_bytes = max_file_bytes
        self.time_budget_s = time_budget_s
        self._defs_cache: dict[str, _FileDefs] = {}
        self._git: bool | None = None  # whether the root is in a git work tree (checked once)
        self._lock = threading.Lock()

    # -- paths -----------------------------------------------------------------------------------------

    def resolve(self, path: str) -> Path:
        """Resolve ``path`` (relative to the root, or absolute) and check it stays inside the root.

        Raises:
            ValueError: empty path.
            PathOutsideRootError: the resolved path (``..`` and symlinks followed) is outside the root.
        """
        if not path or not path.strip():
            raise ValueError("path is empty; give a file path relative to the repository root")
        p = Path(path.strip())
        candidate = (p if p.is_absolute() else self.root / p).resolve()
        if candidate != self.root and not candidate.is_relative_to(self.root):
            raise PathOutsideRootError(
                f"path {path!r} is outside the repository root; give a path relative to the root"
            )
        return candidate

    def rel(self, path: Path) -> str:
        """The POSIX path of ``path`` (already resolved, inside the root) relative to the root."""
        return path.relative_to(self.root).as_posix()

    def _in_git(self) -> bool:
        try:
            out = subprocess.run(
                ["git", "-C", str(self.root), "rev-parse", "--is-inside-work-tree"],
                capture_output=True,
                text=True,
                timeout=10,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            return False
        return out.returncode == 0 and out.stdout.strip() == "true"

    def _git_files(self) -> list[str] | None:
        try:
            out = subprocess.run(
                [
                    "git",
                    "-c",
                    "core.quotepath=off",
                    "ls-files",
                    "-z",
                    "--cached",
                    "--others",
                    "--exclude-standard",
                ],
                cwd=self.root,
                capture_output=True,
                timeout=30,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        if out.returncode != 0:
            return None
        names = out.stdout.decode("utf-8", errors="surrogateescape").split("\0")
        return sorted({n for n in names if n})

    def _walk_files(self) -> list[str]:
        ignore = GitIgnore()
        found: list[str] = []
        for dirpath, dirnames, filenames in os.walk(self.root, followlinks=False):
            dpath = Path(dirpath)
            base = "" if dpath == self.root else dpath.relative_to(self.root).as_posix()
            if ".gitignore" in filenames:
                ignore.add_file(dpath / ".gitignore", base)
            keep = []
            for d in sorted(dirnames):
                rel = f"{base}/{d}" if base else d
                if d == ".git" or ignore.ignored(rel, True):
                    continue
                keep.append(d)
            dirnames[:] = keep
            for f in filenames:
                rel = f"{base}/{f}" if base else f
                if not ignore.ignored(rel, False):
                    found.append(rel)
        return sorted(found)

    def files(self) -> list[str]:
        """Searchable files: relative POSIX paths, sorted, each a regular file resolving inside the root.

        A symlink whose target is itself a listed file is left out (its hits would be duplicates).
        """
        if self._git is None:
            self._git = self._in_git()
        names = self._git_files() if self._git else None
        if names is None:
            names = self._walk_files()
        entries: list[tuple[str, Path]] = []
        for rel in names:
            p = self.root / rel
            try:
                # resolve() follows symlinks in every component: a link (to a file or a directory) that
                # leads outside the root is dropped here.
                real = p.resolve()
                if not real.is_relative_to(self.root) or not p.is_file():
                    continue
            except (OSError, RuntimeError):
                continue
            entries.append((rel, real))
        # a link to a file that is itself listed is a duplicate: keep the file under its real path
        direct = {real for rel, real in entries if real == self.root / rel}
        return [rel for rel, real in entries if real == self.root / rel or real not in direct]

    def _read_text(self, rel: str) -> str | None:
        """The file's text (UTF-8, undecodable bytes replaced), or None if binary / too large / unreadable."""
        p = self.root / rel
        try:
            if p.stat().st_size > self.max_file_bytes:
                return None
            data = p.read_bytes()
        except OSError:
            return None
        if b"\0" in data[:8192]:
            return None
        return data.decode("utf-8", errors="replace")

    # -- definitions -----------------------------------------------------------------------------------

    def _definitions(self, rel: str, text: str) -> list[Definition]:
        p = self.root / rel
        try:
            st = p.stat()
        except OSError:
            return []
        with self._lock:
            cached = self._defs_cache.get(rel)
        if cached is not None and cached.mtime_ns == st.st_mtime_ns and cached.size == st.st_size:
            return cached.defs
        defs: list[Definition]
        if rel.endswith((".py", ".pyi")):
            try:
                defs = _python_definitions(rel, text)
            except (SyntaxError, ValueError, RecursionError):
                defs = _regex_definitions(rel, text)
        elif PurePosixPath(rel).suffix.casefold() in _NON_CODE_SUFFIXES:
            defs = []
        else:
            defs = _regex_definitions(rel, text)
        with self._lock:
            self._defs_cache[rel] = _FileDefs(st.st_mtime_ns, st.st_size, defs)
        return defs

    def find_definitions(
        self, name: str, kind: KindFilter = "any", max_results: int = 5, glob: str | None = None
    ) -> dict[str, Any]:
        """Find definitions whose name (or dotted qualified name) equals or contains ``name``.

        Ranking: exact name, then exact ignoring case, qualified-name match, prefix, substring; within a rank
        source files before tests/examples before docs, public before ``_private`` (unless asked for),
        shallower paths first, then path and line.

        Args:
            name: a name (``load_bundle``), a substring (``bundle``) or a dotted name (``Agent.run``);
                ``def``/``class`` keywords and ``(...)`` around it are ignored. Case-insensitive.
            kind: ``"any"``, ``"function"``, ``"class"`` or ``"method"``.
            max_results: cap on returned matches (>= 1).
            glob: optional ``fnmatch`` pattern on the relative path (``*`` crosses ``/``), e.g. ``agentkit/*``.

        Returns:
            ``{"query", "matches": [Definition.as_dict()], "total": int, "truncated": bool}`` and a ``hint``
            when nothing matched.

        Raises:
            ValueError: an empty name.
        """
        query = _normalize_query(name)
        if not query:
            raise ValueError(f"name {name!r} is empty after stripping; give a function or class name")
        needle = query.rsplit(".", 1)[-1].casefold().encode()
        deadline = time.monotonic() + self.time_budget_s
        scored: list[tuple[tuple[Any, ...], Definition]] = []
        timed_out = False
        for rel in self.files():
            if glob and not fnmatch.fnmatch(rel, glob):
                continue
            if time.monotonic() > deadline:
                timed_out = True
                break
            text = self._read_text(rel)
            if text is None or needle not in text.casefold().encode():
                continue
            for d in self._definitions(rel, text):
                if kind != "any" and d.kind != kind:
                    continue
                score = _match_score(query, d)
                if score is None:
                    continue
                private = d.name.startswith("_") and not query.startswith("_")
                key = (score, _path_rank(rel), private, rel.count("/"), rel, d.line)
                scored.append((key, d))
        scored.sort(key=lambda kd: kd[0])
        out: dict[str, Any] = {
            "query": query,
            "matches": [d.as_dict() for _, d in scored[:max_results]],
            "total": len(scored),
            "truncated": len(scored) > max_results or timed_out,
        }
        if not scored:
            what = "definition" if kind == "any" else f"{kind} definition"
            out["hint"] = (
                f"No {what} matches {query!r}; try a shorter part of the name, another kind, or search_code."
            )
        return out

    # -- full-text search ------------------------------------------------------------------------------

    def search(
        self,
        pattern: str,
        *,
        glob: str | None = None,
        case_sensitive: bool = False,
        context_lines: int = 2,
        max_results: int = 10,
        max_scanned_matches: int = 5000,
    ) -> dict[str, Any]:
        """Search every searchable file for a regular expression, line by line.

        A pattern that is not a valid regular expression is searched as literal text (``note`` says so).
        Ranking: lines that define something (Python ``def``/``class`` or a declaration-keyword line) first,
        then source files before tests/examples before docs, then path and line.

        Args:
            pattern: a Python regular expression (``re`` syntax), matched with ``search`` on each line.
            glob: optional ``fnmatch`` pattern on the relative path (``*`` crosses ``/``), e.g. ``*.py``.
            case_sensitive: match case exactly (default: ignore case).
            context_lines: lines of context before and after each hit (0-10).
            max_results: cap on returned hits (>= 1).
            max_scanned_matches: stop scanning after this many hits (then ``truncated``).

        Returns:
            ``{"pattern", "matches": [{"location", "path", "line", "text", "context"}], "total", "files",
            "truncated"}``; ``context`` is the hit's neighbourhood, one ``"N: text"`` line each, the hit
            marked ``"N> text"``; ``total`` counts hits (a lower bound when truncated), ``files`` the files
            with hits.

        Raises:
            ValueError: an empty pattern or ``context_lines`` outside 0-10.
        """
        if not pattern:
            raise ValueError("pattern is empty; give a regular expression or text to search for")
        if not 0 <= context_lines <= 10:
            raise ValueError(f"context_lines must be between 0 and 10, got {context_lines}")
        flags = 0 if case_sensitive else re.IGNORECASE
        note = None
        try:
            rx = re.compile(pattern, flags)
        except re.error as exc:
            pattern_text = re.escape(pattern)
            note = f"pattern is not a valid regular expression ({exc}); searched it as literal text"
        else:
            pattern_text = pattern
        rx = re.compile(pattern_text, flags)
        # file-level pre-check; MULTILINE so that ^ and $ mean what they mean on a single line
        rx_file = re.compile(pattern_text, flags | re.MULTILINE)
        deadline = time.monotonic() + self.time_budget_s
        hits: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
        files_hit = 0
        truncated = False
        for rel in self.files():
            if glob and not fnmatch.fnmatch(rel, glob):
                continue
            if time.monotonic() > deadline or len(hits) >= max_scanned_matches:
                truncated = True
                break
            text = self._read_text(rel)
            if text is None or not rx_file.search(text):
                continue
            lines = text.splitlines()
            file_hit = False
            for i, line in enumerate(lines):
                if len(line) > 2000 or not rx.search(line):
                    continue
                file_hit = True
                is_def = bool(_PY_DEF_LINE_RE.match(line) if rel.endswith(".py") else _DECL_RE.match(line))
                lo, hi = max(0, i - context_lines), min(len(lines), i + context_lines + 1)
                context = "\n".join(
                    f"{j + 1}{'>' if j == i else ':'} {lines[j][:300]}" for j in range(lo, hi)
                )
                hit = {
                    "location": f"{rel}:{i + 1}",
                    "path": rel,
                    "line": i + 1,
                    "text": line.strip()[:300],
                    "context": context,
                }
                hits.append(((not is_def, _path_rank(rel), rel, i), hit))
                if len(hits) >= max_scanned_matches:
                    break
            files_hit += file_hit
        hits.sort(key=lambda kh: kh[0])
        out: dict[str, Any] = {
            "pattern": pattern,
            "matches": [h for _, h in hits[:max_results]],
            "total": len(hits),
            "files": files_hit,
            "truncated": truncated or len(hits) > max_results,
        }
        if note:
            out["note"] = note
        return out

    # -- reading ---------------------------------------------------------------------------------------

    def read(
        self, path: str, start_line: int = 1, end_line: int | None = None, max_lines: int = 400
    ) -> dict[str, Any]:
        """Read lines ``start_line``..``end_line`` (1-based, inclusive) of a text file under the root.

        Args:
            path: file path relative to the root (or absolute inside it).
            start_line: first line, >= 1.
            end_line: last line (default ``start_line + 99``); clipped to the file end and to ``max_lines``
                lines after ``start_line``.
            max_lines: cap on the number of lines returned.

        Returns:
            ``{"path", "start_line", "end_line", "total_lines", "content", "truncated"}``; ``content`` has one
            ``"N: text"`` line per file line (lines over 500 characters cut).

        Raises:
            PathOutsideRootError: the path leaves the root. FileNotFoundError: no such file.
            IsADirectoryError: the path is a directory (the message lists some entries).
            ValueError: bad line numbers, a binary file, or a file over ``max_file_bytes``.
        """
        if start_line < 1:
            raise ValueError(f"start_line must be >= 1, got {start_line}")
        if end_line is not None and end_line < start_line:
            raise ValueError(f"end_line ({end_line}) is before start_line ({start_line})")
        p = self.resolve(path)
        rel = self.rel(p)
        if p.is_dir():
            entries = sorted(e.name + ("/" if e.is_dir() else "") for e in p.iterdir())
            shown = ", ".join(entries[:30]) + (", ..." if len(entries) > 30 else "")
            raise IsADirectoryError(f"{rel or '.'!r} is a directory; it contains: {shown}")
        if not p.is_file():
            raise FileNotFoundError(
                f"no file {path!r} under the repository root; use find_definition or search_code to find paths"
            )
        if p.stat().st_size > self.max_file_bytes:
            raise ValueError(f"{rel!r} is larger than {self.max_file_bytes} bytes; it is not read")
        data = p.read_bytes()
        if b"\0" in data[:8192]:
            raise ValueError(f"{rel!r} is a binary file")
        lines = data.decode("utf-8", errors="replace").splitlines()
        total = len(lines)
        if total == 0:
            return {
                "path": rel,
                "start_line": 0,
                "end_line": 0,
                "total_lines": 0,
                "content": "",
                "truncated": False,
            }
        if start_line > total:
            raise ValueError(f"start_line {start_line} is past the end of {rel!r} ({total} lines)")
        wanted_end = end_line if end_line is not None else start_line + 99
        last = min(wanted_end, total, start_line + max_lines - 1)
        content = "\n".join(
            f"{n}: {lines[n - 1] if len(lines[n - 1]) <= 500 else lines[n - 1][:500] + '...'}"
            for n in range(start_line, last + 1)
        )
        return {
            "path": rel,
            "start_line": start_line,
            "end_line": last,
            "total_lines": total,
            "content": content,
            "truncated": last < min(wanted_end, total),
        }


# ---------------------------------------------------------------------------------------------------------
# Default repository and the tool functions

_repo_lock = threading.Lock()
_configured_root: Path | None = None
_repos: dict[Path, CodeRepo] = {}


def set_root(root: str | os.PathLike[str] | None) -> None:
    """Set the repository root of the tool functions; ``None`` restores the default
    (``$AGENTKIT_CODE_ROOT``, else the current directory at call time).

    Raises:
        NotADirectoryError: ``root`` is not an existing directory.
    """
    global _configured_root
    if root is None:
        _configured_root = None
        return
    path = Path(root).expanduser().resolve()
    if not path.is_dir():
        raise NotADirectoryError(f"code-search root {str(path)!r} is not a directory")
    _configured_root = path


def get_repo() -> CodeRepo:
    """The :class:`CodeRepo` of the current root (one cached instance per root)."""
    root = _configured_root
    if root is None:
        root = Path(os.environ.get(CODE_ROOT_ENV) or os.getcwd()).expanduser().resolve()
    with _repo_lock:
        repo = _repos.get(root)
        if repo is None:
            repo = _repos[root] = CodeRepo(root)
        return repo


SymbolName = Annotated[
    str,
    Field(
        min_length=1,
        max_length=200,
        description="Name or part of a name of a function, class or method, e.g. 'load_bundle' or 'Agent.run'.",
    ),
]
KindArg = Annotated[
    KindFilter, Field(description="Only this kind of definition: any, function, class or method.")
]
Pattern = Annotated[
    str, Field(min_length=1, max_length=500, description="Regular expression (Python syntax) to search for.")
]
PathGlob = Annotated[
    str | None, Field(max_length=200, description="Only files whose path matches this glob, e.g. '*.py'.")
]
RelPath = Annotated[
    str, Field(min_length=1, max_length=500, description="File path relative to the repository root.")
]


MaxDefinitions = Annotated[int, Field(ge=1, le=50, description="At most this many results, 1-50.")]
CaseSensitive = Annotated[bool, Field(description="Match case exactly.")]
ContextLines = Annotated[int, Field(ge=0, le=10, description="Lines of context around each hit, 0-10.")]
MaxHits = Annotated[int, Field(ge=1, le=100, description="At most this many hits, 1-100.")]
StartLine = Annotated[int, Field(ge=1, description="First line to read (1-based).")]
EndLine = Annotated[
    int | None, Field(ge=1, description="Last line to read (inclusive); default start_line + 99.")
]


class FindDefinitionArgs(BaseModel):
    """Arguments of :func:`find_definition`."""

    model_config = ConfigDict(extra="forbid")
    name: SymbolName
    kind: KindArg = "any"
    max_results: MaxDefinitions = 5


class SearchCodeArgs(BaseModel):
    """Arguments of :func:`search_code`."""

    model_config = ConfigDict(extra="forbid")
    pattern: Pattern
    glob: PathGlob = None
    case_sensitive: CaseSensitive = False
    context_lines: ContextLines = 2
    max_results: MaxHits = 10


class ReadFileArgs(BaseModel):
    """Arguments of :func:`read_file`."""

    model_config = ConfigDict(extra="forbid")
    path: RelPath
    start_line: StartLine = 1
    end_line: EndLine = None


def _validate(model: type[BaseModel], **values: Any) -> Any:
    try:
        return model(**values)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'arguments'}: {err['msg']}" for err in exc.errors()
        )
        raise ValueError(f"Invalid arguments: {problems}") from exc


def find_definition(
    name: SymbolName, kind: KindArg = "any", max_results: MaxDefinitions = 5
) -> dict[str, Any]:
    """Find where a function, class or method is defined in the repository.

    Args:
        name: Name or part of a name of a function, class or method, e.g. 'load_bundle' or 'Agent.run'.
        kind: Only this kind of definition: any, function, class or method.
        max_results: At most this many results, 1-50.

    Returns:
        ``{"query", "matches": [{"location": "path:line", "path", "line", "end_line", "kind", "name",
        "qualname", "signature", "doc"}], "total", "truncated"}``, best match first (see
        :meth:`CodeRepo.find_definitions`).

    Raises:
        ValueError: invalid arguments.
    """
    args: FindDefinitionArgs = _validate(FindDefinitionArgs, name=name, kind=kind, max_results=max_results)
    return get_repo().find_definitions(args.name, args.kind, args.max_results)


def search_code(
    pattern: Pattern,
    glob: PathGlob = None,
    case_sensitive: CaseSensitive = False,
    context_lines: ContextLines = 2,
    max_results: MaxHits = 10,
) -> dict[str, Any]:
    """Search the repository's files for a regular expression; returns file:line hits with context.

    Args:
        pattern: Regular expression (Python syntax) to search for.
        glob: Only files whose path matches this glob, e.g. '*.py'.
        case_sensitive: Match case exactly.
        context_lines: Lines of context around each hit, 0-10.
        max_results: At most this many hits, 1-100.

    Returns:
        See :meth:`CodeRepo.search`.

    Raises:
        ValueError: invalid arguments.
    """
    args: SearchCodeArgs = _validate(
        SearchCodeArgs,
        pattern=pattern,
        glob=glob,
        case_sensitive=case_sensitive,
        context_lines=context_lines,
        max_results=max_results,
    )
    return get_repo().search(
        args.pattern,
        glob=args.glob,
        case_sensitive=args.case_sensitive,
        context_lines=args.context_lines,
        max_results=args.max_results,
    )


def read_file(path: RelPath, start_line: StartLine = 1, end_line: EndLine = None) -> dict[str, Any]:
    """Read a range of lines of a file in the repository.

    Args:
        path: File path relative to the repository root.
        start_line: First line to read (1-based).
        end_line: Last line to read (inclusive); default start_line + 99.

    Returns:
        See :meth:`CodeRepo.read`.

    Raises:
        ValueError: invalid arguments or line numbers. PathOutsideRootError: the path leaves the root.
        FileNotFoundError, IsADirectoryError.
    """
    args: ReadFileArgs = _validate(ReadFileArgs, path=path, start_line=start_line, end_line=end_line)
    return get_repo().read(args.path, args.start_line, args.end_line)


# ---------------------------------------------------------------------------------------------------------
# Python snippets in the Docker sandbox, with copies of repository files

#: ``(code, files, timeout_s) -> execution`` where the execution has ``stdout``, ``stderr``, ``exit_code``,
#: ``timed_out`` and ``oom_killed`` (a :class:`sandbox.Execution`).
SandboxRunner = Callable[[str, dict[str, bytes], float], Any]

MAX_SNIPPET_FILES = 20
MAX_SNIPPET_FILE_BYTES = 2_000_000
_OUTPUT_CHARS = 4000

_sandbox_runner: SandboxRunner | None = None


def _docker_runner(code: str, files: dict[str, bytes], timeout_s: float) -> Any:
    """Run in the process-wide sandbox shared with :mod:`tools.python_exec` (warm pool of 1, started on first
    use)."""
    from tools.python_exec import get_sandbox

    return get_sandbox().run(code, language="python", files=files, timeout=timeout_s)


def set_sandbox_runner(runner: SandboxRunner | None) -> None:
    """Replace how :func:`run_python` executes code (tests); ``None`` restores the Docker sandbox."""
    global _sandbox_runner
    _sandbox_runner = runner


SnippetCode = Annotated[
    str,
    Field(min_length=1, max_length=20_000, description="The Python 3 program; print() what you want to see."),
]
SnippetFiles = Annotated[
    list[Annotated[str, Field(min_length=1, max_length=500)]],
    Field(
        max_length=MAX_SNIPPET_FILES,
        description="Repository files (paths relative to the root) to copy into the program's working directory.",
    ),
]
SnippetTimeout = Annotated[int, Field(ge=1, le=60, description="Time limit in seconds, 1-60.")]


class RunPythonArgs(BaseModel):
    """Arguments of :func:`run_python`."""

    model_config = ConfigDict(extra="forbid")
    code: SnippetCode
    files: SnippetFiles = Field(default_factory=list)
    timeout: SnippetTimeout = 20


def _tail(text: str) -> str:
    return text if len(text) <= _OUTPUT_CHARS else "[... cut]\n" + text[-_OUTPUT_CHARS:]


def run_python(
    code: SnippetCode, files: SnippetFiles | None = None, timeout: SnippetTimeout = 20
) -> dict[str, Any]:
    """Run a short Python program in an isolated sandbox, optionally with copies of repository files.

    Args:
        code: The Python 3 program; print() what you want to see.
        files: Repository files (paths relative to the root) to copy into the program's working directory.
        timeout: Time limit in seconds, 1-60.

    Returns:
        ``{"exit_code", "stdout", "stderr", "timed_out", "files"}`` (output streams cut to their last 4000
        characters; ``files`` lists the copied paths). The program runs in the Docker sandbox (no network,
        read-only system, memory and process limits); the copies sit at the same relative paths under its
        working directory, so ``open("agentkit/bundle.py")`` works.

    Raises:
        ValueError: invalid arguments, a binary file, or files over the size limits.
        PathOutsideRootError, FileNotFoundError: a path leaves the root or is not a file.
        sandbox.SandboxError: Docker or the sandbox image is unavailable (the message says how to fix it).
    """
    args: RunPythonArgs = _validate(RunPythonArgs, code=code, files=files or [], timeout=timeout)
    repo = get_repo()
    payload: dict[str, bytes] = {}
    total = 0
    for name in args.files:
        p = repo.resolve(name)
        if not p.is_file():
            raise FileNotFoundError(f"no file {name!r} under the repository root")
        data = p.read_bytes()
        if b"\0" in data[:8192]:
            raise ValueError(f"{name!r} is a binary file; only text files can be copied")
        total += len(data)
        if total > MAX_SNIPPET_FILE_BYTES:
            raise ValueError(
                f"the files add up to more than {MAX_SNIPPET_FILE_BYTES} bytes; copy fewer files"
            )
        payload[repo.rel(p)] = data
    runner = _sandbox_runner or _docker_runner
    ex = runner(args.code, payload, float(args.timeout))
    return {
        "exit_code": ex.exit_code,
        "stdout": _tail(ex.stdout),
        "stderr": _tail(ex.stderr),
        "timed_out": bool(ex.timed_out),
        "oom_killed": bool(getattr(ex, "oom_killed", False)),
        "files": sorted(payload),
    }
