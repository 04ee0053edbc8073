"""Sub-commands of the ``agentkit`` CLI, one module per command group (registered in :mod:`agentkit.cli`)."""

from __future__ import annotations

import typer


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print ``message`` in red on stderr, unwrapped (``file:line:`` messages stay greppable), and return the
    :class:`typer.Exit` of exit status ``code`` for the caller to raise (2: bad input, as a usage error)."""
    typer.secho(message, err=True, fg="red")
    return typer.Exit(code)
