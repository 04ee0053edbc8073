"""YAML tool bundles: an agent (model, system prompt, loop settings, tools) in one versioned file.

The format is documented in docs/BUNDLES.md and defined by ``agentkit/schemas/bundle.schema.json``
(JSON Schema 2020-12, checked with ``jsonschema``). :func:`load_bundle` reads a file, validates it against
the schema, then checks what a schema cannot (importable ``python:`` functions, valid ``parameters``
schemas, placeholders that name parameters, duplicate tool names...). Every problem is reported with the
file, the line and column (from the YAML node marks) and the field path (``tools[1].http.url``), all at
once, in a :class:`~agentkit.errors.BundleError`.

Tool implementations:

* ``python: package.module:function`` - imported at load time (the bundle's folder is put on ``sys.path``);
  ``parameters`` optional (taken from the type hints when absent).
* ``http:`` - one HTTP request per call with httpx, retried with tenacity on 429/5xx/timeouts.
* ``sandbox:`` - code run in the Docker sandbox (:mod:`sandbox`), with the arguments in ``args.json``.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import sys
import threading
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from agentkit.backends.embedded import constraint_support_error
from agentkit.errors import BundleError, BundleIssue, ToolDefinitionError
from agentkit.tools import DEFAULT_RETRIES, DEFAULT_TIMEOUT_S, Tool

if TYPE_CHECKING:
    import httpx

    from agentkit.agent import Agent
    from agentkit.backends.base import Backend

__all__ = ["FORMAT_VERSION", "Bundle", "load_bundle", "schema"]

#: The bundle format version this agentkit reads (``agentkit_bundle: 1``).
FORMAT_VERSION = 1
SCHEMA_PATH = Path(__file__).resolve().parent / "schemas" / "bundle.schema.json"

_EMBEDDED_KEYS = ("dtype", "device", "max_new_tokens", "seed", "threads", "adapter")
_OPENAI_KEYS = ("base_url", "api_key_env", "timeout", "max_retries", "request", "seed")

Path_ = tuple[str | int, ...]


@lru_cache(maxsize=1)
def schema() -> dict[str, Any]:
    """The bundle JSON Schema (``agentkit/schemas/bundle.schema.json``)."""
    return dict(json.loads(SCHEMA_PATH.read_text(encoding="utf-8")))


def _fmt(path: Path_) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


class _Positions:
    """Line/column of every value and key of a YAML document, by field path."""

    def __init__(self) -> None:
        self.values: dict[Path_, tuple[int, int]] = {}
        self.keys: dict[Path_, tuple[int, int]] = {}

    def at(self, path: Path_, *, key: bool = False) -> tuple[int | None, int | None]:
        """Position of ``path`` (of its key when ``key``), else of its nearest known parent."""
        if key and path in self.keys:
            return self.keys[path]
        p = path
        while True:
            if p in self.values:
                return self.values[p]
            if not p:
                return None, None
            p = p[:-1]


def _mark(node: yaml.Node) -> tuple[int, int]:
    return node.start_mark.line + 1, node.start_mark.column + 1


def _walk(node: yaml.Node, path: Path_, pos: _Positions, issues: list[tuple[Path_, str, bool]]) -> None:
    pos.values.setdefault(path, _mark(node))
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for k, v in node.value:
            key = k.value if isinstance(k, yaml.ScalarNode) else str(k.value)
            kp = (*path, key)
            if key in seen:
                pos.keys[(*kp, "#dup")] = _mark(k)
                issues.append(((*kp, "#dup"), f"duplicate key {key!r} (YAML keeps only the last one)", True))
                continue
            seen.add(key)
            pos.keys[kp] = _mark(k)
            _walk(v, kp, pos, issues)
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            _walk(v, (*path, i), pos, issues)


# ------------------------------------------------------------------------------------------ templates

_TEMPLATE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\{\{|\}\}|\{([A-Za-z_][A-Za-z0-9_]*)\}")
_EXACT = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


class _Missing(Exception):
    pass


def _placeholders(value: Any, path: Path_) -> list[tuple[str, Path_]]:
    """Every ``{arg}`` placeholder in a template value, with the field path where it appears."""
    found: list[tuple[str, Path_]] = []
    if isinstance(value, str):
        for m in _TEMPLATE.finditer(value):
            if m.group(2):
                found.append((m.group(2), path))
    elif isinstance(value, dict):
        for k, v in value.items():
            found.extend(_placeholders(v, (*path, k)))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found.extend(_placeholders(v, (*path, i)))
    return found


def _env(name: str, where: str) -> str:
    value = os.environ.get(name)
    if value is None:
        raise RuntimeError(f"environment variable {name} is not set (needed by {where})")
    return value


def _render(template: Any, args: dict[str, Any], where: str, *, quote: bool = False) -> Any:
    """Fill a template: ``${ENV}`` from the environment, ``{arg}`` from the arguments (single pass, so values
    are never re-expanded). A string that is exactly ``{arg}`` yields the argument's typed value. Mappings
    and lists drop entries whose placeholders name absent arguments.

    Raises:
        _Missing: the (top-level) template needs an argument that is absent or null.
        RuntimeError: an environment variable is not set.
    """
    if isinstance(template, str):
        m = _EXACT.fullmatch(template)
        if m:
            if args.get(m.group(1)) is None:
                raise _Missing(m.group(1))
            value = args[m.group(1)]
            if not quote:
                return value
            template_value = value if isinstance(value, str) else json.dumps(value)
            return urllib.parse.quote(template_value, safe="")

        def rep(mm: re.Match[str]) -> str:
            if mm.group(1):
                return _env(mm.group(1), where)
            if mm.group(0) == "{{":
                return "{"
            if mm.group(0) == "}}":
                return "}"
            name = mm.group(2)
            if args.get(name) is None:
                raise _Missing(name)
            v = args[name]
            text = v if isinstance(v, str) else json.dumps(v)
            return urllib.parse.quote(text, safe="") if quote else text

        return _TEMPLATE.sub(rep, template)
    if isinstance(template, dict):
        out: dict[str, Any] = {}
        for k, v in template.items():
            try:
                out[k] = _render(v, args, where)
            except _Missing:
                continue
        return out
    if isinstance(template, list):
        items = []
        for v in template:
            try:
                items.append(_render(v, args, where))
            except _Missing:
                continue
        return items
    return template


# ------------------------------------------------------------------------------------------ http tools


def _make_http_function(
    tool_name: str, spec: dict[str, Any], client_getter: Callable[[], httpx.Client]
) -> Callable[..., Any]:
    import httpx

    from tools.httpclient import RetriesExhausted, RetryingClient

    method = spec.get("method", "GET")
    url_t = spec["url"]
    headers_t = spec.get("headers", {})
    has_query = "query" in spec
    has_body = "body" in spec
    timeout = float(spec.get("timeout", 10.0))
    retries = int(spec.get("retries", 2))
    retry_wait = float(spec.get("retry_wait", 0.5))
    mode = spec.get("response", "auto")
    max_chars = int(spec.get("max_response_chars", 20000))
    url_args = {n for n, _ in _placeholders(url_t, ())}
    where = f"tool {tool_name!r}"

    def call(**arguments: Any) -> Any:
        try:
            url = _render(url_t, arguments, where, quote=True)
        except _Missing as exc:
            raise ValueError(f"argument {exc} is needed to build the URL") from None
        headers: dict[str, str] = {}
        for k, v in headers_t.items():
            try:
                headers[k] = str(_render(v, arguments, where))
            except _Missing:
                continue
        rest = {k: v for k, v in arguments.items() if k not in url_args and v is not None}
        params: Any = None
        body: Any = None
        if has_query:
            params = _render(spec["query"], arguments, where)
        if has_body:
            try:
                body = _render(spec["body"], arguments, where)
            except _Missing:
                body = None
        if not has_query and not has_body and rest:
            if method in ("GET", "DELETE"):
                params = rest
            else:
                body = rest
        if isinstance(params, dict):
            params = {
                k: (
                    json.dumps(v)
                    if isinstance(v, dict)
                    else ("true" if v is True else "false" if v is False else v)
                )
                for k, v in params.items()
            }
        shown = f"{method} {url.split('?', 1)[0]}"
        client = client_getter()

        http = RetryingClient(client, attempts=retries + 1, retry_wait=retry_wait, max_wait=retry_wait * 16)
        try:
            resp, _ = http.request(method, url, params=params, json=body, headers=headers, timeout=timeout)
        except RetriesExhausted as exc:
            if exc.response is not None:
                why = f"HTTP {exc.response.status_code}: {exc.response.text[:300]}"
            elif isinstance(exc.error, httpx.TimeoutException):
                why = f"timed out after {timeout:g} s"
            else:
                why = f"{type(exc.error).__name__}: {exc.error}"
            raise RuntimeError(f"{shown}: {why} (after {exc.attempts} attempt(s))") from None
        if resp.status_code >= 400:
            raise RuntimeError(f"{shown}: HTTP {resp.status_code}: {resp.text[:500]}")
        ctype = resp.headers.get("content-type", "")
        if mode == "json" or (mode == "auto" and "json" in ctype):
            try:
                value = resp.json()
            except ValueError:
                if mode == "json":
                    raise RuntimeError(f"{shown}: response is not JSON: {resp.text[:200]}") from None
            else:
                text = json.dumps(value, ensure_ascii=False)
                if len(text) <= max_chars:
                    return value
                return text[:max_chars] + f"... [truncated {len(text) - max_chars} characters]"
        text = resp.text
        if len(text) > max_chars:
            text = text[:max_chars] + f"... [truncated {len(text) - max_chars} characters]"
        return text

    call.__name__ = tool_name
    return call


# --------------------------------------------------------------------------------------- sandbox tools

#: ``(code, language, files, timeout) -> result with stdout, stderr, exit_code, timed_out, oom_killed``.
SandboxRunner = Callable[[str, str, dict[str, str], float], Any]


def default_sandbox_runner(code: str, language: str, files: dict[str, str], timeout: float) -> Any:
    """Run code in the process-wide sandbox of :mod:`tools.python_exec` (one :class:`sandbox.Sandbox`, warm
    pool of 1, started on first use and shared with the ``python_exec`` tool).

    Raises:
        sandbox.SandboxError: the Docker engine or image is unavailable (the message says how to fix it).
    """
    from tools.python_exec import get_sandbox

    return get_sandbox().run(code, language=language, files=files, timeout=timeout)


_PY_PRELUDE = (
    "import json as _agentkit_json\nwith open('args.json') as _f:\n    args = _agentkit_json.load(_f)\n"
)


def _make_sandbox_function(tool_name: str, spec: dict[str, Any], runner: SandboxRunner) -> Callable[..., Any]:
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


# -------------------------------------------------------------------------------------------- bundle


@dataclass
class Bundle:
    """A loaded bundle.

    Attributes:
        path: the bundle file.
        name: bundle name.
        description: bundle description.
        model: the ``model:`` section (backend kind, name, backend settings).
        system_prompt: system prompt (``None`` if absent).
        agent_settings: the ``agent:`` section (``max_steps``, ``tool_choice``, ``loop_guard``,
            ``reset_tool_choice``, ``max_tool_output_bytes``, ``trim_history``).
        tools: the tools, ready to use.
        data: the parsed YAML document.
    """

    path: Path
    name: str
    description: str
    model: dict[str, Any]
    system_prompt: str | None
    agent_settings: dict[str, Any]
    tools: list[Tool]
    data: dict[str, Any] = field(repr=False)

    def make_backend(
        self,
        backend: str | Backend | None = None,
        model: str | None = None,
        *,
        seed: int | None = None,
        adapter: str | Path | None = None,
    ) -> Backend:
        """The backend: the bundle's ``model:`` section, or the ``backend``/``model``/``seed`` overrides.

        The bundle's backend settings apply only while the kind is the bundle's own (switching
        ``--backend`` keeps only ``--model`` and ``--seed``). A relative ``scripted`` script path in the bundle
        is relative to the bundle's folder.

        Args:
            backend: a backend kind, or a Backend instance (returned as is).
            model: checkpoint path/id, served model name or script file.
            seed: the embedded backend's denoising seed / the openai request's ``seed``, overriding
                ``model.seed``; the scripted backend is deterministic and ignores it.
            adapter: a LoRA adapter folder (``agentkit specialize``) for the embedded backend, overriding
                ``model.adapter`` (a relative ``model.adapter`` in the bundle is relative to the bundle's folder).

        Raises:
            ValueError: unknown backend kind, a required model name missing, or ``adapter`` with a backend
                other than embedded.
        """
        from agentkit.backends import make_backend

        if backend is not None and not isinstance(backend, str):
            return backend
        bundle_kind = self.model.get("backend", "embedded")
        kind = backend or bundle_kind
        same = kind == bundle_kind
        name = model if model is not None else (self.model.get("name") if same else None)
        settings: dict[str, Any] = {}
        if same and kind == "embedded":
            settings = {k: self.model[k] for k in _EMBEDDED_KEYS if k in self.model}
            if "adapter" in settings and not Path(settings["adapter"]).is_absolute():
                settings["adapter"] = str(self.path.parent / settings["adapter"])
        elif same and kind == "openai":
            settings = {
                k: self.model[k]
                for k in ("base_url", "api_key_env", "timeout", "max_retries")
                if k in self.model
            }
            request = dict(self.model.get("request", {}))
            if "seed" in self.model:
                request.setdefault("seed", self.model["seed"])
            if request:
                settings["settings"] = request
        if adapter is not None:
            if kind != "embedded":
                raise ValueError(f"--adapter applies to the embedded backend only (backend is {kind!r})")
            settings["adapter"] = str(adapter)
        if seed is not None and kind == "embedded":
            settings["seed"] = seed
        elif seed is not None and kind == "openai":
            settings["settings"] = {**settings.get("settings", {}), "seed": seed}
        if kind == "scripted" and name and model is None and not Path(name).is_absolute():
            name = str(self.path.parent / name)
        return make_backend(kind, name, **settings)

    def make_agent(
        self,
        backend: str | Backend | None = None,
        model: str | None = None,
        *,
        seed: int | None = None,
        adapter: str | Path | None = None,
        **overrides: Any,
    ) -> Agent:
        """An :class:`~agentkit.agent.Agent` from this bundle; ``overrides`` are ``Agent`` keywords.

        ``backend``, ``model``, ``seed`` and ``adapter`` are those of :meth:`make_backend`.
        """
        from agentkit.agent import Agent

        kwargs: dict[str, Any] = {
            "system_prompt": self.system_prompt,
            "name": self.name,
            **self.agent_settings,
        }
        kwargs.update(overrides)
        return Agent(self.make_backend(backend, model, seed=seed, adapter=adapter), self.tools, **kwargs)


def _import_object(target: str) -> Any:
    module_name, _, attr = target.partition(":")
    module = importlib.import_module(module_name)
    obj: Any = module
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def load_bundle(
    path: str | Path,
    *,
    http_client: httpx.Client | None = None,
    sandbox_runner: SandboxRunner | None = None,
) -> Bundle:
    """Load and validate a bundle file.

    Args:
        path: the YAML file.
        http_client: httpx client used by ``http:`` tools (default: one created on first call); pass one
            with a ``transport`` for tests, proxies or custom TLS.
        sandbox_runner: runs ``sandbox:`` tools (default :func:`default_sandbox_runner`, Docker).

    Returns:
        The :class:`Bundle`.

    Raises:
        BundleError: every problem found, each with file, line, column and field.
        OSError: the file cannot be read.
    """
    p = Path(path)
    file = str(path)
    text = p.read_text(encoding="utf-8")
    pos = _Positions()
    raw_issues: list[tuple[Path_, str, bool]] = []

    def issue(path_: Path_, message: str, *, key: bool = False, at: Path_ | None = None) -> BundleIssue:
        line, col = pos.at(path_ if at is None else at, key=key)
        fld = _fmt(tuple(x for x in path_ if x != "#dup"))
        return BundleIssue(file, line, col, fld, message)

    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            raise BundleError([BundleIssue(file, 1, 1, "", "the file is empty")])
        data = loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        msg = " ".join(x for x in (exc.context, exc.problem) if x) or str(exc)
        raise BundleError(
            [
                BundleIssue(
                    file,
                    mark.line + 1 if mark else None,
                    mark.column + 1 if mark else None,
                    "",
                    f"YAML syntax: {msg}",
                )
            ]
        ) from None
    except yaml.YAMLError as exc:
        raise BundleError([BundleIssue(file, None, None, "", f"YAML: {exc}")]) from None
    finally:
        loader.dispose()
    _walk(node, (), pos, raw_issues)
    issues = [issue(pth, msg, key=k) for pth, msg, k in raw_issues]

    issues.extend(_schema_issues(data, issue))
    if issues:
        raise BundleError(sorted(issues, key=lambda i: (i.line or 0, i.column or 0)))
    assert isinstance(data, dict)

    client_lock = threading.Lock()
    client_box: list[httpx.Client] = [http_client] if http_client is not None else []

    def get_client() -> httpx.Client:
        with client_lock:
            if not client_box:
                import httpx

                client_box.append(httpx.Client(follow_redirects=True))
            return client_box[0]

    runner = sandbox_runner or default_sandbox_runner
    model = dict(data.get("model", {}))
    kind = model.get("backend", "embedded")
    for k in model:
        if k in ("backend", "name"):
            continue
        if kind == "embedded" and k not in _EMBEDDED_KEYS:
            issues.append(
                issue(
                    ("model", k), f"'{k}' applies to the openai backend only (backend is {kind!r})", key=True
                )
            )
        elif kind == "openai" and k not in _OPENAI_KEYS:
            issues.append(
                issue(
                    ("model", k), f"'{k}' applies to the embedded backend only (backend is openai)", key=True
                )
            )
        elif kind == "scripted":
            issues.append(issue(("model", k), f"the scripted backend takes no '{k}' setting", key=True))
    if kind in ("openai", "scripted") and "name" not in model:
        issues.append(issue(("model",), f"the {kind} backend needs model.name"))

    bundle_dir = str(p.resolve().parent)
    tools: list[Tool] = []
    names: dict[str, int] = {}
    for i, t in enumerate(data["tools"]):
        tp: Path_ = ("tools", i)
        name = t["name"]
        if name in names:
            issues.append(
                issue((*tp, "name"), f"duplicate tool name {name!r} (first at tools[{names[name]}])")
            )
            continue
        names[name] = i
        params = t.get("parameters")
        if isinstance(params, dict) and isinstance(params.get("properties"), dict):
            # `grounded: true` on a property is the bundle spelling of the `x-grounded` keyword
            props_in, bad_g = {}, False
            for k, v in params["properties"].items():
                if isinstance(v, dict) and "grounded" in v:
                    if not isinstance(v["grounded"], bool):
                        issues.append(
                            issue(
                                (*tp, "parameters", "properties", k, "grounded"),
                                "grounded must be true or false",
                            )
                        )
                        bad_g = True
                    v = {**{kk: vv for kk, vv in v.items() if kk != "grounded"}, "x-grounded": v["grounded"]}
                props_in[k] = v
            if bad_g:
                continue
            params = {**params, "properties": props_in}
        if params is not None:
            import jsonschema

            if params.get("type", "object") != "object":
                issues.append(
                    issue((*tp, "parameters", "type"), "parameters must be a JSON Schema of type 'object'")
                )
                continue
            try:
                jsonschema.Draft202012Validator.check_schema(params)
            except jsonschema.SchemaError as exc:
                issues.append(
                    issue((*tp, "parameters", *exc.path), f"not a valid JSON Schema: {exc.message}")
                )
                continue
            if kind == "embedded" and (unsupported := constraint_support_error(name, params)) is not None:
                where = tuple(x for x in unsupported.path.split("/") if x)
                at = (*tp, "parameters", *(int(x) if x.isdigit() else x for x in where), unsupported.keyword)
                issues.append(
                    issue(at, f"the tool-call constraint cannot enforce this schema: {unsupported}")
                )
                continue
        props = set((params or {}).get("properties", {}))
        required = set((params or {}).get("required", []))
        common: dict[str, Any] = {
            "name": name,
            "description": t.get("description"),
            "retries": t.get("retries", DEFAULT_RETRIES),
            "grounded": list(t.get("grounded", [])),
            "max_output_bytes": t.get("max_output_bytes"),
        }
        try:
            if "python" in t:
                if bundle_dir not in sys.path:
                    sys.path.insert(0, bundle_dir)
                try:
                    obj = _import_object(t["python"])
                except ImportError as exc:
                    issues.append(issue((*tp, "python"), f"cannot import {t['python']!r}: {exc}"))
                    continue
                except AttributeError as exc:
                    issues.append(issue((*tp, "python"), f"cannot find {t['python']!r}: {exc}"))
                    continue
                base_timeout: float | None = DEFAULT_TIMEOUT_S
                if isinstance(obj, Tool):
                    base_timeout = obj.timeout
                    if "retries" not in t:
                        common["retries"] = obj.retries
                    if "max_output_bytes" not in t:
                        common["max_output_bytes"] = obj.max_output_bytes
                    if common["description"] is None:
                        common["description"] = obj.description
                    # the decorator's grounded parameters stay grounded (the bundle may add more)
                    marked = [
                        k
                        for k, v in (obj.parameters.get("properties") or {}).items()
                        if isinstance(v, dict) and v.get("x-grounded") is True
                    ]
                    common["grounded"] = list(dict.fromkeys([*marked, *common["grounded"]]))
                    obj = obj.function
                if not callable(obj):
                    issues.append(issue((*tp, "python"), f"{t['python']!r} is not callable"))
                    continue
                made = Tool(obj, parameters=params, timeout=t.get("timeout", base_timeout), **common)
                if kind == "embedded" and params is None:
                    # the schema comes from the function's signature: checked here, so the error has a line
                    unsupported = constraint_support_error(name, made.parameters)
                    if unsupported is not None:
                        issues.append(
                            issue(
                                (*tp, "python"),
                                f"the tool-call constraint cannot enforce the parameters of {t['python']!r}: "
                                f"{unsupported}",
                            )
                        )
                        continue
                tools.append(made)
                continue
            if params is None:
                impl = "http" if "http" in t else "sandbox"
                issues.append(issue(tp, f"a {impl} tool needs 'parameters' (a JSON Schema of its arguments)"))
                continue
            if "http" in t:
                spec = t["http"]
                bad = False
                for n, where in _placeholders(spec["url"], (*tp, "http", "url")):
                    if n not in required:
                        issues.append(issue(where, f"URL placeholder {{{n}}} must be a required parameter"))
                        bad = True
                for part in ("headers", "query", "body"):
                    if part in spec:
                        for n, where in _placeholders(spec[part], (*tp, "http", part)):
                            if n not in props:
                                issues.append(
                                    issue(
                                        where,
                                        f"placeholder {{{n}}} names no parameter (have: {sorted(props)})",
                                    )
                                )
                                bad = True
                if bad:
                    continue
                per_try = float(spec.get("timeout", 10.0))
                attempts = int(spec.get("retries", 2)) + 1
                fn = _make_http_function(name, spec, get_client)
                default_timeout = per_try * attempts + float(spec.get("retry_wait", 0.5)) * 16 * attempts + 1
                tools.append(Tool(fn, parameters=params, timeout=t.get("timeout", default_timeout), **common))
            else:
                spec = t["sandbox"]
                fn = _make_sandbox_function(name, spec, runner)
                default_timeout = float(spec.get("timeout", 10.0)) + 60.0
                tools.append(Tool(fn, parameters=params, timeout=t.get("timeout", default_timeout), **common))
        except ToolDefinitionError as exc:
            issues.append(issue(tp, str(exc)))

    agent_settings = dict(data.get("agent", {}))
    tc = agent_settings.get("tool_choice")
    if isinstance(tc, dict) and tc.get("name") not in names:
        issues.append(
            issue(
                ("agent", "tool_choice", "name"),
                f"tool_choice names {tc.get('name')!r}, which is not a tool of this bundle",
            )
        )
    if issues:
        raise BundleError(sorted(issues, key=lambda i: (i.line or 0, i.column or 0)))
    return Bundle(
        path=p,
        name=data["name"],
        description=data.get("description", ""),
        model=model,
        system_prompt=data.get("system_prompt"),
        agent_settings=agent_settings,
        tools=tools,
        data=data,
    )


def _schema_issues(data: Any, issue: Callable[..., BundleIssue]) -> list[BundleIssue]:
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema())
    out: list[BundleIssue] = []
    for err in validator.iter_errors(data):
        path: Path_ = tuple(err.absolute_path)
        v = err.validator
        if v == "required" and isinstance(err.instance, dict):
            for r in err.validator_value:
                if r not in err.instance:
                    out.append(issue((*path, r), f"required field '{r}' is missing", at=path, key=True))
        elif v == "additionalProperties" and isinstance(err.instance, dict):
            allowed = err.schema.get("properties", {})
            for k in err.instance:
                if k not in allowed:
                    out.append(
                        issue(
                            (*path, k),
                            f"unknown field '{k}' (allowed: {', '.join(sorted(allowed))})",
                            key=True,
                        )
                    )
        elif v == "oneOf" and len(path) == 2 and path[0] == "tools" and isinstance(err.instance, dict):
            impls = [k for k in ("python", "http", "sandbox") if k in err.instance]
            found = "none" if not impls else " and ".join(impls)
            out.append(
                issue(
                    path, f"a tool needs exactly one implementation (python, http or sandbox), found {found}"
                )
            )
        elif v == "oneOf" and path and path[-1] == "max_tool_output_bytes":
            out.append(issue(path, f"must be an integer >= 1 (bytes), 'auto' or null, got {err.instance!r}"))
        elif v == "oneOf":
            out.append(
                issue(path, f"must be 'auto', 'required', 'none' or {{name: TOOL}}, got {err.instance!r}")
            )
        elif v == "const" and path == ("agentkit_bundle",):
            out.append(
                issue(
                    path,
                    f"unsupported bundle format version {err.instance!r}; this agentkit reads version {FORMAT_VERSION}",
                )
            )
        elif v == "pattern" and path and path[-1] == "python":
            out.append(issue(path, f"expected 'package.module:function', got {err.instance!r}"))
        else:
            out.append(issue(path, err.message))
    return out
