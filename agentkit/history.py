"""Conversation history kept across turns: each finished turn's user message and final answer, nothing else
(its thinking and tool calls are in that turn's ``RunResult``).

Conversations serialise to versioned JSON and load back equal::

    {"format": "agentkit.conversation", "version": 1, "metadata": {...},
     "messages": [{"role": "user", "content": "..."}, {"role": "assistant", "content": "..."}, ...]}

A user message with images has OpenAI content parts as its content (``image_url`` parts, then a ``text`` part).
The format is typed by :class:`SavedConversation` and :class:`HistoryMessage`; a malformed file or message list
is a ``ValueError`` naming the message, the part and the problem.
"""

from __future__ import annotations

import errno
import json
import os
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import pydantic

from agentkit.backends.base import ChatMessage
from agentkit.messages import AssistantMessage, ImageURLPart, TextPart, UserMessage

__all__ = [
    "Conversation",
    "HistoryMessage",
    "ImageURLPart",
    "SavedConversation",
    "TextPart",
    "droppable_groups",
]

FORMAT = "agentkit.conversation"
VERSION = 1


#: A kept message: the one model's user message (text or content parts) or final answer (text); the history's
#: own rules (these two roles, alternating, exactly ``role`` and ``content``) are :class:`SavedConversation`'s.
HistoryMessage = Annotated[UserMessage | AssistantMessage, pydantic.Field(discriminator="role")]


class SavedConversation(pydantic.BaseModel):
    """The saved-conversation file (see the module docstring); :meth:`Conversation.to_dict` writes it."""

    model_config = pydantic.ConfigDict(extra="forbid")

    format: Literal["agentkit.conversation"]
    version: Literal[1]
    metadata: dict[str, Any] = pydantic.Field(default_factory=dict)
    messages: list[HistoryMessage]

    @pydantic.field_validator("messages", mode="before")
    @classmethod
    def _kept(cls, messages: Any) -> Any:
        if isinstance(messages, list):
            for i, m in enumerate(messages):
                if (problem := _kept_problem(i, m)) is not None:
                    raise ValueError(problem)
            if len(messages) % 2:
                raise ValueError("the last message is a user message without a final answer")
        return messages


def _kept_problem(i: int, m: Any) -> str | None:
    """What keeps ``m`` from being message ``i`` of a history (its parts are the model's to check)."""
    if not isinstance(m, dict):
        return f"message {i} must be an object, got {type(m).__name__}"
    role, content = m.get("role"), m.get("content")
    if role == "assistant" and "tool_calls" in m:
        return f"message {i} is an assistant tool-call message: {_KEPT}"
    if role not in ("user", "assistant"):
        hint = f": {_KEPT}" if role in ("tool", "system", "developer") else ""
        return f"message {i} has role {role!r}, expected 'user' or 'assistant'{hint}"
    if set(m) != {"role", "content"}:
        return (
            f"message {i} must have exactly the keys 'role' and 'content' (history keeps only user messages and "
            "final answers)"
        )
    if role != (expected := ("user", "assistant")[i % 2]):
        return f"message {i} has role {role!r}, expected {expected!r} (turns alternate)"
    if role == "assistant" and not isinstance(content, str):
        return f"message {i} content must be a string"
    if not isinstance(content, str | list):
        return f"message {i} content must be a string or a list of content parts"
    return f"message {i}: content parts must not be empty" if content == [] else None


def _validated(data: dict[str, Any], where: str = "") -> SavedConversation:
    """``data`` as a :class:`SavedConversation`; ValueError naming the message (and part) of the first problem."""
    try:
        return SavedConversation.model_validate(data)
    except pydantic.ValidationError as exc:
        raise ValueError(where + _problem(exc)) from None


