"""An agent's toolsets: opened before a run (or by ``async with agent:``), refreshed before each model turn
after a ``tools/list_changed`` notification, closed after."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from agentkit.tools import Tool


class ToolRegistry(Protocol):
    """What the toolsets need of an agent (:class:`agentkit.Agent` is one)."""

    backend: Any

    def add_tool(self, t: Tool) -> Tool: ...

    def remove_tool(self, name: str) -> None: ...


__all__ = ["ToolRegistry", "close_toolsets", "open_toolsets", "refresh_toolsets"]


async def open_toolsets(agent: ToolRegistry, toolsets: Sequence[Any]) -> None:
    """Open every toolset and register its tools with ``agent``; on any failure close them all and re-raise.

    Raises:
        MCPServerError, MCPSchemaError: from :meth:`MCPToolset.open`.
        ToolDefinitionError: a tool name already registered.
    """
    check = callable(getattr(agent.backend, "check_tool", None))
    try:
        for ts in toolsets:
            for t in await ts.open(check=check):
                agent.add_tool(t)
    except BaseException:
        await close_toolsets(agent, toolsets)
        raise


async def refresh_toolsets(agent: ToolRegistry, toolsets: Sequence[Any]) -> None:
    """Re-list the tools of each toolset whose server said its list changed, and swap them in ``agent``.

    Raises:
        MCPServerError, MCPSchemaError, ToolDefinitionError: as :func:`open_toolsets`.
    """
    for ts in toolsets:
        if not ts.changed or not ts.is_open:
            continue
        old = [t.name for t in ts.tools]
        new = await ts.refresh()
        for name in old:
            agent.remove_tool(name)
        for t in new:
            agent.add_tool(t)


async def close_toolsets(agent: ToolRegistry, toolsets: Sequence[Any]) -> None:
    """Unregister the toolsets' tools and close them (never raises)."""
    for ts in toolsets:
        for t in ts.tools:
            agent.remove_tool(t.name)
        await ts.close()
