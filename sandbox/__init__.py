"""Hardened Docker execution of model-written code (:class:`Sandbox`, :class:`Limits`, :class:`Execution`,
image helpers, :func:`diagnose`, the errors). Imports no other package of the project; the docker SDK only when
a lazily imported name is first used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from sandbox.errors import (
    EngineUnavailableError,
    ImageBuildError,
    ImageMissingError,
    SandboxClosedError,
    SandboxError,
    SandboxInputError,
)
from sandbox.models import Execution, Limits, parse_size

if TYPE_CHECKING:
    from sandbox.core import Sandbox
    from sandbox.doctor import Check, diagnose
    from sandbox.image import build_image, default_image

__all__ = [
    "Check",
    "EngineUnavailableError",
    "Execution",
    "ImageBuildError",
    "ImageMissingError",
    "Limits",
    "Sandbox",
    "SandboxClosedError",
    "SandboxError",
    "SandboxInputError",
    "build_image",
    "default_image",
    "diagnose",
    "parse_size",
]

_LAZY = {
    "Sandbox": "sandbox.core",
    "Check": "sandbox.doctor",
    "diagnose": "sandbox.doctor",
    "build_image": "sandbox.image",
    "default_image": "sandbox.image",
}


def __getattr__(name: str) -> Any:
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'sandbox' has no attribute {name!r}")
    return getattr(importlib.import_module(mod), name)
