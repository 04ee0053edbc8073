"""The backend contract: one model turn from a list of chat messages and tool declarations.

Every backend (``embedded``, ``openai``, ``scripted`` or your own) implements :class:`Backend`. The planner
(:mod:`agentkit.agent`) owns the loop; a backend only turns messages into one :class:`ModelTurn`.

Message format (OpenAI-style dicts, the same contract as ``model.turn.chat.ChatModel``; typed by
:mod:`agentkit.messages`, whose codec reads and writes them):

* ``{"role": "system" | "user", "content": str}``
* ``{"role": "assistant", "content": str | None, "tool_calls": [{"id", "type": "function",
  "function": {"name", "arguments": dict}}]}`` - arguments are a *dict*, not a JSON string; a backend that
  speaks the OpenAI wire format encodes them. Within a turn an assistant message may carry ``"thinking"``.
* ``{"role": "tool", "tool_call_id": str, "name": str, "content": str}``; to a backend whose ``takes_images`` is
  true, a tool response with images has content parts instead: ``[{"type": "text", "text": ...}, {"type":
  "image_url", "image_url": {"url": "data:image/png;base64,..."}}, ...]`` (the text first).

Tool declarations: ``[{"type": "function", "function": {"name", "description", "parameters"}}]`` with
``parameters`` a JSON Schema object. ``tool_choice``: ``"auto" | "required" | "none" | {"name": NAME}``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import ConfigDict
from pydantic.dataclasses import dataclass as pydantic_dataclass

from agentkit.messages import ToolCall
from model.turn.limits import prompt_too_long_message

#: One chat message (see the module docstring for the keys).
ChatMessage = dict[str, Any]
#: One OpenAI-style tool declaration.
ToolDeclaration = dict[str, Any]
#: ``"auto" | "required" | "none" | {"name": NAME}``.
ToolChoice = Literal["auto", "required", "none"] | dict[str, str]


@pydantic_dataclass(slots=True, config=ConfigDict(extra="forbid"))
class Usage:
    """Token and request counts of one model turn, or summed over a run.

    Attributes:
        input_tokens: prompt tokens (tokens), as reported by the backend (0 when unknown).
        output_tokens: generated tokens (tokens).
        requests: model requests made (HTTP requests for ``openai``, including retried ones that got a body).
    """

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

    def to_dict(self) -> dict[str, int]:
        """JSON-ready dict."""
        return dict(plain_data(self))


def plain_data(obj: Any) -> Any:
    """``obj`` (a Pydantic dataclass: :class:`Usage`, ``agentkit.result``'s records) as plain Python data (dicts,
    lists, scalars) by the serializer its schema carries; values typed ``Any`` as they are."""
    return obj.__pydantic_serializer__.to_python(obj)


#: The name this type had before :mod:`agentkit.messages` (kept for existing imports).
ToolCallRequest = ToolCall


class PromptTooLong(ValueError):
    """Raised by a backend when a prompt does not fit its model's context (before anything is allocated); the
    planner then drops the oldest turns and asks again (part of the :class:`Backend` contract).

    Attributes:
        prompt_tokens: length of the prompt (tokens).
        limit: the most prompt tokens the call allows (tokens).
        max_positions: the model's context (tokens), when the backend knows it.
        generation_tokens: the generation budget the limit leaves room for (tokens), when the backend knows it.
    """

    def __init__(
        self,
        prompt_tokens: int,
        limit: int,
        max_positions: int | None = None,
        generation_tokens: int | None = None,
    ) -> None:
        self.prompt_tokens = prompt_tokens
        self.limit = limit
        self.max_positions = max_positions
        self.generation_tokens = generation_tokens
        super().__init__(prompt_too_long_message(prompt_tokens, limit, max_positions, generation_tokens))

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.prompt_tokens, self.limit, self.max_positions, self.generation_tokens))


@dataclass(slots=True)
class ModelTurn:
    """What a backend returns for one model request.

    Attributes:
        text: visible text (the final answer when there are no tool calls).
        thinking: reasoning text, if the model produced any (never kept in history across turns).
        tool_calls: requested calls, in the order the model issued them.
        usage: token counts of this request.
        raw: backend-specific raw response (HTTP JSON, ``ChatOutput``...), for debugging; not serialised.
        format_error: set by a backend when ``text`` looks like a tool call that does not parse (a remote
            model writing calls as text, see :mod:`agentkit.backends.textcalls`): what is wrong. The
            planner answers with a format reminder instead of taking ``text`` as the final answer.
    """

    text: str = ""
    thinking: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    raw: Any = None
    format_error: str | None = None


@dataclass(slots=True)
class TurnRequest:
    """One model request: what the planner asks a backend for (and what ``ScriptedBackend`` records).

    Attributes:
        messages: the conversation so far (system, kept history, this turn's trajectory).
        tools: tool declarations; may be empty.
        tool_choice: ``"auto" | "required" | "none" | {"name": NAME}``.
    """

    messages: list[ChatMessage]
    tools: list[ToolDeclaration]
    tool_choice: ToolChoice = "auto"


class Backend:
    """A model behind the planner: the base class of the built-in backends, and of yours.

    A subclass implements :meth:`turn` (one model turn for a :class:`TurnRequest`) and, when it has real async
    I/O, :meth:`aturn` (the ``openai`` backend does); the planner calls :meth:`complete`
    (:meth:`agentkit.Agent.run`) or :meth:`acomplete` (:meth:`agentkit.Agent.arun`). A subclass may override
    :meth:`complete` instead of :meth:`turn`, and an object that is no subclass but has ``name`` and
    ``complete(messages, tools, tool_choice)`` (optionally ``async acomplete`` with the same signature) works
    as well.
    """

    #: Short name shown in results and logs (e.g. ``"openai:qwen3"``).
    name: str

    # Optional: ``max_prompt_tokens`` (int or None), the longest prompt a turn takes, in tokens; the agent
    # sizes its default tool-output budget from it (``Agent(max_tool_output_bytes="auto")``).
    # Optional: ``default_vision_budget`` (int), soft tokens of an image part without ``vision_budget``; the
    # planner sizes images by it when it trims a prompt that does not fit.
    # Optional: ``takes_images`` (bool, default false): the model reads images, so tool responses with images
    # (``agentkit.tool_output.ToolContent``) come as content parts (see the module docstring), else as text.
    # Optional: ``check_tool(name, parameters) -> None``, raising ``ToolDefinitionError`` for a tool this
    # backend cannot serve; the agent calls it for each tool it registers (the embedded backend refuses schemas
    # its tool-call constraint cannot enforce).

    def complete(
        self,
        messages: list[ChatMessage],
        tools: list[ToolDeclaration],
        tool_choice: ToolChoice = "auto",
    ) -> ModelTurn:
        """Run one model turn (:meth:`turn` of the :class:`TurnRequest` of the arguments).

        Args:
            messages: the conversation so far (system, kept history, this turn's trajectory).
            tools: tool declarations; may be empty.
            tool_choice: ``"auto" | "required" | "none" | {"name": NAME}``.

        Returns:
            The model's turn.

        Raises:
            BackendError: the model could not be reached or answered with something unusable.
            PromptTooLong: (this module's) the prompt does not fit the model's context (raise it before
                allocating anything; the planner then drops the oldest turns and asks again).
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
    """The forced tool name of a ``{"name": NAME}`` tool choice, else ``None``.

    Raises:
        ValueError: ``tool_choice`` is neither one of the three strings nor ``{"name": str}``.
    """
    if isinstance(tool_choice, str):
        if tool_choice not in ("auto", "required", "none"):
            raise ValueError(
                f"tool_choice must be 'auto', 'required', 'none' or {{'name': NAME}}, got {tool_choice!r}"
            )
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
