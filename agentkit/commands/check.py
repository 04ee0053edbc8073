"""``agentkit check BUNDLE``: validate a bundle without running it (no model is loaded, no tool is called)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from agentkit.commands import check_backend, load_bundle_or_exit


def check_command(
    bundle: Path = typer.Argument(..., help="Bundle file (YAML, see docs/BUNDLES.md)."),
    backend: str | None = typer.Option(
        None,
        "--backend",
        "-b",
        help="Check for this backend (embedded | openai | scripted; default: the bundle's): the embedded one "
        "also checks that its tool-call constraint can enforce every schema.",
    ),
    json_out: bool = typer.Option(
        False, "--json", help='Print one JSON object: {"ok", "name", "tools", "issues": [{file, line, ...}]}.'
    ),
) -> None:
    """Validate a bundle as `run` loads it (schema, python targets, parameters, placeholders, ...) without
    loading a model or calling a tool; every problem is printed as FILE:LINE:COLUMN: FIELD: message. Not
    checked: what only loading or running finds (the checkpoint and adapter folders, MCP servers' tools).

    Exit status: 0 valid; 2 invalid, or the file cannot be read.
    """
    check_backend(backend)
    b = load_bundle_or_exit(bundle, backend, quiet=json_out, issues_json=json_out)
    names = [t.name for t in b.tools]
    if json_out:
        typer.echo(json.dumps({"ok": True, "name": b.name, "tools": names, "issues": []}, ensure_ascii=False))
        return
    kind = b.model.get("backend", "embedded") if backend is None else backend
    toolsets = f" and {len(b.toolsets)} MCP toolset(s), listed when a run starts" if b.toolsets else ""
    typer.echo(f"{bundle}: ok: bundle {b.name!r} for the {kind} backend, {len(names)} tool(s){toolsets}")
    for n in names:
        typer.echo(f"  {n}")
