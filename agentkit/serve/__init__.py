"""``agentkit serve``: an OpenAI-compatible HTTP server over the embedded runtime, with continuous batching.

:func:`load_engine` loads a checkpoint and starts its batcher; :func:`~agentkit.serve.app.create_app` is the
ASGI app, :func:`~agentkit.serve.app.run_server` runs it (``docs/SERVING.md``). Importing this package imports
neither torch nor FastAPI.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["load_engine"]


def load_engine(
    model: str | None = None,
    *,
    model_id: str | None = None,
    max_batch: int = 16,
    dtype: str = "float32",
    device: str = "cpu",
    adapter: str | None = None,
    binding: str = "none",
) -> Any:
    """The :class:`agentkit.serve.engine.ServeEngine` of ``model`` (``None``: the embedded default), with an
    ``adapter`` applied when given; ``binding``: the binder of requests that name none.

    Raises:
        model.checkpoint.loading.CheckpointError: the checkpoint is missing or unreadable.
        ValueError: ``max_batch`` below 1.
    """
    from agentkit.serve.engine import ServeEngine
    from model.turn.chat import ChatModel

    cm = ChatModel.load(model, dtype=dtype, device=device, adapter=adapter)
    if model_id is None:  # what clients name: a local checkpoint's folder name, else the hub id as given
        local = Path(model).resolve().name if model is not None and Path(model).exists() else None
        model_id = local or model or "agentkit-tiny"  # (resolved: '--model .' is the folder's name, not '')
    return ServeEngine(cm, model_id, max_batch=max_batch, binding=binding)
