"""A deterministic backend for tests and demos: it replays a script of model turns, one per request::

    from agentkit.backends.scripted import ScriptedBackend, call, answer
    backend = ScriptedBackend([
        call("get_weather", city="Paris"),                 # one tool call
        [call("add", a=1, b=2), call("add", a=3, b=4)],    # two parallel calls
        answer("It is sunny."),                            # final answer (a plain str works too)
    ])

or a function ``(messages, tools, tool_choice) -> item``. Every request is recorded in
:attr:`ScriptedBackend.requests`. A JSON script file (``--backend scripted --model script.json``) lists strings
(final answers) or ``{"text", "thinking", "tool_calls": [{"name", "arguments", "id"?}]}``.
"""

from __future__ import annotations

import copy
import itertools
import json
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from agentkit.backends.base import (
    Backend,
    ChatMessage,
    ModelTurn,
    ToolChoice,
    ToolDeclaration,
    TurnRequest,
    Usage,
    turn_problem,
)
from agentkit.errors import BackendError
from agentkit.messages import ToolCall

#: One script entry: a final answer (str), one call, parallel calls, or a full turn.
ScriptItem = str | ToolCall | Sequence[ToolCall] | ModelTurn
#: ``(messages, tools, tool_choice) -> ScriptItem``.
ScriptFunction = Callable[[list[ChatMessage], list[ToolDeclaration], ToolChoice], ScriptItem]


def call(
    name: str, arguments: dict[str, Any] | None = None, /, *, call_id: str = "", **kwargs: Any
) -> ToolCall:
    """A scripted tool call: ``call("add", a=1, b=2)`` or ``call("add", {"a": 1, "b": 2})`` (``call_id``
    defaults to ``call_<n>``, counted per backend)."""
    return ToolCall(id=call_id, name=name, arguments={**(arguments or {}), **kwargs})


def answer(text: str, *, thinking: str = "") -> ModelTurn:
    """A scripted final answer, optionally with thinking; TypeError for a value that is not a string."""
    return script_turn(ModelTurn(text=text, thinking=thinking), "answer(): ")


def turn(*calls: ToolCall, text: str = "", thinking: str = "", usage: Usage | None = None) -> ModelTurn:
    """A scripted turn with text, thinking and any number of calls; TypeError for a bad value."""
    return script_turn(ModelTurn(text, thinking, list(calls), usage or Usage()), "turn(): ")


def _call_problem(c: Any) -> str | None:
    if not isinstance(c, ToolCall):
        return f"a tool call must be a ToolCall (made by call()), got {c!r}"
    if not isinstance(c.name, str) or not isinstance(c.arguments, dict):
        return f"a tool call needs a string name and a dict of arguments, got {c.name!r} with {c.arguments!r}"
    return None


def script_turn(item: Any, where: str = "") -> ModelTurn:
    """A :data:`ScriptItem` as a new :class:`ModelTurn` (its calls and usage copied); TypeError, after ``where``,
    saying what is wrong with it."""
    if isinstance(item, str):
        item = ModelTurn(text=item)
    elif isinstance(item, ToolCall):
        item = ModelTurn(tool_calls=[item])
    elif (
        isinstance(item, Sequence)
        and not isinstance(item, bytes)
        and all(isinstance(c, ToolCall) for c in item)
    ):
        item = ModelTurn(tool_calls=list(item))
    elif not isinstance(item, ModelTurn):
        raise TypeError(
            f"{where}not a script item (a string answer, a call(), a list of calls or a ModelTurn such as "
            f"answer(...)), got {item!r}"
        )
    if (
        problem := next(filter(None, map(_call_problem, item.tool_calls)), None) or turn_problem(item)
    ) is not None:
        raise TypeError(where + problem)
    calls = [ToolCall(c.id, c.name, dict(c.arguments), c.error, c.raw_arguments) for c in item.tool_calls]
    return ModelTurn(item.text, item.thinking, calls, Usage(**item.usage.to_dict()), item.raw)


def _estimate_tokens(messages: list[ChatMessage]) -> int:
    chars = 0
    for m in messages:
        c = m.get("content")
        if isinstance(c, str):
            chars += len(c)
        for tc in m.get("tool_calls") or ():
            chars += len(tc["function"]["name"]) + 2 * len(tc["function"]["arguments"])
    return chars // 4


