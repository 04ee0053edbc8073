"""Errors of the model runtime that callers catch without importing the loader (and torch), and the one wording of
a config entry pydantic refuses."""

from __future__ import annotations

import json
from collections.abc import Iterable

from pydantic import ValidationError


class CheckpointError(RuntimeError):
    """A checkpoint (or an adapter on it) cannot be loaded; the message names the path and the problem."""


def invalid_entry(where: str, exc: ValidationError, known: Iterable[str]) -> str:
    """``where: unknown keys [...] (known: [...])``, or ``where: KEY: problem, got VALUE`` for the first error."""
    errors = exc.errors(include_url=False)
    if unknown := sorted(str(e["loc"][0]) for e in errors if e["type"] == "extra_forbidden"):
        return f"{where}: unknown keys {unknown} (known: {list(known)})"
    e = errors[0]
    msg, got = e["msg"].removeprefix("Value error, "), f", got {json.dumps(e['input'], default=repr)}"
    if e["type"] == "value_error":  # worded by a validator (one across keys has no location)
        return f"{where}: {msg}{got if e['loc'] else ''}"
    if not e["loc"]:
        return f"{where}: a JSON object with keys among {list(known)} is expected{got}"
    return f"{where}: {'.'.join(map(str, e['loc']))}: {msg[:1].lower()}{msg[1:]}{got}"
