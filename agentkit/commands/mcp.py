"""``agentkit mcp serve`` (a bundle's tools to MCP clients) and ``agentkit mcp list`` (an MCP server's tools)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import typer

from agentkit.commands import fail, load_bundle_or_exit
from agentkit.mcp.guard import interpreter

mcp_app = typer.Typer(
    name="mcp", help="MCP: serve a bundle's tools, list a server's tools (docs/MCP.md).", no_args_is_help=True
)


@mcp_app.command("serve")
def serve_command(
    bundle: str = typer.Argument(..., help="The bundle YAML whose tools to offer."),
    http: int | None = typer.Option(
        None, "--http", min=0, max=65535, help="Serve streamable HTTP on this port (/mcp) instead of stdio."
    ),
    host: str = typer.Option(
        "127.0.0.1", help="Address for --http; any other than loopback needs an API key."
    ),
    api_key: str | None = typer.Option(
        None,
        "--api-key",
        help="Require 'Authorization: Bearer KEY' over --http (default: $AGENTKIT_API_KEY).",
    ),
) -> None:
    """Offer a bundle's tools (python, http and sandbox ones, and the tools of its own MCP toolsets) to any
    MCP client, over stdio (default) or streamable HTTP on 127.0.0.1 (--http PORT)."""
    from agentkit.mcp.client import MCPSchemaError
    from agentkit.mcp.content import MCPServerError
    from agentkit.mcp.server import serve_http, serve_stdio_process, served
    from agentkit.serve.app import resolve_api_key

    if Path(bundle).is_dir():
        found = ", ".join(str(p) for p in sorted(Path(bundle).glob("*.y*ml"))) or "none"
        raise fail(f"error: {bundle} is a folder; give a bundle's YAML file (YAML files there: {found})")
    # over stdio, stdout is the protocol's from the start; no model runs here: any JSON Schema may be served
    b = load_bundle_or_exit(bundle, "openai", quiet=http is None)

    toolsets = [t.copy() for t in b.toolsets]

    def server() -> Any:  # the toolsets' servers live as long as the serving loop
        return served(b.tools, toolsets, name=b.name, instructions=b.description or None)

    def ready(port: int) -> None:
        auth = "API key required" if key else "no API key"
        n = len(b.tools) + sum(len(t.tools) for t in toolsets)
        typer.echo(
            f"agentkit mcp serve: {n} tool{'s' * (n != 1)} on http://{host}:{port}/mcp ({auth})", err=True
        )

    try:
        if http is None:
            serve_stdio_process(server)
            return
        key = resolve_api_key(host, api_key)
        serve_http(server, host=host, port=http, api_key=key, on_ready=ready)
    except (MCPServerError, MCPSchemaError, ValueError) as exc:
        raise fail(f"error: {exc}") from None
    except OSError as exc:
        if http is None:
            raise
        raise fail(f"error: cannot listen on {host}:{http}: {exc}") from None


def _pairs(values: list[str], sep: str, what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for v in values:
        k, found, val = v.partition(sep)
        if not found or not k.strip():
            raise fail(f"error: {what} must be NAME{sep}VALUE, got {v!r}")
        out[k.strip()] = val.strip()
    return out


async def _list(target: str, args: list[str], env: dict[str, str], headers: dict[str, str]) -> list[Any]:
    from agentkit.mcp.client import MCPToolset, check_tool_schema

    if "://" in target:  # a URL (one that is not http(s) is refused by name, not run as a command)
        ts = MCPToolset.http(target, headers=headers, on_unsupported="skip")
    else:
        ts = MCPToolset.stdio(interpreter(target), args, env=env or None, on_unsupported="skip")
    await ts.open(check=False)  # every tool is listed, each with its verdict
    await ts.close()
    return [(t, check_tool_schema(t.name, t.input_schema)) for t in ts.listed]


@mcp_app.command("list", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def list_command(
    ctx: typer.Context,
    target: str = typer.Argument(..., help="A server command (its arguments after it) or an http(s) URL."),
    env: list[str] = typer.Option([], "--env", help="NAME=VALUE for a command server (repeatable)."),
    header: list[str] = typer.Option([], "--header", help="NAME: VALUE for a URL server (repeatable)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """Print an MCP server's tools and whether the embedded tool-call constraint can enforce each schema."""
    from agentkit.mcp.content import MCPServerError

    is_url = "://" in target
    if is_url and (env or ctx.args):
        raise fail(f"error: --env and arguments apply to a server command, not to a URL ({target})")
    if header and not is_url:
        raise fail("error: --header applies to a URL server, not to a command (use --env NAME=VALUE)")
    try:
        rows = asyncio.run(
            _list(target, list(ctx.args), _pairs(env, "=", "--env"), _pairs(header, ":", "--header"))
        )
    except (MCPServerError, ValueError) as exc:
        raise fail(f"error: {exc}") from None
    if as_json:
        out = [
            {
                "name": t.name,
                "description": t.description or "",
                "enforceable": c is None,
                "keyword": c and c.keyword,
                "pointer": c.path if c else "",
                "reason": str(c or ""),
            }
            for t, c in rows
        ]
        typer.echo(json.dumps(out, indent=2))
        return
    for t, c in rows:
        verdict = "enforceable" if c is None else f"NOT enforceable: keyword {c.keyword!r} at {c.path or '/'}"
        typer.echo(f"{t.name}  [{verdict}]  {(t.description or '').splitlines()[0] if t.description else ''}")
    bad = sum(1 for _, c in rows if c is not None)
    typer.echo(
        f"{len(rows)} tool{'s' * (len(rows) != 1)}, {len(rows) - bad} enforceable by the embedded constraint",
        err=True,
    )
