"""Errors of the model runtime that more than one module raises.

:class:`CheckpointError` lives here, not in :mod:`model.loading`, so that :mod:`model.adapters` (which
:mod:`model.loading` calls to apply an adapter) can raise it without importing the loader back. Both
modules re-export it; ``from model.loading import CheckpointError`` keeps working.
"""

from __future__ import annotations

__all__ = ["CheckpointError"]


class CheckpointError(RuntimeError):
    """A checkpoint (or an adapter on it) cannot be loaded; the message names the path and the problem."""
