"""MCP tool results as agentkit tool values: text, structured content, images, resources, ``isError``."""

from __future__ import annotations

import base64
import binascii
from typing import Any

import mcp_types as types

from agentkit.errors import AgentKitError

__all__ = ["MCPServerError", "MCPToolError", "result_value"]


class MCPServerError(AgentKitError):
    """An MCP server failed: it did not start, did not answer, exited or wrote something that is not MCP.

    The message names the server (and the tool, for a failed call).
    """


class MCPToolError(AgentKitError):
    """An MCP tool answered with ``isError: true``; the message is the text it returned."""


def _size(data: str) -> int:
    try:
        return len(base64.b64decode(data, validate=False))
    except (binascii.Error, ValueError):
        return len(data)


def block_text(block: Any) -> str:
    """One content block as text: text as is, an image or audio as a one-line note (``[image image/png, 68
    bytes]``), an embedded text resource as its text, a blob resource or a resource link as a note."""
    if isinstance(block, types.TextContent):
        return block.text
    if isinstance(block, types.ImageContent):
        return f"[image {block.mime_type}, {_size(block.data)} bytes]"
    if isinstance(block, types.AudioContent):
        return f"[audio {block.mime_type}, {_size(block.data)} bytes]"
    if isinstance(block, types.EmbeddedResource):
        res = block.resource
        if isinstance(res, types.TextResourceContents):
            return res.text
        mime = res.mime_type or "application/octet-stream"
        return f"[resource {res.uri} ({mime}), {_size(res.blob)} bytes]"
    if isinstance(block, types.ResourceLink):
        return f"[resource link {block.uri}: {block.name}]"
    return f"[{getattr(block, 'type', type(block).__name__)} content]"


def result_value(result: types.CallToolResult, structured: bool) -> Any:
    """The value a tool call gives the model.

    Args:
        result: the server's ``CallToolResult``.
        structured: the tool declares an output schema: its ``structuredContent`` is the value when present.

    Returns:
        The structured content (a JSON value), else the text of the content blocks joined by newlines.

    Raises:
        MCPToolError: the result has ``isError`` set (message: its text).
    """
    text = "\n".join(block_text(b) for b in result.content)
    if result.is_error:
        raise MCPToolError(text or "the tool reported an error without a message")
    if structured and result.structured_content is not None:
        return result.structured_content
    return text
