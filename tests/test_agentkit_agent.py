"""The planner loop with the scripted backend: tool round trips, failures, parallel calls, guards, events."""

import asyncio
import contextvars
import json
import threading
import time

import pytest

from agentkit import Agent, ModelRetry, tool
from agentkit.backends.base import Backend, ModelTurn, ToolCallRequest
from agentkit.backends.scripted import ScriptedBackend, answer, call, turn
from agentkit.calls import echo_arguments
from agentkit.errors import (
    BackendError,
    LoopGuardTriggered,
    MaxStepsExceeded,
    ToolDefinitionError,
    ToolRetriesExceeded,
)
from agentkit.events import (
    ModelResponded,
    RunFailed,
    RunFinished,
    RunStarted,
    ToolCallFinished,
    ToolCallStarted,
)
from agentkit.tools import ToolContext


@tool
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: First.
        b: Second.
    """
    return a + b


@tool
def divide(a: float, b: float) -> float:
    """Divide a by b."""
    return a / b


def tool_messages(messages):
    return [m for m in messages if m["role"] == "tool"]


def test_final_answer_without_tools():
    backend = ScriptedBackend(["Hello!"])
    result = Agent(backend, [add], system_prompt="Be brief.").run("Hi")
    assert result.answer == "Hello!"
    assert result.stop_reason == "final_answer"
    assert len(result.steps) == 1 and result.steps[0].tool_calls == []
    assert result.usage.requests == 1
    assert result.timing.total_seconds >= result.timing.model_seconds >= 0
    sent = backend.requests[0]
    assert sent.messages == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    assert [t["function"]["name"] for t in sent.tools] == ["add"]
    assert sent.tool_choice == "auto"


def test_tool_round_trip_and_transcript():
    backend = ScriptedBackend([call("add", a=2, b=40), answer("42")])
    result = Agent(backend, [add]).run("2+40?")
    assert result.answer == "42"
    rec = result.steps[0].tool_calls[0]
    assert (rec.id, rec.name, rec.arguments, rec.content, rec.result, rec.error) == (
        "call_0",
        "add",
        {"a": 2, "b": 40},
        "42",
        42,
        None,
    )
    second = backend.requests[1].messages
    assert second[-2] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_0", "type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 40}}}
        ],
    }
    assert second[-1] == {"role": "tool", "tool_call_id": "call_0", "name": "add", "content": "42"}
    assert result.usage.requests == 2
    assert result.usage.input_tokens > 0


def test_tool_exception_becomes_tool_response_with_name_and_arguments():
    backend = ScriptedBackend([call("divide", a=1, b=0), answer("cannot divide by zero")])
    result = Agent(backend, [divide]).run("1/0?")
    assert result.answer == "cannot divide by zero"
    rec = result.steps[0].tool_calls[0]
    assert rec.error_kind == "exception"
    assert rec.error == "ZeroDivisionError: float division by zero"
    payload = json.loads(rec.content)
    assert payload == {
        "error": "ZeroDivisionError: float division by zero",
        "tool": "divide",
        "arguments": {"a": 1, "b": 0},
    }
    assert tool_messages(backend.requests[1].messages)[0]["content"] == rec.content


def test_model_retry_sends_its_message_only():
    @tool
    def lookup(key: str) -> str:
        raise ModelRetry(f"no key {key!r}; valid keys are 'a' and 'b'")

    backend = ScriptedBackend([call("lookup", key="z"), "ok"])
    result = Agent(backend, [lookup]).run("?")
    assert json.loads(result.tool_calls[0].content)["error"] == "no key 'z'; valid keys are 'a' and 'b'"


def test_sync_tool_hanging_past_timeout_does_not_block_the_loop():
    release = threading.Event()
    finished = threading.Event()

    @tool(timeout=0.2)
    def hang(x: int) -> int:
        release.wait(30)
        finished.set()
        return x

    backend = ScriptedBackend([call("hang", x=1), answer("it timed out")])
    try:
        t0 = time.perf_counter()
        result = Agent(backend, [hang]).run("go")
        elapsed = time.perf_counter() - t0
        assert not finished.is_set()  # the planner answered while the tool thread was still blocked
        assert elapsed < 10
    finally:
        release.set()
    rec = result.tool_calls[0]
    assert rec.error_kind == "timeout"
    assert rec.error == "tool 'hang' timed out after 0.2 s"
    assert json.loads(rec.content)["arguments"] == {"x": 1}
    assert result.answer == "it timed out"
    assert finished.wait(5)


def test_async_tool_past_timeout_is_cancelled():
    state = {}

    @tool(timeout=0.1)
    async def slow(x: int) -> int:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            state["cancelled"] = True
            raise
        return x

    result = Agent(ScriptedBackend([call("slow", x=1), "done"]), [slow]).run("go")
    assert result.tool_calls[0].error_kind == "timeout"
    assert state == {"cancelled": True}


def test_tool_raising_timeout_error_itself_is_an_exception_not_a_timeout():
    @tool(timeout=5)
    def flaky() -> str:
        raise TimeoutError("upstream timed out")

    result = Agent(ScriptedBackend([call("flaky"), "done"]), [flaky]).run("go")
    assert result.tool_calls[0].error_kind == "exception"
    assert result.tool_calls[0].error == "TimeoutError: upstream timed out"


def test_unknown_tool_name_lists_valid_tools():
    backend = ScriptedBackend([call("multiply", a=2, b=3), call("add", a=2, b=3), "5"])
    result = Agent(backend, [add, divide]).run("2*3?")
    rec = result.steps[0].tool_calls[0]
    assert rec.error_kind == "unknown_tool"
    payload = json.loads(rec.content)
    assert payload["error"] == "unknown tool 'multiply'"
    assert payload["valid_tools"] == ["add", "divide"]
    assert payload["arguments"] == {"a": 2, "b": 3}
    assert result.steps[1].tool_calls[0].content == "5"


def test_invalid_arguments_are_reported_with_the_schema():
    backend = ScriptedBackend([call("add", a="two", b=2), "sorry"])
    result = Agent(backend, [add]).run("?")
    rec = result.tool_calls[0]
    assert rec.error_kind == "invalid_arguments"
    payload = json.loads(rec.content)
    assert "a: Input should be a valid integer" in payload["error"]
    assert payload["parameters"] == add.parameters


def test_backend_decode_error_goes_back_with_valid_names():
    bad = ToolCallRequest(
        "c1",
        "add",
        {},
        error="arguments are not valid JSON (Expecting value at character 5)",
        raw_arguments='{"a":',
    )
    backend = ScriptedBackend([ModelTurn(tool_calls=[bad]), "ok"])
    result = Agent(backend, [add]).run("?")
    payload = json.loads(result.tool_calls[0].content)
    assert payload["error"].startswith("arguments are not valid JSON")
    assert payload["arguments"] == '{"a":'
    assert payload["valid_tools"] == ["add"]
    assert backend.requests[1].messages[-2]["tool_calls"][0]["function"]["arguments"] == '{"a":'


def test_parallel_calls_run_concurrently_and_answer_in_id_order():
    barrier = threading.Barrier(2, timeout=5)
    order = []
    second_done = threading.Event()

    @tool
    def slow_first(x: int) -> str:
        barrier.wait()  # passes only if slow_second runs at the same time
        assert second_done.wait(5)
        order.append("first")
        return f"first {x}"

    @tool
    def slow_second(x: int) -> str:
        barrier.wait()
        order.append("second")
        second_done.set()
        return f"second {x}"

    backend = ScriptedBackend(
        [[call("slow_first", x=1), call("divide", a=1, b=0), call("slow_second", x=2)], "done"]
    )
    result = Agent(backend, [slow_first, slow_second, divide]).run("go")
    assert order == ["second", "first"]  # completion order differs from call order...
    recs = result.steps[0].tool_calls
    assert [r.id for r in recs] == ["call_0", "call_1", "call_2"]  # ...records and responses are in id order
    assert [r.content for r in (recs[0], recs[2])] == ["first 1", "second 2"]
    assert recs[1].error_kind == "exception"
    tms = tool_messages(backend.requests[1].messages)
    assert [m["tool_call_id"] for m in tms] == ["call_0", "call_1", "call_2"]
    assert [m["name"] for m in tms] == ["slow_first", "divide", "slow_second"]


def test_parallel_async_calls_run_concurrently():
    @tool(timeout=5)
    async def ping(ctx: ToolContext) -> str:
        ctx.deps[ctx.call_id].set()
        other = "b" if ctx.call_id == "a" else "a"
        await ctx.deps[other].wait()  # deadlocks (-> timeout) unless both run at once
        return "pong"

    async def main():
        events = {"a": asyncio.Event(), "b": asyncio.Event()}
        backend = ScriptedBackend([[call("ping", call_id="a"), call("ping", call_id="b")], "done"])
        return await Agent(backend, [ping]).arun("go", deps=events)

    result = asyncio.run(main())
    assert [r.content for r in result.tool_calls] == ["pong", "pong"]


def test_duplicate_and_missing_call_ids_are_made_unique():
    backend = ScriptedBackend(
        [[call("add", call_id="x", a=1, b=1), call("add", {"a": 2, "b": 2}, call_id="x")], "ok"]
    )
    result = Agent(backend, [add]).run("?")
    ids = [r.id for r in result.tool_calls]
    assert ids == ["x", "x_1"]
    assert [m["tool_call_id"] for m in tool_messages(result.messages)] == ids


def test_loop_guard_stops_repeated_identical_calls():
    backend = ScriptedBackend(
        [call("add", a=1, b=2), call("add", b=2, a=1), call("add", a=1, b=2), "never reached"]
    )
    with pytest.raises(LoopGuardTriggered) as ei:
        Agent(backend, [add], loop_guard=3).run("loop")
    exc = ei.value
    assert 'add({"a":1,"b":2}) 3 times' in str(exc)
    partial = exc.result
    assert partial.answer is None and partial.stop_reason == "loop_guard"
    assert [r.error_kind for r in partial.tool_calls] == [None, None, "not_run"]
    assert len(tool_messages(partial.messages)) == 2
    assert backend.remaining == 1


def test_loop_guard_can_be_disabled():
    backend = ScriptedBackend([call("add", a=1, b=2)] * 4 + ["3"])
    assert Agent(backend, [add], loop_guard=None).run("loop").answer == "3"


def test_step_limit_raises_with_partial_transcript():
    backend = ScriptedBackend(lambda messages, tools, tc: call("add", a=len(messages), b=1))
    with pytest.raises(MaxStepsExceeded) as ei:
        Agent(backend, [add], max_steps=3).run("count")
    partial = ei.value.result
    assert "no final answer after 3 model turns" in str(ei.value)
    assert partial.stop_reason == "max_steps" and partial.answer is None
    assert len(partial.steps) == 3
    assert [r.content for r in partial.tool_calls] == ["2", "4", "6"]  # len(messages) + 1: 1, 3, 5 messages
    assert partial.conversation.messages == []  # a failed turn does not enter the history


def test_failure_budget_stops_a_tool_that_keeps_failing():
    @tool(retries=1)
    def broken(n: int) -> int:
        raise RuntimeError(f"broken {n}")

    backend = ScriptedBackend([call("broken", n=1), call("broken", n=2), "never"])
    with pytest.raises(ToolRetriesExceeded) as ei:
        Agent(backend, [broken]).run("go")
    assert (
        "tool 'broken' failed 2 times in this run (retries=1; the calls of one step all run before the budget is checked); last error: RuntimeError: broken 2"
        in str(ei.value)
    )
    assert len(ei.value.result.tool_calls) == 2


def test_forced_tool_choice_applies_to_first_turn_only():
    backend = ScriptedBackend([call("add", a=1, b=1), "2"])
    Agent(backend, [add], tool_choice={"name": "add"}).run("?")
    assert [r.tool_choice for r in backend.requests] == [{"name": "add"}, "auto"]
    backend = ScriptedBackend([call("add", a=1, b=1), "2"])
    Agent(backend, [add], tool_choice="required", reset_tool_choice=False).run("?")
    assert [r.tool_choice for r in backend.requests] == ["required", "required"]


def test_constructor_checks():
    with pytest.raises(ToolDefinitionError, match="tool_choice names tool 'nope'"):
        Agent(ScriptedBackend([]), [add], tool_choice={"name": "nope"})
    with pytest.raises(ToolDefinitionError, match="duplicate tool name 'add'"):
        Agent(ScriptedBackend([]), [add, add])
    with pytest.raises(ValueError, match="max_steps must be an integer >= 1"):
        Agent(ScriptedBackend([]), max_steps=0)
    with pytest.raises(ValueError, match="tool_choice must be"):
        Agent(ScriptedBackend([]), tool_choice="sometimes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"question must be a non-empty string, got str '  '$"):
        Agent(ScriptedBackend([])).run("  ")
    # the message named no type
    with pytest.raises(ValueError, match=r"question must be a non-empty string, got int 123$"):
        Agent(ScriptedBackend([])).run(123)  # type: ignore[arg-type]


def test_plain_functions_and_agent_tool_decorator():
    def mul(a: int, b: int) -> int:
        """Multiply."""
        return a * b

    agent = Agent(ScriptedBackend([call("mul", a=6, b=7), call("neg", x=42), "-42"]), [mul])

    @agent.tool
    def neg(x: int) -> int:
        return -x

    result = agent.run("?")
    assert [r.content for r in result.tool_calls] == ["42", "-42"]
    assert list(agent.tools) == ["mul", "neg"]


def test_agent_tool_decorator_takes_the_options_of_tool():
    agent = Agent(ScriptedBackend([call("negate", x=4), "-4"]))

    @agent.tool(name="negate", timeout=2.5, retries=0, max_output_bytes=100)
    def neg(x: int) -> int:
        """Negate."""
        return -x

    assert (neg.name, neg.timeout, neg.retries, neg.max_output_bytes) == ("negate", 2.5, 0, 100)
    assert agent.tools["negate"] is neg and neg(3) == -3
    assert [r.content for r in agent.run("?").tool_calls] == ["-4"]
    with pytest.raises(TypeError, match="timeoutt"):
        agent.tool(timeoutt=1)(lambda x: x)


def test_tool_choice_required_without_tools_is_refused_before_the_model_is_asked():
    backend = ScriptedBackend([call("ping"), "done"])
    agent = Agent(backend, tool_choice="required")  # tools may still be added: not refused here
    with pytest.raises(ValueError, match="tool_choice='required' needs a tool, and this agent has none"):
        agent.run("?")
    assert backend.requests == []

    @agent.tool
    def ping() -> str:
        return "pong"

    assert agent.run("?").answer == "done"


def test_a_forced_tool_choice_whose_tool_was_removed_is_refused_before_the_model_is_asked():
    # __init__ checks the name; remove_tool (or setting tool_choice later) left it to the backend, whose turn
    # then failed (the embedded grammar: after loading the checkpoint) or ignored it
    @tool
    def ping() -> str:
        """Ping."""
        return "pong"

    backend = ScriptedBackend([call("ping"), "done"])
    agent = Agent(backend, [ping], tool_choice={"name": "ping"})
    agent.remove_tool("ping")
    with pytest.raises(
        ValueError, match=r"tool_choice names tool 'ping', which is not a tool of this agent \(\[\]\)"
    ):
        agent.run("?")
    agent.tool_choice = {"name": "pong"}
    agent.add_tool(ping)
    with pytest.raises(ValueError, match="tool_choice names tool 'pong'"):
        agent.run("?")
    assert backend.requests == []


def test_a_forced_tool_choice_whose_tool_a_tool_removed_during_the_run_is_refused_before_the_next_turn():
    # with reset_tool_choice=False the next turn was sent still forcing the removed tool: the embedded backend
    # failed with "BackendError: embedded backend: ValueError: ... not declared", a server with a 400
    agent: Agent

    @tool
    def once() -> str:
        """Runs once, then leaves the agent."""
        agent.remove_tool("once")
        return "gone"

    backend = ScriptedBackend([call("once"), "done"])
    agent = Agent(backend, [once], tool_choice={"name": "once"}, reset_tool_choice=False)
    with pytest.raises(ValueError, match=r"tool_choice names tool 'once', which the agent no longer has"):
        agent.run("?")
    assert len(backend.requests) == 1


def test_a_tool_that_calls_sys_exit_is_a_failed_call_not_the_end_of_the_process():
    import argparse
    import sys

    def cli(args: str) -> str:
        """A wrapped command line: argparse exits on a bad argument."""
        parser = argparse.ArgumentParser(prog="cli")
        parser.add_argument("--n", type=int)
        return str(parser.parse_args(args.split()).n)

    async def leave(code: int) -> str:
        sys.exit(code)

    script = [[call("cli", args="--n x"), call("leave", code=3)], call("cli", args="--n 4"), "done"]
    result = Agent(ScriptedBackend(script), [cli, leave]).run("?")
    assert result.answer == "done"
    assert [(r.error_kind, r.error) for r in result.tool_calls] == [
        ("exception", "SystemExit: the tool called sys.exit(2)"),
        ("exception", "SystemExit: the tool called sys.exit(3)"),
        (None, None),
    ]
    assert result.tool_calls[2].content == "4"


class _Abort(BaseException):
    """A library's own BaseException subclass (as some frameworks raise to unwind)."""


