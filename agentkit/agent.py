"""The agent: a backend, tools and its run logic (``agent.graph``, a :class:`agentkit.planner.RunGraph`).

``Agent.run`` / ``arun`` answer one user message; ``Agent.iter`` gives the same run node by node or step by
step; ``Agent.chat`` keeps a multi-turn :class:`ChatSession` (user messages and final answers only).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypedDict, Unpack, overload

from agentkit.backends import resolve_backend
from agentkit.backends.base import Backend, ToolChoice, ToolDeclaration, tool_choice_name
from agentkit.errors import ToolDefinitionError
from agentkit.events import EventCallback, check_callback
from agentkit.history import Conversation, HistoryLike, as_conversation
from agentkit.mcp.host import ToolsetLease, refresh_toolsets, tool_choice_written_at
from agentkit.nodes import AgentRun, refuse_in_event_loop
from agentkit.planner import Host, RunGraph, RunState
from agentkit.result import RunResult, Step
from agentkit.tool_output import ToolImageLimits, int_at_least, prompt_tokens
from agentkit.tools import Tool, ToolOptions, as_tool, tool
from model.heads.vision import ImageError, ImageSource, check_budget, to_data_url

if TYPE_CHECKING:
    from agentkit.backends.base import ModelTurn
    from agentkit.bundle_load import BundleSpec

__all__ = ["Agent", "AgentRun", "ChatSession", "RunOptions", "TurnOptions", "user_content"]

#: Tool-output budget per model turn (bytes) when the backend does not say how many prompt tokens it takes.
DEFAULT_TOOL_OUTPUT_BYTES = 32_768


class TurnOptions(TypedDict, total=False):
    """The keywords of one turn of a :class:`ChatSession` (:meth:`ChatSession.send`): see :meth:`Agent.arun`."""

    deps: Any
    on_event: EventCallback | None
    images: Sequence[ImageSource] | None
    vision_budget: int | None


class RunOptions(TurnOptions, total=False):
    """The keywords of :meth:`Agent.run`, :meth:`Agent.arun` and :meth:`Agent.iter`: a turn's and its history."""

    history: HistoryLike | None


def user_content(
    question: str, images: Sequence[ImageSource] | None = None, vision_budget: int | None = None
) -> str | list[dict[str, Any]]:
    """The content of a user message: ``question`` alone, or image parts (checked, inline ``data:`` URLs) and
    then a text part.

    Raises:
        ValueError: ``question`` is not a non-empty string.
        model.heads.vision.ImageError: an unusable image or vision budget (names the image and the reason).
    """
    if not isinstance(question, str) or not question.strip():
        raise ValueError(
            f"question must be a non-empty string, got {type(question).__name__} {question!r:.80}"
        )
    if vision_budget is not None:
        check_budget(vision_budget)
    if images is None or len(images) == 0:
        return question
    if isinstance(images, (str, bytes, Path)):
        raise ImageError(
            f"images must be a list of images, got one {type(images).__name__}: wrap it in a list"
        )
    parts: list[dict[str, Any]] = []
    for image in images:
        part: dict[str, Any] = {"type": "image_url", "image_url": {"url": to_data_url(image)}}
        if vision_budget is not None:
            part["vision_budget"] = vision_budget
        parts.append(part)
    parts.append({"type": "text", "text": question})
    return parts


def _check_arguments(model: Any, tools: Any, on_event: Any) -> list[EventCallback]:
    """The event callbacks of ``on_event``; ``TypeError`` for tools given as the model, one tool not in a list or
    a non-callable on_event."""
    if isinstance(model, (list, tuple, Tool)) or (callable(model) and not hasattr(model, "complete")):
        raise TypeError(
            f"Agent's first argument is the model (a backend, a spec string such as 'embedded', or None), got "
            f"{type(model).__name__}: pass the tools as tools=[...]"
        )
    if isinstance(tools, (Tool, str, bytes)) or callable(tools):
        raise TypeError(
            f"tools must be a list of tools or functions, got one {type(tools).__name__}: wrap it in a list"
        )
    callbacks = [on_event] if on_event is None or callable(on_event) else on_event
    if not isinstance(callbacks, (list, tuple)):
        raise TypeError(f"on_event must be a callable or a list of callables, got {on_event!r}")
    callbacks = [c for c in callbacks if c is not None]
    for c in callbacks:
        check_callback(c)
    return callbacks


