"""MCP both ways: MCP servers' tools as agent toolsets (:class:`MCPToolset`) and a bundle's tools offered to
MCP clients (:mod:`agentkit.mcp.server`, ``agentkit mcp serve``). See docs/MCP.md.

Names are imported on first use, so loading a bundle without ``toolsets:`` never imports the MCP SDK.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentkit.mcp.client import MCPSchemaError, MCPToolset
    from agentkit.mcp.content import MCPServerError, MCPToolError

_EXPORTS = {
    "MCPSchemaError": "agentkit.mcp.client",
    "MCPToolset": "agentkit.mcp.client",
    "MCPServerError": "agentkit.mcp.content",
    "MCPToolError": "agentkit.mcp.content",
}
__all__ = ["MCPSchemaError", "MCPServerError", "MCPToolError", "MCPToolset"]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'agentkit.mcp' has no attribute {name!r}")