def test_a_tool_raising_a_custom_base_exception_is_a_failed_call_and_ctrl_c_still_propagates():
    def sync_abort() -> str:
        raise _Abort("sync unwound")

    async def async_abort() -> str:
        raise _Abort("async unwound")

    script = [[call("sync_abort"), call("async_abort")], "done"]
    result = Agent(ScriptedBackend(script), [sync_abort, async_abort]).run("?")
    assert result.answer == "done"
    assert [(r.error_kind, r.error) for r in result.tool_calls] == [
        ("exception", "_Abort: sync unwound"),
        ("exception", "_Abort: async unwound"),
    ]
    assert json.loads(result.tool_calls[0].content)["error"] == "_Abort: sync unwound"

    def interrupted() -> str:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        Agent(ScriptedBackend([call("interrupted"), "done"]), [interrupted]).run("?")


def test_ctrl_c_in_an_async_tool_reaches_the_awaiting_caller_as_itself():
    """A lone call is awaited in the run's own task: its KeyboardInterrupt is what ``await agent.arun()``
    raises and RunFailed reports (run through a gather, the caller got a CancelledError and the interrupt
    escaped past its ``except``), and a context variable the tool sets stays set, as after a plain await."""
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")

    async def interrupted() -> str:
        raise KeyboardInterrupt("stop")

    async def set_var() -> str:
        var.set("set by the tool")
        return "ok"

    failed: list[BaseException] = []

    async def main() -> tuple[str, str]:
        agent = Agent(
            ScriptedBackend([call("interrupted"), "done"]),
            [interrupted],
            on_event=lambda e: failed.append(e.error) if isinstance(e, RunFailed) else None,
        )
        try:
            await agent.arun("?")
        except KeyboardInterrupt as e:
            caught = f"KeyboardInterrupt: {e}"
        await Agent(ScriptedBackend([call("set_var"), "done"]), [set_var]).arun("?")
        return caught, var.get()

    try:
        got = asyncio.run(main())
    except KeyboardInterrupt:
        pytest.fail("the tool's KeyboardInterrupt escaped past the caller's except")
    assert got == ("KeyboardInterrupt: stop", "set by the tool")
    assert [type(e).__name__ for e in failed] == ["KeyboardInterrupt"]


