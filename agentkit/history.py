"""Conversation history kept across turns: user messages and final answers, nothing else.

A finished turn leaves exactly two messages in the history: the user's message and the model's final
answer. The turn's thinking text and its tool-call trajectory (assistant calls and tool responses) are
dropped - they are in that turn's :class:`agentkit.agent.RunResult` if you need them. Within a turn the
planner keeps the whole trajectory in the prompt.

Conversations serialise to JSON (:meth:`Conversation.to_json`) and load back equal
(:meth:`Conversation.from_json`); the format is versioned::

    {"format": "agentkit.conversation", "version": 1, "metadata": {...},
     "messages": [{"role": "user", "content": "..."}, {"role": "assistant", "content": "..."}, ...]}

A user message that came with images has a list of OpenAI content parts as its content: image parts
``{"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}, "vision_budget": 280}`` (the budget
is optional) followed by ``{"type": "text", "text": "..."}``. Such files are read by the same version.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentkit.backends.base import ChatMessage

FORMAT = "agentkit.conversation"
VERSION = 1


@dataclass
class Conversation:
    """Kept history of a multi-turn conversation.

    Attributes:
        messages: alternating ``{"role": "user" | "assistant", "content": str}`` dicts, user first (a user
            message with images has a list of content parts, see the module docstring).
        metadata: free JSON-serialisable data of yours (kept through JSON round trips).
    """

    messages: list[ChatMessage] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_messages(self.messages, where="Conversation")

    @property
    def turns(self) -> int:
        """Number of finished turns (user message + final answer pairs)."""
        return len(self.messages) // 2

    def with_turn(self, question: str | list[dict[str, Any]], answer: str) -> Conversation:
        """A new conversation with one more finished turn (this one is not modified); ``question`` is the user
        message's content (text, or content parts with images)."""
        msgs = [dict(m) for m in self.messages]
        msgs.append({"role": "user", "content": question})
        msgs.append({"role": "assistant", "content": answer})
        return Conversation(msgs, dict(self.metadata))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict in the versioned format."""
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
        """Build from :meth:`to_dict` output.

        Raises:
            ValueError: wrong format name or version, or a malformed message (names its index and key).
        """
        if not isinstance(data, dict):
            raise ValueError(f"a conversation is a JSON object, got {type(data).__name__}")
        if data.get("format") != FORMAT:
            raise ValueError(
                f"not an agentkit conversation: format is {data.get('format')!r}, expected {FORMAT!r}"
            )
        if data.get("version") != VERSION:
            raise ValueError(
                f"unsupported conversation version {data.get('version')!r} (this agentkit reads {VERSION})"
            )
        unknown = set(data) - {"format", "version", "metadata", "messages"}
        if unknown:
            raise ValueError(f"unknown conversation key(s): {sorted(unknown)}")
        metadata = data.get("metadata", {})
        if not isinstance(metadata, dict):
            raise ValueError("conversation metadata must be an object")
        messages = data.get("messages")
        if not isinstance(messages, list):
            raise ValueError("conversation messages must be a list")
        return cls([dict(m) if isinstance(m, dict) else m for m in messages], dict(metadata))

    @classmethod
    def from_json(cls, text: str) -> Conversation:
        """Parse :meth:`to_json` output.

        Raises:
            ValueError: not JSON, or see :meth:`from_dict`.
        """
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"conversation is not valid JSON: {exc}") from exc
        return cls.from_dict(data)

    def save(self, path: str | Path) -> None:
        """Write :meth:`to_json` (indented) to ``path`` (UTF-8).

        Lone surrogates (text that was never valid UTF-8, e.g. a file name read with ``surrogateescape``) are
        written as JSON ``\\udXXX`` escapes, so the file is valid UTF-8 and loads back to the same strings.
        """
        text = self.to_json(indent=2)
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError:
            data = json.dumps(self.to_dict(), ensure_ascii=True, indent=2).encode("ascii")
        Path(path).write_bytes(data + b"\n")

    @classmethod
    def load(cls, path: str | Path) -> Conversation:
        """Read a file written by :meth:`save`.

        Raises:
            ValueError: see :meth:`from_json` (the message names the file).
            OSError: the file cannot be read.
        """
        p = Path(path)
        try:
            return cls.from_json(p.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise ValueError(f"{p}: {exc}") from exc


def droppable_groups(messages: list[ChatMessage]) -> list[tuple[int, int]]:
    """The message groups a prompt may lose when it does not fit the model, oldest first.

    A group is a half-open index range ``(start, end)`` into ``messages``: a kept-history turn (a user
    message up to the next user message, i.e. with its final answer), or, after the question, one assistant
    tool-call message together with all the tool responses that follow it - so a call is never separated
    from its response. Never in a group: system messages, the question (the last user message) and the
    latest tool-call group (the responses the model is about to read).

    Args:
        messages: a planner prompt: system message(s), kept history, the question, this turn's trajectory.

    Returns:
        The droppable groups in the order they should be dropped (oldest first).
    """
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


def _check_messages(messages: Any, *, where: str) -> None:
    if not isinstance(messages, list):
        raise ValueError(f"{where}: messages must be a list")
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise ValueError(f"{where}: message {i} must be an object, got {type(m).__name__}")
        if set(m) != {"role", "content"}:
            raise ValueError(
                f"{where}: message {i} must have exactly the keys 'role' and 'content' (history keeps only user "
                f"messages and final answers), got {sorted(m)}"
            )
        expected = "user" if i % 2 == 0 else "assistant"
        if m["role"] != expected:
            raise ValueError(
                f"{where}: message {i} has role {m['role']!r}, expected {expected!r} (turns alternate)"
            )
        if isinstance(m["content"], list) and expected == "user":
            _check_parts(m["content"], where=f"{where}: message {i}")
        elif not isinstance(m["content"], str):
            raise ValueError(
                f"{where}: message {i} content must be a string"
                + (" or a list of content parts" if expected == "user" else "")
            )
    if len(messages) % 2:
        raise ValueError(f"{where}: the last message is a user message without a final answer")


def _check_parts(parts: list[Any], *, where: str) -> None:
    """Check a user message's content parts: text parts and image parts holding a URL (a ``data:`` URL)."""
    if not parts:
        raise ValueError(f"{where}: content parts must not be empty")
    for j, p in enumerate(parts):
        kind = p.get("type") if isinstance(p, dict) else None
        if kind == "text":
            if not isinstance(p.get("text"), str):
                raise ValueError(f"{where} part {j}: a text part needs a string 'text'")
        elif kind == "image_url":
            spec = p.get("image_url")
            if not isinstance(spec, dict) or not isinstance(spec.get("url"), str):
                raise ValueError(f"{where} part {j}: an image_url part needs image_url.url (a data: URL)")
        else:
            raise ValueError(
                f"{where} part {j}: content parts are 'text' or 'image_url', got {kind or type(p).__name__!r}"
            )
