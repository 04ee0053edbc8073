"""Errors of the model runtime that more than one module raises (here so that :mod:`model.checkpoint.adapters` need
not import the loader)."""

from __future__ import annotations


class CheckpointError(RuntimeError):
    """A checkpoint (or an adapter on it) cannot be loaded; the message names the path and the problem."""
