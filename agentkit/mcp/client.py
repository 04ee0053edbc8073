"""MCP servers as toolsets (through the ``mcp`` SDK's ``Client``): their tools become agentkit tools.

``MCPToolset.stdio(...)`` runs a server as a subprocess (behind :mod:`agentkit.mcp.guard`),
``MCPToolset.http(url, ...)`` talks streamable HTTP.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import shutil
import sys
import tempfile
from contextlib import AsyncExitStack
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import anyio
import httpx2
import mcp_types as types
import pydantic
import pydantic.dataclasses
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from pydantic import Field

from agentkit.backends.embedded import constraint_support_error
from agentkit.errors import ToolDefinitionError
from agentkit.mcp.content import MCPServerError, result_value
from agentkit.mcp.guard import command_not_found
from agentkit.tool_schema import schema_problems
from agentkit.tools import DEFAULT_RETRIES, Tool, ToolTimeoutError
from schema import SchemaError
from tools.args import format_validation_error

__all__ = ["MCPSchemaError", "MCPToolset", "check_tool_schema"]

log = logging.getLogger(__name__)
GUARD = str(Path(__file__).resolve().parent / "guard.py")
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]{0,63}$")
#: Pages of ``tools/list`` followed at most (a server whose cursors never end is an error).
MAX_PAGES = 100


class MCPSchemaError(ToolDefinitionError):
    """A server's tool whose schema the embedded constraint cannot enforce, or whose name agentkit cannot take,
    under ``on_unsupported: error`` (the message names the server, the tool, the keyword and its pointer)."""


def check_tool_schema(name: str, schema: Any) -> SchemaError | None:
    """What the embedded tool-call constraint cannot enforce of one tool (its name included), or what keeps its
    schema from being a tool's (not valid JSON Schema, a misspelt keyword: ``tool_schema.schema_problems``),
    else ``None``."""
    if not _NAME_RE.match(name):
        return SchemaError("name", "", f"tool name {name!r} is not a valid agentkit tool name")
    if not isinstance(schema, dict) or schema.get("type", "object") != "object":
        return SchemaError("type", "", "the input schema is not an object schema")
    if (problem := constraint_support_error(name, schema)) is not None:
        return problem
    for path, why in schema_problems(schema)[:1]:  # as Tool() would refuse it
        node = schema
        for p in path:
            node = node[p]
        if isinstance(node, dict):  # a subschema: a $ref, or a definition where a loop of them begins
            return SchemaError("$ref", "".join(f"/{p}" for p in path), why)
        return SchemaError(str(path[-1]) if path else "schema", "".join(f"/{p}" for p in path[:-1]), why)
    return None


@pydantic.dataclasses.dataclass(slots=True, config=pydantic.ConfigDict(extra="forbid"))
class _Options:
    name: str
    prefix: Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")] | None = None
    include: frozenset[str] | None = None
    exclude: frozenset[str] = frozenset()
    on_unsupported: Literal["error", "skip"] = "error"
    timeout: Annotated[float, Field(gt=0)] = 60.0
    startup_timeout: Annotated[float, Field(gt=0)] = 30.0
    retries: int = DEFAULT_RETRIES
    origin: str = ""  # where it was configured (a bundle's ``FILE:LINE toolsets[i].mcp``), for start errors


class MCPToolset:
    """One MCP server's tools, for ``Agent(toolsets=[...])`` or a bundle's ``toolsets:``; built by :meth:`stdio`
    or :meth:`http`, kept open across runs by ``async with toolset:`` (or ``async with agent:``).

    Keyword options of both constructors:
        name: the server's name in messages (default: the command's file name or the URL's host).
        prefix: put ``PREFIX_`` before every tool name; include / exclude: server tool names to keep / drop.
        on_unsupported: ``"error"``: a schema the embedded constraint cannot enforce fails :meth:`open`
            (:class:`MCPSchemaError`); ``"skip"``: that tool is left out and logged (``skipped``).
        timeout: seconds per tool call; startup_timeout: seconds to start, initialise and list tools.
        retries: each tool's failure budget per run.
    """

    def __init__(
        self, params: StdioServerParameters | str, headers: dict[str, str] | None, opts: _Options
    ) -> None:
        self.params = params
        self.headers = dict(headers or {})
        self.opts = opts
        self.name = opts.name
        self.tools: list[Tool] = []
        self.skipped: list[str] = []
        self.listed: list[types.Tool] = []  # every tool of the last listing, as the server gave it
        self.changed = False
        self._client: Client | None = None
        self._holder: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._ready: asyncio.Future[Client] | None = None
        self._errlog: Any = None
        self._http_status: str | None = None  # the last HTTP error status of a url server, for messages
        self._unread: str | None = None  # the last stdout line the SDK could not read, for timeout messages
        self._check = True

    @classmethod
    def stdio(
        cls,
        command: str,
        args: list[str] | tuple[str, ...] = (),
        *,
        env: dict[str, str] | None = None,
        cwd: str | Path | None = None,
        name: str | None = None,
        **options: Any,
    ) -> MCPToolset:
        """A server run as a subprocess over stdin/stdout (``env`` added to the SDK's minimal environment);
        ValueError for an empty command or an invalid option."""
        if not command:
            raise ValueError("MCPToolset.stdio needs a command")
        params = StdioServerParameters(command=command, args=list(args), env=env, cwd=cwd)
        return cls(params, None, _options(name or _default_name(command, list(args)), options))

    @classmethod
    def http(
        cls, url: str, *, headers: dict[str, str] | None = None, name: str | None = None, **options: Any
    ) -> MCPToolset:
        """A server over streamable HTTP at ``url``; ValueError for a URL that is not http(s) with a host, or an
        invalid option."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"MCP server URL must be http:// or https:// with a host, got {url!r}")
        return cls(url, headers, _options(name or parts.hostname, options))

    def copy(self) -> MCPToolset:
        """A new, closed toolset for the same server with the same options."""
        return MCPToolset(self.params, self.headers, replace(self.opts))

    def __repr__(self) -> str:
        return f"MCPToolset(name={self.name!r}, open={self.is_open}, tools={[t.name for t in self.tools]})"

    @property
    def label(self) -> str:
        """``MCP server 'NAME'``, and where a bundle configured it."""
        return f"MCP server {self.name!r}" + (f" ({self.opts.origin})" if self.opts.origin else "")

    @property
    def is_open(self) -> bool:
        """The server is connected."""
        return self._client is not None

    async def __aenter__(self) -> MCPToolset:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def open(self, *, check: bool = True) -> list[Tool]:
        """Start / connect to the server and list its tools (also kept in :attr:`tools`); ``check``: check each
        schema against the embedded constraint.

        Raises:
            MCPServerError: the server did not start, did not initialise within ``startup_timeout`` or wrote
                something that is not MCP (with the end of its stderr).
            MCPSchemaError: an unsupported schema with ``on_unsupported="error"``.
        """
        if self._client is not None:
            return self.tools
        self._check = check
        self._http_status = self._unread = None
        ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        self._stop = asyncio.Event()
        self._ready = ready
        self._holder = asyncio.create_task(self._hold(ready, self._stop), name=f"mcp:{self.name}")
        try:
            self._client = await asyncio.wait_for(asyncio.shield(ready), self.opts.startup_timeout)
            await self._load_tools()
        except MCPSchemaError:
            await self.close()
            raise
        except BaseException as exc:
            if not isinstance(exc, Exception) or isinstance(exc, MCPServerError):
                await self.close()
                raise
            await self._settle()
            why = self._why(exc, starting=True)  # before close(), which drops the stderr file
            await self.close()
            raise MCPServerError(f"{self.label}: failed to start: {why}") from None
        return self.tools

    async def _settle(self) -> None:
        """Give a failed start's task a moment to end, so the server's last stderr is written."""
        if self._holder is not None:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(asyncio.shield(self._holder), 0.5)

    async def _hold(self, ready: asyncio.Future[Client], stop: asyncio.Event) -> None:
        """The connection's own task: enters the SDK client, waits for :meth:`close`, exits it."""
        try:
            async with AsyncExitStack() as stack:
                client = await stack.enter_async_context(self._make_client(stack))
                if not ready.done():
                    ready.set_result(client)
                await stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else MCPServerError("cancelled"))
            if not isinstance(exc, Exception):
                raise
            log.debug("MCP server %r: connection ended: %s", self.name, exc)

    async def close(self) -> None:
        """Disconnect; a stdio server is stopped (stdin closed, then its process group killed). Never raises."""
        holder, self._holder, self._client = self._holder, None, None
        ready = self._ready
        if holder is not None and ready is not None:
            self._stop.set()
            if not ready.done() or ready.cancelled() or ready.exception() is not None:
                holder.cancel()  # still starting, or its start failed: cancelling runs the SDK's bounded shutdown
            try:
                await asyncio.wait_for(asyncio.shield(holder), 10.0)
            except BaseException:  # the SDK's shutdown is bounded; this is a backstop
                holder.cancel()
                with contextlib.suppress(BaseException):
                    await holder
            if ready.done() and not ready.cancelled():
                ready.exception()  # retrieved: a failed start was reported by open()
        if self._errlog is not None:
            self._errlog.close()
            self._errlog = None

    def _make_client(self, stack: AsyncExitStack) -> Client:
        async def on_message(message: Any) -> None:
            if isinstance(message, types.ToolListChangedNotification):
                self.changed = True
            elif isinstance(message, Exception):  # a line of its stdout that is not JSON-RPC
                line = _bad_line(message)
                ready = self._ready
                if ready is not None and not ready.done():  # fail the start now, not at its timeout
                    ready.set_exception(
                        MCPServerError(
                            f"{self.label}: failed to start: it wrote {line} on stdout, which is not "
                            f"MCP (JSON-RPC){self._stderr_tail()}"
                        )
                    )
                elif ready is None or ready.exception() is None:  # (not a start already failed)
                    self._unread = line
                    log.warning(
                        "MCP server %r wrote %s on stdout, which is not MCP; ignored", self.name, line
                    )

        if isinstance(self.params, StdioServerParameters):
            p = self.params
            if shutil.which(p.command, path=(p.env or {}).get("PATH", os.environ.get("PATH"))) is None:
                raise FileNotFoundError(command_not_found(p.command))
            self._errlog = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")
            guarded = p.model_copy(
                update={"command": sys.executable, "args": [GUARD, str(os.getpid()), p.command, *p.args]}
            )

            transport: Any = stdio_client(guarded, errlog=self._errlog)
        else:

            async def on_response(response: Any) -> None:
                if response.status_code >= 400:
                    self._http_status = f"HTTP {response.status_code} {response.reason_phrase}"

            http = httpx2.AsyncClient(
                headers=self.headers,
                timeout=httpx2.Timeout(30.0, read=300.0),
                event_hooks={"response": [on_response]},
            )
            stack.push_async_callback(http.aclose)
            transport = streamable_http_client(self.params, http_client=http)
        return Client(transport, mode="legacy", message_handler=on_message, cache=None)

    def _why(self, exc: BaseException, *, starting: bool = False) -> str:
        while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
            exc = exc.exceptions[0]
        if isinstance(exc, TimeoutError):
            why = f"no answer to initialize / tools/list within {self.opts.startup_timeout:g} s"
            if self._unread is not None:  # the answer may have been that line
                why += f" (it wrote {self._unread} on stdout, which could not be read)"
        else:
            why = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        if starting and str(exc) == "Connection closed" and isinstance(self.params, StdioServerParameters):
            why += " (the server exited, or closed its stdout, before answering initialize)"
        if self._http_status is not None:
            why += f" ({self._http_status} from {self.params}; check the URL and the headers)"
        return why + self._stderr_tail()

    def _stderr_tail(self) -> str:
        if self._errlog is None:
            return ""
        try:
            self._errlog.seek(0)
            tail = self._errlog.read()[-600:].strip()
        except (OSError, ValueError):
            return ""
        return f"; its stderr ends: {tail}" if tail else ""

    async def list_server_tools(self) -> list[types.Tool]:
        """Every tool the server lists (at most :data:`MAX_PAGES` pages); MCPServerError if that fails."""
        client = self._require()
        out: list[types.Tool] = []
        cursor: str | None = None
        try:
            with anyio.fail_after(self.opts.startup_timeout):
                for _ in range(MAX_PAGES):
                    page = await client.list_tools(cursor=cursor)
                    out.extend(page.tools)
                    cursor = page.next_cursor
                    if not cursor:
                        return out
        except (Exception, TimeoutError) as exc:
            raise MCPServerError(f"{self.label}: tools/list failed: {self._why(exc)}") from None
        raise MCPServerError(f"{self.label}: tools/list gave more than {MAX_PAGES} pages")

    async def refresh(self) -> list[Tool]:
        """List the tools again (after ``tools/list_changed``); raises as :meth:`open`."""
        self.changed = False
        await self._load_tools()
        return self.tools

    async def _load_tools(self) -> None:
        listed = self.listed = await self.list_server_tools()
        kept: list[Tool] = []
        bad: list[str] = []
        self.skipped = []
        for t in listed:
            if (
                self.opts.include is not None and t.name not in self.opts.include
            ) or t.name in self.opts.exclude:
                continue
            local = f"{self.opts.prefix}_{t.name}" if self.opts.prefix else t.name
            problem = check_tool_schema(local, t.input_schema) if self._check else None
            if problem is None:
                try:
                    kept.append(self._make_tool(t, local))
                    continue
                except ToolDefinitionError as exc:  # agentkit's own rules, whatever the backend
                    problem = SchemaError("schema" if _NAME_RE.match(local) else "name", "", str(exc))
            bad.append(f"{self.label}, tool {t.name!r}: {problem}")
        unmatched = sorted(
            ((self.opts.include or frozenset()) | self.opts.exclude) - {t.name for t in listed}
        )
        if unmatched:  # a typo keeps a tool out silently otherwise; not an error: a later list may have it
            log.warning(
                "%s: include/exclude name no tool it lists: %s (its tools: %s)",
                self.label,
                ", ".join(unmatched),
                ", ".join(t.name for t in listed) or "none",
            )
        if bad and self.opts.on_unsupported == "error":
            raise MCPSchemaError(
                "agentkit cannot use these tools (on_unsupported: skip leaves them out):\n" + "\n".join(bad)
            )
        for msg in bad:
            log.warning("skipping %s", msg)
        self.skipped = bad
        self.tools = kept

    def _make_tool(self, t: types.Tool, local: str) -> Tool:
        remote = t.name
        structured = t.output_schema is not None

        async def call(**arguments: Any) -> Any:
            return await self.call(remote, arguments, structured=structured, local=local)

        call.__name__ = local
        return Tool(
            call,
            name=local,
            description=t.description or t.title or "",
            parameters=t.input_schema,
            timeout=None,
            retries=self.opts.retries,
        )

    async def call(
        self, name: str, arguments: dict[str, Any], *, structured: bool = False, local: str | None = None
    ) -> Any:
        """Call the server's tool ``name`` within ``timeout``; its :func:`result_value`.

        Raises:
            MCPToolError: the tool answered ``isError``; ToolTimeoutError: no answer in time.
            MCPServerError: the server is gone or answered with a protocol error.
        """
        client = self._require()
        try:
            with anyio.fail_after(self.opts.timeout):
                result = await client.call_tool(name, arguments)
        except TimeoutError:
            raise ToolTimeoutError(local or name, self.opts.timeout) from None
        except Exception as exc:
            raise MCPServerError(
                f"MCP server {self.name!r}, tool {name!r}: {self._why(exc)}{self._exit_note()}"
            ) from None
        return result_value(result, structured)

    def _exit_note(self) -> str:
        return "" if self._client is None else " (the server may have exited)"

    def _require(self) -> Client:
        if self._client is None:
            raise MCPServerError(
                f"MCP server {self.name!r} is not open (use `async with agent:` or run the agent)"
            )
        return self._client