def test_ctrl_c_in_one_of_several_async_tool_calls_reaches_the_awaiting_caller_as_itself():
    """With two calls in a step (run concurrently), one call's KeyboardInterrupt is what ``await agent.arun()``
    raises (it escaped ``asyncio.run`` past the caller's ``except``), after the other call, still waiting, is
    cancelled."""
    cancelled: list[str] = []

    async def interrupted() -> str:
        raise KeyboardInterrupt("stop")

    async def waiting() -> str:
        try:
            await asyncio.Event().wait()  # never set: only the cancellation ends it
        except asyncio.CancelledError:
            cancelled.append("waiting")
            raise
        return "never"

    failed: list[BaseException] = []
    backend = ScriptedBackend([[call("waiting"), call("interrupted")], "done"])

    async def main() -> str:
        agent = Agent(
            backend,
            [waiting, interrupted],
            on_event=lambda e: failed.append(e.error) if isinstance(e, RunFailed) else None,
        )
        try:
            await agent.arun("?")
        except KeyboardInterrupt as e:
            return f"KeyboardInterrupt: {e}"
        return "no interrupt"

    try:
        got = asyncio.run(main())
    except KeyboardInterrupt:
        pytest.fail("the tool's KeyboardInterrupt escaped past the caller's except")
    assert got == "KeyboardInterrupt: stop"
    assert cancelled == ["waiting"]
    assert [type(e).__name__ for e in failed] == ["KeyboardInterrupt"]


