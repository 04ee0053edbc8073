"""Definitions in source files: Python's :mod:`ast` for ``.py`` files, a language-agnostic declaration regex
for the rest; and how a query matches and ranks them."""

from __future__ import annotations

import ast
import re
from dataclasses import asdict, dataclass
from pathlib import PurePosixPath
from typing import Any, Literal

#: File suffixes that hold no code (docs, data, config): definitions are not looked for there.
NON_CODE_SUFFIXES = frozenset(
    ".md .markdown .rst .txt .adoc .json .jsonl .yaml .yml .toml .ini .cfg .csv .tsv .lock .xml .html .htm "
    ".svg .log .ipynb .jinja .j2".split()
)
_DOC_SUFFIXES = frozenset(".md .markdown .rst .txt .adoc".split())

#: A declaration line in most languages: ``kw`` the keyword, ``name`` the declared name.
DECL_RE = re.compile(
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
#: A Python ``def``/``async def``/``class`` line.
PY_DEF_LINE_RE = re.compile(r"^\s*(?:async\s+def|def|class)\s")

#: ``variable``: a name a Python module assigns at its top level (``MAX_THREADS = 1024``, ``Units = Literal[...]``).
Kind = Literal["function", "class", "method", "variable"]
KindFilter = Literal["any", "function", "class", "method"]


@dataclass(frozen=True)
class Definition:
    """One definition: ``path`` (relative, POSIX), ``line`` of its keyword (decorators excluded) and last line
    (``end_line``; ``line`` for the regex fallback), ``kind`` (a method: a function directly in a class), the
    bare ``name`` and the dotted ``qualname`` (``Agent.run``), its ``signature`` (the declaration line outside
    Python) and ``doc``, its docstring's first line ("" if none)."""

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
        return {"location": f"{self.path}:{self.line}", **asdict(self)}


def _py_signature(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> str:
    if isinstance(node, ast.ClassDef):
        bases = [ast.unparse(b) for b in node.bases] + [ast.unparse(k) for k in node.keywords]
        return f"class {node.name}" + (f"({', '.join(bases)})" if bases else "")
    prefix = "async def" if isinstance(node, ast.AsyncFunctionDef) else "def"
    sig = f"{prefix} {node.name}({ast.unparse(node.args)})"
    if node.returns is not None:
        sig += f" -> {ast.unparse(node.returns)}"
    return sig if len(sig) <= 300 else sig[:297] + "..."


def _assigned_names(node: ast.stmt) -> list[str]:
    """The plain names a top-level assignment binds (``A = B = 1``, ``x: int = 2``)."""
    targets = (
        node.targets
        if isinstance(node, ast.Assign)
        else [node.target]
        if isinstance(node, ast.AnnAssign)
        else []
    )
    return [t.id for t in targets if isinstance(t, ast.Name)]


def python_definitions(rel: str, text: str) -> list[Definition]:
    """All function/class/method definitions of a Python source, and the names its module level assigns
    (``variable``); SyntaxError/ValueError if it does not parse."""
    tree = ast.parse(text)
    lines = re.split(r"\r\n?|\n", text)  # ast's line breaks (splitlines also breaks at \f, \u2028...)
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
            elif not prefix and (names := _assigned_names(node)):
                line = lines[node.lineno - 1].strip()[:300] if node.lineno <= len(lines) else ""
                end = node.end_lineno or node.lineno
                out.extend(Definition(rel, node.lineno, end, "variable", n, n, line, "") for n in names)
            elif isinstance(node, ast.If | ast.Try | ast.With | ast.AsyncWith | ast.For | ast.While):
                # definitions under `if TYPE_CHECKING:`, `try:` etc. belong to the enclosing scope
                for field in ("body", "orelse", "finalbody"):
                    visit(getattr(node, field, []) or [], prefix, in_class)
                for handler in getattr(node, "handlers", []) or []:
                    visit(handler.body, prefix, in_class)

    visit(tree.body, "", False)
    return out


def regex_definitions(rel: str, text: str) -> list[Definition]:
    """Language-agnostic definitions: declaration-keyword lines, JS function assignments, shell functions."""
    out: list[Definition] = []
    shellish = rel.endswith((".sh", ".bash", ".zsh")) or PurePosixPath(rel).suffix == ""
    for lineno, line in enumerate(text.splitlines(), 1):
        if len(line) > 500:
            continue
        kind: Kind
        m = DECL_RE.match(line)
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


def normalize_query(name: str) -> str:
    """Strip what a model may wrap around a name: ``def``/``class`` and kind words before or after it
    (``variable MAX``, ``Agent class``), ``()``, backticks, quotes, spaces, and the punctuation a span copied
    from a question ends with (``load_bundle -``, ``load_bundle?``, ``Agent.run.``)."""
    q = name.lstrip("`'\"?!,;:- \t\n").rstrip("`'\".?!,;:- \t\n")
    q = re.sub(r"^(?:async\s+def|def|class|function|func|fn|method|variable|constant|const|var)\s+", "", q)
    q = re.sub(r"\(.*\)?$", "", q).strip()
    return re.sub(r"\s+(?:class|function|method|variable|constant)$", "", q)


#: The highest :func:`match_score` that names the definition itself (exact, exact ignoring case, qualified
#: name); above it, prefix and substring matches.
NAMED = 2


def module_qualname(d: Definition) -> str | None:
    """The dotted import path of a Python definition (``agentkit.bundle.load_bundle``), else ``None``."""
    p = PurePosixPath(d.path)
    if p.suffix not in (".py", ".pyi"):
        return None
    parts = list(p.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([*parts, d.qualname])


def match_score(query: str, d: Definition) -> int | None:
    """0 exact name, 1 exact ignoring case, 2 qualname match, 3 prefix, 4 substring, None no match.

    A dotted query matches the qualified name (``Agent.run``) or, for Python files, the module path before it
    (``agentkit.bundle.load_bundle``, ``bundle.load_bundle``: a tail of it at a dot)."""
    ql = query.casefold()
    if "." in query:
        qn = d.qualname.casefold()
        if d.qualname == query:
            return 0
        if qn == ql or qn.endswith("." + ql):
            return 2
        full = module_qualname(d)
        if full is not None and ("." + full.casefold()).endswith("." + ql):
            return 0 if full == query else 2
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


def listed_matches(
    ranked: list[tuple[tuple[Any, ...], Definition]], kind: str
) -> tuple[list[tuple[tuple[Any, ...], Definition]], bool]:
    """The definitions ``find_definitions`` lists, from its ``ranked`` ``(key, definition)`` pairs (sorted; ``key[0]``
    the :func:`match_score`, ``key[2]`` the :func:`path_rank`) and the asked ``kind`` (``"any"`` or a kind).

    Those of ``kind`` that name the query (scores up to :data:`NAMED`), less the ones that have it only ignoring case
    where one in a file of their language, as far in, has it as written; when none of ``kind`` names it, those of
    other kinds that do (only as written when ``kind`` has partial matches); else ``kind``'s partial matches.
    Returns ``(listed, whether they are of other kinds)``."""
    wanted = [kd for kd in ranked if kind in ("any", kd[1].kind)]
    named = [kd for kd in wanted if kd[0][0] <= NAMED]
    # one language's ``_Tables`` is another name than its ``_tables`` (Go's ``LoadBundle`` may be JS's
    # ``loadBundle``), unless the one written so sits further out (a test's ``agent`` beside the class ``Agent``)
    exact = [(PurePosixPath(d.path).suffix, key[2]) for key, d in named if key[0] == 0]
    named = [
        (key, d)
        for key, d in named
        if key[0] != 1 or not any(sx == PurePosixPath(d.path).suffix and pr <= key[2] for sx, pr in exact)
    ]
    # function 'limit' is tool_thread_limit, not a test's LIMIT: other kinds as written when this kind has parts
    other_kinds = [kd for kd in ranked if kd[0][0] <= (0 if wanted else NAMED)] if not named else []
    return named or other_kinds or wanted, bool(other_kinds)


def path_rank(rel: str) -> int:
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
