"""The planner's phases one at a time (agentkit.planner), Agent.iter(), and overriding a phase."""

import asyncio
import json

import pytest

from agentkit import Agent, tool
from agentkit.backends.scripted import ScriptedBackend, answer, call
from agentkit.errors import ToolRetriesExceeded
from agentkit.history import Conversation
from agentkit.planner import RunGraph, RunState
from agentkit.result import Step


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool(retries=0)
def boom(x: int) -> int:
    """Always fails."""
    raise RuntimeError(f"boom {x}")


def agent(script, **kw):
    return Agent(ScriptedBackend(script), [add, boom], system_prompt="Be brief.", **kw)


def test_prepare_builds_the_state():
    a = agent([])
    history = Conversation().with_turn("hi", "hello")
    events = []
    st = a.graph.prepare("2+2?", "2+2?", history, deps="D", on_event=events.append)
    assert isinstance(st, RunState) and st.deps == "D" and st.step == 0
    assert [m["role"] for m in st.messages] == ["system", "user", "assistant", "user"]
    assert st.messages[-1] == {"role": "user", "content": "2+2?"}
    assert st.callbacks == [events.append]


def test_model_turn_then_plan_execute_resolve():
    a = agent([[call("add", a=2, b=3), call("nope", q=1), call("add", a="x", b=1)]])
    st = a.graph.prepare("sum", "sum", None, None, None)
    turn, seconds = asyncio.run(a.graph.model_turn(st))
    assert [c.name for c in turn.tool_calls] == ["add", "nope", "add"] and seconds >= 0

    plan = a.graph.plan_calls(st, turn, seconds)
    assert [i for i, _t, _v in plan.scheduled] == [0]  # only the valid call runs
    kinds = [r.error_kind if r else None for r in plan.records]
    assert kinds == [None, "unknown_tool", "invalid_arguments"]
    assert json.loads(plan.records[1].content)["valid_tools"] == ["add", "boom"]
    assert st.messages[-1]["role"] == "assistant" and len(st.messages[-1]["tool_calls"]) == 3

    asyncio.run(a.graph.execute(st, plan))
    assert plan.records[0].content == "5" and plan.records[0].ok

    step = a.graph.resolve(st, plan)
    assert isinstance(step, Step) and st.steps == [step]
    tool_msgs = [m for m in st.messages if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_msgs] == [c.id for c in turn.tool_calls]  # call-id order
    assert st.failures == {"add": 1}  # the invalid arguments count against add's budget


def test_resolve_raises_when_a_tool_spends_its_budget():
    a = agent([call("boom", x=1), "never"])
    with pytest.raises(ToolRetriesExceeded, match=r"tool 'boom' failed 1 time in this run \(retries=0"):
        a.run("go")


def test_iter_yields_each_step_then_the_result():
    a = agent([call("add", a=1, b=2), "It is 3."])

    async def go():
        run = a.iter("1+2?")
        seen = []
        async for step in run:
            seen.append((step.index, [c.name for c in step.tool_calls], step.text, run.result is None))
        return seen, run.result

    seen, result = asyncio.run(go())
    assert seen == [(0, ["add"], "", True), (1, [], "It is 3.", False)]
    assert result.answer == "It is 3." and result.stop_reason == "final_answer"
    assert result.answer == agent([call("add", a=1, b=2), "It is 3."]).run("1+2?").answer


def test_phases_are_overridable():
    class Cached(Agent):
        """execute_tool_call overridden: a cache in front of the tools; process_tool_calls counted."""

        seen = 0

        async def execute_tool_call(self, state, tl, c, validated, byte_share=None, token_share=None):
            if c.arguments == {"a": 1, "b": 1}:
                from agentkit.result import ToolCallRecord

                return ToolCallRecord(c.id, c.name, c.arguments, "2 (cached)")
            return await super().execute_tool_call(state, tl, c, validated, byte_share, token_share)

        async def process_tool_calls(self, state, turn, model_s):
            self.seen += len(turn.tool_calls)
            return await super().process_tool_calls(state, turn, model_s)

    a = Cached(ScriptedBackend([[call("add", a=1, b=1), call("add", a=2, b=2)], answer("ok")]), [add])
    result = a.run("sums")
    assert [r.content for r in result.steps[0].tool_calls] == ["2 (cached)", "4"]
    assert a.seen == 2 and isinstance(a.graph, RunGraph)


def test_a_run_state_emits_to_each_callback_and_without_any_does_nothing():
    a = agent([])
    a.graph.prepare("q", "q", None, None, None).emit(object())  # no callbacks: no error, nothing to guard
    got = []
    a.graph.prepare("q", "q", None, None, got.append).emit("e")
    a.graph.callbacks = [got.append]
    a.graph.prepare("q", "q", None, None, got.append).emit("f")
    assert got == ["e", "f", "f"]


def test_iterating_a_run_again_continues_it_and_never_restarts_it():
    a = agent([call("add", a=1, b=2), "It is 3."])

    async def go():
        run = a.iter("1+2?")
        first = []
        async for step in run:
            first.append(step.index)
            break  # stop after the first step
        rest = [step.index async for step in run]
        again = [step.index async for step in run]
        return first, rest, again, run.result

    first, rest, again, result = asyncio.run(go())
    assert (first, rest, again) == ([0], [1], [])
    assert result.answer == "It is 3." and len(result.steps) == 2


def test_an_overridden_execute_tool_call_still_gets_its_finished_event_and_a_type_check():
    from agentkit.result import ToolCallRecord

    class Cached(Agent):
        async def execute_tool_call(self, state, tl, c, validated, byte_share=None, token_share=None):
            return ToolCallRecord(c.id, c.name, c.arguments, "cached")

    events = []
    Cached(ScriptedBackend([call("add", a=1, b=1), "ok"]), [add]).run("x", on_event=events.append)
    kinds = [e.kind for e in events]
    assert kinds.count("tool_call_started") == kinds.count("tool_call_finished") == 1

    class Wrong(Agent):
        async def execute_tool_call(self, state, tl, c, validated, byte_share=None, token_share=None):
            return "not a record"

    with pytest.raises(
        TypeError, match=r"Wrong.execute_tool_call must return an agentkit.ToolCallRecord, got str"
    ):
        Wrong(ScriptedBackend([call("add", a=1, b=1), "ok"]), [add]).run("x")
