"""A tool's arguments model, built from the function's own signature (:func:`args_model`), and one error
format for invalid arguments (:func:`format_validation_error`, also what :mod:`agentkit.tools` sends the model).
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from typing import Any, TypeVar

import pydantic

__all__ = ["args_model", "format_validation_error", "validate_args"]

M = TypeVar("M", bound=pydantic.BaseModel)


def format_validation_error(exc: pydantic.ValidationError) -> str:
    """One line per problem, joined with ``; ``: ``days: Input should be less than or equal to 7 (got 9)``."""
    parts = []
    for err in exc.errors(include_url=False):
        loc = ".".join(str(p) for p in err["loc"]) or "(arguments)"
        msg = err["msg"]
        if err["type"] not in ("missing", "extra_forbidden"):
            msg += f" (got {err['input']!r})"
        elif err["type"] == "extra_forbidden":
            msg = "unknown argument"
        parts.append(f"{loc}: {msg}")
    return "; ".join(parts)


def validate_args(model: type[M], **values: Any) -> M:
    """``model(**values)``; ValueError ``Invalid arguments: ...`` in :func:`format_validation_error`'s format."""
    try:
        return model(**values)
    except pydantic.ValidationError as exc:
        raise ValueError(f"Invalid arguments: {format_validation_error(exc)}") from exc


def args_model(fn: Callable[..., Any], name: str) -> type[pydantic.BaseModel]:
    """The Pydantic model ``name`` of ``fn``'s arguments: one field per parameter, in order, with its annotation
    and default; unknown keys are refused; docstring ``Arguments of :func:`fn`.``.

    Raises:
        pydantic.PydanticSchemaGenerationError: an annotation Pydantic cannot validate.
    """
    hints = typing.get_type_hints(fn, include_extras=True)
    fields: dict[str, Any] = {
        n: (hints[n], ... if p.default is p.empty else p.default)
        for n, p in inspect.signature(fn).parameters.items()
    }
    return pydantic.create_model(
        name,
        __config__=pydantic.ConfigDict(extra="forbid"),
        __doc__=f"Arguments of :func:`{fn.__name__}`.",
        **fields,
    )
