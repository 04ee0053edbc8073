"""Model backends behind the planner: ``embedded`` (default), ``openai``, ``scripted``.

Backends are imported lazily: naming ``openai`` does not import torch, naming ``embedded`` does not import
httpx.
"""

from __future__ import annotations

from typing import Any

from agentkit.backends.base import Backend, ModelTurn, ToolCallRequest, Usage

__all__ = ["BACKENDS", "Backend", "ModelTurn", "ToolCallRequest", "Usage", "make_backend", "resolve_backend"]

#: Backend kinds :func:`make_backend` knows.
BACKENDS = ("embedded", "openai", "scripted")


def make_backend(kind: str, model: str | None = None, **settings: Any) -> Backend:
    """Build a backend by kind.

    Args:
        kind: ``"embedded"``, ``"openai"`` or ``"scripted"``.
        model: ``embedded``: checkpoint path or id (``None`` = the default checkpoint); ``openai``: the
            served model name (required); ``scripted``: path of a JSON script (required).
        settings: keyword arguments of the backend class (:class:`~agentkit.backends.embedded.EmbeddedBackend`,
            :class:`~agentkit.backends.openai.OpenAIBackend`).

    Raises:
        ValueError: unknown kind, or a required ``model`` missing.
    """
    if kind == "embedded":
        from agentkit.backends.embedded import EmbeddedBackend

        return EmbeddedBackend(model, **settings)
    if kind == "openai":
        from agentkit.backends.openai import OpenAIBackend

        if not model:
            raise ValueError("the openai backend needs a model name (the name the server serves)")
        return OpenAIBackend(model, **settings)
    if kind == "scripted":
        from agentkit.backends.scripted import ScriptedBackend

        if not model:
            raise ValueError(
                "the scripted backend needs a script: a JSON file of turns (--model script.json)"
            )
        if settings:
            raise ValueError(f"the scripted backend takes no settings, got {sorted(settings)}")
        return ScriptedBackend.from_file(model)
    raise ValueError(f"unknown backend {kind!r}; choose one of {', '.join(BACKENDS)}")


def resolve_backend(spec: Backend | str | None) -> Backend:
    """Turn an ``Agent(model=...)`` value into a backend.

    ``None`` -> embedded backend with the default checkpoint; ``"embedded"``, ``"embedded:PATH"``,
    ``"openai:MODEL"``, ``"scripted:FILE"`` -> :func:`make_backend`; a :class:`Backend` -> itself.

    Raises:
        ValueError: a string that names no backend.
        TypeError: an object without a ``complete`` method.
    """
    if spec is None:
        return make_backend("embedded")
    if isinstance(spec, str):
        kind, _, model = spec.partition(":")
        return make_backend(kind, model or None)
    if not callable(getattr(spec, "complete", None)):
        raise TypeError(
            f"model must be a Backend (with .complete), a backend spec string or None, got {spec!r}"
        )
    return spec
