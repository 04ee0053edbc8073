"""The repository: which files are searched, their definitions (cached by mtime), full-text search and
reading a line range; paths never escape the root."""

from __future__ import annotations

import fnmatch
import os
import re
import subprocess
import threading
import time
from pathlib import Path, PurePosixPath
from typing import Any

import regex

from tools.code_search.definitions import (
    DECL_RE,
    NON_CODE_SUFFIXES,
    PY_DEF_LINE_RE,
    Definition,
    KindFilter,
    listed_matches,
    match_score,
    normalize_query,
    path_rank,
    python_definitions,
    regex_definitions,
)
from tools.code_search.gitignore import GitIgnore

#: A search result's ``location``: ``path:line``.
_LOCATION_RE = re.compile(r"^(?P<path>.+?):(?P<line>[1-9][0-9]{0,8})$")


def path_glob(glob: str | None) -> Any:
    """The regex of a path glob (relative POSIX paths), ``None`` for no filter: ``fnmatch`` syntax, where ``*``
    crosses ``/`` and ``**/`` may match no folder, as in git and ripgrep (``**/*.py`` matches ``setup.py``). A
    glob ending in ``/`` or without wildcards names a folder (the files under it) or a file; a leading ``./`` or
    ``/`` is the root. Compiled with ``regex``, which fails many ``**/`` at once where ``re`` backtracks."""
    glob = (glob or "").strip()
    while glob.startswith("./"):
        glob = glob[2:]
    glob = glob.lstrip("/")
    if not glob:
        return None
    if not any(c in glob for c in "*?["):  # a folder or a file, named as it is
        return regex.compile(r"(?s:" + regex.escape(glob.rstrip("/")) + r")(?:/.*)?\Z")
    if glob.endswith("/"):
        glob += "*"
    if "\0" in glob:  # the placeholder below cannot be told apart: plain fnmatch
        return regex.compile(fnmatch.translate(glob))
    # fnmatch leaves a NUL as is; each stands for one "**/" and becomes "any folders, or none"
    return regex.compile(fnmatch.translate(glob.replace("**/", "\0")).replace("\0", "(?:.*/)?"))


class PathOutsideRootError(ValueError):
    """A path resolves (after ``..`` and symlinks) to a place outside the repository root."""


def _compile_search(pattern: str, case_sensitive: bool) -> tuple[Any, Any, str | None]:
    """``(per line, per file (MULTILINE), note)`` patterns, compiled with ``regex`` (its matches take a timeout);
    an invalid regular expression is searched as literal text, which ``note`` says."""
    flags = 0 if case_sensitive else regex.IGNORECASE
    note = None
    try:
        rx = regex.compile(pattern, flags)
    except regex.error as exc:
        pattern = regex.escape(pattern)
        note = f"pattern is not a valid regular expression ({exc}); searched it as literal text"
        rx = regex.compile(pattern, flags)
    return rx, regex.compile(pattern, flags | regex.MULTILINE), note


def _left(deadline: float) -> float:
    """Seconds left before ``deadline``, at least a millisecond (a match's timeout)."""
    return max(deadline - time.monotonic(), 0.001)


def _line_hits(
    rel: str, text: str, rx: Any, context_lines: int, limit: int, deadline: float
) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    """At most ``limit`` hits of ``rx`` in one file as ``(sort key, hit)``; TimeoutError past ``deadline``."""
    lines = text.splitlines()
    hits: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    for i, line in enumerate(lines):
        if len(line) > 2000 or not rx.search(line, timeout=_left(deadline)):
            continue
        is_def = bool(PY_DEF_LINE_RE.match(line) if rel.endswith(".py") else DECL_RE.match(line))
        lo, hi = max(0, i - context_lines), min(len(lines), i + context_lines + 1)
        context = "\n".join(f"{j + 1}{'>' if j == i else ':'} {lines[j][:300]}" for j in range(lo, hi))
        hit = {
            "location": f"{rel}:{i + 1}",
            "path": rel,
            "line": i + 1,
            "text": line.strip()[:300],
            "context": context,
        }
        hits.append(((not is_def, path_rank(rel), rel, i), hit))
        if len(hits) >= limit:
            break
    return hits


