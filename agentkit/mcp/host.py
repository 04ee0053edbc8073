"""An agent's toolsets: opened before a run (or by ``async with agent:``), refreshed before each model turn
after a ``tools/list_changed`` notification, closed after.

A forced ``tool_choice`` may name a toolset's tool; once the toolsets are listed, a name that matches no tool
is an error naming the tools there are (a :class:`~agentkit.errors.BundleError` at the bundle's line when the
choice came from a bundle, see :func:`tool_choice_written_at`).
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Sequence
from typing import Any, Protocol

from agentkit.backends.base import tool_choice_name
from agentkit.errors import BundleError, BundleIssue, ToolDefinitionError
from agentkit.tools import Tool


class ToolRegistry(Protocol):
    """What the toolsets need of an agent (:class:`agentkit.Agent` is one)."""

    backend: Any
    tool_choice: Any

    @property
    def tools(self) -> dict[str, Tool]: ...

    def add_tool(self, t: Tool) -> Tool: ...

    def remove_tool(self, name: str) -> None: ...


__all__ = ["ToolRegistry", "close_toolsets", "open_toolsets", "refresh_toolsets", "tool_choice_written_at"]

#: Where an agent's forced tool_choice was written (a bundle's ``agent.tool_choice.name``), by agent.
_WRITTEN_AT: weakref.WeakKeyDictionary[Any, BundleIssue] = weakref.WeakKeyDictionary()


def tool_choice_written_at(agent: ToolRegistry, where: BundleIssue) -> None:
    """Record that ``agent``'s forced tool_choice comes from a bundle, at ``where`` (file, line, column,
    field; its message is replaced): a name that matches no tool once the toolsets are listed is then a
    :class:`~agentkit.errors.BundleError` there."""
    _WRITTEN_AT[agent] = where


def _check_tool_choice(agent: ToolRegistry, toolsets: Sequence[Any]) -> None:
    forced = tool_choice_name(agent.tool_choice)
    tools = agent.tools
    if forced is None or forced in tools:
        return
    servers = ", ".join(repr(getattr(ts, "name", "?")) for ts in toolsets)
    msg = (
        f"tool_choice names {forced!r}, which is no tool of this agent nor of its MCP toolsets ({servers}); "
        f"tools: {', '.join(sorted(tools)) or 'none'}"
    )
    where = _WRITTEN_AT.get(agent)
    if where is None:
        raise ToolDefinitionError(msg)
    raise BundleError([dataclasses.replace(where, message=msg)])


async def open_toolsets(agent: ToolRegistry, toolsets: Sequence[Any]) -> None:
    """Open every toolset and register its tools with ``agent``; on any failure close them all and re-raise.

    Raises:
        MCPServerError, MCPSchemaError: from :meth:`MCPToolset.open`.
        ToolDefinitionError: a tool name already registered, or a forced ``tool_choice`` naming no tool.
        BundleError: that, for a ``tool_choice`` written in a bundle (its file, line and the tools there are).
    """
    check = callable(getattr(agent.backend, "check_tool", None))
    try:
        for ts in toolsets:
            for t in await ts.open(check=check):
                agent.add_tool(t)
        if toolsets:
            _check_tool_choice(agent, toolsets)
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