@pytest.mark.parametrize(
    ("args", "options", "message"),
    [
        (
            ([add],),
            {},
            "Agent's first argument is the model (a backend, a spec string such as 'embedded', or None)",
        ),
        ((add,), {}, "got Tool: pass the tools as tools=[...]"),
        ((ScriptedBackend([]),), {"tools": add}, "tools must be a list of tools or functions, got one Tool"),
        (
            (ScriptedBackend([]),),
            {"on_event": 5},
            "on_event must be a callable or a list of callables, got 5",
        ),
        # was AttributeError "'str' object has no attribute 'tools'" at the first run
        (
            (ScriptedBackend([]),),
            {"toolsets": ["notes"]},
            "toolsets must be a list of agentkit.mcp.MCPToolset",
        ),
        ((ScriptedBackend([]),), {"toolsets": "notes"}, "MCPToolset, got 'notes'"),
    ],
)
def test_a_first_agent_s_mix_ups_are_named(args, options, message):
    # were: "model must be a Backend ... got [...]", "'Tool' object is not iterable", "'int' object is not iterable"
    with pytest.raises(TypeError) as info:
        Agent(*args, **options)
    assert message in str(info.value)


def test_max_steps_that_is_not_an_integer_is_named():
    with pytest.raises(ValueError, match="max_steps must be an integer >= 1, got '3'"):
        Agent(ScriptedBackend([]), max_steps="3")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        # were: accepted (a float loop guard, a number as the system prompt), or "'<' not supported between
        # instances of 'str' and 'int'"
        ({"loop_guard": 2.5}, "loop_guard must be an integer >= 2 or None, got 2.5"),
        ({"loop_guard": True}, "loop_guard must be an integer >= 2 or None, got True"),
        ({"max_format_retries": "2"}, "max_format_retries must be an integer >= 0, got '2'"),
        (
            {"max_tool_output_bytes": 1.5},
            "max_tool_output_bytes must be an integer >= 1 (bytes), 'auto' or None",
        ),
        ({"system_prompt": 5}, "system_prompt must be a string or None, got int"),
        ({"system_prompt": ["Be brief."]}, "system_prompt must be a string or None, got list"),
    ],
)
def test_settings_of_the_wrong_type_are_named(options, message):
    with pytest.raises(ValueError) as info:
        Agent(ScriptedBackend([]), **options)
    assert message in str(info.value)


