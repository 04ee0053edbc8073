"""The typed sections of a bundle: ``model:`` (one class per backend kind, discriminated on ``backend``) and
``agent:``; each knows the keyword arguments it gives its backend or agent (:mod:`agentkit.bundle` loads them)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import pydantic

from agentkit.tool_output import ToolImageLimits

#: The binder names a bundle, ``--binding`` and ``agentkit eval`` take.
BindingName = Literal["auto", "copy-head", "none"]


class _Section(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)


class EmbeddedModel(_Section):
    """``model:`` for the embedded runtime (``backend: embedded``, the default)."""

    backend: Literal["embedded"] = "embedded"
    name: str | None = None
    dtype: Literal["float32", "bfloat16", "float16"] | None = None
    device: str | None = None
    max_new_tokens: int | None = None
    seed: int | None = None
    threads: int | None = None
    adapter: str | None = None
    #: the binder before each tool-call turn: auto (the checkpoint's default), copy-head or none
    binding: BindingName | None = None

    def backend_settings(self, bundle_dir: Path) -> dict[str, Any]:
        """Keyword arguments of :class:`~agentkit.backends.embedded.EmbeddedBackend` (a relative adapter is
        relative to the bundle's folder)."""
        out = self.model_dump(exclude_none=True, exclude={"backend", "name"})
        if "adapter" in out and not Path(out["adapter"]).is_absolute():
            out["adapter"] = str(bundle_dir / out["adapter"])
        return out


class OpenAIModel(_Section):
    """``model:`` for an OpenAI-compatible server (``backend: openai``)."""

    backend: Literal["openai"]
    name: str
    base_url: str | None = None
    api_key_env: str | None = None
    timeout: float | None = None
    max_retries: int | None = None
    request: dict[str, Any] | None = None
    seed: int | None = None

    def backend_settings(self, bundle_dir: Path) -> dict[str, Any]:
        """Keyword arguments of :class:`~agentkit.backends.openai.OpenAIBackend` (``request`` and ``seed`` go
        into every request's body)."""
        out = self.model_dump(
            exclude_none=True, include={"base_url", "api_key_env", "timeout", "max_retries"}
        )
        request = dict(self.request or {})
        if self.seed is not None:
            request.setdefault("seed", self.seed)
        if request:
            out["settings"] = request
        return out


class ScriptedModel(_Section):
    """``model:`` for the scripted test backend (``backend: scripted``, ``name``: the script file)."""

    backend: Literal["scripted"]
    name: str

    def backend_settings(self, bundle_dir: Path) -> dict[str, Any]:
        """None: the script is the whole configuration."""
        return {}


#: The ``model:`` section, discriminated on ``backend``.
ModelSection = Annotated[EmbeddedModel | OpenAIModel | ScriptedModel, pydantic.Field(discriminator="backend")]
MODEL_SECTION: pydantic.TypeAdapter[EmbeddedModel | OpenAIModel | ScriptedModel] = pydantic.TypeAdapter(
    ModelSection
)


class AgentSection(_Section):
    """The ``agent:`` section: :class:`~agentkit.agent.Agent` keywords."""

    max_steps: int | None = None
    tool_choice: str | dict[str, str] | None = None
    loop_guard: int | None = None
    reset_tool_choice: bool | None = None
    max_tool_output_bytes: int | Literal["auto"] | None = None
    trim_history: bool | None = None
    tool_images: ToolImageLimits | None = None
