"""The one message model: chat messages, their content parts and tool calls, typed, with one dict codec.

Messages travel as OpenAI-style dicts; this module is their schema (Pydantic unions over ``role``,
:data:`Message`, and a part's ``type``, :data:`ContentPart`) and the codec (:func:`parse_message` /
:func:`dump_message`): a dict comes back equal, key order and unknown keys included.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import pydantic
from pydantic import ConfigDict, Field

from model.heads.vision import check_budget

__all__ = [
    "AssistantMessage",
    "ContentPart",
    "ImageURL",
    "ImageURLPart",
    "Message",
    "SystemMessage",
    "TextPart",
    "ToolCall",
    "ToolMessage",
    "UserMessage",
    "assistant_message",
    "decode_arguments",
    "dump_message",
    "loads_json",
    "parse_message",
    "to_template_messages",
    "tool_message",
]


class _Open(pydantic.BaseModel):
    """Keys outside the model are kept (OpenAI's optional ones: ``detail``, ``name``...)."""

    model_config = ConfigDict(extra="allow")


# ------------------------------------------------------------------------------------------------ parts


class TextPart(_Open):
    """``{"type": "text", "text": ...}``."""

    type: Literal["text"]
    text: str


class ImageURL(_Open):
    """``{"url": "data:..."}`` (OpenAI's ``detail`` and other keys kept)."""

    url: str


class ImageURLPart(_Open):
    """``{"type": "image_url", "image_url": {"url": ...}, "vision_budget": N}`` (the budget, in soft tokens per
    image for the embedded backend and ``agentkit serve``, is optional: one of
    :data:`model.heads.vision.VISION_BUDGETS`)."""

    type: Literal["image_url"]
    image_url: ImageURL
    vision_budget: Annotated[int, pydantic.Strict(), pydantic.AfterValidator(check_budget)] | None = None


#: A content part, discriminated by ``type``.
ContentPart = Annotated[TextPart | ImageURLPart, Field(discriminator="type")]

#: A user message's content: text, or parts (images before the text).
Content = str | list[ContentPart]


# ------------------------------------------------------------------------------------------------ calls


def loads_json(text: str) -> Any:
    """``json.loads`` as RFC 8259 reads JSON: ``NaN``, ``Infinity``, ``-Infinity`` and a number too large for a
    double (``1e400``) raise :class:`json.JSONDecodeError` at the first of them (they could not be written
    back as strict JSON), as does nesting past Python's recursion limit (at character 0)."""

    def refuse(literal: str, why: str = "is not a JSON number") -> Any:
        raise json.JSONDecodeError(f"{literal} {why}", text, max(text.find(literal), 0))

    def finite(literal: str) -> float:  # 1e400: past the largest double, Python reads it as infinity
        value = float(literal)
        return refuse(literal, "is beyond a double's range") if math.isinf(value) else value

    try:
        return json.loads(text, parse_constant=refuse, parse_float=finite)
    except RecursionError:
        raise json.JSONDecodeError("arrays and objects nest too deep to read", text, 0) from None


def decode_arguments(raw: Any) -> tuple[dict[str, Any], str | None]:
    """An OpenAI tool call's ``arguments`` (a JSON string, an object, or ``None``/``""`` for none) decoded:
    ``(arguments, None)``, or ``({}, error)`` for malformed JSON, double-encoded JSON or not an object."""
    if isinstance(raw, dict):
        return raw, None
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}, None
    if not isinstance(raw, str):
        return {}, f"arguments must be a JSON object, got {type(raw).__name__}"
    try:
        value = loads_json(raw)
    except json.JSONDecodeError as exc:
        return {}, f"arguments are not valid JSON ({exc.msg} at character {exc.pos})"
    if isinstance(value, str):
        try:
            inner = json.loads(value)
        except json.JSONDecodeError:
            inner = None
        if isinstance(inner, dict):
            return {}, "arguments were double-encoded: a JSON string containing JSON; send the object itself"
        return {}, "arguments must be a JSON object, got a string"
    if not isinstance(value, dict):
        return {}, f"arguments must be a JSON object, got {type(value).__name__}"
    return value, None


