"""Errors of the model runtime that more than one module raises.

:class:`CheckpointError` lives here, not in :mod:`model.checkpoint.loading`, so that :mod:`model.checkpoint.adapters` (which
:mod:`model.checkpoint.loading` calls to apply an adapter) can raise it without importing the loader back. Both
modules re-export it; ``from model.checkpoint.loading import CheckpointError`` keeps working.
"""

from __future__ import annotations

__all__ = ["CheckpointError"]


class CheckpointError(RuntimeError):
    """A checkpoint (or an adapter on it) cannot be loaded; the message names the path and the problem."""