def test_events_are_emitted_in_order():
    events = []
    backend = ScriptedBackend([turn(call("add", a=1, b=2), thinking="t"), "3"])
    result = Agent(backend, [add], on_event=events.append).run("?")
    kinds = [e.kind for e in events]
    assert kinds == [
        "run_started",
        "model_responded",
        "tool_call_started",
        "tool_call_finished",
        "model_responded",
        "run_finished",
    ]
    assert isinstance(events[0], RunStarted) and events[0].tools == ("add",)
    assert isinstance(events[1], ModelResponded) and events[1].turn.thinking == "t"
    assert isinstance(events[2], ToolCallStarted) and events[2].arguments == {"a": 1, "b": 2}
    assert isinstance(events[3], ToolCallFinished) and events[3].record.content == "3"
    assert isinstance(events[5], RunFinished) and events[5].result is result


def test_run_failed_event_and_backend_error():
    events = []
    agent = Agent(ScriptedBackend([]), [add], on_event=events.append)
    with pytest.raises(BackendError, match="has no turn left"):
        agent.run("?")
    assert isinstance(events[-1], RunFailed)


def test_run_failed_ends_every_run_that_stops_without_an_answer():
    # an overridden phase's error and a cancelled run end with RunFailed too, reported once, so a tracer
    # waiting for RunFinished or RunFailed is never left waiting
    class Wrong(Agent):
        async def execute_tool_call(self, state, tl, c, validated, byte_share=None, token_share=None):
            return "not a record"

    events: list = []
    wrong = Wrong(ScriptedBackend([call("add", a=1, b=2), "x"]), [add], on_event=events.append)
    with pytest.raises(TypeError, match=r"must return an agentkit\.ToolCallRecord"):
        wrong.run("?")
    assert [e.kind for e in events][-2:] == ["tool_call_started", "run_failed"]
    assert isinstance(events[-1].error, TypeError)

    started = asyncio.Event()

    @tool
    async def wait() -> str:
        """Waits."""
        started.set()
        await asyncio.sleep(30)
        return "late"

    seen: list = []
    slow = Agent(ScriptedBackend([call("wait"), "x"]), [wait], on_event=seen.append)

    async def main() -> None:
        task = asyncio.create_task(slow.arun("?"))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert [e.kind for e in seen] == ["run_started", "model_responded", "tool_call_started", "run_failed"]
    assert isinstance(seen[-1].error, asyncio.CancelledError)

    events.clear()
    with pytest.raises(BackendError):
        Agent(ScriptedBackend([]), on_event=events.append).run("?")
    assert [e.kind for e in events] == ["run_started", "run_failed"]  # reported once


