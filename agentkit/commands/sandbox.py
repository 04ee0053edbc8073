"""``agentkit sandbox``: run code in the hardened Docker sandbox, build its base image, check the setup."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Literal

import typer

from agentkit.commands import fail

sandbox_app = typer.Typer(
    name="sandbox",
    help="Run code in hardened, single-use Docker containers; build the base image; check the setup.",
    no_args_is_help=True,
)


@sandbox_app.command("run")
def run_cmd(
    code: Annotated[str, typer.Argument(help="Program text, or '-' to read it from stdin.")],
    language: Annotated[  # checked here: a bad one is named before the engine is reached
        Literal["python", "bash", "sh"], typer.Option("--language", "-l", help="python | bash | sh")
    ] = "python",
    file: Annotated[
        list[Path] | None,
        typer.Option("--file", "-f", help="Local file copied into the work dir (repeatable)."),
    ] = None,
    collect: Annotated[
        list[str] | None,
        typer.Option("--collect", "-c", help="Glob of work-dir files to return (repeatable)."),
    ] = None,
    timeout: Annotated[float, typer.Option(help="Wall-clock limit, seconds.")] = 10.0,
    memory: Annotated[str, typer.Option(help="Memory (= memory+swap) limit, e.g. 256m.")] = "256m",
    cpus: Annotated[float, typer.Option(help="CPU quota in cores.")] = 1.0,
    pids: Annotated[int, typer.Option(help="Max processes/threads.")] = 64,
    runtime: Annotated[str | None, typer.Option(help="OCI runtime, e.g. runsc (gVisor).")] = None,
    image: Annotated[
        str | None,
        typer.Option(help="Image (default: $AGENTKIT_SANDBOX_IMAGE, else agentkit-sandbox:<recipe hash>)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the Execution as one JSON object.")] = False,
) -> None:
    """Run CODE once in a fresh container and print the Execution; exits with the program's exit code."""
    from sandbox import Limits, Sandbox, SandboxError

    program = sys.stdin.read() if code == "-" else code
    files: dict[str, bytes] = {}
    for p in file or []:
        if not p.is_file():
            raise fail(f"error: --file {p}: not a file")
        files[p.name] = p.read_bytes()
    try:
        limits = Limits.from_options(memory=memory, cpus=cpus, pids=pids, runtime=runtime)
        with Sandbox(image, pool_size=0, limits=limits, timeout_s=timeout) as sb:
            ex = sb.run(program, language=language, files=files or None, collect=collect or None)
    except SandboxError as exc:
        raise fail(f"error: {exc}") from exc
    if as_json:
        typer.echo(json.dumps(ex.to_dict()))
    else:
        sys.stdout.write(ex.stdout)
        sys.stderr.write(ex.stderr)
        for name, data in ex.files_out.items():
            typer.secho(f"[file out] {name} ({len(data)} bytes)", err=True, fg=typer.colors.CYAN)
        status = "timed out" if ex.timed_out else "OOM-killed" if ex.oom_killed else f"exit {ex.exit_code}"
        typer.secho(
            f"[sandbox] {status} in {ex.duration_s:.3f} s{' (output truncated)' if ex.truncated else ''}",
            err=True,
            fg=typer.colors.GREEN if ex.ok else typer.colors.YELLOW,
        )
    code_out = 124 if ex.timed_out else ex.exit_code
    raise typer.Exit(code_out if 0 <= code_out <= 255 else 1)


@sandbox_app.command("build-image")
def build_image_cmd(
    mirror: Annotated[
        str | None,
        typer.Option(help="Debian mirror URL (default: $AGENTKIT_SANDBOX_MIRROR, else from apt sources)."),
    ] = None,
    force: Annotated[bool, typer.Option(help="Rebuild even if the tagged image exists.")] = False,
) -> None:
    """Build the base image offline with debootstrap and tag it by its recipe hash (idempotent; needs root)."""
    from sandbox import SandboxError
    from sandbox.engine import connect
    from sandbox.image import build_image

    try:
        tag, built = build_image(
            connect(), mirror=mirror, force=force, log=lambda m: typer.echo(f"build: {m}")
        )
    except SandboxError as exc:
        raise fail(f"error: {exc}", 1) from exc
    typer.echo(f"{tag} {'built' if built else 'present'}")


@sandbox_app.command("doctor")
def doctor_cmd(
    image: Annotated[str | None, typer.Option(help="Image to check.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the checks as JSON.")] = False,
) -> None:
    """Check the engine, the image, limit support, runtimes and stale containers; exit 1 if a required check fails."""
    from rich.console import Console
    from rich.table import Table

    from sandbox.doctor import diagnose

    checks = diagnose(image)
    if as_json:
        typer.echo(json.dumps([asdict(c) for c in checks]))
    else:
        table = Table(title="agentkit sandbox doctor")
        for col in ("check", "status", "detail", "fix"):
            table.add_column(col)
        for c in checks:
            status = "[green]ok[/]" if c.ok else ("[red]FAIL[/]" if c.required else "[yellow]warn[/]")
            table.add_row(c.name, status, c.detail, "" if c.ok else c.fix)
        Console().print(table)
    if any(c.required and not c.ok for c in checks):
        raise typer.Exit(1)
