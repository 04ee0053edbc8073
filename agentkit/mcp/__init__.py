"""MCP both ways: MCP servers' tools as agent toolsets (:class:`MCPToolset`) and a bundle's tools offered to
MCP clients (:mod:`agentkit.mcp.server`, ``agentkit mcp serve``). See docs/MCP.md."""

from agentkit.mcp.client import MCPSchemaError, MCPToolset, ToolCheck, check_tool_schema
from agentkit.mcp.content import MCPServerError, MCPToolError

__all__ = ["MCPSchemaError", "MCPServerError", "MCPToolError", "MCPToolset", "ToolCheck", "check_tool_schema"]
