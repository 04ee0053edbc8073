"""A YAML tool bundle loaded to its spec (:class:`BundleSpec`; docs/BUNDLES.md), importing no agent: the JSON
Schema's checks, then what a schema cannot check (``python:`` targets, ``parameters``, placeholders, duplicate
names...), every problem at once with file, line, column and field in a :class:`~agentkit.errors.BundleError`."""

from __future__ import annotations

import math
import os
import re
import shutil
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from agentkit.backends import make_backend
from agentkit.backends.embedded import constraint_support_error
from agentkit.bundle_document import FieldPath, Positions, field_name, leaves, read_yaml, schema_issues
from agentkit.bundle_sections import (
    MODEL_SECTION,
    AgentSection,
    EmbeddedModel,
    OpenAIModel,
    ScriptedModel,
)
from agentkit.bundle_tools import (
    SandboxRunner,
    TargetImportError,
    default_sandbox_runner,
    import_python_target,
    make_http_function,
    make_sandbox_function,
    placeholders,
)
from agentkit.errors import BundleError, BundleIssue, ToolDefinitionError
from agentkit.mcp.guard import command_not_found, interpreter
from agentkit.tool_schema import grounded_keyword, mark_grounded, schema_problems
from agentkit.tools import DEFAULT_RETRIES, DEFAULT_TIMEOUT_S, Tool

if TYPE_CHECKING:
    import httpx

    from agentkit.backends.base import Backend
    from agentkit.mcp.client import MCPToolset

__all__ = ["BundleSpec", "load_spec"]

_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_MCP_OPTIONS = (
    "name",
    "prefix",
    "include",
    "exclude",
    "on_unsupported",
    "timeout",
    "startup_timeout",
    "retries",
)


