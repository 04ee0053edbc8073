"""The backend contract: one model turn (:class:`ModelTurn`) from chat messages and tool declarations.

Messages are OpenAI-style dicts typed by :mod:`agentkit.messages`, with tool-call ``arguments`` as a *dict*
(a backend speaking the OpenAI wire format encodes them); an assistant message may carry ``"thinking"``; to a
backend whose ``takes_images`` is true, a tool response with images has content parts (text first, then
``image_url`` parts). Tool declarations: ``[{"type": "function", "function": {"name", "description",
"parameters"}}]``. ``tool_choice``: ``"auto" | "required" | "none" | {"name": NAME}``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import ConfigDict
from pydantic.dataclasses import dataclass as pydantic_dataclass

from agentkit.messages import ToolCall
from model.turn.limits import PromptTooLong as PromptTooLong  # the backend contract's error (one definition)

#: One chat message (see the module docstring for the keys).
ChatMessage = dict[str, Any]
#: One OpenAI-style tool declaration.
ToolDeclaration = dict[str, Any]
#: ``"auto" | "required" | "none" | {"name": NAME}``.
ToolChoice = Literal["auto", "required", "none"] | dict[str, str]


def plain_data(obj: Any) -> Any:
    """``obj`` (a Pydantic dataclass) as plain Python data, by the serializer its schema carries."""
    return obj.__pydantic_serializer__.to_python(obj)


class PlainData:
    """``to_dict`` of a Pydantic dataclass (:class:`Usage`, the records of :mod:`agentkit.result`)."""

    __slots__ = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (a tool-call record's ``result`` left out)."""
        return dict(plain_data(self))


@pydantic_dataclass(slots=True, config=ConfigDict(extra="forbid"))
class Usage(PlainData):
    """Token and request counts of one model turn, or summed over a run (0 when unknown; ``requests``: HTTP
    requests for ``openai``, retried ones included)."""

    input_tokens: int = 0
    output_tokens: int = 0
    requests: int = 0

    def add(self, other: Usage) -> None:
        """Add ``other`` into this object in place."""
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.requests += other.requests

    @property
    def total_tokens(self) -> int:
        """``input_tokens + output_tokens``."""
        return self.input_tokens + self.output_tokens


#: The name this type had before :mod:`agentkit.messages` (kept for existing imports).
ToolCallRequest = ToolCall


@dataclass(slots=True)
class ModelTurn:
    """What a backend returns for one model request.

    Attributes:
        text: visible text (the final answer when there are no tool calls); thinking: reasoning text.
        tool_calls: requested calls, in order; usage: this request's counts.
        raw: backend-specific raw response, for debugging; not serialised.
        format_error: what is wrong when ``text`` looks like a tool call that does not parse: the planner
            answers with a format reminder instead of taking it as the final answer.
    """

    text: str = ""
    thinking: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    raw: Any = None
    format_error: str | None = None


def turn_problem(turn: Any) -> str | None:
    """What keeps ``turn`` from being a :class:`ModelTurn` the planner can read, or ``None``."""
    if not isinstance(turn, ModelTurn):
        return f"returned {type(turn).__name__} for a model turn, not an agentkit.backends.base.ModelTurn"
    for name in ("text", "thinking"):
        if not isinstance(value := getattr(turn, name), str):
            return f"the turn's {name} must be a string, got {value!r}"
    calls = turn.tool_calls
    bad = next((c for c in calls if not (isinstance(c, ToolCall) and isinstance(c.name, str))), None)
    return (
        None if bad is None else f"a tool call must be an agentkit.messages.ToolCall with a name, got {bad!r}"
    )


@dataclass(slots=True)
class TurnRequest:
    """One model request: the conversation so far, the tool declarations (may be empty) and the tool choice."""

    messages: list[ChatMessage]
    tools: list[ToolDeclaration]
    tool_choice: ToolChoice = "auto"


class Backend:
    """A model behind the planner: the base class of the built-in backends, and of yours.

    A subclass implements :meth:`turn` (and :meth:`aturn` when it has real async I/O) or :meth:`complete`;
    any object with ``name`` and ``complete(messages, tools, tool_choice)`` (optionally ``acomplete``) works.
    """

    #: Short name shown in results and logs (e.g. ``"openai:qwen3"``).
    name: str

    # Optional attributes the planner reads: ``max_prompt_tokens`` (sizes the default tool-output budget),
    # ``default_vision_budget`` (soft tokens of an image without one), ``takes_images`` (tool responses with
    # images come as content parts), ``check_tool(name, parameters)`` (raises ToolDefinitionError for a tool
    # the backend cannot serve).

    def complete(
        self,
        messages: list[ChatMessage],
        tools: list[ToolDeclaration],
        tool_choice: ToolChoice = "auto",
    ) -> ModelTurn:
        """Run one model turn (:meth:`turn` of the :class:`TurnRequest` of the arguments).

        Raises:
            BackendError: the model could not be reached or answered with something unusable.
            PromptTooLong: (this module's) the prompt does not fit the model's context.
            NotImplementedError: the subclass implements neither :meth:`turn` nor :meth:`complete`.
        """
        return self.turn(TurnRequest(messages, tools, tool_choice))

    async def acomplete(
        self,
        messages: list[ChatMessage],
        tools: list[ToolDeclaration],
        tool_choice: ToolChoice = "auto",
    ) -> ModelTurn:
        """Async :meth:`complete`: :meth:`aturn` of the :class:`TurnRequest` of the arguments."""
        return await self.aturn(TurnRequest(messages, tools, tool_choice))

    def turn(self, request: TurnRequest) -> ModelTurn:
        """One model turn for ``request`` (see :meth:`complete`); what a subclass implements."""
        raise NotImplementedError(
            f"{type(self).__name__} is a Backend but implements neither turn(request) nor "
            "complete(messages, tools, tool_choice)"
        )

    async def aturn(self, request: TurnRequest) -> ModelTurn:
        """Async :meth:`turn`; by default :meth:`complete` itself, run in the event loop's thread."""
        return self.complete(request.messages, request.tools, request.tool_choice)


def tool_choice_name(tool_choice: ToolChoice) -> str | None:
    """The forced tool name of a ``{"name": NAME}`` tool choice, else ``None``; ValueError for another value."""
    if tool_choice in ("auto", "required", "none"):
        return None
    if (
        isinstance(tool_choice, dict)
        and set(tool_choice) == {"name"}
        and isinstance(tool_choice["name"], str)
    ):
        return tool_choice["name"]
    raise ValueError(
        f"tool_choice must be 'auto', 'required', 'none' or {{'name': NAME}}, got {tool_choice!r}"
    )