@dataclass
class Conversation:
    """Kept history of a multi-turn conversation: ``messages`` alternating ``{"role": "user" | "assistant",
    "content": ...}``, user first, and ``metadata``, JSON data of yours kept through round trips."""

    messages: list[ChatMessage] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _validated({"format": FORMAT, "version": VERSION, "messages": self.messages}, "Conversation: ")
        if not isinstance(self.metadata, dict):
            raise ValueError(f"Conversation: metadata must be a dict, got {type(self.metadata).__name__}")
        try:  # said now, not when a long chat is saved
            json.dumps(self.metadata, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ValueError(
                f"Conversation: metadata must be JSON data (it is saved with the messages): {exc}"
            ) from None

    @property
    def turns(self) -> int:
        """Number of finished turns (user message + final answer pairs)."""
        return len(self.messages) // 2

    def with_turn(self, question: str | list[dict[str, Any]], answer: str) -> Conversation:
        """A new conversation with one more finished turn (``question``: the user message's content)."""
        msgs = [dict(m) for m in self.messages]
        msgs.append({"role": "user", "content": question})
        msgs.append({"role": "assistant", "content": answer})
        return Conversation(msgs, dict(self.metadata))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict in the versioned format (:class:`SavedConversation`)."""
        return {
            "format": FORMAT,
            "version": VERSION,
            "metadata": self.metadata,
            "messages": [dict(m) for m in self.messages],
        }

    def to_json(self, *, indent: int | None = None) -> str:
        """Serialise to JSON (non-ASCII kept as is)."""
        return json.dumps(self.to_dict(), ensure_ascii=False, indent=indent)

    @classmethod
    def from_dict(cls, data: Any) -> Conversation:
        """Build from :meth:`to_dict` output or a bare list of its messages.

        Raises:
            ValueError: wrong format name or version, or a malformed message (names its index and key).
        """
        if isinstance(data, list):
            data = {"format": FORMAT, "version": VERSION, "metadata": {}, "messages": data}
        if not isinstance(data, dict):
            raise ValueError(
                f"a conversation is a JSON object (or a list of its messages), got {type(data).__name__}"
            )
        if data.get("format") != FORMAT:
            raise ValueError(
                f"not an agentkit conversation: format is {data.get('format')!r}, expected {FORMAT!r}"
            )
        if (version := data.get("version")) != VERSION and str(version) == str(VERSION):
            raise ValueError(f"conversation version must be the number {VERSION}, got the string {version!r}")
        if version != VERSION:
            raise ValueError(
                f"unsupported conversation version {data.get('version')!r} (this agentkit reads {VERSION})"
            )
        saved = _validated(data)
        return cls([m.model_dump(exclude_none=True) for m in saved.messages], saved.metadata)

    @classmethod
    def from_json(cls, text: str) -> Conversation:
        """Parse :meth:`to_json` output (``ValueError``: not JSON, or as :meth:`from_dict`)."""
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, RecursionError) as exc:  # RecursionError: nested past Python's limit
            raise ValueError(f"conversation is not valid JSON: {exc}") from None
        return cls.from_dict(data)

    def save(self, path: str | Path) -> None:
        """Write :meth:`to_json` (indented, UTF-8; lone surrogates as ``\\udXXX`` escapes) to ``path``, replacing
        the file whole (a failed write leaves the earlier one). Raises ``OSError`` when it cannot be written."""
        text = self.to_json(indent=2)
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError:
            data = json.dumps(self.to_dict(), ensure_ascii=True, indent=2).encode("ascii")
        target = Path(path).resolve() if Path(path).is_symlink() else Path(path)
        if target.is_dir():
            raise IsADirectoryError(errno.EISDIR, "Is a directory", str(path))
        tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex[:12]}.tmp")
        try:
            with open(tmp, "xb") as f:  # the umask's permissions, as a plain write
                f.write(data + b"\n")
            if target.exists():  # an earlier file keeps its permissions (a private 0600 one stays private)
                os.chmod(tmp, target.stat().st_mode & 0o7777)
            os.replace(tmp, target)
        except OSError as exc:
            if exc.filename is None:
                raise
            # the file asked for, not the temporary one
            raise type(exc)(exc.errno, exc.strerror, str(path)) from None
        finally:
            tmp.unlink(missing_ok=True)

    @classmethod
    def load(cls, path: str | Path) -> Conversation:
        """Read a file written by :meth:`save` (``ValueError`` as :meth:`from_json`, naming the file; ``OSError``)."""
        p = Path(path)
        try:
            return cls.from_json(p.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise ValueError(f"{p}: {exc}") from exc


#: What ``Agent.run(history=...)`` and ``Agent.chat(...)`` take: a :class:`Conversation`, or its messages.
HistoryLike = Conversation | Sequence[ChatMessage]


def as_conversation(history: HistoryLike | None, *, where: str = "history") -> Conversation:
    """``history`` as a :class:`Conversation`: itself, one holding a list or tuple of messages (checked), or an
    empty one for ``None``.

    Raises:
        TypeError: ``history`` is neither (names ``where`` and the type given).
        ValueError: a malformed message (its index and the problem).
    """
    if history is None:
        return Conversation()
    if isinstance(history, Conversation):
        return history
    if isinstance(history, (list, tuple)):
        return Conversation(list(history))
    raise TypeError(
        f"{where} must be an agentkit.history.Conversation or a list of messages "
        f"({{'role': 'user' | 'assistant', 'content': ...}}), got {type(history).__name__}"
        + (" (a saved conversation's dict: Conversation.from_dict)" if isinstance(history, dict) else "")
    )


def droppable_groups(messages: list[ChatMessage]) -> list[tuple[int, int]]:
    """The ``(start, end)`` index ranges of a planner prompt that may be dropped when it does not fit, oldest
    first: each kept-history turn, then each tool-call message with its responses after the question. Never the
    system messages, the question or the latest tool-call group."""
    users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
    if not users:
        return []
    question = users[-1]
    groups: list[tuple[int, int]] = []
    start: int | None = None
    for i in range(question):
        role = messages[i].get("role")
        if role == "user":
            if start is not None:
                groups.append((start, i))
            start = i
        elif role == "system" and start is not None:
            groups.append((start, i))
            start = None
    if start is not None:
        groups.append((start, question))
    calls: list[tuple[int, int]] = []
    i = question + 1
    while i < len(messages):
        j = i + 1
        while j < len(messages) and messages[j].get("role") == "tool":
            j += 1
        calls.append((i, j))
        i = j
    return groups + calls[:-1]


#: What a history keeps, said where a message of a whole transcript (an OpenAI message list) is given.
_KEPT = (
    "a history keeps only user messages and final answers (pass a run's result.conversation; its tool calls, "
    "tool responses and the system prompt are not history)"
)


def _problem(exc: pydantic.ValidationError) -> str:
    """The first validation error in the words of the history's format: which key, message or part."""
    errors = exc.errors(include_url=False)
    # str | list: the list's own; a misspelt key before the missing one
    err = max(
        errors, key=lambda e: (len(e["loc"]), e["type"] == "extra_forbidden", e["loc"][-1:] != ("str",))
    )
    kind, got = err["type"], err["input"]
    loc = [x for x in err["loc"] if x not in ("user", "assistant", "str") and not str(x).startswith("list[")]
    if kind == "value_error":  # the list's own check names the message; a part's names neither
        why = str(err["ctx"]["error"])
        return why if len(loc) < 4 else f"message {loc[1]} part {loc[3]}: {loc[-1]}: {why}"
    if len(loc) < 2:
        if kind in ("extra_forbidden", "missing"):
            return f"{'missing' if kind == 'missing' else 'unknown'} conversation key {loc[0]!r}"
        return f"conversation {loc[0]} must be " + ("an object" if loc[0] == "metadata" else "a list")
    i, j = loc[1], loc[3]
    field = loc[5] if len(loc) > 5 else ""  # loc[4] is the part's type (the union's tag)
    if len(loc) == 4:
        part = got.get("type") if isinstance(got, dict) else type(got).__name__
        return f"message {i} part {j}: content parts are 'text' or 'image_url', got {part!r}"
    if field in ("image_url", "text"):
        need = (
            "an image_url part needs image_url.url (a data: URL)"
            if field == "image_url"
            else "a text part needs a string 'text'"
        )
        return f"message {i} part {j}: {need}"
    return f"message {i} part {j}: {field or 'part'}: {err['msg']}"
