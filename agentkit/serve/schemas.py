"""Pydantic models of the OpenAI chat-completions request ``agentkit serve`` reads, its messages those of
:mod:`agentkit.messages` (an assistant message's tool calls checked as OpenAI's API sends them); its answers are
dicts (:mod:`agentkit.serve.engine`); unknown request fields (``user``, ``top_p``, ...) are ignored."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from agentkit import messages as M


class _Open(BaseModel):
    """Request shapes: unknown fields ignored, known ones typed strictly (``"max_tokens": "10"`` is a 400)."""

    model_config = ConfigDict(extra="ignore", strict=True)


class FunctionCall(_Open):
    """``function`` of a request's tool call: its name and ``arguments`` (JSON text or an object; decoded, and
    refused when they are no object, by :func:`agentkit.serve.engine.from_wire_messages`)."""

    name: str
    arguments: str | dict[str, Any] = "{}"


class WireToolCall(_Open):
    """One tool call of a request's assistant message as OpenAI's API sends it: an ``id`` (the tool message
    answers it) and type ``function`` (a saved history's calls, :class:`agentkit.messages.ToolCall`, are read
    leniently)."""

    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


#: A :class:`agentkit.messages.ToolCall` read as a :class:`WireToolCall` (its errors located at the call's field).
_WireCall = Annotated[WireToolCall, AfterValidator(lambda wire: M.ToolCall.from_dict(wire.model_dump()))]


class AssistantMessage(M.AssistantMessage):
    """:class:`agentkit.messages.AssistantMessage` in a request: each tool call a :class:`WireToolCall`; the
    ``reasoning_content`` this server answers with (and clients send back) is text or null."""

    tool_calls: list[_WireCall] | None = None  # type: ignore[assignment]  # (validated to a ToolCall)
    reasoning_content: str | None = None

    @field_validator("tool_calls", mode="before")
    @classmethod
    def _calls(cls, value: Any) -> Any:
        """The field's type reads the wire shape (in place of the saved history's lenient reading)."""
        return value


#: A request's message, discriminated by ``role``.
Message = Annotated[
    M.SystemMessage | M.UserMessage | AssistantMessage | M.ToolMessage, Field(discriminator="role")
]


class FunctionDef(_Open):
    """A tool's ``function``: name, description and JSON Schema ``parameters``."""

    name: str = Field(min_length=1, max_length=128)
    description: str | None = None
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    strict: bool | None = None

    @field_validator("parameters", mode="before")
    @classmethod
    def _no_parameters(cls, value: Any) -> Any:
        """``null`` parameters, as left out: a tool without arguments."""
        return {"type": "object", "properties": {}} if value is None else value


class Tool(_Open):
    """A tool declaration (``{"type": "function", "function": {...}}``)."""

    type: Literal["function"]
    function: FunctionDef


class NamedFunction(_Open):
    name: str


class NamedToolChoice(_Open):
    """``{"type": "function", "function": {"name": NAME}}``: the model must call that tool."""

    type: Literal["function"]
    function: NamedFunction


class JsonSchemaSpec(_Open):
    name: str = "response"
    schema_: dict[str, Any] | bool = Field(alias="schema")
    strict: bool | None = None
    description: str | None = None


class ResponseFormat(_Open):
    """``response_format``: ``text``, ``json_object`` or ``json_schema`` (with its schema)."""

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaSpec | None = None


class StreamOptions(_Open):
    include_usage: bool | None = None  # null or left out: no usage chunk


#: At most this many tools per request, as on OpenAI (each tool's grammar is compiled when first seen).
MAX_TOOLS = 128


class ChatCompletionRequest(_Open):
    """The body of ``POST /v1/chat/completions`` (see the module docstring for ignored fields)."""

    model: str
    messages: list[Message] = Field(min_length=1)
    tools: list[Tool] | None = Field(default=None, max_length=MAX_TOOLS)
    tool_choice: Literal["auto", "none", "required"] | NamedToolChoice | None = None
    response_format: ResponseFormat | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    seed: int | None = Field(default=None, ge=-(2**63), lt=2**63)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0, allow_inf_nan=False)  # NaN: not "> 2"
    n: int | None = None  # null or left out: 1 (OpenAI takes null for both, as their default)
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None  # refused when set (not supported): see ServeEngine.prepare
    logprobs: bool | None = None  # refused when true
    parallel_tool_calls: bool | None = None  # false: one call at most
    #: agentkit's extension: the binder of this request (``none``, ``copy-head``); ``None``: the server's
    binding: Literal["none", "copy-head"] | None = None
