"""A run as nodes over its state: ``UserPrompt -> ModelRequest -> (CallTools -> ModelRequest)* -> End``.

After pydantic-ai's graph. Each node holds the run's :class:`~agentkit.planner.RunState`; ``await
node.run(graph)`` does its part through the agent's :class:`~agentkit.planner.RunGraph` and returns the next
node. :class:`AgentRun` (what ``Agent.iter`` returns) is the cursor: ``run.nodes()`` yields each node before it
runs, so a caller can inspect it, stop, and continue later; ``async for step in run`` yields finished steps.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from agentkit.errors import MaxStepsExceeded
from agentkit.events import RunStarted
from agentkit.result import RunResult, Step

if TYPE_CHECKING:
    from agentkit.backends.base import ModelTurn
    from agentkit.planner import RunGraph, RunState

__all__ = ["AgentRun", "CallTools", "End", "ModelRequest", "Node", "Nodes", "UserPrompt"]


@dataclass
class UserPrompt:
    """The run's start: the question (already the last message of ``state.messages``)."""

    state: RunState

    async def run(self, graph: RunGraph, *, prefer_sync: bool = False) -> ModelRequest:
        """Emit ``RunStarted``; the first model request comes next."""
        self.state.emit(RunStarted(self.state.question, graph.agent.backend.name, tuple(graph.tools)))
        return ModelRequest(self.state)


@dataclass
class ModelRequest:
    """One model turn, at index ``state.step``."""

    state: RunState

    async def run(self, graph: RunGraph, *, prefer_sync: bool = False) -> CallTools | ModelRequest | End:
        """Ask the model: tool calls lead to :class:`CallTools`, a final answer to :class:`End`, a call that does
        not parse to a format reminder and another request. Raises ``MaxStepsExceeded`` past ``max_steps``, and
        as ``Agent.arun``."""
        st = self.state
        n = graph.agent.max_steps
        if st.step >= n:
            raise st.fail(
                MaxStepsExceeded(
                    f"no final answer after {n} model turn{'s' if n != 1 else ''} (max_steps={n})",
                    st.partial("max_steps"),
                )
            )
        turn, model_s = await graph.model_turn(st, prefer_sync=prefer_sync)
        if turn.tool_calls:
            return CallTools(st, turn, model_s)
        st.steps.append(Step(st.step, turn.text, turn.thinking, [], turn.usage, model_s))
        if turn.format_error is not None:  # a call written as text that does not parse
            graph.remind(st, turn)
            st.step += 1
            return ModelRequest(st)
        st.result = graph.final_answer(st, turn)
        return End(st.result)


@dataclass
class CallTools:
    """The tool calls of one model turn (``turn.tool_calls``, not yet run); ``step`` once they have answered."""

    state: RunState
    turn: ModelTurn
    model_seconds: float
    step: Step | None = field(default=None)

    async def run(self, graph: RunGraph, *, prefer_sync: bool = False) -> ModelRequest:
        """Run the calls through ``Agent.process_tool_calls`` (raises as ``Agent.arun``); a model request is next."""
        st = self.state
        self.step = await graph.agent.process_tool_calls(st, self.turn, self.model_seconds)
        if graph.agent.reset_tool_choice and st.tool_choice != "none":
            st.tool_choice = "auto"
        st.step += 1
        return ModelRequest(st)


@dataclass
class End:
    """The run's end: its result."""

    result: RunResult


#: A node of a run.
Node = UserPrompt | ModelRequest | CallTools | End


def refuse_in_event_loop(call: str, instead: str) -> None:
    """Raise ``RuntimeError`` inside a running event loop: a sync entry point runs its own."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise RuntimeError(f"{call} cannot be called from a running event loop; use `{instead}`")


def _close_runner(runner: asyncio.Runner) -> None:
    """Close the event loop of a dropped run's ``for`` iteration (inside a running loop, only the loop)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        runner.close()
        return
    with contextlib.suppress(RuntimeError):  # a runner the finished run closed already
        loop = runner.get_loop()
        if not loop.is_closed():
            loop.close()


class Nodes:
    """``run.nodes()``: iterate with ``for`` (the run's own event loop) or ``async for``; each node is yielded
    before it runs, the next is run when the loop asks for it."""

    def __init__(self, run: AgentRun) -> None:
        self._run = run

    def __iter__(self) -> Iterator[Node]:
        run = self._run
        try:
            while not run.done:
                node = run.pending()
                if node is not None:
                    yield node
                    continue
                refuse_in_event_loop("`for node in run.nodes()`", "async for node in run.nodes()")
                if run.runner is None:
                    run.runner = asyncio.Runner()
                    # a run left unfinished (a loop that broke and never came back) closes its loop when dropped
                    weakref.finalize(run, _close_runner, run.runner)
                run.runner.run(run.advance(prefer_sync=True))
        finally:
            if run.done and run.runner is not None:
                run.runner.close()
                run.runner = None

    async def __aiter__(self) -> AsyncIterator[Node]:
        run = self._run
        while not run.done:
            node = run.pending()
            if node is not None:
                yield node
                continue
            await run.advance()


class AgentRun:
    """One run of an agent, node by node (:meth:`agentkit.Agent.iter`): its ``agent``, ``state``, the ``node``
    that runs next and, once it ended, its ``result``."""

    def __init__(self, graph: RunGraph, state: RunState) -> None:
        self.graph = graph
        self.agent = graph.agent
        self.state = state
        self.node: Node = UserPrompt(state)
        self.runner: asyncio.Runner | None = None
        self._handed_out = False  # whether ``node`` was yielded by nodes()
        self._steps: AsyncIterator[Step] | None = None
        self._steps_seen = 0

    @property
    def result(self) -> RunResult | None:
        """The run's result, once it has one."""
        return self.state.result

    @property
    def done(self) -> bool:
        """True once :class:`End` was handed out, or a node raised."""
        return self.state.failed or (isinstance(self.node, End) and self._handed_out)

    def pending(self) -> Node | None:
        """The next node if it has not been handed out yet (it is marked handed out), else ``None``."""
        if self._handed_out:
            return None
        self._handed_out = True
        return self.node

    async def advance(self, *, prefer_sync: bool = False) -> Node:
        """Run :attr:`node`; its successor is next and returned (an :class:`End` stays). What the node raises
        ends the run."""
        node = self.node
        if isinstance(node, End):
            return node
        try:
            self.node = await node.run(self.graph, prefer_sync=prefer_sync)
        except BaseException as exc:
            self.state.fail(exc)  # RunFailed, also for a cancelled run or an override's error
            raise
        self._handed_out = False
        return self.node

    async def complete(self, *, prefer_sync: bool = False) -> RunResult:
        """Run the remaining nodes to the end; the result."""
        while not isinstance(self.node, End):
            await self.advance(prefer_sync=prefer_sync)
        return self.node.result

    def nodes(self) -> Nodes:
        """The run's nodes, each yielded before it runs (``for`` or ``async for``); ``nodes()`` again continues a
        stopped loop. A node that raises ends the run: the error comes out of the loop."""
        return Nodes(self)

    def __aiter__(self) -> AsyncIterator[Step]:
        # One run, one loop: iterating again continues where the last loop stopped (nothing more once it ended).
        if self._steps is None:
            self._steps = self._finished_steps()
        return self._steps

    async def _finished_steps(self) -> AsyncIterator[Step]:
        async for _node in self.nodes():
            while self._steps_seen < len(self.state.steps):
                self._steps_seen += 1
                yield self.state.steps[self._steps_seen - 1]
