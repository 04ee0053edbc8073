"""The model's tool calls as the planner handles them: names resolved (``functions.NAME``, the nearest tool for
an unknown one), ids made unique, the assistant message written, the loop guard's key, error responses, and the
reminder sent after a call that does not parse."""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Iterable
from typing import Any

from agentkit.messages import ToolCall
from agentkit.result import ErrorKind, ToolCallRecord
from agentkit.tool_output import longest_fitting
from agentkit.tools import Tool

__all__ = [
    "canonical_arguments",
    "echo_arguments",
    "error_record",
    "fit_error",
    "format_reminder",
    "nearest_tool_name",
    "resolve_tool_name",
]


def canonical_arguments(arguments: Any) -> str:
    """Canonical JSON text of tool arguments (sorted keys, no spaces) - the loop guard's key."""
    return json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


#: The most bytes of arguments an error response echoes (the model has them in its own call already).
ECHO_BYTES = 1024
#: A string argument longer than this is echoed as its head and a count once the echo is over ECHO_BYTES.
_ECHO_STRING_CHARS = 120


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _json_bytes(value: Any) -> int:
    return len(_dumps(value).encode("utf-8", "surrogatepass"))


def _arguments_note(arguments: Any) -> str:
    return f"<{_json_bytes(arguments):,} bytes of arguments, not repeated>"