def test_a_tool_that_failed_and_was_unregistered_mid_run_does_not_break_the_budget_check():
    @tool
    def flaky() -> str:
        """Fails."""
        raise RuntimeError("down")

    @tool
    def unplug(ctx: ToolContext) -> str:
        """Unregisters flaky."""
        ctx.deps.remove_tool("flaky")
        return "removed"

    agent = Agent(ScriptedBackend([call("flaky"), call("unplug"), call("flaky"), "ok"]), [flaky, unplug])
    result = agent.run("?", deps=agent)
    assert [(c.name, c.error_kind) for c in result.tool_calls] == [
        ("flaky", "exception"),
        ("unplug", None),
        ("flaky", "unknown_tool"),
    ]
    assert result.answer == "ok"


def test_async_with_an_agent_without_toolsets_works_on_two_loops_at_once():
    # the toolset lease pinned the first loop even with no toolsets: a second thread's `async with agent:` was
    # refused as "MCP toolsets () are open on another event loop"
    agent = Agent(ScriptedBackend(["a", "b"]))
    inside, leave = threading.Event(), threading.Event()

    async def hold() -> None:
        async with agent:
            inside.set()
            await asyncio.to_thread(leave.wait, 30)

    holder = threading.Thread(target=asyncio.run, args=(hold(),))
    holder.start()
    try:
        assert inside.wait(30)

        async def use() -> str | None:
            async with agent:
                return (await agent.arun("?")).answer

        assert asyncio.run(use()) == "a"
    finally:
        leave.set()
        holder.join()


def test_async_event_callbacks_are_refused_and_none_in_a_callback_list_is_skipped():
    # an async def callback only made coroutines nobody awaited: every event was lost; None in a list of
    # callbacks passed the check and failed the run with "'NoneType' object is not callable"
    seen: list = []

    async def tracer(event) -> None:
        seen.append(event)

    with pytest.raises(TypeError, match=r"on_event: tracer is an async function, .* asyncio\.Queue"):
        Agent(ScriptedBackend(["a"]), on_event=[print, tracer])
    with pytest.raises(TypeError, match="tracer is an async function"):
        Agent(ScriptedBackend(["a"])).run("?", on_event=tracer)
    events: list = []
    result = Agent(ScriptedBackend(["a"]), on_event=[events.append, None]).run("?")
    assert result.answer == "a" and [e.kind for e in events] == [
        "run_started",
        "model_responded",
        "run_finished",
    ]


def test_run_inside_event_loop_is_refused_and_arun_works():
    agent = Agent(ScriptedBackend(["a", "b"]))

    async def main():
        with pytest.raises(RuntimeError, match=r"use `await agent\.arun"):
            agent.run("x")
        return await agent.arun("x")

    assert asyncio.run(main()).answer == "a"


