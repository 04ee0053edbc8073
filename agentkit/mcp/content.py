"""MCP tool results as agentkit tool values: text, structured content, images, resources, ``isError``."""

from __future__ import annotations

import base64
import binascii
from typing import Any

import mcp_types as types

from agentkit.errors import AgentKitError
from agentkit.tool_output import ToolContent, ToolImage

__all__ = ["MCPServerError", "MCPToolError", "result_value"]


class MCPServerError(AgentKitError):
    """An MCP server did not start, did not answer, exited or wrote something that is not MCP (named)."""


class MCPToolError(AgentKitError):
    """An MCP tool answered with ``isError: true``; the message is the text it returned."""


def _size(data: str) -> int:
    try:
        return len(base64.b64decode(data, validate=False))
    except (binascii.Error, ValueError):
        return len(data)


def block_text(block: Any) -> str:
    """One content block as text: text and text resources as they are, anything else as a one-line note."""
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


def _image(block: Any) -> ToolImage | None:
    """An image block as a :class:`ToolImage`, or ``None`` (not an image, or data that is not base64)."""
    if not isinstance(block, types.ImageContent):
        return None
    try:
        return ToolImage(base64.b64decode(block.data, validate=True), block.mime_type)
    except (binascii.Error, ValueError):
        return None


def result_value(result: types.CallToolResult, structured: bool) -> Any:
    """The value a tool call gives the model: the ``structuredContent`` when the tool declares an output schema
    (``structured``); else a :class:`~agentkit.tool_output.ToolContent` when there are images; else the blocks'
    text joined by newlines. MCPToolError for an ``isError`` result (its text)."""
    if result.is_error:
        text = "\n".join(block_text(b) for b in result.content)
        raise MCPToolError(text or "the tool reported an error without a message")
    if structured and result.structured_content is not None:
        return result.structured_content
    images = [_image(b) for b in result.content]
    text = "\n".join(block_text(b) for b, i in zip(result.content, images, strict=True) if i is None)
    if any(i is not None for i in images):
        return ToolContent(text, tuple(i for i in images if i is not None))
    return text