@dataclass
class BundleSpec:
    """A loaded bundle: what an agent is made of (:meth:`agentkit.Agent.from_bundle` makes it).

    Attributes:
        model, agent_settings: the ``model:`` and ``agent:`` sections as written (``tool_images`` as a
            :class:`~agentkit.tool_output.ToolImageLimits`); ``model_section``: ``model`` typed.
        tools: the tools, ready to use; toolsets: its MCP servers (closed ``MCPToolset``s, copied per agent).
        tool_choice_at: where ``agent.tool_choice`` names a tool not the bundle's own (maybe an MCP tool,
            checked when an agent lists its toolsets), else ``None``.
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
    model_section: EmbeddedModel | OpenAIModel | ScriptedModel = field(default_factory=EmbeddedModel)
    toolsets: list[Any] = field(default_factory=list)
    tool_choice_at: BundleIssue | None = field(default=None, repr=False)

    def make_backend(
        self,
        backend: str | Backend | None = None,
        model: str | None = None,
        *,
        seed: int | None = None,
        adapter: str | Path | None = None,
        binding: str | None = None,
    ) -> Backend:
        """The backend of the bundle's ``model:`` section, with overrides: ``backend`` (a kind, or a Backend
        returned as is), ``model`` (checkpoint, served model or script), ``seed`` (embedded and openai),
        ``adapter`` (a LoRA folder) and ``binding`` (embedded only). The bundle's backend settings apply only
        while the kind is its own. A relative script, adapter or checkpoint folder found beside the bundle is
        relative to the bundle's folder.

        Raises:
            ValueError: unknown backend kind, a required model name missing, or ``adapter`` or ``binding`` with
                a backend other than embedded.
            TypeError: ``model`` that is not a name (a backend object goes in ``backend``).
        """
        # Agent(model=...) takes a backend
        if model is not None and not isinstance(model, (str, os.PathLike)):
            hint = ": pass a backend object as backend=" if callable(getattr(model, "complete", None)) else ""
            raise TypeError(
                f"model is the checkpoint, served model or script (a name), got {type(model).__name__}{hint}"
            )
        if backend is not None and not isinstance(backend, str):
            return backend
        own = self.model_section
        kind = backend or own.backend
        same = kind == own.backend
        name = model if model is not None else (own.name if same else None)
        settings = own.backend_settings(self.path.parent) if same else {}
        for key, value in (("adapter", adapter), ("binding", binding)):
            if value is not None and kind != "embedded":
                raise ValueError(f"--{key} applies to the embedded backend only (backend is {kind!r})")
            if value is not None:
                settings[key] = str(value)
        if seed is not None and kind == "embedded":
            settings["seed"] = seed
        elif seed is not None and kind == "openai":
            settings["settings"] = {**settings.get("settings", {}), "seed": seed}
        if name and model is None and not Path(name).expanduser().is_absolute():
            here = self.path.parent / name
            if kind == "scripted" or (kind == "embedded" and here.is_dir()):
                name = str(here)
        return make_backend(kind, name, **settings)

    def agent_settings_with(self, **overrides: Any) -> dict[str, Any]:
        """The ``Agent`` keywords this bundle sets (fresh copies of its toolsets), ``overrides`` winning."""
        kwargs: dict[str, Any] = {
            "system_prompt": self.system_prompt,
            "name": self.name,
            **self.agent_settings,
        }
        kwargs.update({"toolsets": [t.copy() for t in self.toolsets], **overrides})
        return kwargs


# ----------------------------------------------------------------------------------------------- loading


class _Load:
    """One :func:`load_spec` call: the document, where its fields are, the issues found so far."""

    def __init__(
        self, path: Path, http_client: httpx.Client | None, runner: SandboxRunner, backend: str | None = None
    ) -> None:
        self.path = path
        self.backend = backend  # the backend the bundle will run on, when the caller overrides the bundle's
        self.file = str(path)
        self.pos = Positions()
        self.issues: list[BundleIssue] = []
        self.runner = runner
        self.bundle_dir = str(path.resolve().parent)
        self.checked = True
        self._client_lock = threading.Lock()
        self._client = http_client
        self.tool_choice_at: BundleIssue | None = None  # a tool_choice left to check against MCP tools

    def issue(
        self, path_: FieldPath, message: str, *, key: bool = False, at: FieldPath | None = None
    ) -> BundleIssue:
        """A :class:`BundleIssue` at ``path_`` (its key when ``key``; the position of ``at`` when given)."""
        line, col = self.pos.at(path_ if at is None else at, key=key)
        fld = field_name(tuple(x for x in path_ if x != "#dup"))
        return BundleIssue(self.file, line, col, fld, message)

    def add(self, path_: FieldPath, message: str) -> None:
        """Record an issue."""
        self.issues.append(self.issue(path_, message))

    def raise_if_any(self) -> None:
        """Raise every issue found so far, by line."""
        if self.issues:
            raise BundleError(sorted(self.issues, key=lambda i: (i.line or 0, i.column or 0)))

    def client(self) -> httpx.Client:
        """The http: tools' client (created on first call)."""
        with self._client_lock:
            if self._client is None:
                import httpx

                self._client = httpx.Client(follow_redirects=True)
            return self._client

    # -- the document

    def read(self) -> dict[str, Any]:
        """Parse the YAML (positions and duplicate keys recorded) and check it against the JSON Schema."""
        data, raw = read_yaml(self.path, self.file, self.pos)
        self.issues.extend(self.issue(pth, msg, key=k) for pth, msg, k in raw)
        self.issues.extend(schema_issues(data, self.issue))
        # no setting takes a NaN or an infinity (YAML's .nan, .inf, 1e400): in model.request it is not JSON;
        # nor an integer past a double's range (a timeout of 10**400 seconds cannot be waited for)
        for at, v in leaves(data):
            if isinstance(v, float) and not math.isfinite(v):
                self.add(at, f"must be a finite number, got {v}")
            elif isinstance(v, int) and abs(v) > sys.float_info.max:
                digits = len(str(abs(v)))
                self.add(
                    at, f"must be a finite number, got an integer of {digits} digits, beyond a double's range"
                )
        self.raise_if_any()
        assert isinstance(data, dict)
        return data

    def model_section(self, model: dict[str, Any]) -> EmbeddedModel | OpenAIModel | ScriptedModel:
        """The typed ``model:`` section (the JSON Schema has checked each backend's settings: cannot fail), its
        ``name`` and ``adapter`` with ``${ENV}`` expanded as the toolsets' fields are (an unset one: an issue)."""
        kind = model.get("backend", "embedded")
        self.checked = (self.backend or kind) == "embedded"  # the constraint check is the embedded backend's
        expanded = {k: self.env(model[k], "model", k) for k in ("name", "adapter") if k in model}
        return MODEL_SECTION.validate_python({"backend": kind, **model, **expanded})

    # -- tools

    def parameters(self, t: dict[str, Any], tp: FieldPath) -> tuple[dict[str, Any] | None, bool]:
        """``(parameters or None, ok)``: ``grounded: true`` read as ``x-grounded``; a valid object schema."""
        params = t.get("parameters")
        if params is None:
            return None, True
        bad: list[tuple[FieldPath, str]] = []
        params = grounded_keyword(params, bad)
        problems = bad or schema_problems(params)
        for spot, why in problems:
            self.add((*tp, "parameters", *spot), why)
        if problems:
            return None, False
        return params, True

    def tool(self, t: dict[str, Any], tp: FieldPath) -> Tool | None:
        """One tool, or ``None`` with its issues recorded."""
        params, ok = self.parameters(t, tp)
        if not ok:
            return None
        common: dict[str, Any] = {
            "name": t["name"],
            "description": t.get("description"),
            "retries": t.get("retries", DEFAULT_RETRIES),
            "grounded": list(t.get("grounded", [])),
            "max_output_bytes": t.get("max_output_bytes"),
        }
        try:
            made = self.made_tool(t, tp, params, common)
        except ToolDefinitionError as exc:
            if not self.grounded_issues(t, tp, params, common):
                self.add(tp, str(exc))
            return None
        # what the embedded backend's constraint cannot enforce (checked for that backend only)
        if (
            made is None
            or not self.checked
            or (problem := constraint_support_error(t["name"], made.parameters)) is None
        ):
            return made
        where = tuple(int(x) if x.isdigit() else x for x in problem.path.split("/") if x)
        as_written = str(problem).replace("'x-grounded'", "'grounded'")  # the bundle's spelling
        why = f"the tool-call constraint cannot enforce this schema: {as_written}"
        if "parameters" not in t:  # the schema of the function's signature
            why = f"the tool-call constraint cannot enforce the parameters of {t['python']!r}: {problem}"
            self.add((*tp, "python"), why)
        elif problem.keyword == "x-grounded" and len(where) == 2 and where[1] in t.get("grounded", ()):
            self.add((*tp, "grounded"), why)  # marked by the tool-level `grounded:` list
        else:
            keyword = "grounded" if problem.keyword == "x-grounded" else problem.keyword  # as written
            self.add((*tp, "parameters", *where, keyword), why)
        return None

    def made_tool(
        self, t: dict[str, Any], tp: FieldPath, params: dict[str, Any] | None, common: dict[str, Any]
    ) -> Tool | None:
        """The tool of ``t`` by its kind, or ``None`` with its issues recorded; raises ToolDefinitionError."""
        if "python" in t:
            return self.python_tool(t, tp, params, common)
        if params is None:
            impl = "http" if "http" in t else "sandbox"
            self.add(tp, f"a {impl} tool needs 'parameters' (a JSON Schema of its arguments)")
            return None
        if "http" in t:
            return self.http_tool(t, tp, params, common)
        spec = t["sandbox"]
        fn = make_sandbox_function(t["name"], spec, self.runner)
        timeout = t.get("timeout", float(spec.get("timeout", 10.0)) + 60.0)
        return Tool(fn, parameters=params, timeout=timeout, **common)

    def grounded_issues(
        self, t: dict[str, Any], tp: FieldPath, params: dict[str, Any] | None, common: dict[str, Any]
    ) -> bool:
        """After a tool failed to build: record each entry of its ``grounded:`` list that names no string
        parameter (all of them, each at its entry); whether there was one."""
        try:
            made = self.made_tool(t, tp, params, {**common, "grounded": []}) if common["grounded"] else None
        except ToolDefinitionError:
            return False  # the tool fails for another reason
        if made is None:
            return False
        before = len(self.issues)
        for i, n in enumerate(common["grounded"]):
            try:
                mark_grounded(t["name"], made.parameters, [n])
            except ToolDefinitionError as exc:
                self.add((*tp, "grounded", i), str(exc))
        return len(self.issues) > before

    def python_tool(
        self, t: dict[str, Any], tp: FieldPath, params: dict[str, Any] | None, common: dict[str, Any]
    ) -> Tool | None:
        """A ``python:`` tool; a ``@tool`` target lends its settings, which the bundle's own override."""
        target = t["python"]
        try:
            obj = import_python_target(target, self.bundle_dir)
        except TargetImportError as exc:
            self.add((*tp, "python"), str(exc))
            return None
        if isinstance(obj, Tool):
            # all the decorator's settings (its args_model or parameters, serializer...) but the bundle's own
            own = {
                k: common[k] for k in ("retries", "max_output_bytes", "description") if t.get(k) is not None
            }
            own.update({k: v for k, v in (("parameters", params), ("timeout", t.get("timeout"))) if k in t})
            # the decorator's grounded parameters stay grounded (the bundle may add more)
            marked = [
                k
                for k, v in (obj.parameters.get("properties") or {}).items()
                if isinstance(v, dict) and v.get("x-grounded") is True
            ]
            grounded = list(dict.fromkeys([*marked, *common["grounded"]]))
            return obj.replace(name=t["name"], grounded=grounded, **own)
        if not callable(obj):
            self.add((*tp, "python"), f"{target!r} is not callable")
            return None
        return Tool(obj, parameters=params, timeout=t.get("timeout", DEFAULT_TIMEOUT_S), **common)

    def http_tool(
        self, t: dict[str, Any], tp: FieldPath, params: dict[str, Any], common: dict[str, Any]
    ) -> Tool | None:
        """An ``http:`` tool: every placeholder must name a parameter (a URL one, a required parameter)."""
        spec = t["http"]
        props = set(params.get("properties", {}))
        required = set(params.get("required", []))
        before = len(self.issues)
        for n, where in placeholders(spec["url"], (*tp, "http", "url")):
            if n not in props:
                self.add(where, f"URL placeholder {{{n}}} names no parameter (have: {sorted(props)})")
            elif n not in required:
                self.add(where, f"URL placeholder {{{n}}} must be a required parameter")
        for part in ("headers", "query", "body"):
            for n, where in placeholders(spec.get(part), (*tp, "http", part)):
                if n not in props:
                    self.add(where, f"placeholder {{{n}}} names no parameter (have: {sorted(props)})")
        if len(self.issues) > before:
            return None
        per_try = float(spec.get("timeout", 10.0))
        attempts = int(spec.get("retries", 2)) + 1
        fn = make_http_function(t["name"], spec, self.client)
        default_timeout = per_try * attempts + float(spec.get("retry_wait", 0.5)) * 16 * attempts + 1
        return Tool(fn, parameters=params, timeout=t.get("timeout", default_timeout), **common)

    def tools(self, specs: list[dict[str, Any]]) -> list[Tool]:
        """Every tool of the bundle (a duplicate name is an issue, naming the first; the duplicate is checked too)."""
        tools: list[Tool] = []
        first: dict[str, int] = {}
        for i, t in enumerate(specs):
            tp: FieldPath = ("tools", i)
            name = t["name"]
            if name in first:
                self.add((*tp, "name"), f"duplicate tool name {name!r} (first at tools[{first[name]}])")
            first.setdefault(name, i)
            if (made := self.tool(t, tp)) is not None and first[name] == i:
                tools.append(made)
        return tools

    # -- toolsets: MCP servers (the schema checked their shape: what it cannot check is checked here)

    def env(self, value: str, *at: str | int) -> str:
        """``value`` with each ``${NAME}`` from the environment; an unset NAME is an issue at ``at``."""
        for name in _ENV.findall(value):
            if name not in os.environ:
                self.add(at, f"environment variable {name} is not set")
        return _ENV.sub(lambda m: os.environ.get(m.group(1), m.group(0)), value)

    def mcp_command(self, spec: dict[str, Any], at: FieldPath) -> tuple[str, str | None]:
        """The command (``python``: agentkit's interpreter) and its ``cwd``, each relative to the bundle."""
        before = len(self.issues)
        cmd = self.env(spec["command"], *at, "command")
        cwd = self.env(spec["cwd"], *at, "cwd") if "cwd" in spec else None
        if cwd is not None and not Path(cwd).is_absolute():
            cwd = str(self.path.parent / cwd)
        if cwd is not None and len(self.issues) == before and not Path(cwd).is_dir():
            self.add(
                (*at, "cwd"),
                f"{cwd} is not a folder" if Path(cwd).exists() else f"folder {cwd} does not exist",
            )
        if (exe := interpreter(cmd)) != cmd:  # no PATH lookup nor bundle-relative path for agentkit's own
            return exe, cwd
        if "/" in cmd and not Path(cmd).is_absolute():
            cmd = str(self.path.parent / cmd)
        if len(self.issues) == before and shutil.which(cmd) is None:
            why = command_not_found(cmd)
            why = why if "is a file" in why else f"{why} (not on PATH, or not an executable file)"
            self.add((*at, "command"), why)
        return cmd, cwd

    def toolsets(self, specs: list[dict[str, Any]]) -> list[MCPToolset]:
        """The bundle's MCP toolsets (closed), each knowing where it was written for its start errors."""
        if not specs:  # a bundle without toolsets never imports the MCP SDK
            return []
        from agentkit.mcp.client import MCPToolset

        out: list[MCPToolset] = []
        for i, entry in enumerate(specs):
            at: FieldPath = ("toolsets", i, "mcp")
            spec, before = entry["mcp"], len(self.issues)
            opts = {k: spec[k] for k in _MCP_OPTIONS if k in spec}
            # exactly one of url and command, each with its own settings: the schema's check
            if "url" in spec:
                url = self.env(spec["url"], *at, "url")
                parts = urlsplit(url)
                if len(self.issues) == before and (
                    parts.scheme not in ("http", "https") or not parts.hostname
                ):
                    self.add((*at, "url"), f"url must be http:// or https:// with a host, got {url!r}")
                headers = {k: self.env(v, *at, "headers", k) for k, v in (spec.get("headers") or {}).items()}
                made = MCPToolset.http(url, headers=headers, **opts) if len(self.issues) == before else None
            else:
                cmd, cwd = self.mcp_command(spec, at)
                args = [self.env(a, *at, "args", n) for n, a in enumerate(spec.get("args") or [])]
                env = {k: self.env(v, *at, "env", k) for k, v in (spec.get("env") or {}).items()}
                ok = len(self.issues) == before
                made = MCPToolset.stdio(cmd, args, env=env or None, cwd=cwd, **opts) if ok else None
            if made is not None:
                made.opts.origin = f"{self.file}:{self.pos.at(at)[0]} toolsets[{i}].mcp"
                out.append(made)
        return out

    def agent_section(
        self, agent: dict[str, Any], tool_names: set[str], has_toolsets: bool
    ) -> dict[str, Any]:
        """The ``agent:`` section; ``tool_choice`` must name a tool (maybe an MCP one) and ``required`` needs one."""
        section = AgentSection.model_validate(agent)  # the JSON Schema has checked the values: cannot fail
        tc = agent.get("tool_choice")
        if isinstance(tc, dict) and tc.get("name") not in tool_names and has_toolsets:
            # may name an MCP tool: checked once the toolsets are listed (agentkit.mcp.host), at this line
            self.tool_choice_at = self.issue(("agent", "tool_choice", "name"), "")
        elif isinstance(tc, dict) and tc.get("name") not in tool_names:
            self.add(
                ("agent", "tool_choice", "name"),
                f"tool_choice names {tc.get('name')!r}, which is not a tool of this bundle",
            )
        elif tc == "required" and not tool_names and not has_toolsets:
            self.add(
                ("agent", "tool_choice"), "tool_choice 'required' needs a tool, and this bundle has none"
            )
        return {**agent, **({"tool_images": section.tool_images} if section.tool_images is not None else {})}