class ScriptedBackend(Backend):
    """Replays scripted model turns (see the module docstring).

    Args:
        script: a sequence of :data:`ScriptItem` (one per model request) or a :data:`ScriptFunction`.
        name: backend name reported in results.
        record: keep a deep copy of every request in :attr:`requests`.
        takes_images: tool responses with images come as content parts, as to a vision model.

    A turn's usage is its own, else an estimate (characters / 4) with ``requests=1``.

    Raises:
        TypeError: a script item is not a :data:`ScriptItem` (its index named).
        BackendError: (from :meth:`complete`) no turn left, or a function returned no :data:`ScriptItem`.
    """

    def __init__(
        self,
        script: Sequence[ScriptItem] | ScriptFunction,
        *,
        name: str = "scripted",
        record: bool = True,
        takes_images: bool = False,
    ) -> None:
        self.name = name
        self.takes_images = takes_images
        self._function: ScriptFunction | None = None
        self._items: list[ScriptItem] = []
        if callable(script):
            self._function = script
        elif isinstance(script, str | bytes) or not isinstance(script, Sequence):
            raise TypeError("script must be a sequence of turns or a function (messages, tools, tool_choice)")
        else:
            self._items = list(script)
            for i, item in enumerate(self._items):
                script_turn(item, f"scripted backend {name!r}: script item {i}: ")
        self._pos = 0
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self.record = record
        self.requests: list[TurnRequest] = []

    @classmethod
    def from_file(cls, path: str | Path) -> ScriptedBackend:
        """Load a JSON script; ValueError naming the item of a wrong shape, or for a file that is not JSON."""
        p = Path(path)
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError, RecursionError) as exc:  # RecursionError: nested too deep
            raise ValueError(f"{p}: cannot read scripted turns: {exc}") from exc
        if not isinstance(data, list):
            raise ValueError(f"{p}: a script is a JSON list of turns, got {type(data).__name__}")
        items: list[ScriptItem] = []
        for i, item in enumerate(data):
            if isinstance(item, str):
                items.append(item)
                continue
            if not isinstance(item, dict) or not set(item) <= {"text", "thinking", "tool_calls"}:
                raise ValueError(
                    f"{p}: turn {i}: expected a string or an object with text/thinking/tool_calls, got {item!r}"
                )
            calls = []
            for j, c in enumerate(item.get("tool_calls") or []):
                if not isinstance(c, dict) or not isinstance(c.get("name"), str):
                    raise ValueError(f"{p}: turn {i} call {j}: expected {{'name': str, 'arguments': object}}")
                args = c.get("arguments", {})
                if not isinstance(args, dict):
                    raise ValueError(f"{p}: turn {i} call {j}: arguments must be an object")
                calls.append(ToolCall(id=str(c.get("id", "")), name=c["name"], arguments=args))
            try:
                items.append(script_turn(ModelTurn(item.get("text", ""), item.get("thinking", ""), calls)))
            except TypeError as exc:
                raise ValueError(f"{p}: turn {i}: {exc}") from None
        return cls(items, name=f"scripted:{p.name}")

    @property
    def remaining(self) -> int:
        """Scripted turns not yet played (0 for a function script)."""
        return len(self._items) - self._pos

    def turn(self, request: TurnRequest) -> ModelTurn:
        """Return the next scripted turn (see :meth:`agentkit.backends.base.Backend.complete`)."""
        if self.record:
            self.requests.append(copy.deepcopy(request))
        if self._function is not None:
            item = self._function(request.messages, request.tools, request.tool_choice)
        else:
            with self._lock:
                if self._pos >= len(self._items):
                    raise BackendError(
                        f"scripted backend {self.name!r} has no turn left: the script has {len(self._items)} "
                        "turn(s) and all were played"
                    )
                item = self._items[self._pos]
                self._pos += 1
        out = self._to_turn(item)
        if out.usage.requests == 0 and out.usage.total_tokens == 0:
            n_out = len(out.text) + sum(len(c.name) + 2 * len(c.arguments) for c in out.tool_calls)
            out.usage = Usage(
                input_tokens=_estimate_tokens(request.messages), output_tokens=n_out // 4 + 1, requests=1
            )
        return out

    def _to_turn(self, item: Any) -> ModelTurn:
        try:  # a function's item (a list's was checked up front)
            out = script_turn(item)
        except TypeError as exc:
            raise BackendError(f"scripted backend {self.name!r}: {exc}") from None
        for c in out.tool_calls:
            c.id = c.id or f"call_{next(self._ids)}"
        return out
