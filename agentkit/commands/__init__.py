"""Sub-commands of the ``agentkit`` CLI, one module per command group (registered in :mod:`agentkit.cli`)."""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Callable
from typing import Any, get_args

import typer

from agentkit.backends import BACKENDS


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print ``message`` in red on stderr, unwrapped, and return the :class:`typer.Exit` of ``code`` to raise."""
    typer.secho(message, err=True, fg="red")
    return typer.Exit(code)


def finite(minimum: float, *, inclusive: bool = True) -> Callable[[float | None], float | None]:
    """The typer callback of a float option refusing NaN, infinities and a value below ``minimum`` (or at it,
    when not ``inclusive``); give the option no ``min=`` (click would call NaN out of range)."""

    def check(value: float | None) -> float | None:
        if value is None:
            return None
        if not math.isfinite(value):
            raise typer.BadParameter(f"must be a finite number, got {value}")
        if value < minimum or (value == minimum and not inclusive):
            raise typer.BadParameter(
                f"must be {'at least' if inclusive else 'greater than'} {minimum}, got {value}"
            )
        return value

    return check


def check_backend(backend: str | None) -> None:
    """Raise the exit of a ``--backend`` that names no backend; ``None`` (not given) passes."""
    if backend is not None and backend not in BACKENDS:
        raise fail(f"error: --backend: unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")


def check_binding(binding: str | None) -> None:
    """Raise the exit of a ``--binding`` that is not one of the bundle schema's names; ``None`` passes."""
    from agentkit.bundle_sections import BindingName

    names = get_args(BindingName)
    if binding is not None and binding not in names:
        raise fail(f"error: --binding must be {', '.join(names[:-1])} or {names[-1]}, got {binding!r}")


def prints_to_stderr(json_out: bool) -> contextlib.AbstractContextManager[Any]:
    """With ``--json``, what a bundle's modules and tools print goes to stderr, so stdout is the JSON alone."""
    return contextlib.redirect_stdout(sys.stderr) if json_out else contextlib.nullcontext()
