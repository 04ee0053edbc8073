"""What a run returns: the final answer, every step's tool calls and responses, usage and timing."""

from __future__ import annotations

import json
import math
import re
from typing import Annotated, Any, Literal

from pydantic import (
    ConfigDict,
    Field,
    InstanceOf,
    PlainSerializer,
    SkipValidation,
    computed_field,
)
from pydantic.dataclasses import dataclass

from agentkit.backends.base import ChatMessage, PlainData, Usage, plain_data
from agentkit.history import Conversation

# the planner builds records from checked values: free-form values (arguments, results, messages) pass as they are
_CONFIG = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

_SURROGATE = re.compile(r"[\ud800-\udfff]")


#: What went wrong with a tool call (see :class:`ToolCallRecord`).
ErrorKind = Literal["decode", "unknown_tool", "invalid_arguments", "exception", "timeout", "not_run"]

#: Why a run ended.
StopReason = Literal[
    "final_answer", "max_steps", "loop_guard", "tool_retries", "prompt_too_long", "format_retries"
]


@dataclass(slots=True, config=_CONFIG)
class ToolCallRecord(PlainData):
    """One tool call and the tool response the model got for it.

    Attributes:
        id, name, arguments: the call as requested (``arguments`` the raw text when it could not be decoded).
        content: the tool response text sent to the model (the serialised result, or an error object).
        error: ``None`` on success, else the error text; ``error_kind``: its :data:`ErrorKind`.
        result: the tool's Python return value (not serialised by :meth:`to_dict`).
        seconds: wall time of the call (0 when it did not run).
    """

    id: str
    name: str
    arguments: SkipValidation[Any]
    content: str
    error: str | None = None
    error_kind: ErrorKind | None = None
    result: SkipValidation[Any] = Field(default=None, exclude=True)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """True when the tool ran and returned."""
        return self.error is None


@dataclass(slots=True, config=_CONFIG)
class Step(PlainData):
    """One model turn and the tool calls it requested.

    Attributes:
        index: 0-based step number; text, thinking: the model's text and reasoning (never in the history).
        tool_calls: records in call-id order (empty for the final answer); usage: tokens of this turn.
        model_seconds, tool_seconds: time in the backend, wall time of the step's (concurrent) tool calls.
    """

    index: int
    text: str
    thinking: str
    tool_calls: list[ToolCallRecord]
    usage: Usage
    model_seconds: float
    tool_seconds: float = 0.0


@dataclass(slots=True, config=_CONFIG)
class Timing(PlainData):
    """Wall-clock split of a run (seconds): the whole run, inside the backend, in the steps' tool batches."""

    total_seconds: float = 0.0
    model_seconds: float = 0.0
    tool_seconds: float = 0.0

    @computed_field  # type: ignore[prop-decorator]
    @property
    def framework_seconds(self) -> float:
        """Time spent in agentkit itself: ``total - model - tool`` (seconds)."""
        return self.total_seconds - self.model_seconds - self.tool_seconds


@dataclass(config=_CONFIG)
class RunResult:
    """The outcome of one turn (``Agent.run``) - or, inside an :class:`agentkit.errors.AgentRunError`, the
    partial transcript of a stopped one.

    Attributes:
        question, answer: the user message and the final answer (``None`` when the run stopped without one).
        steps, usage, timing: every model turn with its tool calls, tokens summed, the wall-clock split.
        messages: the full transcript of this turn (system prompt, history, question, calls, responses, answer).
        conversation: the history after this turn (for a stopped run, before it).
        stop_reason: why the run ended; backend: name of the backend used.
    """

    question: str
    answer: str | None
    steps: list[Step]
    usage: Usage
    timing: Timing
    messages: SkipValidation[list[ChatMessage]]
    conversation: Annotated[InstanceOf[Conversation], PlainSerializer(lambda c: c.to_dict())]
    stop_reason: StopReason
    backend: str = ""

    @property
    def tool_calls(self) -> list[ToolCallRecord]:
        """All tool-call records of all steps, in order."""
        return [c for s in self.steps for c in s.tool_calls]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (what ``agentkit run --json`` prints): the fields in the order ``question, answer,
        stop_reason, backend, steps, usage, timing, messages, conversation``."""
        d = plain_data(self)
        return {k: d[k] for k in ("question", "answer", "stop_reason", "backend")} | d

    def to_json(self, *, indent: int | None = None) -> str:
        """:meth:`to_dict` as JSON (tool results that are not JSON are written with ``str``)."""
        return json_text(self.to_dict(), indent=indent)


def json_text(value: Any, *, indent: int | None = None) -> str:
    """``value`` as JSON text, non-ASCII as is but lone surrogates as ``\\udXXX`` escapes (as JSON reads them
    back), so the text can be written in UTF-8; values JSON has no type for are written with ``str``, NaN and
    infinities (a custom backend's arguments) as the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"``."""
    try:
        text = json.dumps(value, ensure_ascii=False, indent=indent, default=str, allow_nan=False)
    except ValueError:  # json.dumps would write NaN, which is not JSON
        text = json.dumps(_finite(value), ensure_ascii=False, indent=indent, default=str)
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)  # only ever inside a JSON string


def _finite(value: Any) -> Any:
    """``value`` with its NaN and infinite floats as strings (as tool results write them)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    return [_finite(v) for v in value] if isinstance(value, (list, tuple)) else value
