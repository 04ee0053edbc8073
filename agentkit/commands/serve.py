"""``agentkit serve``: the OpenAI-compatible server (see :mod:`agentkit.serve` and ``docs/SERVING.md``)."""

from __future__ import annotations

import socket
from typing import Any

import typer

from agentkit.commands import Device, DType, Threads, fail, finite, load_or_exit
from agentkit.serve import load_engine


def _check_address(host: str, port: int, api_key: str | None) -> str | None:
    """The API key to require, once the address is known to be bindable with it, before the model loads (else
    exit 2 with one line)."""
    from agentkit.serve.app import resolve_api_key

    try:
        key = resolve_api_key(host, api_key)
    except ValueError as exc:
        raise fail(f"error: {exc}") from None
    try:
        with socket.create_server((host, port)):
            pass
    except OSError as exc:
        raise fail(f"error: cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return key


def _load(threads: int | None, device: str, dtype: str, **options: Any) -> Any:
    """The serving engine (``options``: :func:`agentkit.serve.load_engine`'s); a checkpoint, device or dtype
    that cannot load exits 2 with one line."""
    try:
        return load_or_exit(threads, load_engine, dtype=dtype, device=device, **options)
    except typer.Exit:
        raise
    except (RuntimeError, ValueError, TypeError) as exc:  # a device or dtype torch does not know
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise fail(f"error: cannot load the model on --device {device} --dtype {dtype}: {first}") from None


def serve_command(
    model: str | None = typer.Option(
        None, "--model", "-m", help="Checkpoint folder or hub id (default: the embedded agentkit-tiny)."
    ),
    host: str = typer.Option("127.0.0.1", help="Address to bind; any other than loopback needs an API key."),
    port: int = typer.Option(8000, min=0, max=65535, help="Port (0: an ephemeral one, printed at start)."),
    max_batch: int = typer.Option(16, min=1, help="At most this many requests denoise together."),
    api_key: str | None = typer.Option(
        None, "--api-key", help="Require 'Authorization: Bearer KEY' (default: $AGENTKIT_API_KEY)."
    ),
    model_name: str | None = typer.Option(
        None, "--model-name", help="The id clients send as 'model' (default: the checkpoint folder's name)."
    ),
    max_body_mb: float = typer.Option(
        4.0, callback=finite(0.001), help="Largest request body, MiB (413 above; at least 0.001)."
    ),
    drain_timeout: float = typer.Option(
        120.0,
        callback=finite(0.0),
        help="On SIGTERM, seconds in-flight requests get to finish before they are ended with 503.",
    ),
    threads: Threads = None,
    adapter: str | None = typer.Option(
        None, "--adapter", help="LoRA adapter folder from `agentkit specialize`, applied to the checkpoint."
    ),
    device: Device = "cpu",
    dtype: DType = "float32",
    binding: str = typer.Option(
        "none",
        "--binding",
        help="Binder of every request that names none: none (clients' schemas enforced as written) or "
        "copy-head (the copy head proposes parameter values and declines a request no tool fits); a request's own 'binding' field overrides it.",
    ),
    log_level: str = typer.Option(
        "info",
        help="uvicorn log level: critical, error, warning, info, debug or trace.",
        case_sensitive=False,
    ),
) -> None:
    """Serve a checkpoint behind OpenAI's /v1/chat/completions: tool calls constrained during denoising (they
    always parse and validate), requests batched together, streaming as server-sent events."""
    from agentkit.serve.app import run_server

    levels = ("critical", "error", "warning", "info", "debug", "trace")
    if log_level.lower() not in levels:
        raise fail(f"error: --log-level must be one of {', '.join(levels)}, got {log_level!r}")
    if binding not in ("none", "copy-head"):
        raise fail(f"error: --binding must be none or copy-head, got {binding!r}")
    key = _check_address(host, port, api_key)
    engine = _load(
        threads,
        device,
        dtype,
        model=model,
        model_id=model_name,
        max_batch=max_batch,
        adapter=adapter,
        binding=binding,
    )

    def ready(bound: int) -> None:
        typer.echo(
            f"agentkit serve: model {engine.model_id!r} on http://{host}:{bound}/v1 "
            f"(max batch {max_batch}, {'API key required' if key else 'no API key'})",
            err=True,
        )

    try:
        run_server(
            engine,
            host=host,
            port=port,
            api_key=key,
            max_body_bytes=int(max_body_mb * 1024 * 1024),
            drain_timeout_s=drain_timeout,
            log_level=log_level.lower(),
            on_ready=ready,
        )
    except OSError as exc:  # port taken, address not available
        raise fail(f"error: cannot listen on {host}:{port}: {exc}") from None
