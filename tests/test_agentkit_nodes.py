"""A run node by node (agentkit.nodes): UserPrompt -> ModelRequest -> (CallTools -> ModelRequest)* -> End."""

import asyncio
import gc
import json

import pytest

from agentkit import Agent, tool
from agentkit.backends.scripted import ScriptedBackend, call
from agentkit.errors import MaxStepsExceeded
from agentkit.nodes import AgentRun, CallTools, End, ModelRequest, UserPrompt
from agentkit.planner import RunGraph


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool(retries=5)
def boom(x: int) -> int:
    """Always fails."""
    raise RuntimeError(f"boom {x}")


def agent(script, **kw):
    return Agent(ScriptedBackend(script), [add, boom], system_prompt="Be brief.", **kw)


def kinds(nodes):
    return [type(n).__name__ for n in nodes]


def test_the_agent_holds_its_run_graph():
    a = agent([])
    assert isinstance(a.graph, RunGraph) and a.graph.agent is a
    assert list(a.graph.tools) == ["add", "boom"] and a.tools == a.graph.tools


def test_sync_nodes_come_in_order_and_end_with_the_result():
    run = agent([call("add", a=1, b=2), call("add", a=3, b=4), "It is 3, then 7."]).iter("sums?")
    assert isinstance(run, AgentRun)
    nodes = list(run.nodes())
    assert kinds(nodes) == [
        "UserPrompt",
        "ModelRequest",
        "CallTools",
        "ModelRequest",
        "CallTools",
        "ModelRequest",
        "End",
    ]
    assert isinstance(nodes[-1], End) and nodes[-1].result is run.result
    assert run.result is not None and run.result.answer == "It is 3, then 7."
    assert [r.content for r in run.result.tool_calls] == ["3", "7"]


def test_async_nodes_match_the_sync_ones_and_arun():
    script = [call("add", a=1, b=2), "It is 3."]

    async def go():
        run = agent(list(script)).iter("1+2?")
        return [n async for n in run.nodes()], run.result

    nodes, result = asyncio.run(go())
    assert kinds(nodes) == ["UserPrompt", "ModelRequest", "CallTools", "ModelRequest", "End"]
    expected = agent(list(script)).run("1+2?")
    assert result.answer == expected.answer == "It is 3."
    assert [m["role"] for m in result.messages] == [m["role"] for m in expected.messages]


def test_a_call_tools_node_shows_the_calls_before_they_run():
    ran = []

    @tool
    def note(text: str) -> str:
        """Write a note."""
        ran.append(text)
        return "noted"

    run = Agent(ScriptedBackend([call("note", text="hi"), "done"]), [note]).iter("note it")
    for node in run.nodes():
        if isinstance(node, CallTools):
            assert [c.name for c in node.turn.tool_calls] == ["note"] and node.step is None
            assert ran == []  # yielded before it runs
            break
    assert ran == []
    rest = list(run.nodes())  # continue: the pending CallTools runs first
    assert ran == ["hi"] and kinds(rest) == ["ModelRequest", "End"]
    assert run.result is not None and run.result.answer == "done"


@pytest.mark.parametrize("stop_after", range(5))
def test_stop_after_any_node_and_continue(stop_after):
    script = [call("add", a=1, b=2), "It is 3."]
    run = agent(list(script)).iter("1+2?")
    first = []
    for i, node in enumerate(run.nodes()):
        first.append(node)
        if i == stop_after:
            break
    rest = list(run.nodes())
    assert kinds(first + rest) == ["UserPrompt", "ModelRequest", "CallTools", "ModelRequest", "End"]
    assert list(run.nodes()) == []  # the run ended: nothing more
    assert run.result is not None and run.result.answer == "It is 3."


def test_async_stop_then_continue_with_steps():
    async def go():
        run = agent([call("add", a=1, b=2), "It is 3."]).iter("1+2?")
        async for node in run.nodes():
            if isinstance(node, ModelRequest):
                break  # before the model is asked
        assert run.state.usage.requests == 0
        steps = [s.index async for s in run]  # steps continue the same run
        return steps, run.result

    steps, result = asyncio.run(go())
    assert steps == [0, 1] and result.answer == "It is 3."