def _check_settings(
    max_steps: Any, loop_guard: Any, max_format_retries: Any, max_tool_output_bytes: Any, system_prompt: Any
) -> None:
    """Raise ``ValueError`` naming the first numeric setting (or system prompt) of the wrong type or range."""
    for name, value, least, also, said in (
        ("max_steps", max_steps, 1, (), ""),
        ("max_format_retries", max_format_retries, 0, (), ""),
        ("loop_guard", loop_guard, 2, (None,), " or None"),
        ("max_tool_output_bytes", max_tool_output_bytes, 1, (None, "auto"), " (bytes), 'auto' or None"),
    ):
        if value not in also and not int_at_least(value, least):
            raise ValueError(f"{name} must be an integer >= {least}{said}, got {value!r}")
    if system_prompt is not None and not isinstance(system_prompt, str):
        raise ValueError(f"system_prompt must be a string or None, got {type(system_prompt).__name__}")


class Agent(Host):
    """A function-calling agent: a backend, tools and its run logic (``agent.graph``, a
    :class:`agentkit.planner.RunGraph`); :meth:`process_tool_calls` and :meth:`execute_tool_call` may be
    overridden. The keywords in full: docs/AGENTS.md.

    Args:
        model: a :class:`~agentkit.backends.base.Backend`, a spec string (``"embedded"``, ``"embedded:PATH"``,
            ``"openai:MODEL"``) or ``None`` (the embedded backend, default checkpoint).
        tools: :class:`~agentkit.tools.Tool` objects or plain typed functions.
        system_prompt: system message put before the history.
        max_steps: model turns allowed per run (>= 1).
        tool_choice: ``"auto" | "required" | "none" | {"name": NAME}``; a forced choice applies to the first
            model turn only, unless ``reset_tool_choice=False``.
        loop_guard: stop at the ``loop_guard``-th request of the same (tool, canonical arguments) in one run
            (>= 2; ``None`` disables).
        on_event: callback(s) receiving every :mod:`agentkit.events` event of every run.
        name: a label for logs and results.
        max_tool_output_bytes: bytes of tool output the model may see per model turn, shared by its calls;
            ``"auto"``: half the prompt capacity (:meth:`tool_output_budget`); ``None``: the tools' own limits.
        trim_history: drop the oldest kept turns and tool-call groups while the prompt does not fit.
        max_format_retries: format reminders per run for turns with a tool call that does not parse (>= 0).
        toolsets: MCP servers (:class:`agentkit.mcp.MCPToolset`) whose tools the agent also uses (docs/MCP.md).
        tool_images: which images of tool results are shown (:class:`~agentkit.tool_output.ToolImageLimits`).

    Raises:
        ToolDefinitionError: duplicate tool names, or a forced tool_choice naming an unknown tool.
        TypeError: tools given as the model, one tool not in a list, or an ``on_event`` that is not callable.
        ValueError: a setting of the wrong type or range, or an invalid ``tool_choice``.
    """

    def __init__(
        self,
        model: Backend | str | None = None,
        tools: Iterable[Tool | Callable[..., Any]] = (),
        *,
        system_prompt: str | None = None,
        max_steps: int = 10,
        tool_choice: ToolChoice = "auto",
        loop_guard: int | None = 3,
        reset_tool_choice: bool = True,
        on_event: EventCallback | Sequence[EventCallback] | None = None,
        name: str = "agent",
        max_tool_output_bytes: int | Literal["auto"] | None = "auto",
        trim_history: bool = True,
        max_format_retries: int = 2,
        toolsets: Sequence[Any] = (),
        tool_images: ToolImageLimits | None = None,
    ) -> None:
        callbacks = _check_arguments(model, tools, on_event)
        _check_settings(max_steps, loop_guard, max_format_retries, max_tool_output_bytes, system_prompt)
        self.max_tool_output_bytes = max_tool_output_bytes
        if tool_images is not None and not isinstance(tool_images, ToolImageLimits):
            raise TypeError(f"tool_images must be a ToolImageLimits, got {type(tool_images).__name__}")
        self.tool_images = tool_images or ToolImageLimits()
        self.trim_history = trim_history
        self.backend: Backend = resolve_backend(model)
        self.system_prompt = system_prompt
        self.max_steps = max_steps
        self.loop_guard = loop_guard
        self.reset_tool_choice = reset_tool_choice
        self.name = name
        self.max_format_retries = max_format_retries
        self.graph = RunGraph(self)
        for t in tools:
            self.add_tool(t)
        self._toolsets = list(toolsets)
        if isinstance(toolsets, (str, bytes)) or any(
            not callable(getattr(t, "open", None)) for t in self._toolsets
        ):
            raise TypeError(f"toolsets must be a list of agentkit.mcp.MCPToolset, got {toolsets!r}")
        self._toolset_lease = ToolsetLease(self, self._toolsets)
        self._toolsets_held = 0  # `async with agent:` blocks open now
        forced = tool_choice_name(tool_choice)
        if forced is not None and forced not in self.graph.tools and not self._toolsets:
            raise ToolDefinitionError(f"tool_choice names tool {forced!r}, which is not registered")
        self.tool_choice: ToolChoice = tool_choice
        self.graph.callbacks = callbacks

    # ------------------------------------------------------------------ construction helpers

    @classmethod
    def from_bundle(
        cls,
        bundle: str | Path | BundleSpec,
        *,
        backend: str | Backend | None = None,
        model: str | None = None,
        seed: int | None = None,
        adapter: str | Path | None = None,
        binding: str | None = None,
        **overrides: Any,
    ) -> Agent:
        """Build an agent from a YAML tool bundle (docs/BUNDLES.md): a path or a loaded
        :class:`agentkit.bundle_load.BundleSpec`; ``backend``, ``model``, ``seed``, ``adapter``, ``binding``
        override its ``model:`` section (:meth:`agentkit.bundle_load.BundleSpec.make_backend`), ``overrides``
        are :class:`Agent` keywords (``tools=`` replaces the bundle's tools).

        Raises:
            BundleError: the file is invalid (file, line, field in the message).
            TypeError: ``bundle`` is neither a path nor a ``BundleSpec``.
        """
        from agentkit.bundle_load import BundleSpec, load_spec

        kind = backend if isinstance(backend, str) else None if backend is None else "custom"
        spec = bundle if isinstance(bundle, BundleSpec) else load_spec(bundle, backend=kind)
        made = spec.make_backend(backend, model, seed=seed, adapter=adapter, binding=binding)
        tools = overrides.pop("tools", spec.tools)  # an Agent keyword too: it replaces the bundle's tools
        agent = cls(made, tools, **spec.agent_settings_with(**overrides))
        if spec.tool_choice_at is not None and "tool_choice" not in overrides:
            tool_choice_written_at(agent, spec.tool_choice_at)
        return agent

    def add_tool(self, t: Tool | Callable[..., Any]) -> Tool:
        """Register a tool (a :class:`Tool` or a typed function); returns the Tool.

        Raises:
            ToolDefinitionError: a duplicate name, a function that cannot be a tool, or a schema the backend
                cannot serve (the embedded backend's constraint).
        """
        tl = as_tool(t)
        if tl.name in self.graph.tools:
            raise ToolDefinitionError(f"duplicate tool name {tl.name!r}")
        check_tool = getattr(self.backend, "check_tool", None)
        if check_tool is not None:
            check_tool(tl.name, tl.parameters)
        self.graph.tools[tl.name] = tl
        return tl

    def remove_tool(self, name: str) -> None:
        """Unregister the tool ``name`` (nothing if there is none)."""
        self.graph.tools.pop(name, None)

    async def __aenter__(self) -> Agent:
        """Open the toolsets (MCP servers) for the runs inside the block (blocks may nest or overlap)."""
        await self._toolset_lease.acquire()
        self._toolsets_held += 1
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._toolsets_held -= 1
        await self._toolset_lease.release()

    async def refresh_tools(self) -> None:
        """Before each model turn: re-list the tools of toolsets whose list changed."""
        if self._toolsets:
            await refresh_toolsets(self, self._toolsets)

    async def process_tool_calls(self, state: RunState, turn: ModelTurn, model_s: float) -> Step:
        """A model turn's tool calls (plan, execute, resolve: :meth:`agentkit.planner.RunGraph.process_tool_calls`).
        Override it to see or change a step's calls; ``model_s``: seconds the model took for ``turn``."""
        return await self.graph.process_tool_calls(state, turn, model_s)

    @overload
    def tool(self, fn: Callable[..., Any], /) -> Tool: ...

    @overload
    def tool(
        self, fn: None = None, /, **options: Unpack[ToolOptions]
    ) -> Callable[[Callable[..., Any]], Tool]: ...

    def tool(
        self, fn: Callable[..., Any] | None = None, /, **options: Unpack[ToolOptions]
    ) -> Tool | Callable[[Callable[..., Any]], Tool]:
        """Decorator registering ``fn`` as a tool: ``@agent.tool`` or ``@agent.tool(timeout=5, ...)`` (the
        keywords of :func:`agentkit.tools.tool`); raises as :meth:`add_tool`."""
        if fn is not None:
            return self.add_tool(tool(**options)(fn) if options else fn)
        return lambda f: self.add_tool(tool(**options)(f))

    @property
    def tools(self) -> dict[str, Tool]:
        """Registered tools by name (a copy)."""
        return dict(self.graph.tools)

    def declarations(self) -> list[ToolDeclaration]:
        """The tool declarations sent to the model."""
        return [t.declaration() for t in self.graph.tools.values()]

    def tool_output_budget(self) -> int | None:
        """Bytes of tool output the model may see per model turn (see ``max_tool_output_bytes``; ``"auto"`` asks
        the backend's ``max_prompt_tokens``, which loads the embedded checkpoint); ``None``: no agent-wide limit."""
        if self.max_tool_output_bytes != "auto":
            return self.max_tool_output_bytes
        tokens = prompt_tokens(self.backend)
        if tokens is None:
            return DEFAULT_TOOL_OUTPUT_BYTES
        # with a token budget, that one binds: a byte pre-cut never before it (no token is longer than 16 bytes)
        return max(tokens // 2, 1) * (16 if self.tool_output_token_budget() else 1)

    def tool_output_token_budget(self) -> int | None:
        """Tokens of tool output the model may see per model turn: with ``"auto"`` on a backend that counts
        tokens and reports ``max_prompt_tokens``, half the prompt capacity; else ``None``."""
        if self.max_tool_output_bytes != "auto" or not callable(getattr(self.backend, "count_tokens", None)):
            return None
        tokens = prompt_tokens(self.backend)
        return None if tokens is None else max(tokens // 2, 1)

    # ------------------------------------------------------------------------------ running

    def run(self, question: str, **options: Unpack[RunOptions]) -> RunResult:
        """Answer one user message: :meth:`arun` run synchronously (``RuntimeError`` inside an event loop)."""
        refuse_in_event_loop("Agent.run()", "await agent.arun(...)")
        return asyncio.run(self._complete(self._prepare("Agent.run()", question, options), True))

    async def arun(self, question: str, **options: Unpack[RunOptions]) -> RunResult:
        """Answer one user message: loop model turn -> tool calls -> tool responses until a final answer.

        Args:
            question: the user message (non-empty).
            history: kept history of earlier turns, a :class:`~agentkit.history.Conversation` or a list of its
                messages (alternating, user first); not modified, the new one is ``result.conversation``.
            deps: any object, handed to tools through :class:`~agentkit.tools.ToolContext`.
            on_event: an extra event callback for this run only.
            images: file paths, bytes, ``data:`` URLs or ``PIL.Image.Image`` objects (PNG, JPEG or WebP), put in
                the user message as ``image_url`` content parts before the text.
            vision_budget: soft tokens per image for the embedded backend: 70, 140, 280 (default), 560 or 1120
                (:mod:`model.heads.vision`).

        Returns:
            The :class:`~agentkit.result.RunResult` (answer, steps, usage, timing, transcript, history).

        Raises:
            ValueError, TypeError, model.heads.vision.ImageError: a bad question, history, image or
                ``tool_choice="required"`` without tools (before the model is asked).
            AgentRunError: the run stopped (``MaxStepsExceeded``, ``LoopGuardTriggered``, ``ToolRetriesExceeded``,
                ``PromptTooLong``, ``ToolCallFormatError``), the partial transcript in ``.result``.
            BackendError: the backend failed (after its own retries).
        """
        return await self._complete(self._prepare("Agent.arun()", question, options), False)

    def iter(self, question: str, **options: Unpack[RunOptions]) -> AgentRun:
        """The run :meth:`arun` makes, step by step (``async for step in run``) or node by node
        (``run.nodes()``): an :class:`agentkit.nodes.AgentRun` (examples in docs/AGENTS.md). Arguments as
        :meth:`arun`. Each :class:`~agentkit.result.Step` is yielded once its tool calls have answered, the final
        answer's last; ``run.result`` is then the :class:`~agentkit.result.RunResult`. A run that stops raises
        from the loop as :meth:`arun`; a second loop continues where the first stopped. Raises ``ValueError`` and
        ``ImageError`` as :meth:`arun`, at once."""
        state = self._prepare("Agent.iter()", question, options)
        if self._toolsets and not self._toolsets_held:
            raise RuntimeError("an agent with toolsets iterates inside `async with agent:`")
        return AgentRun(self.graph, state)

    def _prepare(self, call: str, question: str, options: RunOptions) -> RunState:
        """The state of a run (:class:`RunOptions` as :meth:`arun`); raises as :meth:`arun`, at once, and
        ``TypeError`` naming ``call`` for an unknown keyword."""
        if unknown := [k for k in options if k not in RunOptions.__optional_keys__]:
            takes = ", ".join(sorted(RunOptions.__optional_keys__))
            raise TypeError(f"{call} got an unexpected keyword argument {unknown[0]!r} (it takes {takes})")
        if self.tool_choice == "required" and not self.graph.tools and not self._toolsets:
            raise ValueError(
                "tool_choice='required' needs a tool, and this agent has none: add one (add_tool, @agent.tool) "
                "or use tool_choice='auto'"
            )
        forced = tool_choice_name(self.tool_choice)  # set, or its tool removed, after __init__ checked it
        if forced is not None and forced not in self.graph.tools and not self._toolsets:
            raise ValueError(
                f"tool_choice names tool {forced!r}, which is not a tool of this agent ({list(self.tools)})"
            )
        if (on_event := options.get("on_event")) is not None:
            check_callback(on_event)
        content = user_content(question, options.get("images"), options.get("vision_budget"))
        history = as_conversation(options.get("history"))
        return self.graph.prepare(question, content, history, options.get("deps"), on_event)

    async def _complete(self, state: RunState, prefer_sync: bool) -> RunResult:
        # a run uses the agent's MCP servers (if any): the first user opens them, concurrent runs share them, the
        # last closes them
        await self._toolset_lease.acquire()
        try:
            return await AgentRun(self.graph, state).complete(prefer_sync=prefer_sync)
        finally:
            await self._toolset_lease.release()

    # -------------------------------------------------------------------------------- chat

    def chat(self, conversation: HistoryLike | None = None) -> ChatSession:
        """A multi-turn chat session, new or resumed from ``conversation``."""
        return ChatSession(self, conversation)

    def __repr__(self) -> str:
        return f"Agent(name={self.name!r}, backend={self.backend.name!r}, tools={list(self.graph.tools)})"


class ChatSession:
    """A multi-turn conversation with ``agent``; history keeps user messages and final answers only.
    ``conversation``: history to resume from (copied), a Conversation or a list of its messages (``None``: empty);
    ``TypeError``, ``ValueError`` as :func:`agentkit.history.as_conversation`."""

    def __init__(self, agent: Agent, conversation: HistoryLike | None = None) -> None:
        self.agent = agent
        given = as_conversation(conversation, where="conversation")
        self.conversation = Conversation.from_dict(given.to_dict())
        self.results: list[RunResult] = []

    def send(self, message: str, **options: Unpack[TurnOptions]) -> RunResult:
        """Run one turn and append it to the history (options as :meth:`Agent.arun`). A failed turn raises and
        leaves the history unchanged; turns sent concurrently each start from the history as sent and are all
        kept, in the order they finished."""
        refuse_in_event_loop("ChatSession.send()", "await chat.asend(...)")
        return self._keep(self.agent.run(message, history=self.conversation, **options))

    async def asend(self, message: str, **options: Unpack[TurnOptions]) -> RunResult:
        """Async :meth:`send`."""
        return self._keep(await self.agent.arun(message, history=self.conversation, **options))

    def _keep(self, result: RunResult) -> RunResult:
        # appended to the history as it is now, so concurrent turns are all kept
        question, final = result.conversation.messages[-2:]
        self.conversation = self.conversation.with_turn(question["content"], final["content"])
        self.results.append(result)
        return result

    def reset(self) -> None:
        """Forget the history's messages; its ``metadata`` (yours, see :class:`Conversation`) is kept."""
        self.conversation = Conversation([], dict(self.conversation.metadata))

    def save(self, path: str | Path) -> None:
        """Write the history as JSON (see :class:`~agentkit.history.Conversation`)."""
        self.conversation.save(path)