def test_result_serialises():
    result = Agent(ScriptedBackend([call("add", a=1, b=2), "3"]), [add]).run("?")
    d = json.loads(result.to_json())
    assert d["answer"] == "3"
    assert d["steps"][0]["tool_calls"][0]["content"] == "3"
    assert d["usage"]["requests"] == 2
    assert set(d["timing"]) == {"total_seconds", "model_seconds", "tool_seconds", "framework_seconds"}


class _DuckBackend:
    """A backend written to the documented contract without subclassing ``Backend``."""

    name = "duck"

    def complete(self, messages, tools, tool_choice="auto"):
        return ModelTurn(text=f"{len(messages)} messages, {len(tools)} tools, {tool_choice}")


class _CompleteOnly(Backend):
    """A ``Backend`` subclass that overrides ``complete`` rather than ``turn``."""

    name = "complete-only"

    def complete(self, messages, tools, tool_choice="auto"):
        return ModelTurn(text=f"sync {messages[-1]['content']}")


def test_custom_backends_run_and_arun():
    for backend, text in ((_DuckBackend(), "2 messages, 1 tools, auto"), (_CompleteOnly(), "sync hi")):
        agent = Agent(backend, [add], system_prompt="s")
        assert agent.run("hi").answer == text
        assert asyncio.run(agent.arun("hi")).answer == text
    assert asyncio.run(_CompleteOnly().acomplete([{"role": "user", "content": "x"}], [])).text == "sync x"


def test_backend_subclass_without_turn_is_a_clear_error():
    class Empty(Backend):
        name = "empty"

    with pytest.raises(NotImplementedError, match="Empty is a Backend but implements neither turn"):
        Empty().complete([{"role": "user", "content": "x"}], [])


def test_a_tool_exception_whose_str_raises_is_a_failed_call_not_a_crash():
    class Unprintable(Exception):
        def __str__(self) -> str:
            raise ValueError("no text")

    @tool
    def fragile(x: int) -> int:
        """Fail with an exception that cannot be printed.

        Args:
            x: Any number.
        """
        raise Unprintable()

    backend = ScriptedBackend([call("fragile", x=1), answer("it failed")])
    result = Agent(backend, [fragile]).run("try it")
    assert result.answer == "it failed"
    rec = result.tool_calls[0]
    assert rec.error_kind == "exception"
    assert rec.error == "Unprintable: <str() failed: ValueError>"
    assert json.loads(rec.content)["error"] == rec.error


def test_an_error_response_echoes_at_most_a_kilobyte_of_the_arguments():
    # a cap above the echoed arguments, so that the responses are whole JSON (a smaller cap cuts them too)
    @tool(max_output_bytes=1000)
    def execute(code: str) -> str:
        """Run a program.

        Args:
            code: The program.
        """
        raise RuntimeError("it failed")

    code = "x = 1\n" * 5000  # 30,000 characters
    backend = ScriptedBackend(
        [
            [call("execute", code=code), call("execute", code=code, extra="y" * 200)],
            call("execute", code="print(1)"),
            answer("done"),
        ]
    )
    result = Agent(backend, [execute], loop_guard=None).run("run it")
    raised, invalid, small = result.tool_calls
    assert (raised.error_kind, invalid.error_kind) == ("exception", "invalid_arguments")
    assert json.loads(raised.content)["arguments"] == {"code": code[:120] + "...[29,880 more characters]"}
    assert json.loads(invalid.content)["arguments"] == {
        "code": code[:120] + "...[29,880 more characters]",
        "extra": "y" * 120 + "...[80 more characters]",
    }
    assert len(raised.content.encode()) < 600
    assert raised.arguments == {"code": code}  # the record keeps them whole
    assert json.loads(small.content)["arguments"] == {"code": "print(1)"}  # short ones as given


def test_an_error_response_summarises_arguments_too_many_to_echo():
    many = {f"k{i}": i for i in range(300)}
    assert echo_arguments(many) == f"<{len(json.dumps(many)):,} bytes of arguments, not repeated>"
    assert echo_arguments({"a": 1}) == {"a": 1}


def test_generator_tools_run_under_their_timeout_and_send_their_items():
    release = threading.Event()

    @tool(timeout=0.2)
    def stuck(n: int):
        """Yield n items, the second one only once released.

        Args:
            n: How many.
        """
        yield 0
        release.wait(5)
        yield from range(1, n)

    @tool
    async def numbers(n: int):
        """Yield n numbers.

        Args:
            n: How many.
        """
        for i in range(n):
            await asyncio.sleep(0)
            yield i

    backend = ScriptedBackend([[call("stuck", n=3), call("numbers", n=3)], answer("ok")])
    result = Agent(backend, [stuck, numbers]).run("q")
    release.set()
    timed_out, listed = result.tool_calls
    assert timed_out.error_kind == "timeout"  # drained on its worker thread, within the timeout
    assert (listed.error_kind, listed.content, listed.result) == (None, "[0,1,2]", [0, 1, 2])


