"""The planner: one run (one user turn) as named phases over an explicit :class:`RunState`.

:class:`RunGraph` holds an agent's run logic (``agent.graph``); the nodes of :mod:`agentkit.nodes` run its phases:
:meth:`~RunGraph.prepare`, :meth:`~RunGraph.model_turn` (trimming the prompt while it does not fit) and
``Agent.process_tool_calls`` (:meth:`~RunGraph.plan_calls`, :meth:`~RunGraph.execute`, :meth:`~RunGraph.resolve`:
every call answered, errors included, each response cut to its share of the step's budget). docs/ARCHITECTURE.md
walks through one turn.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from agentkit.backends.base import ChatMessage, ModelTurn, ToolChoice, Usage, tool_choice_name, turn_problem
from agentkit.backends.base import PromptTooLong as BackendPromptTooLong
from agentkit.calls import (
    canonical_arguments,
    error_record,
    format_reminder,
    nearest_tool_name,
    unique_ids,
)
from agentkit.errors import (
    LoopGuardTriggered,
    PromptTooLong,
    ToolCallFormatError,
    ToolRetriesExceeded,
    describe_exception,
)
from agentkit.events import (
    Event,
    EventCallback,
    ModelResponded,
    PromptTrimmed,
    RunFailed,
    RunFinished,
    ToolCallFinished,
    ToolCallStarted,
)
from agentkit.history import Conversation, droppable_groups
from agentkit.messages import ToolCall, assistant_message, tool_message
from agentkit.result import RunResult, Step, StopReason, Timing, ToolCallRecord
from agentkit.tool_output import ToolImageLimits, ToolImageShare, cap_output, cap_output_tokens
from agentkit.tools import Tool, ToolArgumentsError, ToolContext, ToolTimeoutError

if TYPE_CHECKING:
    from agentkit.backends.base import Backend

__all__ = ["CallPlan", "Host", "RunGraph", "RunState"]

_perf = time.perf_counter
_E = TypeVar("_E", bound=BaseException)


@dataclass
class RunState:
    """Everything one run carries between its phases: the question and its content, the history it started
    from, ``deps``, the event ``callbacks``, the transcript (``messages``), what the result reports, the
    loop-guard counts (``repeats``), failures per tool, how many droppable groups the prompt leaves out, reminders
    sent, the tool-output budgets (bytes, tokens; asked once per run) and whether it failed."""

    question: str
    content: str | list[dict[str, Any]]
    conversation: Conversation
    deps: Any
    callbacks: list[EventCallback]
    messages: list[ChatMessage]
    tool_choice: ToolChoice
    backend_name: str
    steps: list[Step] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    timing: Timing = field(default_factory=Timing)
    step: int = 0
    repeats: dict[tuple[str, str], int] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=dict)
    dropped_groups: int = 0
    reminders: int = 0
    budget: tuple[int | None, int | None] | None = None
    t_start: float = field(default_factory=_perf)
    result: RunResult | None = None
    failed: bool = False

    def emit(self, event: Event) -> None:
        """Hand ``event`` to every callback, in order."""
        for cb in self.callbacks:
            cb(event)

    def prompt_view(self) -> tuple[list[ChatMessage], list[tuple[int, int]]]:
        """The messages sent to the model (the dropped groups left out) and the droppable groups."""
        groups = droppable_groups(self.messages)
        if not self.dropped_groups:
            return self.messages, groups
        skip = {i for a, b in groups[: self.dropped_groups] for i in range(a, b)}
        return [m for i, m in enumerate(self.messages) if i not in skip], groups

    def partial(
        self, reason: StopReason, answer: str | None = None, conversation: Conversation | None = None
    ) -> RunResult:
        """The run so far as a :class:`RunResult` (without an answer: the transcript of a run that stops)."""
        self.timing.total_seconds = _perf() - self.t_start
        conv = self.conversation if conversation is None else conversation
        return RunResult(
            self.question,
            answer,
            self.steps,
            self.usage,
            self.timing,
            self.messages,
            conv,
            reason,
            self.backend_name,
        )

    def fail(self, exc: _E) -> _E:
        """Emit :class:`~agentkit.events.RunFailed` for ``exc`` (once per run); ``exc``, for the caller to raise."""
        if not self.failed:
            self.failed = True
            self.emit(RunFailed(exc))
        return exc


@dataclass
class CallPlan:
    """One step's calls (names resolved, ids unique), the records planning decided (error responses, else
    ``None``), the ``(index, tool, validated arguments)`` to run, and the :class:`~agentkit.result.Step`."""

    calls: list[ToolCall]
    records: list[ToolCallRecord | None]
    scheduled: list[tuple[int, Tool, Any]]
    step: Step


# ------------------------------------------------------------------------------------------------ helpers


#: Characters an image counts for, per soft token, in :func:`message_chars` (about a text token's worth).
_CHARS_PER_SOFT_TOKEN = 4
#: Soft tokens an image part without ``vision_budget`` counts for when the backend does not say
#: (``Backend.default_vision_budget``): an estimate for remote models.
IMAGE_TOKENS_UNKNOWN = 256


def message_chars(m: ChatMessage, image_tokens: int = IMAGE_TOKENS_UNKNOWN) -> int:
    """Rough size of a message in the prompt: characters of its content and calls (an image as its soft tokens)."""
    c = m.get("content")
    if isinstance(c, list):
        n = 0
        for part in c:
            if isinstance(part, dict) and part.get("type") in ("image_url", "image"):
                n += int(part.get("vision_budget") or image_tokens) * _CHARS_PER_SOFT_TOKEN
            else:
                n += len(json.dumps(part, default=str))
    else:
        n = len(c) if isinstance(c, str) else len(json.dumps(c, default=str)) if c is not None else 0
    for tc in m.get("tool_calls") or ():
        fn = tc.get("function", {})
        args = fn.get("arguments")
        n += len(str(fn.get("name", ""))) + (
            len(args) if isinstance(args, str) else len(json.dumps(args, default=str))
        )
    return n


def response_cap(
    backend: Any, tool_limit: int | None, byte_share: int | None, token_share: int | None
) -> Callable[[str], str]:
    """What cuts one call's responses (its result or its error): to the smaller of ``tool_limit`` and
    ``byte_share`` bytes, then to ``token_share`` tokens counted by the backend's ``count_tokens`` (if it has one)."""
    limit = min((x for x in (tool_limit, byte_share) if x is not None), default=None)
    count = getattr(backend, "count_tokens", None)

    def cap(text: str) -> str:
        by_bytes = cap_output(text, limit)
        if count is None or token_share is None or count(by_bytes) <= token_share:
            return by_bytes
        # the token cap binds: cut the head the byte cap kept (so both hold), marker sized on the whole
        head = text if by_bytes is text else by_bytes[: by_bytes.rfind("\n[agentkit: cut ")]
        return cap_output_tokens(head, token_share, count, len(text.encode("utf-8", "surrogatepass")))

    return cap