class CodeRepo:
    """A local repository the tools read; thread-safe.

    Args:
        root: the repository root (default: the current directory); resolved once, symlinks included.
        max_file_bytes: larger files are skipped by searches and refused by :meth:`read`.
        time_budget_s: seconds a search may scan before it returns what it has (``truncated``).
        max_files: the most files a search lists (a root such as ``/`` holds millions; ``note`` says so).

    Raises:
        NotADirectoryError: ``root`` is not an existing directory.
    """

    def __init__(
        self,
        root: str | os.PathLike[str] | None = None,
        *,
        max_file_bytes: int = 1_000_000,
        time_budget_s: float = 10.0,
        max_files: int = 100_000,
    ) -> None:
        path = Path(root if root is not None else os.getcwd()).expanduser().resolve()
        if not path.is_dir():
            raise NotADirectoryError(f"code-search root {str(path)!r} is not a directory")
        self.root = path
        self.max_file_bytes = max_file_bytes
        self.time_budget_s = time_budget_s
        self.max_files = max_files
        self._defs_cache: dict[str, tuple[tuple[int, int], list[Definition]]] = {}  # by (mtime, size)
        self._lock = threading.Lock()

    def resolve(self, path: str) -> Path:
        """``path`` (relative to the root, or absolute) resolved, ``..`` and symlinks followed.

        Raises:
            ValueError: empty path. PathOutsideRootError: it resolves outside the root.
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

    def _git_files(self) -> list[str] | None:
        """The files git lists (tracked and not ignored), ``None`` outside a work tree."""
        try:
            out = subprocess.run(
                "git -c core.quotepath=off ls-files -z --cached --others --exclude-standard".split(),
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

    def _walk_files(self, deadline: float) -> list[str]:
        """The files of a walk that honours every ``.gitignore``, stopped past :attr:`max_files` or ``deadline``."""
        ignore = GitIgnore()
        found: list[str] = []
        for dirpath, dirnames, filenames in os.walk(self.root, followlinks=False):
            if len(found) > self.max_files or time.monotonic() > deadline:
                break
            dpath = Path(dirpath)
            base = "" if dpath == self.root else dpath.relative_to(self.root).as_posix()
            if ".gitignore" in filenames:
                ignore.add_file(dpath / ".gitignore", base)
            prefix = f"{base}/" if base else ""
            dirnames[:] = [
                d for d in sorted(dirnames) if d != ".git" and not ignore.ignored(prefix + d, True)
            ]
            found += [prefix + f for f in filenames if not ignore.ignored(prefix + f, False)]
        return sorted(found)

    def files(self) -> list[str]:
        """Searchable files: sorted relative POSIX paths of regular files resolving inside the root, a symlink to a
        listed file left out; at most :attr:`max_files`, listed within :attr:`time_budget_s`."""
        return self.listing(time.monotonic() + self.time_budget_s)[0]

    def listing(self, deadline: float) -> tuple[list[str], str | None]:
        """:meth:`files` listed until ``deadline``, and a note when the listing stopped early (at
        :attr:`max_files` or at ``deadline``): then the root is likely not one repository."""
        names = self._git_files()
        if names is None:
            names = self._walk_files(deadline)
        cut = len(names) > self.max_files or time.monotonic() > deadline
        note = None
        if cut:
            note = (
                f"the root {str(self.root)!r} holds too many files to list in {self.time_budget_s:g} s (at most "
                f"{self.max_files:,}); only part of it was searched: run from the repository, or set "
                f"$AGENTKIT_CODE_ROOT to it"
            )
        entries: list[tuple[str, Path]] = []
        for rel in names[: self.max_files]:
            p = self.root / rel
            try:  # resolve() follows links in every component: one leading outside the root is dropped
                real = p.resolve()
                if not real.is_relative_to(self.root) or not p.is_file():
                    continue
            except (OSError, RuntimeError):
                continue
            entries.append((rel, real))
        # a link to a file that is itself listed is a duplicate: keep the file under its real path
        direct = {real for rel, real in entries if real == self.root / rel}
        return [rel for rel, real in entries if real == self.root / rel or real not in direct], note

    def _text(self, rel: str) -> str:
        """The file's text (undecodable bytes replaced); ValueError if it is too large or binary."""
        p = self.root / rel
        if p.stat().st_size > self.max_file_bytes:
            raise ValueError(f"{rel!r} is larger than {self.max_file_bytes} bytes; it is not read")
        data = p.read_bytes()
        if b"\0" in data[:8192]:
            raise ValueError(f"{rel!r} is a binary file")
        return data.decode("utf-8", errors="replace")

    def _read_text(self, rel: str) -> str | None:
        """:meth:`_text`, or ``None`` for a binary, too large or unreadable file."""
        try:
            return self._text(rel)
        except (OSError, ValueError):
            return None

    def _globbed(self, glob: str | None, deadline: float) -> tuple[list[str], str | None, bool]:
        """The listed files the glob keeps, a note (listing cut, or no file matched the glob) and whether the
        listing was cut."""
        files, note = self.listing(deadline)
        cut = note is not None
        only = path_glob(glob)
        if only is not None:
            files = [rel for rel in files if only.match(rel)]
            if not files and note is None:
                note = f"no file path matches the glob {glob!r}; nothing was searched"
        return files, note, cut

    def _definitions(self, rel: str, text: str) -> list[Definition]:
        p = self.root / rel
        try:
            st = p.stat()
        except OSError:
            return []
        with self._lock:
            cached = self._defs_cache.get(rel)
        stamp = (st.st_mtime_ns, st.st_size)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        defs: list[Definition]
        if rel.endswith((".py", ".pyi")):
            try:
                defs = python_definitions(rel, text)
            except (SyntaxError, ValueError, RecursionError):
                defs = regex_definitions(rel, text)
        elif PurePosixPath(rel).suffix.casefold() in NON_CODE_SUFFIXES:
            defs = []
        else:
            defs = regex_definitions(rel, text)
        with self._lock:
            self._defs_cache[rel] = (stamp, defs)
        return defs

    def find_definitions(
        self, name: str, kind: KindFilter = "any", max_results: int = 5, glob: str | None = None
    ) -> dict[str, Any]:
        """Find definitions whose name (or dotted qualified name) equals or contains ``name``.

        ``name``: a name, a part of one, or a dotted name (``Agent.run``, ``agentkit.bundle.load_bundle``),
        case-insensitive, ``def``/``class`` and ``(...)`` around it ignored; ``kind``: ``"any"``, ``"function"``,
        ``"class"`` or ``"method"`` (when no definition of that kind has the name itself, those of other kinds
        that have it, as written if that kind has partial matches, with a ``note``); ``glob``: an optional
        :func:`path_glob`. Module-level variables (``MAX_THREADS = 1024``) match under ``"any"``. Ranking: exact
        name, exact ignoring case, qualified-name match, prefix, substring; within a rank functions, classes and
        methods before variables, source before tests/examples before docs, public before ``_private`` (unless
        asked for), module-level before nested, shallower paths, then path and line. When some definition is
        named ``name`` itself (the first three ranks), only those are listed and counted: beside it,
        ``test_load_bundle`` is noise; and those that have it only ignoring case are left out where one in a file
        of their language, as far in (source, tests, docs), has it as written (``class Bundle`` beside ``def
        bundle``); :func:`tools.code_search.definitions.listed_matches` decides.

        Returns:
            ``{"query", "matches": [Definition.as_dict()], "total", "truncated"}`` (``total``: the matches of the
            listed ranks), and a ``hint`` when nothing matched. ValueError for an empty name.
        """
        query = normalize_query(name)
        if not query:
            raise ValueError(f"name {name!r} is empty after stripping; give a function or class name")
        needle = query.rsplit(".", 1)[-1].casefold().encode()
        deadline = time.monotonic() + self.time_budget_s
        scored: list[tuple[tuple[Any, ...], Definition]] = []
        files, glob_note, timed_out = self._globbed(glob, deadline)
        for rel in files:
            if time.monotonic() > deadline:
                timed_out = True
                break
            text = self._read_text(rel)
            if text is None or needle not in text.casefold().encode():
                continue
            for d in self._definitions(rel, text):
                score = match_score(query, d)
                if score is None:
                    continue
                private = d.name.startswith("_") and not query.startswith("_")
                nested = "." in d.qualname  # a method or nested function: after module-level definitions
                key = (
                    score,
                    d.kind == "variable",
                    path_rank(rel),
                    private,
                    nested,
                    rel.count("/"),
                    rel,
                    d.line,
                )
                scored.append((key, d))
        scored.sort(key=lambda kd: kd[0])
        listed, other_kinds = listed_matches(scored, kind)
        shown = listed[:max_results]
        out: dict[str, Any] = {
            "query": query,
            "matches": [d.as_dict() for _, d in shown],
            "total": len(listed),
            "truncated": len(listed) > len(shown) or timed_out,
        }
        if not listed:
            what = "definition" if kind == "any" else f"{kind} definition"
            out["hint"] = glob_note or (
                f"No {what} matches {query!r}; try a shorter part of the name, another kind, or search_code."
            )
        elif other_kinds:
            out["note"] = (
                f"No {kind} definition matches {query!r}; these are definitions of it of other kinds."
            )
        elif glob_note:
            out["note"] = glob_note
        return out

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
        """Search every searchable file for a Python regular expression, line by line (an invalid one as literal
        text, which ``note`` says), with ``context_lines`` (0-10) around each hit, stopping after
        ``max_scanned_matches`` hits; ``glob``: an optional :func:`path_glob`. Ranking: definition lines first,
        then source before tests/examples before docs, then path and line.

        Returns:
            ``{"pattern", "matches": [{"location", "path", "line", "text", "context"}], "total", "files",
            "truncated"}``; ``context`` has one ``"N: text"`` line each, the hit ``"N> text"``; ``total`` counts
            hits (a lower bound when truncated), ``files`` the files with hits. ValueError for an empty pattern or
            ``context_lines`` out of range.
        """
        if not pattern:
            raise ValueError("pattern is empty; give a regular expression or text to search for")
        if not 0 <= context_lines <= 10:
            raise ValueError(f"context_lines must be between 0 and 10, got {context_lines}")
        rx, rx_file, note = _compile_search(pattern, case_sensitive)
        deadline = time.monotonic() + self.time_budget_s
        hits: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
        files_hit = 0
        files, glob_note, truncated = self._globbed(glob, deadline)
        note = note or glob_note
        for rel in files:
            if time.monotonic() > deadline or len(hits) >= max_scanned_matches:
                truncated = True
                break
            text = self._read_text(rel)
            try:  # the time budget bounds each match too: a pattern that backtracks badly cannot hang
                if text is None or not rx_file.search(text, timeout=_left(deadline)):
                    continue
                found = _line_hits(rel, text, rx, context_lines, max_scanned_matches - len(hits), deadline)
            except TimeoutError:
                truncated = True
                note = (
                    f"the pattern took over {self.time_budget_s:g} s; the hits so far are listed: simplify it"
                )
                break
            hits.extend(found)
            files_hit += bool(found)
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

    def read(
        self, path: str, start_line: int = 1, end_line: int | None = None, max_lines: int = 400
    ) -> dict[str, Any]:
        """Read lines ``start_line``..``end_line`` (1-based, inclusive) of a text file under the root.

        ``end_line`` defaults to ``start_line + 99`` and is clipped to the file and to ``max_lines`` lines. A
        ``path:LINE`` that names no file but whose ``path`` does (a result's ``location``) reads from ``LINE``
        unless ``start_line`` is given; ``note`` then says so.

        Returns:
            ``{"path", "start_line", "end_line", "total_lines", "content", "truncated"}``; ``content`` has one
            ``"N: text"`` line per file line (lines over 500 characters cut).

        Raises:
            PathOutsideRootError: the path leaves the root. FileNotFoundError: no such file.
            IsADirectoryError: the path is a directory (the message lists some entries).
            ValueError: bad line numbers, a binary file, or a file over ``max_file_bytes``.
        """
        p = self.resolve(path)
        note = None
        located = _LOCATION_RE.match(path.strip())
        if located and not p.exists() and self.resolve(located["path"]).is_file():
            p = self.resolve(located["path"])
            if start_line == 1:
                start_line = int(located["line"])
            note = f"read {path!r} as the file {self.rel(p)!r} from line {start_line}"
        if start_line < 1:
            raise ValueError(f"start_line must be >= 1, got {start_line}")
        if end_line is not None and end_line < start_line:
            raise ValueError(f"end_line ({end_line}) is before start_line ({start_line})")
        rel = self.rel(p)
        if p.is_dir():
            entries = sorted(e.name + ("/" if e.is_dir() else "") for e in p.iterdir())
            shown = ", ".join(entries[:30]) + (", ..." if len(entries) > 30 else "")
            raise IsADirectoryError(f"{rel or '.'!r} is a directory; it contains: {shown}")
        if not p.is_file():
            raise FileNotFoundError(
                f"no file {path!r} under the repository root; use find_definition or search_code to find paths"
            )
        lines = self._text(rel).splitlines()
        total = len(lines)
        if start_line > total > 0:
            raise ValueError(f"start_line {start_line} is past the end of {rel!r} ({total} lines)")
        wanted_end = end_line if end_line is not None else start_line + 99
        last = min(wanted_end, total, start_line + max_lines - 1)
        content = "\n".join(
            f"{n}: {lines[n - 1] if len(lines[n - 1]) <= 500 else lines[n - 1][:500] + '...'}"
            for n in range(start_line, last + 1)
        )
        out = {
            "path": rel,
            "start_line": start_line if total else 0,
            "end_line": last,
            "total_lines": total,
            "content": content,
            "truncated": last < min(wanted_end, total),
        }
        return out if note is None or not total else {**out, "note": note}  # an empty file: no note