def load_spec(
    path: str | Path,
    *,
    http_client: httpx.Client | None = None,
    sandbox_runner: SandboxRunner | None = None,
    backend: str | None = None,
) -> BundleSpec:
    """Load and validate a bundle file to its :class:`BundleSpec`.

    Args:
        path: the YAML file.
        backend: the backend kind it will run on when not its own (``--backend``); the constraint check of the
            tools' parameters runs only for ``embedded``.
        http_client: httpx client of the ``http:`` tools (default: one created on first call).
        sandbox_runner: runs ``sandbox:`` tools (default :func:`default_sandbox_runner`, Docker).

    Raises:
        BundleError: every problem found, each with file, line, column and field.
        OSError: the file cannot be read.
        TypeError: ``path`` is not a ``str`` or ``os.PathLike``.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(
            f"the bundle path must be a str or a pathlib.Path, got {type(path).__name__}: {path!r}"
        )
    p = Path(path)
    load = _Load(p, http_client, sandbox_runner or default_sandbox_runner, backend)
    data = load.read()
    model = dict(data.get("model", {}))
    section = load.model_section(model)
    tools = load.tools(data["tools"])
    toolsets = load.toolsets(data.get("toolsets") or [])
    agent_settings = load.agent_section(
        dict(data.get("agent", {})), {t["name"] for t in data["tools"]}, bool(data.get("toolsets"))
    )
    load.raise_if_any()
    return BundleSpec(
        path=p,
        name=data["name"],
        description=data.get("description", ""),
        model=model,
        system_prompt=data.get("system_prompt"),
        agent_settings=agent_settings,
        tools=tools,
        data=data,
        model_section=section,
        toolsets=toolsets,
        tool_choice_at=load.tool_choice_at,
    )