# -------------------------------------------------------------------------------------------------- loop


class Host(Protocol):
    """What the graph reads from its agent: settings and overridable phases (:class:`agentkit.Agent` subclasses it)."""

    backend: Backend
    system_prompt: str | None
    max_steps: int
    tool_choice: ToolChoice
    loop_guard: int | None
    reset_tool_choice: bool
    trim_history: bool
    max_format_retries: int
    tool_images: ToolImageLimits

    def tool_output_budget(self) -> int | None: ...

    def tool_output_token_budget(self) -> int | None: ...

    async def refresh_tools(self) -> None: ...

    async def process_tool_calls(self, state: RunState, turn: ModelTurn, model_s: float) -> Step: ...

    async def execute_tool_call(
        self,
        state: RunState,
        tl: Tool,
        c: ToolCall,
        validated: Any,
        byte_share: int | None = None,
        token_share: int | None = None,
    ) -> ToolCallRecord:
        """Run one validated call under its timeout, its response cut to the budget. An exception (but
        ``KeyboardInterrupt``, ``GeneratorExit`` and cancellation), ``sys.exit()`` or a timeout becomes an error
        record. An override returns an :class:`agentkit.ToolCallRecord`; the planner emits its event."""

        cap = response_cap(self.backend, tl.max_output_bytes, byte_share, token_share)
        t0 = _perf()
        try:
            value = await tl.acall(validated, ToolContext(tl.name, c.id, state.step, state.deps))
            content = cap(tl.serialize(value))
        except ToolTimeoutError as exc:
            hint = "the tool did not answer in time; try other arguments or another approach"
            rec = error_record(c, c.arguments, "timeout", str(exc), {"hint": hint}, cap)
        except (KeyboardInterrupt, asyncio.CancelledError, GeneratorExit):
            raise
        except BaseException as exc:  # also sys.exit() (say, argparse's), a custom BaseException subclass
            rec = error_record(c, c.arguments, "exception", describe_exception(exc), cap=cap)
        else:
            rec = ToolCallRecord(c.id, c.name, c.arguments, content, None, None, value)
        rec.seconds = _perf() - t0
        return rec


