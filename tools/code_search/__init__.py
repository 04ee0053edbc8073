"""Code-search tools over a local repository: find definitions, full-text regex search, read a file range, run
a snippet with copies of its files in the Docker sandbox.

The root is :func:`set_root`'s, else ``$AGENTKIT_CODE_ROOT``, else the current directory at call time. Inside a
git work tree the searched files are those ``git ls-files --cached --others --exclude-standard`` lists, else a
walk that honours every ``.gitignore`` (:class:`GitIgnore`); binary and oversized files are skipped. Every path
is resolved (``..`` and symlinks) and must stay under the root (:class:`PathOutsideRootError`). Definitions come
from :mod:`ast` for Python and from a declaration-keyword regular expression for other languages.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from tools.args import args_model, validate_args
from tools.code_search.definitions import Definition, KindFilter
from tools.code_search.gitignore import GitIgnore
from tools.code_search.repo import CodeRepo, PathOutsideRootError

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


_repo_lock = threading.Lock()
_configured_root: Path | None = None
_repos: dict[Path, CodeRepo] = {}


def set_root(root: str | os.PathLike[str] | None) -> None:
    """Set the repository root of the tool functions (``None``: the default); NotADirectoryError if it is not
    an existing directory."""
    global _configured_root
    _configured_root = None if root is None else CodeRepo(root).root


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


def find_definition(
    name: SymbolName, kind: KindArg = "any", max_results: MaxDefinitions = 5
) -> dict[str, Any]:
    """Find where a function, class or method is defined in the repository.

    Returns:
        See :meth:`CodeRepo.find_definitions` (each match: ``location`` ``path:line``, ``path``, ``line``,
        ``end_line``, ``kind``, ``name``, ``qualname``, ``signature``, ``doc``), best match first.

    Raises:
        ValueError: invalid arguments.
    """
    args = validate_args(FindDefinitionArgs, name=name, kind=kind, max_results=max_results)
    return get_repo().find_definitions(**dict(args))


def search_code(
    pattern: Pattern,
    glob: PathGlob = None,
    case_sensitive: CaseSensitive = False,
    context_lines: ContextLines = 2,
    max_results: MaxHits = 10,
) -> dict[str, Any]:
    """Search the repository's files for a regular expression; returns file:line hits with context.

    Returns:
        See :meth:`CodeRepo.search`.

    Raises:
        ValueError: invalid arguments.
    """
    args = validate_args(
        SearchCodeArgs,
        pattern=pattern,
        glob=glob,
        case_sensitive=case_sensitive,
        context_lines=context_lines,
        max_results=max_results,
    )
    return get_repo().search(**dict(args))


def read_file(path: RelPath, start_line: StartLine = 1, end_line: EndLine = None) -> dict[str, Any]:
    """Read a range of lines of a file in the repository.

    Returns:
        See :meth:`CodeRepo.read`.

    Raises:
        ValueError: invalid arguments or line numbers. PathOutsideRootError: the path leaves the root.
        FileNotFoundError, IsADirectoryError.
    """
    args = validate_args(ReadFileArgs, path=path, start_line=start_line, end_line=end_line)
    return get_repo().read(**dict(args))


FindDefinitionArgs = args_model(find_definition, "FindDefinitionArgs")
SearchCodeArgs = args_model(search_code, "SearchCodeArgs")
ReadFileArgs = args_model(read_file, "ReadFileArgs")


#: ``(code, files, timeout_s) -> execution`` (a :class:`sandbox.Execution`, or what has its fields).
SandboxRunner = Callable[[str, dict[str, bytes], float], Any]

MAX_SNIPPET_FILES = 20
MAX_SNIPPET_FILE_BYTES = 2_000_000
_OUTPUT_CHARS = 4000

_sandbox_runner: SandboxRunner | None = None


def _docker_runner(code: str, files: dict[str, bytes], timeout_s: float) -> Any:
    """Run in the process-wide sandbox of :mod:`tools.python_exec`."""
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


def _tail(text: str) -> str:
    return text if len(text) <= _OUTPUT_CHARS else "[... cut]\n" + text[-_OUTPUT_CHARS:]


def run_python(
    code: SnippetCode, files: SnippetFiles | None = None, timeout: SnippetTimeout = 20
) -> dict[str, Any]:
    """Run a short Python program in an isolated sandbox, optionally with copies of repository files.

    Args:
        files: Repository files (paths relative to the root) to copy into the program's working directory.

    Returns:
        ``{"exit_code", "stdout", "stderr", "timed_out", "oom_killed", "files"}`` (streams cut to their last 4000
        characters; ``files``: the copied paths, at the same relative paths under the working directory).

    Raises:
        ValueError: invalid arguments, a binary file, or files over the size limits.
        PathOutsideRootError, FileNotFoundError, IsADirectoryError: a path leaves the root, names no file or
            names a directory. A file named twice is copied (and counted against the size limit) once.
        sandbox.SandboxError: Docker or the sandbox image is unavailable (the message says how to fix it).
    """
    args = dict(validate_args(RunPythonArgs, code=code, files=files or [], timeout=timeout))
    repo = get_repo()
    payload: dict[str, bytes] = {}
    total = 0
    for name in args["files"]:
        p = repo.resolve(name)
        if p.is_dir():
            raise IsADirectoryError(f"{name!r} is a directory, not a file; list the files in it to copy")
        if not p.is_file():
            raise FileNotFoundError(f"no file {name!r} under the repository root")
        if repo.rel(p) in payload:  # the same file named twice (or by two spellings): copied and counted once
            continue
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
    ex = runner(args["code"], payload, float(args["timeout"]))
    return {
        "exit_code": ex.exit_code,
        "stdout": _tail(ex.stdout),
        "stderr": _tail(ex.stderr),
        "timed_out": bool(ex.timed_out),
        "oom_killed": bool(getattr(ex, "oom_killed", False)),
        "files": sorted(payload),
    }


RunPythonArgs = args_model(run_python, "RunPythonArgs")
