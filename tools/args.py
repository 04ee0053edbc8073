"""Validation of a tool's arguments against its Pydantic model, with one error format for every tool.

:func:`args_model` builds that model from the tool function's own signature, so the parameters are declared
once (their ``Annotated`` constraints and descriptions serve the function, the model and its JSON Schema).

:func:`format_validation_error` is also what :mod:`agentkit.tools` sends the model when a call's arguments
are invalid: ``field: message (got value)`` per problem, ``unknown argument`` for an extra key.
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
    """``model(**values)``.

    Raises:
        ValueError: ``Invalid arguments: ...`` in :func:`format_validation_error`'s format.
    """
    try:
        return model(**values)
    except pydantic.ValidationError as exc:
        raise ValueError(f"Invalid arguments: {format_validation_error(exc)}") from exc


def args_model(fn: Callable[..., Any], name: str) -> type[pydantic.BaseModel]:
    """The Pydantic model ``name`` of ``fn``'s arguments: one field per parameter, in order, with its annotation
    (``Annotated`` constraints and description included) and default; unknown keys are refused. Its docstring,
    and so its JSON Schema's ``description``, is ``Arguments of :func:`fn`.``.

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
