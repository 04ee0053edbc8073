"""Errors raised by :mod:`sandbox`. Every message says what went wrong and how to fix it."""

from __future__ import annotations


class SandboxError(Exception):
    """Base class of every error raised by :mod:`sandbox`."""


class EngineUnavailableError(SandboxError):
    """The Docker engine cannot be reached (not installed, not started, or no permission on its socket)."""


class ImageMissingError(SandboxError):
    """The sandbox base image (``agentkit-sandbox:<recipe hash>``) is not present in the engine."""


class ImageBuildError(SandboxError):
    """Building the base image failed (no root, no debootstrap, no Debian mirror, or a failed step)."""


class SandboxClosedError(SandboxError):
    """:meth:`sandbox.Sandbox.run` was called after :meth:`sandbox.Sandbox.close`."""


class SandboxInputError(SandboxError, ValueError):
    """Bad input to the sandbox (a limit out of range, an unsafe file name, an unknown language...)."""
