"""The tool factories of YAML bundles: ``python:`` targets (imported from the bundle's folder first), ``http:``
tools (one request per call, retried) and ``sandbox:`` tools (code in the Docker sandbox, arguments in
``args.json``), and the ``{arg}`` / ``${ENV}`` templates they fill."""

from __future__ import annotations

import contextlib
import json
import os
import pkgutil
import re
import sys
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentkit.bundle_document import FieldPath, leaves
from agentkit.siblings import SIBLING_PACKAGES
from agentkit.tool_output import INVALID_UTF8_NOTE, decode_utf8

if TYPE_CHECKING:
    import httpx

__all__ = [
    "SandboxRunner",
    "TargetImportError",
    "default_sandbox_runner",
    "import_python_target",
    "make_http_function",
    "make_sandbox_function",
    "placeholders",
]

# ------------------------------------------------------------------------------------------ python


class TargetImportError(Exception):
    """A ``python:`` target that cannot be imported; the message names the target and why."""


def import_python_target(target: str, bundle_dir: str) -> Any:
    """The object a ``python: package.module:function`` target names, imported with ``bundle_dir`` first on
    ``sys.path`` (a module the bundle's folder holds is imported from there even when another folder's module of
    that name was imported before).

    Raises:
        TargetImportError: the module cannot be imported (missing, a syntax error, raises or exits while
            imported) or has no such attribute.
    """
    if sys.path[:1] != [bundle_dir]:
        if bundle_dir in sys.path:
            sys.path.remove(bundle_dir)
        sys.path.insert(0, bundle_dir)
    top = target.partition(":")[0].split(".")[0]
    here = Path(bundle_dir) / top
    beside = (here / "__init__.py").is_file() or here.with_suffix(".py").is_file()
    ours = Path(__file__).resolve().parent.parent / top  # agentkit's own package of that name, if any
    if beside and top in ("agentkit", *SIBLING_PACKAGES) and here.resolve() != ours:
        raise TargetImportError(  # importing it would replace agentkit's own package for the whole process
            f"cannot import {target!r}: {here if here.is_dir() else here.with_suffix('.py')} has the name of "
            f"agentkit's own package {top!r}; rename it, e.g. to my_{top}"
        )
    loaded = getattr(sys.modules.get(top), "__file__", None)
    if loaded and beside:
        if not Path(loaded).resolve().is_relative_to(Path(bundle_dir).resolve()):
            for name in [m for m in sys.modules if m == top or m.startswith(top + ".")]:
                del sys.modules[name]
    try:
        return pkgutil.resolve_name(target)
    except ImportError as exc:
        raise TargetImportError(f"cannot import {target!r}: {exc}") from exc
    except AttributeError as exc:
        raise TargetImportError(f"cannot find {target!r}: {exc}") from exc
    except SyntaxError as exc:
        where = f"{exc.filename}:{exc.lineno}: " if exc.filename else ""
        raise TargetImportError(f"cannot import {target!r}: {where}SyntaxError: {exc.msg}") from exc
    except Exception as exc:  # the module raised while it was imported
        why = f"importing it raised {type(exc).__name__}: {exc}"
        raise TargetImportError(f"cannot import {target!r}: {why}") from exc
    except SystemExit as exc:
        raise TargetImportError(
            f"cannot import {target!r}: importing it called sys.exit({exc.code!r})"
        ) from exc


# ------------------------------------------------------------------------------------------ templates

_TEMPLATE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\{\{|\}\}|\{([A-Za-z_][A-Za-z0-9_]*)\}")
_EXACT = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


class _Missing(Exception):
    pass


def placeholders(value: Any, path: FieldPath) -> list[tuple[str, FieldPath]]:
    """Every ``{arg}`` placeholder in a template value, with the field path where it appears."""
    return [
        (m.group(2), at)
        for at, text in leaves(value, path)
        if isinstance(text, str)
        for m in _TEMPLATE.finditer(text)
        if m.group(2)
    ]


