"""MCP both ways: MCP servers' tools as agent toolsets (:class:`MCPToolset`) and a bundle's tools offered to
MCP clients (:mod:`agentkit.mcp.server`, ``agentkit mcp serve``). See docs/MCP.md.

Names are imported on first use, so loading a bundle without ``toolsets:`` never imports the MCP SDK.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
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
__all__ = [
    "MCPSchemaError",
    "MCPServerError",
    "MCPToolError",
    "MCPToolset",
    "command_not_found",
    "interpreter",
]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'agentkit.mcp' has no attribute {name!r}")


def interpreter(command: str) -> str:
    """``command``, except that ``python`` and ``python3`` mean agentkit's own interpreter."""
    return sys.executable if command in ("python", "python3") else command


def command_not_found(command: str) -> str:
    """Why ``command`` cannot be run: not found, or a file that is not executable (say how to run a script)."""
    if Path(command).is_file():
        how = f"python {command}" if command.endswith(".py") else f"INTERPRETER {command}"
        return f"command {command!r} is a file but not executable (run it with its interpreter: {how})"
    return f"command {command!r} not found"
