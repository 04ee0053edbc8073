"""YAML tool bundles: an agent (model, system prompt, loop settings, tools) in one versioned file.

The format is documented in docs/BUNDLES.md. :func:`load_bundle` reads and checks a file
(:func:`agentkit.bundle_load.load_spec`: every problem with file, line, column and field in one
:class:`~agentkit.errors.BundleError`) to a :class:`Bundle`, the spec of :mod:`agentkit.bundle_load` that also
makes its agent (:meth:`Bundle.make_agent`). The agent side imports only the spec module
(:meth:`agentkit.Agent.from_bundle`), so agent and bundle do not import each other.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentkit.agent import Agent
from agentkit.bundle_load import (
    FORMAT_VERSION,
    AgentSection,
    BundleSpec,
    EmbeddedModel,
    OpenAIModel,
    SandboxRunner,
    ScriptedModel,
    default_sandbox_runner,
    load_spec,
    schema,
)
from agentkit.errors import BundleError

if TYPE_CHECKING:
    import httpx

    from agentkit.backends.base import Backend

__all__ = [
    "FORMAT_VERSION",
    "AgentSection",
    "Bundle",
    "BundleError",
    "BundleSpec",
    "EmbeddedModel",
    "OpenAIModel",
    "SandboxRunner",
    "ScriptedModel",
    "default_sandbox_runner",
    "load_bundle",
    "schema",
]


class Bundle(BundleSpec):
    """A loaded bundle (its fields: :class:`~agentkit.bundle_load.BundleSpec`) that makes its agent."""

    def make_agent(
        self, backend: str | Backend | None = None, model: str | None = None, **overrides: Any
    ) -> Agent:
        """An :class:`~agentkit.agent.Agent` from this bundle: :meth:`agentkit.Agent.from_bundle` with its
        keywords (``backend``, ``model``, ``seed``, ``adapter``, ``binding`` for
        :meth:`~agentkit.bundle_load.BundleSpec.make_backend`, and ``Agent`` keywords)."""
        return Agent.from_bundle(self, backend=backend, model=model, **overrides)


def load_bundle(
    path: str | Path,
    *,
    http_client: httpx.Client | None = None,
    sandbox_runner: SandboxRunner | None = None,
    backend: str | None = None,
) -> Bundle:
    """Load and validate a bundle file (arguments: :func:`agentkit.bundle_load.load_spec`).

    Raises:
        BundleError: every problem found, each with file, line, column and field.
        OSError: the file cannot be read.
    """
    return load_spec(
        path, http_client=http_client, sandbox_runner=sandbox_runner, backend=backend, cls=Bundle
    )
