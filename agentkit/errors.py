"""Exceptions raised by agentkit.

Two families:

* Definition errors (:class:`ToolDefinitionError`, :class:`BundleError`) are raised while tools, agents and
  bundles are built, before any model call; they name the offending function, file, line and field.
* Run errors (:class:`AgentRunError` and subclasses) stop a run deliberately (step limit, loop guard, a tool's
  failure budget, a prompt that does not fit the model's context). Each carries the partial transcript in ``.result`` (a :class:`agentkit.result.RunResult`
  with ``answer=None``) so nothing the model and tools did is lost.

A tool's own exception or timeout is *not* raised: the planner turns it into a tool response the model
sees (see :mod:`agentkit.agent`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentkit.result import RunResult


class AgentKitError(Exception):
    """Base class of every exception agentkit raises on purpose."""


class ToolDefinitionError(AgentKitError, TypeError):
    """A function cannot become a tool (e.g. ``*args``, an unsupported annotation, a duplicate tool name)."""


class ModelRetry(AgentKitError):
    """Raise inside a tool to send ``message`` back to the model as the tool response (no traceback text).

    Counts against the tool's failure budget like any other tool error.
    """


class BackendError(AgentKitError):
    """A backend could not produce a model turn (HTTP error after retries, exhausted script, bad response).

    Attributes:
        status_code: HTTP status of the last attempt, when there was one.
    """

    def __init__(self, message: str, *, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


class AgentRunError(AgentKitError):
    """A run stopped without a final answer. ``result`` holds the partial transcript (``answer is None``).

    Attributes:
        reason: why the run stopped, one line (``str(exc)`` adds where the partial transcript is).
        result: the partial transcript.
    """

    def __init__(self, message: str, result: RunResult) -> None:
        super().__init__(f"{message}; the partial transcript is in .result")
        self.reason = message
        self.result = result


class MaxStepsExceeded(AgentRunError):
    """The model made ``max_steps`` turns without giving a final answer."""


class LoopGuardTriggered(AgentRunError):
    """The model requested the same (tool, canonical arguments) pair ``loop_guard`` times in one run."""


class ToolRetriesExceeded(AgentRunError):
    """A tool failed more times in one run than its retry budget (``Tool.retries``) allows."""


class PromptTooLong(AgentRunError):
    """A model turn's prompt does not fit the model's context, even after dropping the oldest turns.

    Raised before the model allocates anything for the prompt (the embedded backend checks the token count
    right after tokenizing, see :mod:`model.turn.limits`). Trimming (``Agent(trim_history=True)``, the default)
    first drops the oldest history turns and tool-call groups; this error means what is left (system prompt,
    tool declarations, the question and the latest tool calls with their responses) is still too long.

    Attributes:
        prompt_tokens: tokens of the smallest prompt tried (tokens).
        limit: the most prompt tokens the model takes (tokens): its ``max_position_embeddings`` minus the
            generation budget.
        dropped_messages: messages trimmed from the prompt before giving up.
    """

    def __init__(
        self, message: str, result: RunResult, *, prompt_tokens: int, limit: int, dropped_messages: int = 0
    ) -> None:
        super().__init__(message, result)
        self.prompt_tokens = prompt_tokens
        self.limit = limit
        self.dropped_messages = dropped_messages


class ToolCallFormatError(AgentRunError):
    """The model kept writing tool calls as text that does not parse: more such turns in one run than
    ``Agent(max_format_retries=...)`` format reminders allow."""


@dataclass(frozen=True)
class BundleIssue:
    """One problem found in a bundle file.

    Attributes:
        file: path of the bundle file as given.
        line: 1-based line number (``None`` when the position is unknown).
        column: 1-based column number (``None`` when unknown).
        field: dotted path of the field, e.g. ``tools[1].http.url`` (``""`` for the whole document).
        message: what is wrong.
    """

    file: str
    line: int | None
    column: int | None
    field: str
    message: str

    def __str__(self) -> str:
        pos = self.file
        if self.line is not None:
            pos += f":{self.line}"
            if self.column is not None:
                pos += f":{self.column}"
        where = f" {self.field}:" if self.field else ""
        return f"{pos}:{where} {self.message}"


class BundleError(AgentKitError, ValueError):
    """A bundle file is invalid. ``issues`` lists every problem found, each with file, line and field."""

    def __init__(self, issues: list[BundleIssue]) -> None:
        self.issues = issues
        super().__init__("invalid bundle:\n" + "\n".join(f"  {i}" for i in issues))


def describe_exception(exc: BaseException) -> str:
    """``"TypeName: message"`` for an exception, or just the message for :class:`ModelRetry`.

    An exception whose ``__str__`` itself raises (or returns a non-string) is described as
    ``"TypeName: <str() failed: ErrorName>"``, as :mod:`traceback` does, so describing it never raises."""
    name = type(exc).__name__
    try:
        text = str(exc)
    except Exception as failure:
        return f"{name}: <str() failed: {type(failure).__name__}>"
    if isinstance(exc, ModelRetry):
        return text
    return f"{name}: {text}" if text else name
