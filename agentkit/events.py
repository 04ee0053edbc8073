"""Events the planner emits for tracing: pass ``on_event=callback`` to ``Agent(...)`` or ``Agent.run``.

Order within a run: :class:`RunStarted`; per step (:class:`PromptTrimmed` when the prompt had to be trimmed)
:class:`ModelResponded`, then :class:`ToolCallStarted` for each call in call-id order before any runs and
:class:`ToolCallFinished` as each finishes; finally :class:`RunFinished` or :class:`RunFailed`. Callbacks run on
the planner's thread; an exception in one propagates.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from agentkit.backends.base import ModelTurn
from agentkit.result import RunResult, ToolCallRecord


@dataclass(frozen=True, slots=True)
class RunStarted:
    """A run began. ``tools``: names of the declared tools."""

    kind: ClassVar[str] = "run_started"
    question: str
    backend: str
    tools: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ModelResponded:
    """The backend returned a model turn for step ``step`` after ``seconds`` seconds."""

    kind: ClassVar[str] = "model_responded"
    step: int
    turn: ModelTurn
    seconds: float


@dataclass(frozen=True, slots=True)
class ToolCallStarted:
    """A tool call is about to run (only calls that passed validation run)."""

    kind: ClassVar[str] = "tool_call_started"
    step: int
    call_id: str
    name: str
    arguments: Any


@dataclass(frozen=True, slots=True)
class ToolCallFinished:
    """A tool call has its tool response (success or error; also for calls that never ran)."""

    kind: ClassVar[str] = "tool_call_finished"
    step: int
    record: ToolCallRecord


@dataclass(frozen=True, slots=True)
class PromptTrimmed:
    """The prompt of step ``step`` did not fit (``prompt_tokens`` > ``limit``): the oldest ``dropped_messages``
    messages in all are left out of it from now on (the transcript keeps them)."""

    kind: ClassVar[str] = "prompt_trimmed"
    step: int
    dropped_messages: int
    prompt_tokens: int
    limit: int


@dataclass(frozen=True, slots=True)
class RunFinished:
    """The model gave its final answer."""

    kind: ClassVar[str] = "run_finished"
    result: RunResult


@dataclass(frozen=True, slots=True)
class RunFailed:
    """The run stopped without a final answer: ``error`` (any, cancellation included) is raised right after
    this event, emitted once per run."""

    kind: ClassVar[str] = "run_failed"
    error: BaseException


#: Any planner event.
Event = (
    RunStarted | ModelResponded | ToolCallStarted | ToolCallFinished | PromptTrimmed | RunFinished | RunFailed
)
#: An event callback.
EventCallback = Callable[[Event], Any]


def check_callback(callback: Any) -> None:
    """Raise ``TypeError`` for an event callback that is not callable or is ``async`` (callbacks are called
    synchronously: its coroutine would never run)."""
    if not callable(callback):
        raise TypeError(f"on_event must be a callable or a list of callables, got {callback!r}")
    target = callback
    while isinstance(target, functools.partial):
        target = target.func
    if inspect.iscoroutinefunction(target if inspect.isroutine(target) else type(target).__call__):
        name = getattr(target, "__name__", type(target).__name__)
        raise TypeError(
            f"on_event: {name} is an async function, but event callbacks are called synchronously, so it would "
            "never run; use a plain function (to hand events to async code, put them on an asyncio.Queue with "
            "put_nowait)"
        )
