"""agentkit: a function-calling agent framework on an embedded block-diffusion language-model runtime.

Public API (imported lazily, so ``agentkit --help`` stays fast)::

    from agentkit import Agent, tool, load_bundle, Conversation
    from agentkit.backends.scripted import ScriptedBackend, call, answer

See docs/AGENTS.md for the guide and docs/BUNDLES.md for the YAML bundle format.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from agentkit.errors import (  # light (no imports of its own): loaded at once
    AgentKitError,
    AgentRunError,
    BackendError,
    BundleError,
    LoopGuardTriggered,
    MaxStepsExceeded,
    ModelRetry,
    PromptTooLong,
    ToolCallFormatError,
    ToolDefinitionError,
    ToolRetriesExceeded,
)
from agentkit.siblings import check_sibling_packages  # light, as errors

__version__ = "0.1.0"

check_sibling_packages()

if TYPE_CHECKING:
    from agentkit.agent import Agent, AgentRun, ChatSession
    from agentkit.backends.base import Backend, ModelTurn, ToolCallRequest, Usage
    from agentkit.bundle import Bundle, load_bundle
    from agentkit.history import Conversation
    from agentkit.messages import ToolCall
    from agentkit.result import RunResult, Step, Timing, ToolCallRecord
    from agentkit.tool_output import ToolContent, ToolImage, ToolImageLimits
    from agentkit.tools import Grounded, Tool, ToolContext, tool

#: The public names imported lazily, by the module that defines them.
_EXPORTS = {
    "agentkit.agent": ("Agent", "AgentRun", "ChatSession"),
    "agentkit.backends.base": ("Backend", "ModelTurn", "ToolCallRequest", "Usage"),
    "agentkit.messages": ("ToolCall",),
    "agentkit.bundle": ("Bundle", "load_bundle"),
    "agentkit.history": ("Conversation",),
    "agentkit.result": ("RunResult", "Step", "Timing", "ToolCallRecord"),
    "agentkit.tool_output": ("ToolContent", "ToolImage", "ToolImageLimits"),
    "agentkit.tools": ("Grounded", "Tool", "ToolContext", "tool"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = [
    "Agent",
    "AgentKitError",
    "AgentRun",
    "AgentRunError",
    "Backend",
    "BackendError",
    "Bundle",
    "BundleError",
    "ChatSession",
    "Conversation",
    "Grounded",
    "LoopGuardTriggered",
    "MaxStepsExceeded",
    "ModelRetry",
    "ModelTurn",
    "PromptTooLong",
    "RunResult",
    "Step",
    "Timing",
    "Tool",
    "ToolCall",
    "ToolCallFormatError",
    "ToolCallRecord",
    "ToolCallRequest",
    "ToolContent",
    "ToolContext",
    "ToolDefinitionError",
    "ToolImage",
    "ToolImageLimits",
    "ToolRetriesExceeded",
    "Usage",
    "__version__",
    "load_bundle",
    "tool",
]


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'agentkit' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
