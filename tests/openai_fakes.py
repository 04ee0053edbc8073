"""Fake OpenAI chat-completions payloads for the remote-backend tests (served through ``httpx.MockTransport``)."""

from __future__ import annotations


def completion(
    *, content=None, tool_calls=None, reasoning=None, usage=(10, 5), reasoning_key="reasoning_content"
):
    """A ``chat.completion`` body: one choice with ``content``, ``tool_calls`` as ``(id, name, arguments)``
    triples, the reasoning text under ``reasoning_key``, and ``usage`` as ``(prompt, completion)`` tokens."""
    msg = {"role": "assistant", "content": content}
    if tool_calls is not None:
        msg["tool_calls"] = [
            {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
            for cid, name, args in tool_calls
        ]
    if reasoning is not None:
        msg[reasoning_key] = reasoning
    return {
        "id": "x",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": msg, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1]},
    }
