"""An agent's toolsets: opened before a run (or by ``async with agent:``), refreshed before a model turn after
``tools/list_changed``, closed after; a forced ``tool_choice`` naming no tool once they are listed is an error.
``agent``: an :class:`agentkit.Agent` (its ``tools``, ``add_tool``, ``remove_tool``, ``backend``, ``tool_choice``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import weakref
from collections.abc import Sequence
from typing import Any

from agentkit.backends.base import tool_choice_name
from agentkit.errors import BundleError, BundleIssue, ToolDefinitionError

__all__ = [
    "ToolsetLease",
    "close_toolsets",
    "open_toolsets",
    "refresh_toolsets",
    "tool_choice_written_at",
]

#: Where an agent's forced tool_choice was written (a bundle's ``agent.tool_choice.name``), by agent.
_WRITTEN_AT: weakref.WeakKeyDictionary[Any, BundleIssue] = weakref.WeakKeyDictionary()


def tool_choice_written_at(agent: Any, where: BundleIssue) -> None:
    """Record that ``agent``'s forced tool_choice was written in a bundle at ``where``, so a name that matches no
    tool is a :class:`~agentkit.errors.BundleError` there."""
    _WRITTEN_AT[agent] = where


def _check_tool_choice(agent: Any, toolsets: Sequence[Any]) -> None:
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


async def open_toolsets(agent: Any, toolsets: Sequence[Any]) -> None:
    """Open every toolset and register its tools with ``agent``; on any failure close them all and re-raise.

    Raises:
        MCPServerError, MCPSchemaError: from :meth:`MCPToolset.open`.
        ToolDefinitionError: a tool name taken (names the server), or a forced ``tool_choice`` naming no tool
            (BundleError when a bundle wrote it).
    """
    check = callable(getattr(agent.backend, "check_tool", None))
    try:
        for ts in toolsets:
            for t in await ts.open(check=check):
                _register(agent, ts, t, toolsets)
        if toolsets:
            _check_tool_choice(agent, toolsets)
    except BaseException:
        await close_toolsets(agent, toolsets)
        raise


async def refresh_toolsets(agent: Any, toolsets: Sequence[Any]) -> None:
    """Re-list the tools of each toolset whose list changed and swap them in ``agent`` (raises as
    :func:`open_toolsets`)."""
    for ts in toolsets:
        if not ts.changed or not ts.is_open:
            continue
        old = list(ts.tools)
        new = await ts.refresh()
        _unregister(agent, old)
        for t in new:
            _register(agent, ts, t, toolsets)


async def close_toolsets(agent: Any, toolsets: Sequence[Any]) -> None:
    """Unregister the toolsets' tools and close them (never raises)."""
    for ts in toolsets:
        _unregister(agent, ts.tools)
        await ts.close()


def _register(agent: Any, ts: Any, tool: Any, toolsets: Sequence[Any]) -> None:
    """Add ``tool`` (of ``ts``) to ``agent``; a ``ToolDefinitionError`` naming who has the name already."""
    if (taken := agent.tools.get(tool.name)) is not None:
        mine = "one of this agent's own tools"
        owner = next((f"a tool of {o.label}" for o in toolsets if any(t is taken for t in o.tools)), mine)
        raise ToolDefinitionError(
            f"{ts.label}: its tool {tool.name!r} has the name of {owner} "
            "(give the toolset a 'prefix', or 'exclude' the tool)"
        )
    agent.add_tool(tool)


def _unregister(agent: Any, tools: Sequence[Any]) -> None:
    """Remove these tool objects from ``agent``: never another tool of the same name (the agent's own)."""
    for t in tools:
        if agent.tools.get(t.name) is t:
            agent.remove_tool(t.name)


class ToolsetLease:
    """An agent's toolsets, open while its runs or ``async with agent:`` blocks use them: the first user opens
    them, later ones on the same event loop share the opening, the last to leave closes them. A user on
    another loop gets a ``RuntimeError`` (an MCP connection belongs to the loop that opened it)."""

    def __init__(self, agent: Any, toolsets: Sequence[Any]) -> None:
        self.agent = agent
        self.toolsets = toolsets
        self.users = 0
        self.loop: asyncio.AbstractEventLoop | None = None
        self._opening: asyncio.Task[None] | None = None
        self._closing: asyncio.Task[None] | None = None

    async def acquire(self) -> None:
        """Use the toolsets, opening them unless open (or opening); RuntimeError when in use on another loop,
        else raises as :func:`open_toolsets`."""
        if not self.toolsets:  # nothing to open, nothing bound to a loop
            return
        loop = asyncio.get_running_loop()
        if self._closing is not None and self._closing.done():  # its releaser was cancelled while it closed
            self._closing = None
        if self.users == 0 and self._closing is None:
            self.loop = None
        if self.loop is not None and self.loop is not loop:
            names = ", ".join(repr(getattr(ts, "name", "?")) for ts in self.toolsets)
            raise RuntimeError(
                f"this agent's MCP toolsets ({names}) are open on another event loop (a run in another thread): "
                "an MCP connection serves the event loop that opened it; give each thread its own agent, with "
                "its own toolsets (MCPToolset.copy())"
            )
        self.loop = loop
        self.users += 1
        try:
            if self._closing is not None:
                await asyncio.shield(self._closing)
            if self._opening is None:
                self._opening = loop.create_task(open_toolsets(self.agent, self.toolsets))
            opening = self._opening
            try:
                await asyncio.shield(opening)
            except BaseException:
                if opening.done() and self._opening is opening:  # a failed opening: the next user tries again
                    self._opening = None
                raise
        except BaseException:
            await self.release()
            raise

    async def release(self) -> None:
        """Stop using the toolsets; the last user closes them (never raises, but for its own cancellation)."""
        if not self.toolsets:
            return
        self.users -= 1
        if self.users:
            return
        opening, self._opening = self._opening, None
        if opening is not None:
            self._closing = asyncio.get_running_loop().create_task(self._close(opening))
            try:
                await asyncio.shield(self._closing)
            finally:
                if self._closing.done():
                    self._closing = None
        if self.users == 0 and self._closing is None:
            self.loop = None

    async def _close(self, opening: asyncio.Task[None]) -> None:
        with contextlib.suppress(BaseException):
            await opening  # a user that left while it opened: let it finish (or fail, closing itself)
        if not opening.cancelled() and opening.exception() is None:
            await close_toolsets(self.agent, self.toolsets)