def _render(template: Any, args: dict[str, Any], where: str, *, quote: bool = False) -> Any:
    """Fill a template: ``${ENV}`` from the environment, ``{arg}`` from the arguments (one pass: values are not
    re-expanded); exactly ``{arg}`` yields the typed value; mappings and lists drop entries missing an argument.

    Raises:
        _Missing: the (top-level) template needs an argument that is absent or null.
        RuntimeError: an environment variable is not set.
    """
    if isinstance(template, str):

        def text(name: str) -> str:
            if args.get(name) is None:
                raise _Missing(name)
            v = args[name]
            t = v if isinstance(v, str) else json.dumps(v)
            return urllib.parse.quote(t, safe="") if quote else t

        if m := _EXACT.fullmatch(template):
            return text(m.group(1)) if quote or args.get(m.group(1)) is None else args[m.group(1)]

        def rep(mm: re.Match[str]) -> str:
            if var := mm.group(1):
                if (env := os.environ.get(var)) is None:
                    raise RuntimeError(f"environment variable {var} is not set (needed by {where})")
                return env
            return {"{{": "{", "}}": "}"}.get(mm.group(0)) or text(mm.group(2))

        return _TEMPLATE.sub(rep, template)
    if isinstance(template, (dict, list)):
        filled = []
        for k, v in template.items() if isinstance(template, dict) else enumerate(template):
            try:
                filled.append((k, _render(v, args, where)))
            except _Missing:
                continue
        return dict(filled) if isinstance(template, dict) else [v for _, v in filled]
    return template


# ------------------------------------------------------------------------------------------ http tools


def _request_parts(spec: dict[str, Any], arguments: dict[str, Any], where: str) -> dict[str, Any]:
    """``url``, ``headers``, ``params`` and ``json`` of one ``http:`` call: the templates filled; without
    ``query``/``body`` templates, the arguments not in the URL go in the query (GET, DELETE) or the body."""
    method = spec.get("method", "GET")
    try:
        url = _render(spec["url"], arguments, where, quote=True)
    except _Missing as exc:
        raise ValueError(f"argument {exc} is needed to build the URL") from None
    headers = {k: str(v) for k, v in _render(spec.get("headers", {}), arguments, where).items()}
    url_args = {n for n, _ in placeholders(spec["url"], ())}
    rest = {k: v for k, v in arguments.items() if k not in url_args and v is not None}
    params: Any = _render(spec["query"], arguments, where) if "query" in spec else None
    body: Any = None
    if "body" in spec:
        with contextlib.suppress(_Missing):  # a body that needs an absent argument is not sent
            body = _render(spec["body"], arguments, where)
    if "query" not in spec and "body" not in spec and rest:
        if method in ("GET", "DELETE"):
            params = rest
        else:
            body = rest
    if isinstance(params, dict):  # a mapping goes as its JSON (httpx writes booleans as true and false)
        params = {k: json.dumps(v) if isinstance(v, dict) else v for k, v in params.items()}
    return {"url": url, "headers": headers, "params": params, "json": body}


def _read_response(resp: httpx.Response, mode: str, max_chars: int, shown: str) -> Any:
    """The tool's value: parsed JSON (``response: json``, or ``auto`` with a JSON content type) when it fits
    ``max_chars``, else the text cut with a marker (invalid UTF-8 replaced, with :data:`INVALID_UTF8_NOTE`); a
    204 is ``None`` (``""`` with ``response: text``)."""
    if resp.status_code >= 400:
        raise RuntimeError(f"{shown}: HTTP {resp.status_code}: {resp.text[:500]}")
    if resp.status_code == 204 and not resp.content:
        return "" if mode == "text" else None
    if mode == "json" or (mode == "auto" and "json" in resp.headers.get("content-type", "")):
        try:
            value = resp.json()
        except ValueError:
            if mode == "json":
                raise RuntimeError(f"{shown}: response is not JSON: {resp.text[:200]}") from None
        else:
            text = json.dumps(value, ensure_ascii=False)
            return value if len(text) <= max_chars else _cut(text, max_chars)
    charset = (resp.charset_encoding or "utf-8").lower().replace("_", "-")
    text, bad = decode_utf8(resp.content) if charset in ("utf-8", "utf8") else (resp.text, 0)
    return _cut(text, max_chars) + ("\n" + INVALID_UTF8_NOTE.format(n=bad) if bad else "")