async def gather_calls(runs: Sequence[Coroutine[Any, Any, ToolCallRecord]]) -> list[ToolCallRecord]:
    """Await ``runs`` concurrently, their records in order. A call's ``KeyboardInterrupt`` is caught in its own
    task (raised there, asyncio would stop the event loop and it would escape past the caller's ``except``): the
    other calls are cancelled and the interrupt is raised here, in the run's task. Otherwise the first call's
    exception, in call order, once every call has finished."""
    interrupts: list[KeyboardInterrupt] = []

    async def caught(run: Coroutine[Any, Any, ToolCallRecord]) -> ToolCallRecord | None:
        try:
            return await run
        except KeyboardInterrupt as exc:
            interrupts.append(exc)
            for task in tasks:
                if task is not asyncio.current_task():
                    task.cancel()
            return None

    tasks = [asyncio.ensure_future(caught(run)) for run in runs]
    done = await asyncio.gather(*tasks, return_exceptions=True)
    if interrupts:
        raise interrupts[0]
    for rec in done:
        if isinstance(rec, BaseException):
            raise rec
    return [rec for rec in done if isinstance(rec, ToolCallRecord)]  # None: an interrupted call


class RunGraph:
    """The run logic of ``agent`` (``agent.graph``): its ``tools`` by name, the event ``callbacks`` of every run,
    and the phases the nodes of :mod:`agentkit.nodes` run."""

    def __init__(self, agent: Host) -> None:
        self.agent = agent
        self.tools: dict[str, Tool] = {}
        self.callbacks: list[EventCallback] = []

    def prepare(
        self,
        question: str,
        content: str | list[dict[str, Any]],
        history: Conversation | None,
        deps: Any,
        on_event: EventCallback | None,
    ) -> RunState:
        """Phase 1: the run's state, its messages (system prompt, kept history, the question)."""
        conv = history if history is not None else Conversation()
        messages: list[ChatMessage] = []
        if self.agent.system_prompt:
            messages.append({"role": "system", "content": self.agent.system_prompt})
        messages.extend(dict(m) for m in conv.messages)  # type: ignore[misc]
        messages.append({"role": "user", "content": content})
        callbacks = [*self.callbacks, *([] if on_event is None else [on_event])]
        return RunState(
            question,
            content,
            conv,
            deps,
            callbacks,
            messages,
            self.agent.tool_choice,
            self.agent.backend.name,
        )

    async def model_turn(self, state: RunState, *, prefer_sync: bool = False) -> tuple[ModelTurn, float]:
        """Phase 2: ``(turn, seconds in the backend)``, trimming the prompt while it does not fit."""
        await self.agent.refresh_tools()
        backend = self.agent.backend
        # Agent.run owns its event loop (nothing else runs on it): the sync path is as good and keeps the
        # backend's sync connection pool across runs.
        acomplete = None if prefer_sync else getattr(backend, "acomplete", None)
        declarations = [t.declaration() for t in self.tools.values()]
        if (forced := tool_choice_name(state.tool_choice)) is not None and forced not in self.tools:
            raise state.fail(  # removed by a tool (remove_tool) or its MCP server since the run started
                ValueError(
                    f"tool_choice names tool {forced!r}, which the agent no longer has ({list(self.tools)})"
                )
            )
        t0 = _perf()
        while True:
            prompt, groups = state.prompt_view()
            try:
                if acomplete is not None:
                    turn: ModelTurn = await acomplete(prompt, declarations, state.tool_choice)
                else:
                    turn = backend.complete(prompt, declarations, state.tool_choice)
                if (problem := turn_problem(turn)) is not None:
                    raise TypeError(f"backend {backend.name!r}: {problem}")
            except BackendPromptTooLong as exc:
                self._trim(state, exc, prompt, groups, t0)
                continue
            except Exception as exc:
                state.fail(exc)
                raise
            break
        model_s = _perf() - t0
        state.timing.model_seconds += model_s
        state.usage.add(turn.usage)
        state.emit(ModelResponded(state.step, turn, model_s))
        return turn, model_s

    def _trim(
        self,
        state: RunState,
        exc: BackendPromptTooLong,
        prompt: list[ChatMessage],
        groups: list[tuple[int, int]],
        t0: float,
    ) -> None:
        """Drop roughly enough of the oldest message groups for the prompt to fit, or raise PromptTooLong."""
        left = groups[state.dropped_groups :]
        dropped = sum(b - a for a, b in groups[: state.dropped_groups])
        if not self.agent.trim_history or not left or exc.limit <= 0:
            state.timing.model_seconds += _perf() - t0
            has_calls = any(m.get("role") == "tool" for m in prompt)
            if exc.limit <= 0:  # no prompt fits: trimming cannot help, and the message names max_new_tokens
                detail = "no trimming can help"
            else:
                detail = (
                    "history trimming is off (trim_history=False)"
                    if not self.agent.trim_history
                    else (f"dropped {dropped} older message(s); " if dropped else "")
                    + "nothing left to drop (the system prompt, the tool declarations, the question"
                    + (" and the latest tool calls with their responses)" if has_calls else ")")
                )
                detail += "; shorten the question, the system prompt or the tool declarations" + (
                    ", or lower max_tool_output_bytes" if has_calls else ""
                )
            raise state.fail(
                PromptTooLong(
                    f"step {state.step}: {exc}; {detail}",
                    state.partial("prompt_too_long"),
                    prompt_tokens=exc.prompt_tokens,
                    limit=exc.limit,
                    dropped_messages=dropped,
                )
            ) from None
        # characters per token of this prompt, to drop about what is needed at once
        image_tokens = getattr(self.agent.backend, "default_vision_budget", None) or IMAGE_TOKENS_UNKNOWN
        per_token = sum(message_chars(m, image_tokens) for m in prompt) / max(exc.prompt_tokens, 1)
        need = (exc.prompt_tokens - exc.limit) * per_token
        freed = 0.0
        for a, b in left:
            state.dropped_groups += 1
            freed += sum(message_chars(m, image_tokens) for m in state.messages[a:b])
            if freed >= need:
                break
        kept_out = sum(b - a for a, b in groups[: state.dropped_groups])
        state.emit(PromptTrimmed(state.step, kept_out, exc.prompt_tokens, exc.limit))

    def remind(self, state: RunState, turn: ModelTurn) -> None:
        """A turn whose tool call does not parse: a format reminder, or ToolCallFormatError past the budget."""
        assert turn.format_error is not None
        if state.reminders >= self.agent.max_format_retries:
            raise state.fail(
                ToolCallFormatError(
                    f"the model wrote a tool call that does not parse {state.reminders + 1} times in this run "
                    f"(max_format_retries={self.agent.max_format_retries}); last problem: "
                    f"{turn.format_error}; the partial transcript is in .result",
                    state.partial("format_retries"),
                )
            )
        state.reminders += 1
        state.messages.append({"role": "assistant", "content": turn.text})
        state.messages.append({"role": "user", "content": format_reminder(turn.format_error, self.tools)})

    def final_answer(self, state: RunState, turn: ModelTurn) -> RunResult:
        """A model turn without tool calls ends the run: the answer joins the transcript and the history."""
        final: ChatMessage = {"role": "assistant", "content": turn.text}
        if turn.thinking:
            final["thinking"] = turn.thinking
        state.messages.append(final)
        result = state.partial(
            "final_answer", turn.text, state.conversation.with_turn(state.content, turn.text)
        )
        state.emit(RunFinished(result))
        return result

    async def process_tool_calls(self, state: RunState, turn: ModelTurn, model_s: float) -> Step:
        """Phase 3: the step's tool calls: :meth:`plan_calls`, :meth:`execute`, :meth:`resolve`."""
        plan = self.plan_calls(state, turn, model_s)
        await self.execute(state, plan)
        return self.resolve(state, plan)

    def plan_calls(self, state: RunState, turn: ModelTurn, model_s: float) -> CallPlan:
        """Phase 3a: names resolved, ids made unique, the assistant message appended; each call checked (loop
        guard, decode error, unknown tool, invalid arguments) and the valid ones scheduled. Raises
        ``LoopGuardTriggered``."""
        calls = turn.tool_calls
        tools = self.tools
        unique_ids(calls, state.step, tools)
        state.messages.append(assistant_message(turn.text, calls, turn.thinking))
        plan = CallPlan(
            calls,
            [None] * len(calls),
            [],
            Step(state.step, turn.text, turn.thinking, [], turn.usage, model_s),
        )
        # error responses are capped as results are (they echo the model's arguments, however long)
        byte_share, token_share = self._shares(state, len(calls))
        for i, c in enumerate(calls):
            shown: Any = c.arguments if c.error is None else c.raw_arguments
            limit = None if (tl := tools.get(c.name)) is None else tl.max_output_bytes
            cap = response_cap(self.agent.backend, limit, byte_share, token_share)
            if self.agent.loop_guard is not None:
                key = (c.name, canonical_arguments(shown))
                state.repeats[key] = count = state.repeats.get(key, 0) + 1
                if count >= self.agent.loop_guard:
                    self._stop_at_loop_guard(state, plan, key, count)
            if c.error is not None:
                hint = "send the arguments as one JSON object matching the tool's parameters"
                plan.records[i] = error_record(
                    c, shown, "decode", c.error, {"valid_tools": list(tools), "hint": hint}, cap
                )
                continue
            if tl is None:
                extra: dict[str, Any] = {"valid_tools": list(tools), "hint": "call one of valid_tools"}
                nearest = nearest_tool_name(c.name, tools)
                if nearest is not None:
                    extra["did_you_mean"] = nearest
                    extra["hint"] = f"call {nearest!r} (or another of valid_tools) with its parameters"
                plan.records[i] = error_record(
                    c, shown, "unknown_tool", f"unknown tool {c.name!r}", extra, cap
                )
                continue
            try:
                validated = tl.validate(c.arguments)
            except ToolArgumentsError as exc:
                state.failures[tl.name] = state.failures.get(tl.name, 0) + 1
                extra = {"parameters": tl.parameters, "hint": "fix the arguments and call again"}
                plan.records[i] = error_record(
                    c, shown, "invalid_arguments", f"invalid arguments: {exc}", extra, cap
                )
                continue
            plan.scheduled.append((i, tl, validated))
        for i, _tl, _validated in plan.scheduled:
            c = calls[i]
            state.emit(ToolCallStarted(state.step, c.id, c.name, c.arguments))
        for rec in plan.records:
            if rec is not None:
                state.emit(ToolCallFinished(state.step, rec))
        return plan

    def _shares(self, state: RunState, calls: int) -> tuple[int | None, int | None]:
        """Each response's share of the step's tool-output budget (bytes, tokens) among ``calls`` calls."""
        if state.budget is None:
            state.budget = (self.agent.tool_output_budget(), self.agent.tool_output_token_budget())
        b, t = state.budget
        return (None if b is None else max(b // calls, 1)), (None if t is None else max(t // calls, 1))

    def _stop_at_loop_guard(self, state: RunState, plan: CallPlan, key: tuple[str, str], count: int) -> None:
        message = (
            f"loop guard: the model requested {key[0]}({key[1]}) {count} times in this run "
            f"(loop_guard={self.agent.loop_guard}); stopped at step {state.step} before running it"
        )
        for i, c in enumerate(plan.calls):
            if plan.records[i] is None:
                plan.records[i] = ToolCallRecord(
                    c.id, c.name, c.arguments, "", "not run: loop guard stopped the run", "not_run"
                )
        plan.step.tool_calls = [r for r in plan.records if r is not None]
        state.steps.append(plan.step)
        raise state.fail(LoopGuardTriggered(message, state.partial("loop_guard")))

    async def execute(self, state: RunState, plan: CallPlan) -> None:
        """Phase 3b: run the scheduled calls concurrently (the agent's :meth:`Host.execute_tool_call` each),
        sharing the tool-output budget evenly; their records go into ``plan.records``."""
        t1 = _perf()
        if plan.scheduled:  # the budget is shared among all the step's calls, errors included
            byte_share, token_share = self._shares(state, len(plan.calls))
            runs = [
                self._run_call(state, tl, plan.calls[i], v, byte_share, token_share)
                for i, tl, v in plan.scheduled
            ]
            # one call is awaited in the run's own task (no gather): a tool's KeyboardInterrupt reaches the caller
            # as itself, not as a cancellation, and a context variable it sets stays set, as in a plain await
            done = [await runs[0]] if len(runs) == 1 else await gather_calls(runs)
            for (i, _tl, _v), rec in zip(plan.scheduled, done, strict=True):
                plan.records[i] = rec
        tool_s = _perf() - t1
        state.timing.tool_seconds += tool_s
        plan.step.tool_seconds = tool_s

    async def _run_call(
        self,
        state: RunState,
        tl: Tool,
        c: ToolCall,
        validated: Any,
        byte_share: int | None,
        token_share: int | None,
    ) -> ToolCallRecord:
        """The agent's :meth:`Host.execute_tool_call`, its record checked and its event emitted."""
        rec: Any = await self.agent.execute_tool_call(state, tl, c, validated, byte_share, token_share)
        if not isinstance(rec, ToolCallRecord):
            raise TypeError(
                f"{type(self.agent).__name__}.execute_tool_call must return an agentkit.ToolCallRecord, got "
                f"{type(rec).__name__}"
            )
        state.emit(ToolCallFinished(state.step, rec))
        return rec

    def resolve(self, state: RunState, plan: CallPlan) -> Step:
        """Phase 3c: one tool response per call id, in call-id order; raises ``ToolRetriesExceeded`` for a tool
        past its failure budget."""
        records: list[ToolCallRecord] = []
        images = ToolImageShare(self.agent.backend, self.agent.tool_images)
        for rec in plan.records:
            assert rec is not None
            records.append(rec)
            state.messages.append(tool_message(rec.id, rec.name, images.content(rec.content, rec.result)))
            if rec.error_kind in ("exception", "timeout"):
                state.failures[rec.name] = state.failures.get(rec.name, 0) + 1
        plan.step.tool_calls = records
        state.steps.append(plan.step)
        for name, count in state.failures.items():
            tl = self.tools.get(name)
            if tl is None:  # unregistered since it failed (remove_tool, an MCP server's new list)
                continue
            if count > tl.retries:
                last = next((r.error for r in reversed(records) if r.name == name and r.error), None)
                raise state.fail(
                    ToolRetriesExceeded(
                        f"tool {name!r} failed {count} time{'s' if count != 1 else ''} in this run "
                        f"(retries={tl.retries}; the calls of one step all run before the budget is checked)"
                        + (f"; last error: {last}" if last else ""),
                        state.partial("tool_retries"),
                    )
                )
        return plan.step
