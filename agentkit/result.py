"""What a run returns: the final answer, every step's tool calls and responses, usage and timing."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from agentkit.backends.base import ChatMessage, Usage
from agentkit.history import Conversation

#: Why a run ended.
StopReason = Literal[
    "final_answer", "max_steps", "loop_guard", "tool_retries", "prompt_too_long", "format_retries"
]


@dataclass(slots=True)
class ToolCallRecord:
    """One tool call and the tool response the model got for it.

    Attributes:
        id: call id (unique within its step).
        name: tool name as requested.
        arguments: arguments as requested (the raw text, for calls a backend could not decode).
        content: the tool response text sent to the model (the serialised result, or an error object).
        error: ``None`` on success, else the error text (``"unknown_tool"``-style kinds are in ``error_kind``).
        error_kind: ``None`` or one of ``"decode"`` (backend could not decode the call), ``"unknown_tool"``,
            ``"invalid_arguments"``, ``"exception"``, ``"timeout"``, ``"not_run"`` (run stopped first).
        result: the tool's Python return value (not serialised by :meth:`to_dict`).
        seconds: wall time of the call (seconds; 0 when it did not run).
    """

    id: str
    name: str
    arguments: Any
    content: str
    error: str | None = None
    error_kind: str | None = None
    result: Any = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """True when the tool ran and returned."""
        return self.error is None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (without ``result``)."""
        return {
            "id": self.id,
            "name": self.name,
            "arguments": self.arguments,
            "content": self.content,
            "error": self.error,
            "error_kind": self.error_kind,
            "seconds": self.seconds,
        }


@dataclass(slots=True)
class Step:
    """One model turn and the tool calls it requested.

    Attributes:
        index: 0-based step number.
        text: the model's visible text.
        thinking: the model's reasoning text (kept here, never in the conversation history).
        tool_calls: records in call-id order (empty for the final answer).
        usage: tokens of this model turn.
        model_seconds: time in the backend (seconds).
        tool_seconds: wall time of this step's tool calls, run concurrently (seconds).
    """

    index: int
    text: str
    thinking: str
    tool_calls: list[ToolCallRecord]
    usage: Usage
    model_seconds: float
    tool_seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {
            "index": self.index,
            "text": self.text,
            "thinking": self.thinking,
            "tool_calls": [c.to_dict() for c in self.tool_calls],
            "usage": self.usage.to_dict(),
            "model_seconds": self.model_seconds,
            "tool_seconds": self.tool_seconds,
        }


@dataclass(slots=True)
class Timing:
    """Wall-clock split of a run (seconds).

    Attributes:
        total_seconds: the whole run.
        model_seconds: summed time inside the backend.
        tool_seconds: summed wall time of the steps' tool batches.
    """

    total_seconds: float = 0.0
    model_seconds: float = 0.0
    tool_seconds: float = 0.0

    @property
    def framework_seconds(self) -> float:
        """Time spent in agentkit itself: ``total - model - tool`` (seconds)."""
        return self.total_seconds - self.model_seconds - self.tool_seconds

    def to_dict(self) -> dict[str, float]:
        """JSON-ready dict."""
        return {
            "total_seconds": self.total_seconds,
            "model_seconds": self.model_seconds,
            "tool_seconds": self.tool_seconds,
            "framework_seconds": self.framework_seconds,
        }


@dataclass
class RunResult:
    """The outcome of one turn (``Agent.run``) - or, inside an :class:`agentkit.errors.AgentRunError`, the
    partial transcript of a stopped one.

    Attributes:
        question: the user message.
        answer: the final answer; ``None`` when the run stopped without one.
        steps: every model turn with its tool calls.
        usage: tokens summed over the steps.
        timing: wall-clock split.
        messages: the full transcript sent to / received from the model in this turn (system prompt,
            kept history, the question, assistant calls with thinking, tool responses, the final answer).
        conversation: the history after this turn (user messages and final answers only); for a stopped
            run, the history before it.
        stop_reason: why the run ended.
        backend: name of the backend used.
    """

    question: str
    answer: str | None
    steps: list[Step]
    usage: Usage
    timing: Timing
    messages: list[ChatMessage]
    conversation: Conversation
    stop_reason: StopReason
    backend: str = ""

    @property
    def tool_calls(self) -> list[ToolCallRecord]:
        """All tool-call records of all steps, in order."""
        return [c for s in self.steps for c in s.tool_calls]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (what ``agentkit run --json`` prints)."""
        return {
            "question": self.question,
            "answer": self.answer,
            "stop_reason": self.stop_reason,
            "backend": self.backend,
            "steps": [s.to_dict() for s in self.steps],
            "usage": self.usage.to_dict(),
            "timing": self.timing.to_dict(),
            "messages": self.messages,
            "conversation": self.conversation.to_dict(),
        }

    def to_json(self, *, indent: int | None = None) -> str:
        """:meth:`to_dict` as JSON (tool results that are not JSON are written with ``str``)."""
        return json.dumps(self.to_dict(), ensure_ascii=False, indent=indent, default=str)