def _cut_strings(value: Any) -> Any:
    if isinstance(value, str) and len(value) > _ECHO_STRING_CHARS:
        return f"{value[:_ECHO_STRING_CHARS]}...[{len(value) - _ECHO_STRING_CHARS:,} more characters]"
    if isinstance(value, dict):
        return {k: _cut_strings(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_cut_strings(v) for v in value]
    return value


def echo_arguments(arguments: Any) -> Any:
    """The arguments an error response shows: as given within :data:`ECHO_BYTES`, else with long strings cut,
    else a one-line summary (``"<N bytes of arguments, not repeated>"``)."""
    if _json_bytes(arguments) <= ECHO_BYTES:
        return arguments
    cut = _cut_strings(arguments)
    if _json_bytes(cut) <= ECHO_BYTES:
        return cut
    return _arguments_note(arguments)


def error_record(
    call: ToolCall,
    arguments: Any,
    kind: ErrorKind,
    message: str,
    extra: dict[str, Any] | None = None,
    cap: Callable[[str], str] | None = None,
) -> ToolCallRecord:
    """A tool response reporting an error: a JSON object of ``error``, ``tool``, ``arguments``
    (:func:`echo_arguments`) and the ``extra`` keys, made to fit ``cap`` whole (:func:`fit_error`), recorded
    with its ``kind``, the arguments in full and the message ``cap(message)``."""
    payload = {"error": message, "tool": call.name, "arguments": echo_arguments(arguments), **(extra or {})}
    content = _dumps(payload)
    if cap is not None:
        if cap(content) != content:
            content = fit_error(payload, arguments, cap)
        message = cap(message)
    return ToolCallRecord(call.id, call.name, arguments, content, message, kind)


def fit_error(payload: dict[str, Any], arguments: Any, cap: Callable[[str], str]) -> str:
    """The JSON of an error response made to fit ``cap`` (which leaves a fitting text as it is), still one
    object: ``parameters``, the echoed arguments, then ``valid_tools`` become one-line notes until it fits; then
    the ``error`` is cut to its longest head that fits (with a marker), with the other keys or with ``tool``
    alone; past that, ``cap`` cuts the JSON as any text."""
    payload = dict(payload)
    notes = {
        "parameters": lambda v: (
            f"<the parameters schema ({_json_bytes(v):,} bytes) is in the tool's declaration>"
        ),
        "arguments": lambda v: _arguments_note(arguments),
        "valid_tools": lambda v: f"<{len(v)} tools, not listed>",
    }
    for key, note in notes.items():
        if key in payload and len(shorter := note(payload[key])) < _json_bytes(payload[key]):
            payload[key] = shorter
            content = _dumps(payload)
            if cap(content) == content:
                return content
    cut = _cut_message(payload, cap)
    if cut is None:  # a small limit: the error and the tool name alone
        cut = _cut_message({"error": payload["error"], "tool": payload["tool"]}, cap)
    return cut if cut is not None else cap(_dumps({"error": payload["error"], "tool": payload["tool"]}))


def _cut_message(payload: dict[str, Any], cap: Callable[[str], str]) -> str | None:
    """``payload``'s JSON with its ``error`` cut to the longest head that fits ``cap`` (``None``: none does)."""
    message = str(payload["error"])
    if cap(whole := _dumps(payload)) == whole:
        return whole
    total = len(message.encode("utf-8", "surrogatepass"))

    def with_head(k: int) -> str:
        cut = total - len(message[:k].encode("utf-8", "surrogatepass"))
        marker = f"\n[agentkit: cut {cut:,} of {total:,} bytes of this error message]"
        return _dumps({**payload, "error": message[:k] + marker})

    def fits(k: int) -> bool:
        return cap(content := with_head(k)) == content

    return with_head(longest_fitting(len(message), fits)) if fits(0) else None


#: The namespace some models (trained on OpenAI's tool format) put before tool names.
_NAMESPACE = "functions."


def resolve_tool_name(name: str, tools: Iterable[str]) -> str | None:
    """The registered tool a requested name designates, or ``None``: an exact name, else ``functions.NAME``
    read as ``NAME``."""
    names = set(tools)
    if name in names:
        return name
    if name.startswith(_NAMESPACE) and name[len(_NAMESPACE) :] in names:
        return name[len(_NAMESPACE) :]
    return None


def nearest_tool_name(name: str, tools: dict[str, Tool]) -> str | None:
    """The registered tool a model most likely meant by an unknown ``name``, or ``None``:
    :func:`difflib.get_close_matches` (cutoff 0.6) of the name, its last dotted part and their lower-case forms
    against the tool names, then of the lower-case name against each tool's description and its first line."""
    by_lower = {n.lower(): n for n in tools}
    bare = name.rsplit(".", 1)[-1]
    for cand in dict.fromkeys((name, bare)):
        hit = difflib.get_close_matches(cand, list(tools), n=1, cutoff=0.6)
        if hit:
            return hit[0]
        hit = difflib.get_close_matches(cand.lower(), list(by_lower), n=1, cutoff=0.6)
        if hit:
            return by_lower[hit[0]]
    descriptions: dict[str, str] = {}
    for n, t in tools.items():
        d = t.description.strip().lower()
        if d:
            descriptions.setdefault(d, n)
            descriptions.setdefault(d.splitlines()[0].strip(), n)
    hit = difflib.get_close_matches(name.strip().lower(), list(descriptions), n=1, cutoff=0.6)
    return descriptions[hit[0]] if hit else None


def format_reminder(problem: str, tools: Iterable[str]) -> str:
    """The user message sent after a model turn whose tool call does not parse."""
    names = ", ".join(tools)
    if problem.startswith("the reply ended inside a thinking block"):
        return (
            f"Your last message was not used: {problem}. Close your thinking and write the answer (or a tool "
            "call) after it."
        )
    return (
        f"Your last message was not used: it looks like a tool call, but {problem}. To call a tool, use the "
        'tool-calling interface, or write the call exactly as <tool_call>{"name": "TOOL", "arguments": '
        f"{{...}}}}</tool_call> with a JSON object of arguments. Tools: {names}. To answer the user instead, "
        "reply with plain text only."
    )


def unique_ids(calls: list[ToolCall], step: int, tools: dict[str, Tool]) -> None:
    """Resolve ``functions.NAME`` names and make the call ids unique (``call_STEP_I`` when missing)."""
    ids: set[str] = set()
    for i, c in enumerate(calls):
        c.name = resolve_tool_name(c.name, tools) or c.name
        if not c.id or c.id in ids:
            base = cid = c.id or f"call_{step}_{i}"
            k = 0
            while cid in ids:
                k += 1
                cid = f"{base}_{k}"
            c.id = cid
        ids.add(c.id)