def _bad_line(exc: Exception) -> str:
    """The start of the stdout line the SDK could not parse (``exc``: its pydantic error), quoted."""
    errors = getattr(exc, "errors", None)
    listed = errors() if callable(errors) else None
    line = listed[0].get("input") if listed else None
    if isinstance(line, str):
        text = line
    elif listed:  # a line that is JSON but not JSON-RPC (1, {"x": 1}): pydantic holds the parsed value
        text = json.dumps(line, ensure_ascii=False, default=str)
    else:
        text = str(exc).splitlines()[0]
    why = str(listed[0].get("msg", "")) if listed else ""  # JSON-RPC nested past the SDK's reader: say so
    return repr(text[:120]) + (f" ({why})" if "recursion limit" in why else "")


class _DropParseErrors(logging.Filter):
    """Drops the SDK's traceback of a stdout line that is not JSON-RPC (the toolset reports the line)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != "Failed to parse JSONRPC message from server"


logging.getLogger("mcp.client.stdio").addFilter(_DropParseErrors())


def _default_name(command: str, args: list[str]) -> str:
    """``notes_server`` for ``python notes_server.py``, ``pkg`` for ``python -m pkg``, else the command's name."""
    base = Path(command).name
    if base.startswith("python") and args:
        if args[0] == "-m" and len(args) > 1:
            return args[1]
        if not args[0].startswith("-"):
            return Path(args[0]).stem
    return base


def _options(name: str, options: dict[str, Any]) -> _Options:
    """The toolset's options (``None``: the default); ValueError naming unknown or out-of-range ones."""
    try:
        return _Options(name=name, **{k: v for k, v in options.items() if v is not None})
    except pydantic.ValidationError as exc:
        raise ValueError(f"invalid MCPToolset option(s): {format_validation_error(exc)}") from None
