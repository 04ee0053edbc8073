"""Loading a YAML tool bundle to its spec (:class:`BundleSpec`): an agent's model, system prompt, loop settings and
tools, from one versioned file. It imports no agent: :meth:`agentkit.Agent.from_bundle` builds the agent from the
spec, and :mod:`agentkit.bundle` (``load_bundle``, ``Bundle.make_agent``) is the public face of both.

The format is documented in docs/BUNDLES.md and defined by ``agentkit/schemas/bundle.schema.json``
(JSON Schema 2020-12, checked with ``jsonschema``). :func:`load_spec` reads a file, validates it against
the schema, then checks what a schema cannot (importable ``python:`` functions, valid ``parameters``
schemas, placeholders that name parameters, duplicate tool names...). Every problem is reported with the
file, the line and column (from the YAML node marks) and the field path (``tools[1].http.url``), all at
once, in a :class:`~agentkit.errors.BundleError`.

Tool implementations:

* ``python: package.module:function`` - imported at load time (the bundle's folder is put on ``sys.path``);
  ``parameters`` optional (taken from the type hints when absent).
* ``http:`` - one HTTP request per call with httpx, retried on 429/5xx/timeouts (:mod:`agentkit.bundle_tools`).
* ``sandbox:`` - code run in the Docker sandbox (:mod:`sandbox`), with the arguments in ``args.json``.
``toolsets:`` - MCP servers (:mod:`agentkit.mcp.bundle`). The ``model:`` and ``agent:`` sections are typed
(:class:`EmbeddedModel` / :class:`OpenAIModel` / :class:`ScriptedModel`, on ``backend``; :class:`AgentSection`).
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pydantic
import yaml

from agentkit.backends import make_backend
from agentkit.backends.embedded import constraint_support_error
from agentkit.bundle_sections import (
    MODEL_SECTION,
    AgentSection,
    EmbeddedModel,
    OpenAIModel,
    ScriptedModel,
    non_finite_numbers,
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
from agentkit.mcp.bundle import toolsets_of
from agentkit.tool_schema import grounded_keyword, misspelt_keywords, yaml_number_hint
from agentkit.tools import DEFAULT_RETRIES, DEFAULT_TIMEOUT_S, Tool

if TYPE_CHECKING:
    import httpx

    from agentkit.backends.base import Backend

__all__ = [
    "FORMAT_VERSION",
    "AgentSection",
    "BundleSpec",
    "EmbeddedModel",
    "OpenAIModel",
    "SandboxRunner",
    "ScriptedModel",
    "default_sandbox_runner",
    "load_spec",
    "schema",
]

#: A :class:`BundleSpec` class.
S = TypeVar("S", bound="BundleSpec")

#: The bundle format version this agentkit reads (``agentkit_bundle: 1``).
FORMAT_VERSION = 1
SCHEMA_PATH = Path(__file__).resolve().parent / "schemas" / "bundle.schema.json"


@lru_cache(maxsize=1)
def schema() -> dict[str, Any]:
    """The bundle JSON Schema (``agentkit/schemas/bundle.schema.json``)."""
    return dict(json.loads(SCHEMA_PATH.read_text(encoding="utf-8")))


# ------------------------------------------------------------------------------------ typed sections


# ------------------------------------------------------------------------------------------- positions

Path_ = tuple[str | int, ...]


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


#: Most values a bundle may expand to once its YAML aliases are followed (a billion-laughs file is refused
#: before anything walks it).
MAX_EXPANDED_NODES = 100_000


def _expanded_size(node: yaml.Node, sizes: dict[int, float]) -> float:
    """How many nodes ``node`` holds with every alias expanded (``inf`` when an alias refers to a node that
    holds it), counted in time linear in the file: each node once, memoised by identity in ``sizes`` (an alias
    is the same node object as its anchor)."""
    if id(node) not in sizes:
        sizes[id(node)] = math.inf  # while its children are counted: a cycle back to it is infinite
        children: list[yaml.Node] = []
        if isinstance(node, yaml.MappingNode):
            children = [n for kv in node.value for n in kv]
        elif isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        sizes[id(node)] = 1 + sum(_expanded_size(c, sizes) for c in children)
    return sizes[id(node)]


def _walk(node: yaml.Node, path: Path_, pos: _Positions, issues: list[tuple[Path_, str, bool]]) -> None:
    pos.values.setdefault(path, _mark(node))
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for k, v in node.value:
            if k.tag == "tag:yaml.org,2002:merge":  # `<<: *base`: keys written after it override, not repeat
                continue
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


# ---------------------------------------------------------------------------------------------- bundle


@dataclass
class BundleSpec:
    """A loaded bundle: what an agent is made of (:meth:`agentkit.Agent.from_bundle` makes it).

    Attributes:
        path, name, description: the bundle file, its name and its description.
        model: the ``model:`` section as written (backend kind, name, backend settings).
        system_prompt: system prompt (``None`` if absent).
        agent_settings: the ``agent:`` section as written (``max_steps``, ``tool_choice``, ``loop_guard``,
            ``reset_tool_choice``, ``max_tool_output_bytes``, ``trim_history``; ``tool_images`` as a
            :class:`~agentkit.tool_output.ToolImageLimits`).
        tools: the tools, ready to use; toolsets: its MCP servers (closed ``MCPToolset``s, copied per agent).
        tool_choice_at: where ``agent.tool_choice`` names a tool that is not the bundle's own (it may be an MCP
            tool: checked when an agent lists its toolsets), else ``None``.
        data: the parsed YAML document.
        model_section: ``model`` typed (:class:`EmbeddedModel`, :class:`OpenAIModel` or :class:`ScriptedModel`).
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
        """The backend: the bundle's ``model:`` section, or the ``backend``/``model``/``seed`` overrides.

        The bundle's backend settings apply only while the kind is the bundle's own (switching
        ``--backend`` keeps only ``--model`` and ``--seed``). A relative ``scripted`` script path in the bundle
        is relative to the bundle's folder, and so is a relative ``embedded`` checkpoint folder found there
        (else the name is taken as given: a folder relative to the working directory, or a hub id).

        Args:
            backend: a backend kind, or a Backend instance (returned as is).
            model: checkpoint path/id, served model name or script file.
            seed: the embedded backend's denoising seed / the openai request's ``seed``, overriding
                ``model.seed``; the scripted backend is deterministic and ignores it.
            adapter: a LoRA adapter folder (``agentkit specialize``) for the embedded backend, overriding
                ``model.adapter`` (a relative ``model.adapter`` in the bundle is relative to the bundle's folder).
            binding: the embedded backend's binder (``auto``, ``copy-head``, ``none``), overriding
                ``model.binding``.

        Raises:
            ValueError: unknown backend kind, a required model name missing, or ``adapter`` or ``binding`` with
                a backend other than embedded.
        """
        if backend is not None and not isinstance(backend, str):
            return backend
        own = self.model_section
        kind = backend or own.backend
        same = kind == own.backend
        name = model if model is not None else (own.name if same else None)
        settings = own.backend_settings(self.path.parent) if same else {}
        if adapter is not None:
            if kind != "embedded":
                raise ValueError(f"--adapter applies to the embedded backend only (backend is {kind!r})")
            settings["adapter"] = str(adapter)
        if binding is not None:
            if kind != "embedded":
                raise ValueError(f"--binding applies to the embedded backend only (backend is {kind!r})")
            settings["binding"] = binding
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
        """The ``Agent`` keywords this bundle sets (system prompt, name, ``agent:`` settings, fresh copies of its
        toolsets), with ``overrides`` (``Agent`` keywords) winning."""
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
        self.pos = _Positions()
        self.issues: list[BundleIssue] = []
        self.runner = runner
        self.bundle_dir = str(path.resolve().parent)
        self.kind = "embedded"
        self.checked = True
        self._client_lock = threading.Lock()
        self._client = http_client
        self.tool_choice_at: BundleIssue | None = None  # a tool_choice left to check against MCP tools

    def issue(self, path_: Path_, message: str, *, key: bool = False, at: Path_ | None = None) -> BundleIssue:
        """A :class:`BundleIssue` at ``path_`` (its key when ``key``; the position of ``at`` when given)."""
        line, col = self.pos.at(path_ if at is None else at, key=key)
        fld = _fmt(tuple(x for x in path_ if x != "#dup"))
        return BundleIssue(self.file, line, col, fld, message)

    def place(self, path_: Path_) -> str:
        """``FILE:LINE`` of the field at ``path_``."""
        line, _ = self.pos.at(path_)
        return f"{self.file}:{line}" if line is not None else self.file

    def add(self, path_: Path_, message: str, *, key: bool = False) -> None:
        """Record an issue."""
        self.issues.append(self.issue(path_, message, key=key))

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
        raw_bytes = self.path.read_bytes()
        try:
            text = raw_bytes.decode("utf-8")
        except UnicodeDecodeError as exc:
            row = raw_bytes.count(b"\n", 0, exc.start) + 1
            column = exc.start - raw_bytes.rfind(b"\n", 0, exc.start)
            msg = f"not UTF-8: byte 0x{raw_bytes[exc.start]:02x} cannot be decoded (save the file as UTF-8)"
            raise BundleError([BundleIssue(self.file, row, column, "", msg)]) from None
        loader = yaml.SafeLoader(text)
        try:
            node = loader.get_single_node()
            if node is None:
                raise BundleError([BundleIssue(self.file, 1, 1, "", "the file is empty")])
            if (size := _expanded_size(node, {})) > MAX_EXPANDED_NODES:
                msg = (
                    "the document expands without end through YAML aliases (an alias inside its own anchor)"
                    if math.isinf(size)
                    else f"the document expands to {size:,.0f} values through YAML aliases (*name); "
                    f"at most {MAX_EXPANDED_NODES:,}"
                )
                raise BundleError([BundleIssue(self.file, None, None, "", msg)])
            raw: list[tuple[Path_, str, bool]] = []
            _walk(
                node, (), self.pos, raw
            )  # as written: constructing it flattens `<<` merges into the mappings
            data = loader.construct_document(node)
        except yaml.MarkedYAMLError as exc:
            mark, opened = exc.problem_mark or exc.context_mark, exc.context_mark
            msg = " ".join(x for x in (exc.context, exc.problem) if x) or str(exc)
            line, col = (mark.line + 1, mark.column + 1) if mark else (None, None)
            if opened is not None and mark is not None and opened.line != mark.line and exc.context:
                msg += f" (it began at line {opened.line + 1}, column {opened.column + 1})"  # an unclosed bracket
            raise BundleError([BundleIssue(self.file, line, col, "", f"YAML syntax: {msg}")]) from None
        except yaml.YAMLError as exc:
            raise BundleError([BundleIssue(self.file, None, None, "", f"YAML: {exc}")]) from None
        finally:
            loader.dispose()
        self.issues.extend(self.issue(pth, msg, key=k) for pth, msg, k in raw)
        self.issues.extend(_schema_issues(data, self.issue))
        self.issues.extend(
            self.issue(at, f"must be a finite number, got {v}") for at, v in non_finite_numbers(data)
        )
        self.raise_if_any()
        assert isinstance(data, dict)
        return data

    def model_section(self, model: dict[str, Any]) -> EmbeddedModel | OpenAIModel | ScriptedModel:
        """The typed ``model:`` section; a setting of another backend is an issue naming which."""
        self.kind = kind = model.get("backend", "embedded")
        self.checked = (self.backend or kind) == "embedded"  # the constraint check is the embedded backend's
        try:
            return MODEL_SECTION.validate_python({"backend": kind, **model})
        except pydantic.ValidationError as exc:
            for err in exc.errors():
                where = err["loc"][1:]
                if err["type"] == "missing" and where == ("name",):
                    self.add(("model",), f"the {kind} backend needs model.name")
                elif err["type"] == "extra_forbidden" and kind == "scripted":
                    self.add(
                        ("model", *where), f"the scripted backend takes no '{where[0]}' setting", key=True
                    )
                elif err["type"] == "extra_forbidden":
                    other = "openai" if kind == "embedded" else "embedded"
                    self.add(
                        ("model", *where),
                        f"'{where[0]}' applies to the {other} backend only (backend is {kind!r})",
                        key=True,
                    )
                else:
                    self.add(("model", *where), err["msg"])
            return EmbeddedModel()

    # -- tools

    def parameters(self, t: dict[str, Any], tp: Path_) -> tuple[dict[str, Any] | None, bool]:
        """A tool's ``parameters`` (``grounded: true`` written as ``x-grounded``, at any depth), checked:
        a valid JSON Schema of an object that, on the embedded backend, the constraint can enforce.

        Returns:
            ``(parameters or None, ok)``.
        """
        params = t.get("parameters")
        if isinstance(params, dict):
            bad: list[tuple[Path_, str]] = []
            params = grounded_keyword(params, bad)
            bad += misspelt_keywords(params)
            for spot, why in bad:
                self.add((*tp, "parameters", *spot), why)
            if bad:
                return None, False
        if params is None:
            return None, True
        import jsonschema

        if params.get("type", "object") != "object":
            self.add((*tp, "parameters", "type"), "parameters must be a JSON Schema of type 'object'")
            return None, False
        try:
            jsonschema.Draft202012Validator.check_schema(params)
        except jsonschema.SchemaError as exc:
            why = f"not a valid JSON Schema: {exc.message}{yaml_number_hint(exc.instance)}"
            self.add((*tp, "parameters", *exc.path), why)
            return None, False
        if self.checked and (unsupported := constraint_support_error(t["name"], params)) is not None:
            where = tuple(x for x in unsupported.path.split("/") if x)
            keyword = "grounded" if unsupported.keyword == "x-grounded" else unsupported.keyword  # as written
            at = (*tp, "parameters", *(int(x) if x.isdigit() else x for x in where), keyword)
            why = str(unsupported).replace("'x-grounded'", "'grounded'")  # as the bundle spells it
            self.add(at, f"the tool-call constraint cannot enforce this schema: {why}")
            return None, False
        return params, True

    def tool(self, t: dict[str, Any], tp: Path_) -> Tool | None:
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
            if "python" in t:
                made = self.python_tool(t, tp, params, common)
            elif params is None:
                impl = "http" if "http" in t else "sandbox"
                self.add(tp, f"a {impl} tool needs 'parameters' (a JSON Schema of its arguments)")
                return None
            elif "http" in t:
                made = self.http_tool(t, tp, params, common)
            else:
                spec = t["sandbox"]
                fn = make_sandbox_function(t["name"], spec, self.runner)
                timeout = t.get("timeout", float(spec.get("timeout", 10.0)) + 60.0)
                made = Tool(fn, parameters=params, timeout=timeout, **common)
        except ToolDefinitionError as exc:
            self.add(tp, str(exc))
            return None
        if made is not None and self.checked and common["grounded"]:
            # the tool-level `grounded:` list marks parameters only now: check the schema it gives
            unsupported = constraint_support_error(t["name"], made.parameters)
            if unsupported is not None:
                why = str(unsupported).replace("'x-grounded'", "'grounded'")
                self.add((*tp, "grounded"), f"the tool-call constraint cannot enforce this schema: {why}")
                return None
        return made

    def python_tool(
        self, t: dict[str, Any], tp: Path_, params: dict[str, Any] | None, common: dict[str, Any]
    ) -> Tool | None:
        """A ``python:`` tool: the target imported (the bundle's folder on ``sys.path``); a ``@tool`` object
        lends its settings, which the bundle's own override."""
        target = t["python"]
        try:
            obj = import_python_target(target, self.bundle_dir)
        except TargetImportError as exc:
            self.add((*tp, "python"), str(exc))
            return None
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
            self.add((*tp, "python"), f"{target!r} is not callable")
            return None
        made = Tool(obj, parameters=params, timeout=t.get("timeout", base_timeout), **common)
        if self.checked and params is None:
            # the schema comes from the function's signature: checked here, so the error has a line
            unsupported = constraint_support_error(t["name"], made.parameters)
            if unsupported is not None:
                self.add(
                    (*tp, "python"),
                    f"the tool-call constraint cannot enforce the parameters of {target!r}: {unsupported}",
                )
                return None
        return made

    def http_tool(
        self, t: dict[str, Any], tp: Path_, params: dict[str, Any], common: dict[str, Any]
    ) -> Tool | None:
        """An ``http:`` tool: every placeholder must name a parameter (a URL one, a required parameter)."""
        spec = t["http"]
        props = set(params.get("properties", {}))
        required = set(params.get("required", []))
        bad = False
        for n, where in placeholders(spec["url"], (*tp, "http", "url")):
            if n not in required:
                self.add(where, f"URL placeholder {{{n}}} must be a required parameter")
                bad = True
        for part in ("headers", "query", "body"):
            for n, where in placeholders(spec.get(part), (*tp, "http", part)):
                if n not in props:
                    self.add(where, f"placeholder {{{n}}} names no parameter (have: {sorted(props)})")
                    bad = True
        if bad:
            return None
        per_try = float(spec.get("timeout", 10.0))
        attempts = int(spec.get("retries", 2)) + 1
        fn = make_http_function(t["name"], spec, self.client)
        default_timeout = per_try * attempts + float(spec.get("retry_wait", 0.5)) * 16 * attempts + 1
        return Tool(fn, parameters=params, timeout=t.get("timeout", default_timeout), **common)

    def tools(self, specs: list[dict[str, Any]]) -> list[Tool]:
        """Every tool of the bundle (a duplicate name is an issue, naming the first)."""
        tools: list[Tool] = []
        first: dict[str, int] = {}
        for i, t in enumerate(specs):
            tp: Path_ = ("tools", i)
            name = t["name"]
            if name in first:
                self.add((*tp, "name"), f"duplicate tool name {name!r} (first at tools[{first[name]}])")
                continue
            first[name] = i
            made = self.tool(t, tp)
            if made is not None:
                tools.append(made)
        return tools

    def agent_section(
        self, agent: dict[str, Any], tool_names: set[str], has_toolsets: bool
    ) -> dict[str, Any]:
        """The ``agent:`` section (typed by :class:`AgentSection`); ``tool_choice`` must name a tool (of the
        bundle, or with ``has_toolsets`` possibly of an MCP toolset: checked when an agent lists them), and
        ``required`` needs a tool or a toolset."""
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
    cls: type[S] = BundleSpec,  # type: ignore[assignment]
) -> S:
    """Load and validate a bundle file.

    Args:
        path: the YAML file.
        backend: the backend kind the bundle will run on when it is not the bundle's own (``--backend``):
            the check that the tool-call constraint can enforce each tool's parameters runs only for
            ``embedded``.
        http_client: httpx client used by ``http:`` tools (default: one created on first call); pass one
            with a ``transport`` for tests, proxies or custom TLS.
        sandbox_runner: runs ``sandbox:`` tools (default :func:`default_sandbox_runner`, Docker).
        cls: the spec's class (:class:`BundleSpec` or a subclass: :class:`agentkit.bundle.Bundle`).

    Returns:
        The ``cls`` instance.

    Raises:
        BundleError: every problem found, each with file, line, column and field.
        OSError: the file cannot be read.
    """
    p = Path(path)
    load = _Load(p, http_client, sandbox_runner or default_sandbox_runner, backend)
    data = load.read()
    model = dict(data.get("model", {}))
    section = load.model_section(model)
    tools = load.tools(data["tools"])
    toolsets = toolsets_of(data.get("toolsets") or [], load.add, p.parent, load.place)
    agent_settings = load.agent_section(
        dict(data.get("agent", {})), {t["name"] for t in data["tools"]}, bool(data.get("toolsets"))
    )
    load.raise_if_any()
    return cls(
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
        elif v == "type" and not path:
            kinds: dict[type, str] = {list: "a list", str: "a string"}
            kind = kinds.get(type(err.instance), type(err.instance).__name__)
            out.append(
                issue(path, f"a bundle is a YAML mapping (agentkit_bundle:, name:, tools: ...), got {kind}")
            )
        elif v == "pattern" and path and path[-1] == "python":
            out.append(issue(path, f"expected 'package.module:function', got {err.instance!r}"))
        else:  # a number YAML 1.1 read as text (timeout: 1e3) says how to write it
            out.append(issue(path, err.message + (yaml_number_hint(err.instance) if v == "type" else "")))
    return out
