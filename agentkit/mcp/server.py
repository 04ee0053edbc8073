"""``agentkit mcp serve``: a bundle's tools offered to any MCP client, over stdio or streamable HTTP.

Built on the SDK's low-level ``Server``, so each tool is listed with the JSON Schema the agent would declare.
Calls are validated and their output capped as in a run; a bad call, a tool that raises or times out is an
``isError`` result naming the problem. The bundle's own MCP toolsets are re-served too (:func:`served`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hmac
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import mcp_types as types
import uvicorn
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.stdio import stdio_server
from starlette.responses import JSONResponse

from agentkit import __version__
from agentkit.errors import describe_exception
from agentkit.mcp.content import MCPToolError
from agentkit.tool_output import ToolContent, cap_output
from agentkit.tools import Tool, ToolArgumentsError, ToolContext, ToolTimeoutError

__all__ = ["check_key", "serve_http", "serve_stdio_process", "served"]


def _error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


async def call_tool(
    tools: dict[str, Tool], name: str, arguments: dict[str, Any] | None, call_id: str
) -> types.CallToolResult:
    """Run one call of ``tools[name]`` as in a run; any failure (``sys.exit()`` and ``KeyboardInterrupt`` too) is
    an ``isError`` result naming it."""
    tl = tools.get(name)
    if tl is None:
        return _error(f"unknown tool {name!r}; tools: {', '.join(sorted(tools))}")
    try:
        validated = tl.validate(arguments or {})
    except ToolArgumentsError as exc:
        return _error(f"invalid arguments for {name!r}: {exc}")
    try:
        value = await tl.acall(validated, ToolContext(tl.name, call_id, 0))
        if isinstance(value, ToolContent):
            return _content_result(value, tl.max_output_bytes)
        text = cap_output(tl.serialize(value), tl.max_output_bytes)
    except (ToolTimeoutError, MCPToolError) as exc:  # a re-served MCP tool's own error text as is
        return _error(str(exc))
    except (asyncio.CancelledError, GeneratorExit):
        raise
    except BaseException as exc:  # sys.exit(), KeyboardInterrupt too (a Ctrl-C cancels the call instead)
        return _error(f"tool {name!r} failed: {describe_exception(exc)}")
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


def _content_result(value: ToolContent, limit: int | None) -> types.CallToolResult:
    """Text (capped to ``limit`` bytes; left out when empty) then one image block per image, as given."""
    blocks: list[Any] = []
    if value.text:
        blocks.append(types.TextContent(type="text", text=cap_output(value.text, limit)))
    for image in value.images:
        data = base64.b64encode(image.data).decode("ascii")
        blocks.append(types.ImageContent(type="image", data=data, mime_type=image.mime_type))
    return types.CallToolResult(content=blocks)


@contextlib.asynccontextmanager
async def served(
    tools: Sequence[Tool],
    toolsets: Sequence[Any] = (),
    *,
    name: str = "agentkit",
    instructions: str | None = None,
) -> AsyncIterator[Server[Any]]:
    """An MCP server listing and calling ``tools`` and the tools of ``toolsets``, which are opened here (without
    the embedded constraint check) and closed when the block ends; each tool listed with its JSON Schema.

    Raises:
        MCPServerError: a toolset's server did not start.
        ValueError: two tools with one name (the message names it and the toolset it came from).
    """
    opened: list[Any] = []
    try:
        by_name = {t.name: t for t in tools}
        seen: dict[str, str] = dict.fromkeys(by_name, "the bundle's tools")
        for ts in toolsets:
            opened.append(ts)
            for t in await ts.open(check=False):
                if t.name in seen:
                    raise ValueError(
                        f"tool {t.name!r} of {ts.label} has the name of a tool of {seen[t.name]} "
                        "(give the toolset a 'prefix', or 'exclude' it)"
                    )
                seen[t.name], by_name[t.name] = ts.label, t
        listed = [
            types.Tool(name=t.name, description=t.description or None, input_schema=t.parameters)
            for t in by_name.values()
        ]

        async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
            return types.ListToolsResult(tools=listed)

        async def on_call(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
            return await call_tool(by_name, params.name, params.arguments, str(ctx.request_id))

        yield Server(
            name,
            version=__version__,
            instructions=instructions,
            on_list_tools=list_tools,
            on_call_tool=on_call,
        )
    finally:
        for ts in opened:
            await ts.close()


def serve_stdio_process(make: Callable[[], contextlib.AbstractAsyncContextManager[Server[Any]]]) -> None:
    """Serve ``make()``'s server over this process's stdin/stdout until stdin closes, or SIGINT / SIGTERM: then
    its context is left and the process ends with ``os._exit(128 + signal)`` (the SDK's stdin thread would wait
    for a line forever)."""

    async def serve(server: Server[Any]) -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options(NotificationOptions()))

    async def main() -> None:
        loop = asyncio.get_running_loop()
        stop: asyncio.Future[None] = loop.create_future()
        got: list[int] = []

        def on_signal(sig: int) -> None:
            got.append(sig)
            if not stop.done():
                stop.set_result(None)

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, on_signal, int(sig))
        async with make() as srv:
            serving: asyncio.Future[None] = asyncio.ensure_future(serve(srv))
            await asyncio.wait([serving, stop], return_when=asyncio.FIRST_COMPLETED)
            if serving.done():
                serving.result()
                return
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(128 + got[0])

    asyncio.run(main())


def check_key(app: Any, api_key: str) -> Callable[..., Any]:
    """``app`` behind ``Authorization: Bearer API_KEY`` (401 otherwise), as ``agentkit serve``."""
    expected = f"Bearer {api_key}".encode()
    refusal = JSONResponse({"error": "missing or invalid API key: send 'Authorization: Bearer <key>'"}, 401)

    async def gate(scope: dict[str, Any], receive: Any, send: Any) -> None:
        given = dict(scope.get("headers") or []).get(b"authorization", b"")
        if scope["type"] == "http" and not hmac.compare_digest(given.strip(), expected):
            await refusal(scope, receive, send)
            return
        await app(scope, receive, send)

    return gate


def serve_http(
    make: Callable[[], contextlib.AbstractAsyncContextManager[Server[Any]]],
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
    api_key: str | None = None,
    on_ready: Callable[[int], None] | None = None,
) -> None:
    """Serve ``make()``'s server (its context entered in the serving loop) over streamable HTTP at
    ``http://HOST:PORT/mcp`` with uvicorn until SIGINT/SIGTERM.

    Raises:
        ValueError: a non-loopback ``host`` without an API key.
        OSError: the address cannot be bound.
    """
    from agentkit.serve.app import resolve_api_key

    key = resolve_api_key(host, api_key)
    # bound here, not in uvicorn (which sys.exit()s on a port in use)
    sock = socket.create_server((host, port), family=socket.AF_INET6 if ":" in host else socket.AF_INET)

    async def run(srv: Server[Any]) -> None:
        app: Any = srv.streamable_http_app(host=host)
        if key is not None:
            app = check_key(app, key)
        uv = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on"))
        task = asyncio.create_task(uv.serve(sockets=[sock]))
        while not uv.started and not task.done():
            await asyncio.sleep(0.02)
        if uv.started and on_ready is not None:
            on_ready(uv.servers[0].sockets[0].getsockname()[1])
        await task

    async def main() -> None:
        async with make() as srv:
            await run(srv)

    with sock:
        asyncio.run(main())