def test_a_bad_scripted_item_is_refused_where_the_script_is_built(tmp_path):
    # answer(None) used to fail with "object of type 'NoneType' has no len()" deep inside a run
    with pytest.raises(TypeError, match=r"^answer\(\): the turn's text must be a string, got None$"):
        answer(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^turn\(\): the turn's thinking must be a string, got 3$"):
        turn(thinking=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"script item 1: the turn's text must be a string, got b'hi'"):
        ScriptedBackend(["ok", ModelTurn(text=b"hi")])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"script item 2: not a script item .* got 7"):
        ScriptedBackend(["ok", call("f"), 7])  # type: ignore[list-item]
    bad = tmp_path / "turns.json"
    bad.write_text(json.dumps(["ok", {"text": None}]))
    with pytest.raises(ValueError, match=r"turns.json: turn 1: the turn's text must be a string, got None"):
        ScriptedBackend.from_file(bad)
    with pytest.raises(BackendError, match=r"not a script item .* got None"):
        Agent(ScriptedBackend(lambda messages, tools, choice: None)).run("?")  # type: ignore[arg-type,return-value]
    bad.write_text("[" * 100_000 + "]" * 100_000)  # was json's RecursionError traceback from `agentkit run`
    with pytest.raises(ValueError, match=r"turns.json: cannot read scripted turns: maximum recursion depth"):
        ScriptedBackend.from_file(bad)


def test_result_json_writes_non_finite_arguments_as_strings():
    # a custom backend's arguments may hold NaN (Python's json reads it): to_json() (and `agentkit run --json`)
    # wrote a bare NaN, which is not JSON, so strict readers (jq, JSON.parse) refused the whole result
    @tool
    def g(x: float, y: list[float]) -> str:
        """G."""
        return "ok"

    nan, inf = float("nan"), float("inf")
    result = Agent(ScriptedBackend([call("g", x=nan, y=[inf, -inf]), "done"]), [g]).run("q")
    text = result.to_json()
    strict = json.loads(text, parse_constant=lambda c: pytest.fail(f"not JSON: {c}"))
    assert strict["steps"][0]["tool_calls"][0]["arguments"] == {"x": "NaN", "y": ["Infinity", "-Infinity"]}
    assert result.tool_calls[0].arguments["y"] == [inf, -inf]  # the record itself keeps the floats


def test_a_custom_backend_without_a_name_or_returning_no_model_turn_is_told_so():
    # both ended in an AttributeError from deep inside the run: "'dict' object has no attribute 'usage'",
    # "'Nameless' object has no attribute 'name'"
    class Nameless:
        def complete(self, messages, tools, tool_choice="auto"):
            return ModelTurn("hi", "", [])

    with pytest.raises(
        TypeError, match=r"^a backend needs a name \(a str attribute, e.g. 'mine'\), Nameless has none$"
    ):
        Agent(Nameless())

    class Dicts(Nameless):
        name = "dicts"

        def complete(self, messages, tools, tool_choice="auto"):
            return {"text": "hi"}

    events = []
    agent = Agent(Dicts(), on_event=events.append)
    with pytest.raises(
        TypeError,
        match=r"^backend 'dicts': returned dict for a model turn, not an agentkit\.backends\.base\.ModelTurn$",
    ):
        agent.run("?")
    assert [e.kind for e in events] == ["run_started", "run_failed"]

    class Bad(Nameless):
        name = "bad"

        def __init__(self, turn):
            self.result = turn

        def complete(self, messages, tools, tool_choice="auto"):
            return self.result

    with pytest.raises(TypeError, match=r"^backend 'bad': the turn's text must be a string, got None$"):
        Agent(Bad(ModelTurn(None))).run("?")  # was a pydantic ValidationError for Step at '1'
    with pytest.raises(
        TypeError, match=r"^backend 'bad': a tool call must be an agentkit\.messages\.ToolCall"
    ):
        Agent(Bad(ModelTurn("", "", [{"name": "f", "arguments": {}}]))).run("?")


def test_a_serializer_that_returns_no_str_is_an_error_response_naming_it():
    # bytes crashed the run (pydantic ValidationError for ToolCallRecord); an int or None was reported as
    # "TypeError: object of type 'int' has no len()"
    for returned in (b"\xff", 5, None):

        @tool(serializer=lambda v, r=returned: r)
        def stamp() -> str:
            """Stamp."""
            return "val"

        result = Agent(ScriptedBackend([call("stamp"), "done"]), [stamp]).run("?")
        record = result.tool_calls[0]
        assert result.answer == "done" and record.error is not None
        assert json.loads(record.content)["error"] == (
            f"TypeError: the serializer of tool 'stamp' returned {type(returned).__name__}, not str"
        )
