"""YAML tool bundles (docs/BUNDLES.md): :func:`load_bundle` reads and checks a file to a :class:`Bundle`, the spec
of :mod:`agentkit.bundle_load` that also makes its agent. ``Agent.from_bundle`` imports only the spec module, so
agent and bundle do not import each other."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentkit.agent import Agent
from agentkit.backends import BACKENDS
from agentkit.bundle_document import schema
from agentkit.bundle_load import BundleSpec, load_spec
from agentkit.bundle_sections import AgentSection, EmbeddedModel, OpenAIModel, ScriptedModel
from agentkit.bundle_tools import SandboxRunner, default_sandbox_runner
from agentkit.errors import BundleError

if TYPE_CHECKING:
    import httpx

    from agentkit.backends.base import Backend

__all__ = [
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
    """Load and validate a bundle file (arguments and errors: :func:`agentkit.bundle_load.load_spec`;
    ValueError for a ``backend`` that names none of :data:`agentkit.backends.BACKENDS`)."""
    if backend is not None and backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    spec = load_spec(path, http_client=http_client, sandbox_runner=sandbox_runner, backend=backend)
    return Bundle(**vars(spec))
