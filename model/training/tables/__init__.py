"""The word tables of the synthetic training data: JSON objects of named tables beside this module (package
data), read once at import by the modules of :mod:`model.training`."""

from __future__ import annotations

import json
from functools import cache
from importlib.resources import files
from typing import Any


@cache
def load(name: str) -> dict[str, Any]:
    """The tables of ``<name>.json``, cached (callers must not change them); ``FileNotFoundError`` for no such
    file, ``ValueError`` for a file that is not a JSON object."""
    path = files(__name__).joinpath(f"{name}.json")
    if not path.is_file():
        raise FileNotFoundError(f"no training table file {name}.json in {__name__}")
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(
            f"training table file {name}.json: expected a JSON object, got {type(data).__name__}"
        )
    return data


def frozen(x: Any) -> Any:
    """``x`` with every JSON array made a tuple, at any depth (the generators draw from them in file order)."""
    if isinstance(x, list):
        return tuple(frozen(v) for v in x)
    if isinstance(x, dict):
        return {k: frozen(v) for k, v in x.items()}
    return x


def words(name: str, key: str) -> tuple[str, ...]:
    """Table ``key`` of ``<name>.json``, a list of strings, as a tuple (``KeyError``: no such table;
    ``ValueError``: not a list of strings)."""
    tables = load(name)
    if key not in tables:
        raise KeyError(f"training table file {name}.json has no table {key!r}")
    table = tables[key]
    if not isinstance(table, list) or not all(isinstance(w, str) for w in table):
        raise ValueError(f"training table {name}.json:{key}: expected a list of strings")
    return tuple(table)