def test_advance_runs_one_node_at_a_time():
    async def go():
        run = agent([call("add", a=2, b=2), "4"]).iter("2+2?")
        assert isinstance(run.node, UserPrompt)
        seen = [type(await run.advance()).__name__ for _ in range(4)]
        return seen, run

    seen, run = asyncio.run(go())
    assert seen == ["ModelRequest", "CallTools", "ModelRequest", "End"]
    assert run.state.steps[0].tool_calls[0].content == "4"


def test_tool_errors_are_visible_to_the_model_in_the_next_request():
    seen_by_model = []

    def model(messages, tools, tool_choice):
        seen_by_model.append([dict(m) for m in messages])
        if len(seen_by_model) == 1:
            return [call("boom", x=7), call("nope", q=1), call("add", a="x", b=1)]
        return "gave up"

    run = Agent(ScriptedBackend(model), [add, boom]).iter("try")
    nodes = list(run.nodes())
    assert kinds(nodes) == ["UserPrompt", "ModelRequest", "CallTools", "ModelRequest", "End"]
    calls_node = nodes[2]
    assert isinstance(calls_node, CallTools) and calls_node.step is not None
    kinds_ = [r.error_kind for r in calls_node.step.tool_calls]
    assert kinds_ == ["exception", "unknown_tool", "invalid_arguments"]
    responses = [m for m in seen_by_model[1] if m["role"] == "tool"]
    assert len(responses) == 3
    assert "boom 7" in json.loads(responses[0]["content"])["error"]
    assert json.loads(responses[1]["content"])["valid_tools"] == ["add", "boom"]
    assert json.loads(responses[2]["content"])["hint"] == "fix the arguments and call again"


def test_a_node_that_raises_ends_the_run():
    run = agent([call("add", a=1, b=1), call("add", a=2, b=2)], max_steps=2).iter("loop")
    got = []
    with pytest.raises(MaxStepsExceeded) as ei:
        for node in run.nodes():
            got.append(node)
    assert kinds(got) == [
        "UserPrompt",
        "ModelRequest",
        "CallTools",
        "ModelRequest",
        "CallTools",
        "ModelRequest",
    ]
    assert ei.value.result.stop_reason == "max_steps" and len(ei.value.result.steps) == 2
    assert list(run.nodes()) == [] and run.result is None


def test_overridden_process_tool_calls_runs_inside_the_call_tools_node():
    class Counting(Agent):
        calls = 0

        async def process_tool_calls(self, state, turn, model_s):
            self.calls += len(turn.tool_calls)
            return await super().process_tool_calls(state, turn, model_s)

    a = Counting(ScriptedBackend([[call("add", a=1, b=1), call("add", a=2, b=2)], "ok"]), [add])
    nodes = list(a.iter("x").nodes())
    assert a.calls == 2 and kinds(nodes)[-1] == "End"


def test_a_dropped_unfinished_run_closes_its_event_loop():
    # a `for` over run.nodes() that broke and never came back left its event loop open (ResourceWarning:
    # unclosed event loop, its selector and self-pipe held until the interpreter noticed)
    a = agent([call("add", a=1, b=2), "3"])
    run = a.iter("?")
    for node in run.nodes():
        if isinstance(node, CallTools):
            break
    loop = run.runner.get_loop()
    assert not loop.is_closed()  # the run may still continue: its loop stays open while it is kept
    del run, node
    gc.collect()
    assert loop.is_closed()


def test_a_sync_node_loop_inside_an_event_loop_says_to_use_async_for():
    # asyncio's own "Runner.run() cannot be called from a running event loop" came out, and a coroutine that
    # was never awaited was left for a RuntimeWarning
    run = agent([call("add", a=1, b=2), "3"]).iter("sum?")

    async def inside():
        return [type(n).__name__ for n in run.nodes()]

    with pytest.raises(RuntimeError, match=r"use `async for node in run.nodes\(\)`"):
        asyncio.run(inside())
    assert kinds(run.nodes()) == ["ModelRequest", "CallTools", "ModelRequest", "End"]  # outside: it goes on
    assert run.result.answer == "3"