def _cut(text: str, max_chars: int) -> str:
    return (
        text
        if len(text) <= max_chars
        else text[:max_chars] + f"... [truncated {len(text) - max_chars} characters]"
    )


def make_http_function(
    tool_name: str, spec: dict[str, Any], client_getter: Callable[[], httpx.Client]
) -> Callable[..., Any]:
    """The function of an ``http:`` tool: one request per call, retried by
    :class:`tools.httpclient.RetryingClient` on 429/5xx/timeouts (``retry_wait`` doubling up to 16x). The
    function raises ``ValueError`` for an argument the URL needs, ``RuntimeError`` for a failed request."""
    from tools.httpclient import RetriesExhausted, RetryingClient

    method = spec.get("method", "GET")
    timeout = float(spec.get("timeout", 10.0))
    retries = int(spec.get("retries", 2))
    retry_wait = float(spec.get("retry_wait", 0.5))
    where = f"tool {tool_name!r}"

    def call(**arguments: Any) -> Any:
        parts = _request_parts(spec, arguments, where)
        # shown without its query or user:password@ (they may hold keys)
        u = urllib.parse.urlsplit(parts["url"])
        shown = f"{method} {u._replace(netloc=u.netloc.rpartition('@')[2], query='', fragment='').geturl()}"
        http = RetryingClient(
            client_getter(), attempts=retries + 1, retry_wait=retry_wait, max_wait=retry_wait * 16
        )
        try:
            resp, _ = http.request(method, timeout=timeout, **parts)
        except RetriesExhausted as exc:
            why = exc.reason(f"timed out after {timeout:g} s")
            raise RuntimeError(f"{shown}: {why} (after {exc.attempts} attempt(s))") from None
        return _read_response(
            resp, spec.get("response", "auto"), int(spec.get("max_response_chars", 20000)), shown
        )

    call.__name__ = tool_name
    return call


# --------------------------------------------------------------------------------------- sandbox tools

#: ``(code, language, files, timeout) -> result with stdout, stderr, exit_code, timed_out, oom_killed``.
SandboxRunner = Callable[[str, str, dict[str, str], float], Any]


def default_sandbox_runner(code: str, language: str, files: dict[str, str], timeout: float) -> Any:
    """Run code in the process-wide sandbox of :mod:`tools.python_exec` (``sandbox.SandboxError`` without
    Docker or its image)."""
    from tools.python_exec import get_sandbox

    return get_sandbox().run(code, language=language, files=files, timeout=timeout)


_PY_PRELUDE = (
    "import json as _agentkit_json\nwith open('args.json') as _f:\n    args = _agentkit_json.load(_f)\n"
)


def make_sandbox_function(tool_name: str, spec: dict[str, Any], runner: SandboxRunner) -> Callable[..., Any]:
    language = spec.get("language", "python")
    code = spec["code"]
    timeout = float(spec.get("timeout", 10.0))
    program = _PY_PRELUDE + code if language == "python" else code

    def call(**arguments: Any) -> Any:
        files = {"args.json": json.dumps(arguments, ensure_ascii=False)}
        ex = runner(program, language, files, timeout)
        if getattr(ex, "timed_out", False):
            raise TimeoutError(f"sandboxed code timed out after {timeout:g} s")
        if getattr(ex, "oom_killed", False):
            raise MemoryError("sandboxed code ran out of memory")
        if ex.exit_code != 0:
            tail = (ex.stderr or ex.stdout or "").strip()[-1500:]
            raise RuntimeError(f"sandboxed code exited with code {ex.exit_code}: {tail}")
        return ex.stdout

    call.__name__ = tool_name
    return call
