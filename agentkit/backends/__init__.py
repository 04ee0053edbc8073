"""Model backends behind the planner: ``embedded`` (default), ``openai``, ``scripted`` (each imported lazily)."""

from __future__ import annotations

from typing import Any

from agentkit.backends.base import Backend, ModelTurn, ToolCallRequest, Usage

__all__ = ["BACKENDS", "Backend", "ModelTurn", "ToolCallRequest", "Usage", "make_backend", "resolve_backend"]

#: Backend kinds :func:`make_backend` knows.
BACKENDS = ("embedded", "openai", "scripted")


def make_backend(kind: str, model: str | None = None, **settings: Any) -> Backend:
    """Build a backend of ``kind`` (one of :data:`BACKENDS`) with the backend class's keyword ``settings``.

    ``model``: the checkpoint (``embedded``; ``None``: the default), the served model name (``openai``) or
    the JSON script's path (``scripted``). ValueError for an unknown kind or a required ``model`` missing.
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
    """An ``Agent(model=...)`` value as a backend: ``None`` (the embedded default), ``"KIND[:MODEL]"``
    (:func:`make_backend`) or a :class:`Backend`. ValueError for a string naming no backend, TypeError for an
    object without ``complete`` or a string ``name``."""
    if spec is None:
        return make_backend("embedded")
    if isinstance(spec, str):
        kind, _, model = spec.partition(":")
        return make_backend(kind, model or None)
    if not callable(getattr(spec, "complete", None)):
        raise TypeError(
            f"model must be a Backend (with .complete), a backend spec string or None, got {spec!r}"
        )
    if not isinstance(getattr(spec, "name", None), str):  # results and events name it
        raise TypeError(
            f"a backend needs a name (a str attribute, e.g. 'mine'), {type(spec).__name__} has none"
        )
    return spec