@dataclass(slots=True)
class ToolCall:
    """One tool call as the model requested it (answered, it becomes an :class:`agentkit.result.ToolCallRecord`).

    Attributes:
        id: the call id (the planner makes ids unique within a turn).
        name: tool name as the model wrote it (may be unknown).
        arguments: decoded arguments object (``{}`` when ``error`` is set).
        error: why a backend could not decode the call; the planner sends it back as the tool response.
        raw_arguments: the arguments text as received, when the backend had one.
    """

    id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    raw_arguments: str | None = None

    def to_dict(self, *, wire: bool = False) -> dict[str, Any]:
        """The call as an assistant message holds it (``arguments`` the raw text when ``error`` is set); ``wire``:
        as OpenAI's API sends it, ``arguments`` always JSON text."""
        args: Any = self.arguments if self.error is None else (self.raw_arguments or "")
        if wire and self.error is None:
            args = json.dumps(args, ensure_ascii=False)
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": args}}

    @classmethod
    def from_dict(cls, data: Any) -> ToolCall:
        """Read :meth:`to_dict`'s shape (``arguments`` text decoded, or kept raw when it cannot be).

        Raises:
            ValueError: not ``{"id": str, "function": {"name": str, "arguments": ...}}``.
        """
        fn = data.get("function") if isinstance(data, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise ValueError(
                f"a tool call is {{'id', 'type', 'function': {{'name', 'arguments'}}}}, got {data!r}"
            )
        raw = fn.get("arguments")
        args, error = decode_arguments(raw)
        return cls(str(data.get("id") or ""), fn["name"], args, error, raw if isinstance(raw, str) else None)


# --------------------------------------------------------------------------------------------- messages


class SystemMessage(_Open):
    """``{"role": "system", "content": str | [part, ...]}`` (OpenAI's ``developer`` role is one too)."""

    role: Literal["system", "developer"]
    content: Content


class UserMessage(_Open):
    """``{"role": "user", "content": str | [part, ...]}``."""

    role: Literal["user"]
    content: Content


class AssistantMessage(_Open):
    """``{"role": "assistant", "content": str | [part, ...] | None, "tool_calls": [...], "thinking": str}`` (both
    optional)."""

    role: Literal["assistant"]
    content: Content | None = None
    tool_calls: list[ToolCall] | None = None
    thinking: str | None = None

    @pydantic.field_validator("tool_calls", mode="before")
    @classmethod
    def _calls(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [c if isinstance(c, ToolCall) else ToolCall.from_dict(c) for c in value]
        return value

    @pydantic.field_serializer("tool_calls")
    def _dump_calls(self, calls: list[ToolCall] | None) -> list[dict[str, Any]] | None:
        return None if calls is None else [c.to_dict() for c in calls]


class ToolMessage(_Open):
    """``{"role": "tool", "tool_call_id": str, "name": str, "content": str | [part, ...]}``: one call's response
    (content parts, the text first, when it has images for a backend that takes them; ``name`` is optional on
    the wire, where the call id names the tool)."""

    role: Literal["tool"]
    tool_call_id: str
    name: str | None = None
    content: Content


#: A chat message, discriminated by ``role``.
Message = Annotated[SystemMessage | UserMessage | AssistantMessage | ToolMessage, Field(discriminator="role")]

_MESSAGE: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(Message)


def parse_message(data: Any) -> SystemMessage | UserMessage | AssistantMessage | ToolMessage:
    """One message dict as its typed model (a typed message is returned as it is).

    Raises:
        pydantic.ValidationError: not a message of one of the four roles (names the key).
    """
    if isinstance(data, pydantic.BaseModel):
        return data  # type: ignore[return-value]
    return _MESSAGE.validate_python(data)  # type: ignore[no-any-return]


def dump_message(message: pydantic.BaseModel) -> dict[str, Any]:
    """A typed message as its dict: the keys that were set, in order (a parsed dict dumps back equal)."""
    return message.model_dump(exclude_unset=True)


def assistant_message(text: str, calls: list[ToolCall], thinking: str = "") -> dict[str, Any]:
    """The dict of an assistant turn that requests ``calls`` (``content`` is ``None`` without text;
    ``thinking`` only when there is some): :class:`AssistantMessage`'s shape."""
    msg: dict[str, Any] = {
        "role": "assistant",
        "content": text or None,
        "tool_calls": [c.to_dict() for c in calls],
    }
    if thinking:
        msg["thinking"] = thinking
    return msg


def tool_message(call_id: str, name: str, content: str | list[dict[str, Any]]) -> dict[str, Any]:
    """The dict of one call's response: :class:`ToolMessage`'s shape."""
    return {"role": "tool", "tool_call_id": call_id, "name": name, "content": content}


def to_template_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages for the chat template: a tool response whose text is a JSON object becomes that object (a new
    dict; the others are the same objects), so the template renders it natively."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.get("role") == "tool" and isinstance(m.get("content"), str) and m["content"][:1] == "{":
            try:
                value = json.loads(m["content"])
            except json.JSONDecodeError:
                value = None
            if isinstance(value, dict):
                m = {**m, "content": value}
        out.append(m)
    return out
