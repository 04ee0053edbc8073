"""Exceptions raised by agentkit: definition errors (:class:`ToolDefinitionError`, :class:`BundleError`), raised
while tools, agents and bundles are built, and run errors (:class:`AgentRunError` and subclasses), which stop a
run and carry its partial transcript in ``.result``. A tool's own exception or timeout is not raised: the model
gets it as the tool response."""

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
    """Raise inside a tool to send ``message`` back to the model as the tool response (it counts as a failure)."""


class BackendError(AgentKitError):
    """A backend could not produce a model turn (HTTP error after retries, exhausted script, bad response);
    ``status_code``: HTTP status of the last attempt, when there was one."""

    def __init__(self, message: str, *, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


class AgentRunError(AgentKitError):
    """A run stopped without a final answer: ``reason`` says why, one line (``str(exc)`` adds where the partial
    transcript is); ``result`` holds the partial transcript (``answer is None``)."""

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
    """A model turn's prompt does not fit the model's context, even after dropping what trimming may drop:
    ``prompt_tokens`` of the smallest prompt tried, over the ``limit`` the model takes (its context minus the
    generation budget), after trimming ``dropped_messages`` messages from the prompt."""

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
    """One problem found in a bundle file: the file as given, 1-based ``line`` and ``column`` (``None`` when
    unknown), the ``field`` path (``tools[1].http.url``; ``""`` for the whole document) and the ``message``."""

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
    """``"TypeName: message"`` for an exception (the message alone for :class:`ModelRetry`, the code for
    ``SystemExit``); never raises, even when ``__str__`` does (``"TypeName: <str() failed: ErrorName>"``, as
    :mod:`traceback`)."""
    name = type(exc).__name__
    if isinstance(exc, SystemExit):
        return f"SystemExit: the tool called sys.exit({exc.code!r})"
    try:
        text = str(exc)
    except Exception as failure:
        return f"{name}: <str() failed: {type(failure).__name__}>"
    if isinstance(exc, ModelRetry):
        return text
    return f"{name}: {text}" if text else name
