"""The agent and its planner loop.

One run (one user turn) goes through four phases per step, after the OpenAI Agents SDK's split:

1. **Turn preparation** - messages = system prompt + kept history (user messages and final answers only)
   + the question + this turn's trajectory so far; tool declarations from the tools' JSON Schemas.
2. **Model turn** - ``backend.complete(messages, tools, tool_choice)`` (``acomplete`` when the backend has
   it). The embedded backend constrains the denoising to the tool-call grammar.
3. **Tool planning** - for each requested call, in call-id order: loop guard on (tool, canonical
   arguments); decode errors, unknown tool names and invalid arguments become error tool responses that
   list what is valid; valid calls are scheduled.
4. **Execution and resolution** - scheduled calls run concurrently (sync tools on daemon threads, async
   tools on the loop), each under its timeout; every call id gets exactly one tool response, appended in
   call-id order (the order the model issued the calls). A tool exception or timeout becomes an error
   response naming the tool and the offending arguments - never a crash.

The loop ends with a final answer (a model turn without tool calls), or raises
:class:`~agentkit.errors.MaxStepsExceeded` / :class:`~agentkit.errors.LoopGuardTriggered` /
:class:`~agentkit.errors.ToolRetriesExceeded` / :class:`~agentkit.errors.PromptTooLong` /
:class:`~agentkit.errors.ToolCallFormatError`, each carrying the partial transcript.

Size limits: every tool response is cut to ``min(tool.max_output_bytes, agent budget / calls in the step)``
bytes with a marker saying how much was cut (:func:`agentkit.tools.cap_output`). With the default budget
(``"auto"``) on a backend that counts its tokens (the embedded one), a turn's tool output is also cut to half
the model's prompt capacity in *tokens*, counted by the model's own tokenizer
(:func:`agentkit.tools.cap_output_tokens`), so it always fits beside the rest of the prompt without cutting
ordinary JSON to the one-token-per-byte worst case. When a backend reports that the prompt
does not fit (:class:`model.limits.PromptTooLong`, raised before anything is allocated), the oldest kept turns
and then the oldest tool-call groups (a call message together with all its responses) are dropped from the
prompt, never the system prompt, the question or the latest calls; the transcript in ``RunResult.messages``
keeps everything.

A model turn whose text looks like a tool call that does not parse (``ModelTurn.format_error``, set by the
``openai`` backend for calls written as text) is not a final answer: the planner sends a format reminder
(a user message naming the problem, the expected format and the valid tools), at most
``max_format_retries`` times per run.

Tool names: an exact name wins; ``functions.NAME`` is read as ``NAME`` when that is a tool and
``functions.NAME`` is not. An unknown name is answered with the valid names and the nearest one
(:func:`difflib.get_close_matches` over the names, then over the tools' descriptions, for a model that used
a description as the name).

``tool_choice`` other than ``"auto"``/``"none"`` applies to the first model turn of a run only (then
``"auto"``), unless ``reset_tool_choice=False``: a forced call every turn could never end in an answer.
"""

from __future__ import annotations

import asyncio
import difflib
import json
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from agentkit.backends import resolve_backend
from agentkit.backends.base import (
    Backend,
    ChatMessage,
    ModelTurn,
    ToolCallRequest,
    ToolChoice,
    ToolDeclaration,
    Usage,
    tool_choice_name,
)
from agentkit.errors import (
    AgentRunError,
    LoopGuardTriggered,
    MaxStepsExceeded,
    PromptTooLong,
    ToolCallFormatError,
    ToolDefinitionError,
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
    RunStarted,
    ToolCallFinished,
    ToolCallStarted,
)
from agentkit.history import Conversation, droppable_groups
from agentkit.result import RunResult, Step, StopReason, Timing, ToolCallRecord
from agentkit.tools import (
    Tool,
    ToolArgumentsError,
    ToolContext,
    ToolTimeoutError,
    as_tool,
    cap_output,
    cap_output_tokens,
)
from model.limits import PromptTooLong as ModelPromptTooLong
from model.vision import DEFAULT_VISION_BUDGET, ImageError, ImageSource, check_budget, to_data_url

if TYPE_CHECKING:
    from agentkit.bundle import Bundle

__all__ = ["Agent", "ChatSession"]

_perf = time.perf_counter

#: Tool-output budget per model turn (bytes) when the backend does not say how many prompt tokens it takes.
DEFAULT_TOOL_OUTPUT_BYTES = 32_768


def canonical_arguments(arguments: Any) -> str:
    """Canonical JSON text of tool arguments (sorted keys, no spaces) - the loop guard's key."""
    return json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def _error_content(payload: dict[str, Any]) -> str:
    return json.dumps(payload, ensure_ascii=False, default=str)


#: Characters an image counts for, per soft token, in :func:`_message_chars` (about a text token's worth).
_CHARS_PER_SOFT_TOKEN = 4


def _message_chars(m: ChatMessage) -> int:
    """Rough size of a message in the prompt (characters of its content and call arguments; an image counts
    as its vision budget's soft tokens, not as the length of its data URL)."""
    c = m.get("content")
    if isinstance(c, list):
        n = 0
        for part in c:
            if isinstance(part, dict) and part.get("type") in ("image_url", "image"):
                n += int(part.get("vision_budget") or DEFAULT_VISION_BUDGET) * _CHARS_PER_SOFT_TOKEN
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


def user_content(
    question: str, images: Sequence[ImageSource] | None = None, vision_budget: int | None = None
) -> str | list[dict[str, Any]]:
    """The content of a user message: ``question`` alone, or image parts followed by a text part.

    Each image is checked and stored inline as a ``data:`` URL (:func:`model.vision.to_data_url`), so the
    message is self-contained JSON (history, saved conversations, remote requests).

    Raises:
        ValueError: ``question`` is not a non-empty string.
        model.vision.ImageError: an unusable image or vision budget (names the image and the reason).
    """
    if not isinstance(question, str) or not question.strip():
        raise ValueError("question must be a non-empty string")
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


#: The namespace some models (trained on OpenAI's tool format) put before tool names.
_NAMESPACE = "functions."


def resolve_tool_name(name: str, tools: Iterable[str]) -> str | None:
    """The registered tool a requested name designates, or ``None``.

    An exact name wins; ``functions.NAME`` designates ``NAME`` when ``NAME`` is registered and
    ``functions.NAME`` is not (the only unambiguous reading).
    """
    names = set(tools)
    if name in names:
        return name
    if name.startswith(_NAMESPACE) and name[len(_NAMESPACE) :] in names:
        return name[len(_NAMESPACE) :]
    return None


def nearest_tool_name(name: str, tools: dict[str, Tool]) -> str | None:
    """The registered tool a model most likely meant by an unknown ``name``, or ``None``.

    Algorithm: :func:`difflib.get_close_matches` (cutoff 0.6) of the name, its last dotted part and their
    lower-case forms against the tool names; then of the lower-case name against each tool's description
    and its first line (a model that wrote a description as the name).
    """
    by_lower = {n.lower(): n for n in tools}
    bare = name.rsplit(".", 1)[-1]
    for cand in dict.fromkeys((name, bare)):
        hit = difflib.get_close_matches(cand, list(tools), n=1, cutoff=0.6)
        if hit:
            return hit[0]
        hit = difflib.get_close_matches(cand.lower(), list(by_lower), n=1, cutoff=0.6)
        if hit:
            return by_lower[hit[0]]
    descriptions: dict[str, str] = {}
    for n, t in tools.items():
        d = t.description.strip().lower()
        if d:
            descriptions.setdefault(d, n)
            descriptions.setdefault(d.splitlines()[0].strip(), n)
    hit = difflib.get_close_matches(name.strip().lower(), list(descriptions), n=1, cutoff=0.6)
    return descriptions[hit[0]] if hit else None


def _format_reminder(problem: str, tools: Iterable[str]) -> str:
    names = ", ".join(tools)
    if problem.startswith("the reply ended inside a thinking block"):
        return (
            f"Your last message was not used: {problem}. Close your thinking and write the answer (or a tool "
            "call) after it."
        )
    return (
        f"Your last message was not used: it looks like a tool call, but {problem}. To call a tool, use the "
        'tool-calling interface, or write the call exactly as <tool_call>{"name": "TOOL", "arguments": '
        f"{{...}}}}</tool_call> with a JSON object of arguments. Tools: {names}. To answer the user instead, "
        "reply with plain text only."
    )


class Agent:
    """A function-calling agent: a backend, tools and the planner loop.

    Args:
        model: a :class:`~agentkit.backends.base.Backend`, or a spec string resolved by
            :func:`agentkit.backends.resolve_backend` (``"embedded"``, ``"embedded:PATH"``,
            ``"openai:MODEL"``); ``None`` = the embedded backend with the default checkpoint (loaded on
            first use).
        tools: :class:`~agentkit.tools.Tool` objects or plain typed functions (wrapped with defaults).
        system_prompt: system message put before the history; ``None`` for none.
        max_steps: model turns allowed per run (>= 1).
        tool_choice: ``"auto" | "required" | "none" | {"name": NAME}``.
        loop_guard: stop the run when the model requests the same (tool, canonical arguments) for the
            ``loop_guard``-th time in one run (that request is not executed); ``None`` disables (>= 2).
        reset_tool_choice: use ``"auto"`` after the first step when ``tool_choice`` forces a call.
        on_event: callback(s) receiving every :mod:`agentkit.events` event of every run.
        name: a label for logs and results.
        max_tool_output_bytes: bytes (UTF-8) of tool output the model may see per model turn, shared evenly
            by that turn's calls (a tool's own ``max_output_bytes`` lowers its share); longer responses are cut
            with a marker saying how much. ``"auto"``: on a backend that counts tokens and reports
            ``max_prompt_tokens`` (the embedded one), half the prompt capacity in tokens (1,792 / 2 = 896 tokens
            for ``agentkit-tiny``, counted with its tokenizer; :meth:`tool_output_token_budget`); on other
            backends half of ``max_prompt_tokens`` as bytes, or :data:`DEFAULT_TOOL_OUTPUT_BYTES`; ``None``:
            only the tools' own limits.
        trim_history: when the prompt does not fit the model, drop the oldest kept turns, then the oldest
            tool-call groups of this turn (a call never without its responses) before giving up with
            :class:`~agentkit.errors.PromptTooLong`.
        max_format_retries: format reminders per run for model turns whose text looks like a tool call
            that does not parse (>= 0); one more such turn stops the run with
            :class:`~agentkit.errors.ToolCallFormatError`.

    Raises:
        ToolDefinitionError: duplicate tool names, or a forced tool_choice naming an unknown tool.
        ValueError: ``max_steps < 1``, ``loop_guard < 2``, ``max_tool_output_bytes < 1``,
            ``max_format_retries < 0``, or an invalid
            ``tool_choice``.
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
    ) -> None:
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        if max_format_retries < 0:
            raise ValueError(f"max_format_retries must be >= 0, got {max_format_retries}")
        if loop_guard is not None and loop_guard < 2:
            raise ValueError(f"loop_guard must be >= 2 or None, got {loop_guard}")
        if max_tool_output_bytes is not None and max_tool_output_bytes != "auto":
            if (
                isinstance(max_tool_output_bytes, bool)
                or not isinstance(max_tool_output_bytes, int)
                or max_tool_output_bytes < 1
            ):
                raise ValueError(
                    "max_tool_output_bytes must be an integer >= 1 (bytes), 'auto' or None, got "
                    f"{max_tool_output_bytes!r}"
                )
        self.max_tool_output_bytes = max_tool_output_bytes
        self.trim_history = trim_history
        self.backend: Backend = resolve_backend(model)
        self.system_prompt = system_prompt
        self.max_steps = max_steps
        self.loop_guard = loop_guard
        self.reset_tool_choice = reset_tool_choice
        self.name = name
        self.max_format_retries = max_format_retries
        self._tools: dict[str, Tool] = {}
        self._declarations: list[ToolDeclaration] = []
        for t in tools:
            self.add_tool(t)
        forced = tool_choice_name(tool_choice)
        if forced is not None and forced not in self._tools:
            raise ToolDefinitionError(f"tool_choice names tool {forced!r}, which is not registered")
        self.tool_choice: ToolChoice = tool_choice
        if on_event is None:
            self._callbacks: list[EventCallback] = []
        elif callable(on_event):
            self._callbacks = [on_event]
        else:
            self._callbacks = list(on_event)

    # ------------------------------------------------------------------ construction helpers

    @classmethod
    def from_bundle(
        cls,
        bundle: str | Path | Bundle,
        *,
        backend: str | Backend | None = None,
        model: str | None = None,
        **overrides: Any,
    ) -> Agent:
        """Build an agent from a YAML tool bundle (see docs/BUNDLES.md).

        Args:
            bundle: path of the bundle file, or a loaded :class:`agentkit.bundle.Bundle`.
            backend: override the bundle's backend: a name (``embedded``, ``openai``, ``scripted``) or a
                Backend instance.
            model: override the bundle's model (checkpoint path/id, server model name, or script file).
            overrides: any :class:`Agent` keyword (``max_steps=``, ``system_prompt=``, ``on_event=``...), and
                ``seed=`` (the backend's seed, see :meth:`agentkit.bundle.Bundle.make_backend`).

        Raises:
            BundleError: the file is invalid (file, line, field in the message).
        """
        from agentkit.bundle import Bundle, load_bundle

        b = bundle if isinstance(bundle, Bundle) else load_bundle(bundle)
        return b.make_agent(backend=backend, model=model, **overrides)

    def add_tool(self, t: Tool | Callable[..., Any]) -> Tool:
        """Register a tool (a :class:`Tool` or a typed function); returns the Tool.

        Raises:
            ToolDefinitionError: a tool with that name is already registered, the function cannot be made a
                tool, or the backend cannot serve it (the embedded backend: a schema its tool-call constraint
                cannot enforce, checked here and not when the tool is defined).
        """
        tl = as_tool(t)
        if tl.name in self._tools:
            raise ToolDefinitionError(f"duplicate tool name {tl.name!r}")
        check_tool = getattr(self.backend, "check_tool", None)
        if check_tool is not None:
            check_tool(tl.name, tl.parameters)
        self._tools[tl.name] = tl
        self._declarations.append(tl.declaration())
        return tl

    def tool(self, fn: Callable[..., Any]) -> Tool:
        """Decorator registering ``fn`` as a tool with default settings (``@agent.tool``)."""
        return self.add_tool(fn)

    @property
    def tools(self) -> dict[str, Tool]:
        """Registered tools by name (a copy)."""
        return dict(self._tools)

    def declarations(self) -> list[ToolDeclaration]:
        """The tool declarations sent to the model."""
        return list(self._declarations)

    def tool_output_budget(self) -> int | None:
        """Bytes of tool output the model may see per model turn (see ``max_tool_output_bytes``).

        ``"auto"`` asks the backend for ``max_prompt_tokens`` (the embedded backend loads its checkpoint for
        that) and takes that many bytes; ``None`` means no agent-wide limit.
        """
        if self.max_tool_output_bytes != "auto":
            return self.max_tool_output_bytes
        try:
            tokens = getattr(self.backend, "max_prompt_tokens", None)
        except Exception:  # a backend that cannot tell (e.g. its checkpoint failed to load)
            tokens = None
        if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens > 0:
            if callable(getattr(self.backend, "count_tokens", None)):
                # the backend counts tokens: half the prompt in tokens (tool_output_token_budget), and a
                # byte pre-cut generous enough never to bind before it (no token is longer than 16 bytes)
                return max(tokens // 2, 1) * 16
            return max(tokens // 2, 1)
        return DEFAULT_TOOL_OUTPUT_BYTES

    def tool_output_token_budget(self) -> int | None:
        """Tokens of tool output the model may see per model turn, when the backend counts tokens.

        With ``max_tool_output_bytes="auto"`` and a backend that has ``count_tokens`` and reports
        ``max_prompt_tokens`` (the embedded backend): half the prompt capacity in tokens, so a turn's tool output
        always leaves the other half to the system prompt, declarations and question. ``None`` otherwise (the
        byte budget of :meth:`tool_output_budget` is then the only agent-wide limit).
        """
        if self.max_tool_output_bytes != "auto" or not callable(getattr(self.backend, "count_tokens", None)):
            return None
        try:
            tokens = getattr(self.backend, "max_prompt_tokens", None)
        except Exception:
            return None
        if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens > 0:
            return max(tokens // 2, 1)
        return None

    # ------------------------------------------------------------------------------ running

    def run(
        self,
        question: str,
        *,
        history: Conversation | None = None,
        deps: Any = None,
        on_event: EventCallback | None = None,
        images: Sequence[ImageSource] | None = None,
        vision_budget: int | None = None,
    ) -> RunResult:
        """Answer one user message (sync wrapper of :meth:`arun`; see there).

        Raises:
            RuntimeError: called from inside a running event loop (use ``await agent.arun(...)``).
        """
        try:
            asyncio.get_running_loop()
            in_loop = True
        except RuntimeError:
            in_loop = False
        if in_loop:
            raise RuntimeError(
                "Agent.run() cannot be called from a running event loop; use `await agent.arun(...)`"
            )
        content = user_content(question, images, vision_budget)
        return asyncio.run(self._arun(question, content, history, deps, on_event, prefer_sync=True))

    async def arun(
        self,
        question: str,
        *,
        history: Conversation | None = None,
        deps: Any = None,
        on_event: EventCallback | None = None,
        images: Sequence[ImageSource] | None = None,
        vision_budget: int | None = None,
    ) -> RunResult:
        """Answer one user message: loop model turn -> tool calls -> tool responses until a final answer.

        Args:
            question: the user message (non-empty).
            history: kept history of earlier turns (not modified; the new one is ``result.conversation``).
            deps: any object, handed to tools through :class:`~agentkit.tools.ToolContext`.
            on_event: an extra event callback for this run only.
            images: images the question is about: file paths, bytes, ``data:`` URLs or ``PIL.Image.Image``
                objects (PNG, JPEG or WebP; EXIF orientation applied). They go into the user message as OpenAI
                content parts before the text (``{"type": "image_url", "image_url": {"url": "data:..."}}``),
                and so into the history, saved conversations and a remote server's request.
            vision_budget: soft tokens per image for the embedded backend: 70, 140, 280 (default), 560 or
                1120 (see :mod:`model.vision`); kept on each image part as ``vision_budget`` (not sent to a
                remote server).

        Returns:
            The :class:`~agentkit.result.RunResult` (answer, steps, usage, timing, transcript, history).

        Raises:
            ValueError: empty question.
            model.vision.ImageError: an image that is missing, unreadable, corrupt or of another format, or a
                vision budget outside the five values (raised before the model is asked; one line naming the
                image and the reason).
            MaxStepsExceeded: ``max_steps`` model turns without a final answer.
            LoopGuardTriggered: the same (tool, canonical arguments) requested ``loop_guard`` times.
            ToolRetriesExceeded: a tool failed more than its ``retries`` budget in this run.
            PromptTooLong: a prompt does not fit the model's context even after trimming (names the token
                count and the limit).
            ToolCallFormatError: more than ``max_format_retries`` model turns wrote a tool call that does
                not parse.
            BackendError: the backend failed (after its own retries).
        """
        content = user_content(question, images, vision_budget)
        return await self._arun(question, content, history, deps, on_event, prefer_sync=False)

    async def _arun(
        self,
        question: str,
        content: str | list[dict[str, Any]],
        history: Conversation | None,
        deps: Any,
        on_event: EventCallback | None,
        *,
        prefer_sync: bool,
    ) -> RunResult:
        callbacks = self._callbacks if on_event is None else [*self._callbacks, on_event]
        emit: Callable[[Event], None] | None = None
        if callbacks:

            def emit(ev: Event) -> None:
                for cb in callbacks:
                    cb(ev)

        t_start = _perf()
        conv = history if history is not None else Conversation()
        messages: list[ChatMessage] = []
        if self.system_prompt:
            messages.append({"role": "system", "content": self.system_prompt})
        messages.extend(dict(m) for m in conv.messages)
        messages.append({"role": "user", "content": content})
        if emit:
            emit(RunStarted(question, self.backend.name, tuple(self._tools)))

        backend = self.backend
        # Agent.run owns its event loop (nothing else runs on it): the sync path is as good and keeps the
        # backend's sync connection pool across runs.
        acomplete = None if prefer_sync else getattr(backend, "acomplete", None)
        declarations = self._declarations
        tools = self._tools
        tool_choice = self.tool_choice
        steps: list[Step] = []
        usage = Usage()
        timing = Timing()
        repeats: dict[tuple[str, str], int] = {}
        failures: dict[str, int] = {}
        dropped_groups = 0  # oldest droppable message groups left out of the prompt (trimming)
        budget: list[int | None] = []  # the agent's tool-output budget, asked for once per run

        def prompt_view() -> tuple[list[ChatMessage], list[tuple[int, int]]]:
            groups = droppable_groups(messages)
            if not dropped_groups:
                return messages, groups
            skip = {i for a, b in groups[:dropped_groups] for i in range(a, b)}
            return [m for i, m in enumerate(messages) if i not in skip], groups

        reminders = 0

        def partial(reason: StopReason) -> RunResult:
            timing.total_seconds = _perf() - t_start
            return RunResult(question, None, steps, usage, timing, messages, conv, reason, backend.name)

        def fail(exc: AgentRunError) -> AgentRunError:
            if emit:
                emit(RunFailed(exc))
            return exc

        for step in range(self.max_steps):
            # -- model turn (trimming the prompt while the backend says it does not fit)
            t0 = _perf()
            while True:
                prompt, groups = prompt_view()
                try:
                    if acomplete is not None:
                        turn: ModelTurn = await acomplete(prompt, declarations, tool_choice)
                    else:
                        turn = backend.complete(prompt, declarations, tool_choice)
                except ModelPromptTooLong as exc:
                    left = groups[dropped_groups:]
                    dropped = sum(b - a for a, b in groups[:dropped_groups])
                    if not self.trim_history or not left:
                        timing.model_seconds += _perf() - t0
                        has_calls = any(m.get("role") == "tool" for m in prompt)
                        if not self.trim_history:
                            why = "history trimming is off (trim_history=False)"
                        else:
                            why = (f"dropped {dropped} older message(s); " if dropped else "") + (
                                "nothing left to drop (the system prompt, the tool declarations, the question"
                                + (" and the latest tool calls with their responses)" if has_calls else ")")
                            )
                        fix = "shorten the question or the system prompt" + (
                            ", or lower max_tool_output_bytes" if has_calls else ""
                        )
                        raise fail(
                            PromptTooLong(
                                f"step {step}: {exc}; {why}; {fix}",
                                partial("prompt_too_long"),
                                prompt_tokens=exc.prompt_tokens,
                                limit=exc.limit,
                                dropped_messages=dropped,
                            )
                        ) from None
                    # drop roughly enough of the oldest groups at once (characters per token of this prompt)
                    per_token = sum(_message_chars(m) for m in prompt) / max(exc.prompt_tokens, 1)
                    need = (exc.prompt_tokens - exc.limit) * per_token
                    freed = 0.0
                    for a, b in left:
                        dropped_groups += 1
                        freed += sum(_message_chars(m) for m in messages[a:b])
                        if freed >= need:
                            break
                    if emit:
                        emit(
                            PromptTrimmed(
                                step,
                                sum(b - a for a, b in groups[:dropped_groups]),
                                exc.prompt_tokens,
                                exc.limit,
                            )
                        )
                    continue
                except Exception as exc:
                    if emit:
                        emit(RunFailed(exc))
                    raise
                break
            model_s = _perf() - t0
            timing.model_seconds += model_s
            usage.add(turn.usage)
            if emit:
                emit(ModelResponded(step, turn, model_s))
            calls = turn.tool_calls

            if not calls and turn.format_error is not None:  # a call written as text that does not parse
                steps.append(Step(step, turn.text, turn.thinking, [], turn.usage, model_s))
                if reminders >= self.max_format_retries:
                    raise fail(
                        ToolCallFormatError(
                            f"the model wrote a tool call that does not parse {reminders + 1} times in this run "
                            f"(max_format_retries={self.max_format_retries}); last problem: "
                            f"{turn.format_error}; the partial transcript is in .result",
                            partial("format_retries"),
                        )
                    )
                reminders += 1
                messages.append({"role": "assistant", "content": turn.text})
                messages.append({"role": "user", "content": _format_reminder(turn.format_error, tools)})
                continue

            if not calls:  # final answer
                steps.append(Step(step, turn.text, turn.thinking, [], turn.usage, model_s))
                final: ChatMessage = {"role": "assistant", "content": turn.text}
                if turn.thinking:
                    final["thinking"] = turn.thinking
                messages.append(final)
                timing.total_seconds = _perf() - t_start
                result = RunResult(
                    question,
                    turn.text,
                    steps,
                    usage,
                    timing,
                    messages,
                    conv.with_turn(content, turn.text),
                    "final_answer",
                    backend.name,
                )
                if emit:
                    emit(RunFinished(result))
                return result

            # -- tool names (functions.NAME), unique ids, assistant message
            ids: set[str] = set()
            for i, c in enumerate(calls):
                c.name = resolve_tool_name(c.name, tools) or c.name
                if not c.id or c.id in ids:
                    base = c.id or f"call_{step}_{i}"
                    k = 1
                    cid = base if base not in ids else f"{base}_{k}"
                    while cid in ids:
                        k += 1
                        cid = f"{base}_{k}"
                    c.id = cid
                ids.add(c.id)
            assistant: ChatMessage = {
                "role": "assistant",
                "content": turn.text or None,
                "tool_calls": [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {
                            "name": c.name,
                            "arguments": c.arguments if c.error is None else (c.raw_arguments or ""),
                        },
                    }
                    for c in calls
                ],
            }
            if turn.thinking:
                assistant["thinking"] = turn.thinking
            messages.append(assistant)

            # -- tool planning
            n = len(calls)
            records: list[ToolCallRecord | None] = [None] * n
            scheduled: list[tuple[int, Tool, Any]] = []
            step_rec = Step(step, turn.text, turn.thinking, [], turn.usage, model_s)
            guard_msg: str | None = None
            for i, c in enumerate(calls):
                shown_args: Any = c.arguments if c.error is None else c.raw_arguments
                if self.loop_guard is not None:
                    key = (c.name, canonical_arguments(shown_args))
                    cnt = repeats.get(key, 0) + 1
                    repeats[key] = cnt
                    if cnt >= self.loop_guard:
                        guard_msg = (
                            f"loop guard: the model requested {c.name}({key[1]}) {cnt} times in this run "
                            f"(loop_guard={self.loop_guard}); stopped at step {step} before running it"
                        )
                        break
                if c.error is not None:
                    records[i] = ToolCallRecord(
                        c.id,
                        c.name,
                        shown_args,
                        _error_content(
                            {
                                "error": c.error,
                                "tool": c.name,
                                "arguments": shown_args,
                                "valid_tools": list(tools),
                                "hint": "send the arguments as one JSON object matching the tool's parameters",
                            }
                        ),
                        c.error,
                        "decode",
                    )
                    continue
                tl = tools.get(c.name)
                if tl is None:
                    msg = f"unknown tool {c.name!r}"
                    nearest = nearest_tool_name(c.name, tools)
                    payload = {
                        "error": msg,
                        "tool": c.name,
                        "arguments": shown_args,
                        "valid_tools": list(tools),
                        "hint": "call one of valid_tools",
                    }
                    if nearest is not None:
                        payload["did_you_mean"] = nearest
                        payload["hint"] = f"call {nearest!r} (or another of valid_tools) with its parameters"
                    records[i] = ToolCallRecord(
                        c.id,
                        c.name,
                        shown_args,
                        _error_content(payload),
                        msg,
                        "unknown_tool",
                    )
                    continue
                try:
                    validated = tl.validate(c.arguments)
                except ToolArgumentsError as exc:
                    failures[tl.name] = failures.get(tl.name, 0) + 1
                    msg = f"invalid arguments: {exc}"
                    records[i] = ToolCallRecord(
                        c.id,
                        c.name,
                        shown_args,
                        _error_content(
                            {
                                "error": msg,
                                "tool": c.name,
                                "arguments": shown_args,
                                "parameters": tl.parameters,
                                "hint": "fix the arguments and call again",
                            }
                        ),
                        msg,
                        "invalid_arguments",
                    )
                    continue
                scheduled.append((i, tl, validated))

            if guard_msg is not None:
                for i, c in enumerate(calls):
                    if records[i] is None:
                        records[i] = ToolCallRecord(
                            c.id, c.name, c.arguments, "", "not run: loop guard stopped the run", "not_run"
                        )
                step_rec.tool_calls = [r for r in records if r is not None]
                steps.append(step_rec)
                raise fail(LoopGuardTriggered(guard_msg, partial("loop_guard")))

            if emit:
                for i, _tl, _validated in scheduled:
                    c = calls[i]
                    emit(ToolCallStarted(step, c.id, c.name, c.arguments))
                for rec in records:
                    if rec is not None:
                        emit(ToolCallFinished(step, rec))

            # -- execution
            t1 = _perf()
            share: int | None = None
            token_share: int | None = None
            if scheduled:
                if not budget:
                    budget.append(self.tool_output_budget())
                    budget.append(self.tool_output_token_budget())
                if budget[0] is not None:
                    share = max(budget[0] // len(scheduled), 1)
                if budget[1] is not None:
                    token_share = max(budget[1] // len(scheduled), 1)
            if len(scheduled) == 1:
                i, tl, validated = scheduled[0]
                records[i] = await self._execute(
                    tl, calls[i], validated, step, deps, emit, share, token_share
                )
            elif scheduled:
                done = await asyncio.gather(
                    *(
                        self._execute(tl, calls[i], v, step, deps, emit, share, token_share)
                        for i, tl, v in scheduled
                    )
                )
                for (i, _tl, _v), rec in zip(scheduled, done, strict=True):
                    records[i] = rec
            tool_s = _perf() - t1
            timing.tool_seconds += tool_s
            step_rec.tool_seconds = tool_s

            # -- resolution: one tool response per call id, in call-id order
            final_records: list[ToolCallRecord] = []
            for rec in records:
                assert rec is not None
                final_records.append(rec)
                messages.append(
                    {"role": "tool", "tool_call_id": rec.id, "name": rec.name, "content": rec.content}
                )
                if rec.error_kind in ("exception", "timeout"):
                    failures[rec.name] = failures.get(rec.name, 0) + 1
            step_rec.tool_calls = final_records
            steps.append(step_rec)

            for tname, count in failures.items():
                tl = tools[tname]
                if count > tl.retries:
                    last = next(
                        (r.error for r in reversed(final_records) if r.name == tname and r.error), None
                    )
                    raise fail(
                        ToolRetriesExceeded(
                            f"tool {tname!r} failed {count} time{'s' if count != 1 else ''} in this run "
                            f"(retries={tl.retries}; the calls of one step all run before the budget is checked)"
                            + (f"; last error: {last}" if last else ""),
                            partial("tool_retries"),
                        )
                    )

            if self.reset_tool_choice and tool_choice != "none":
                tool_choice = "auto"

        raise fail(
            MaxStepsExceeded(
                f"no final answer after {self.max_steps} model turns (max_steps={self.max_steps})",
                partial("max_steps"),
            )
        )

    async def _execute(
        self,
        tl: Tool,
        c: ToolCallRequest,
        validated: Any,
        step: int,
        deps: Any,
        emit: Callable[[Event], None] | None,
        share: int | None = None,
        token_share: int | None = None,
    ) -> ToolCallRecord:
        limits = [x for x in (tl.max_output_bytes, share) if x is not None]
        limit = min(limits) if limits else None
        count = getattr(self.backend, "count_tokens", None) if token_share is not None else None

        def cap(text: str) -> str:
            by_bytes = cap_output(text, limit)
            if count is None or token_share is None or count(by_bytes) <= token_share:
                return by_bytes
            # the token cap binds: cut the head the byte cap kept (so both hold), marker sized on the whole
            head = text if by_bytes is text else by_bytes[: by_bytes.rfind("\n[agentkit: cut ")]
            return cap_output_tokens(head, token_share, count, len(text.encode("utf-8", "surrogatepass")))

        t0 = _perf()
        try:
            value = await tl.acall(validated, ToolContext(tl.name, c.id, step, deps))
            content = cap(tl.serializer(value))
        except ToolTimeoutError as exc:
            rec = ToolCallRecord(
                c.id,
                c.name,
                c.arguments,
                _error_content(
                    {
                        "error": str(exc),
                        "tool": c.name,
                        "arguments": c.arguments,
                        "hint": "the tool did not answer in time; try other arguments or another approach",
                    }
                ),
                str(exc),
                "timeout",
                None,
                _perf() - t0,
            )
        except Exception as exc:
            msg = cap(describe_exception(exc))
            rec = ToolCallRecord(
                c.id,
                c.name,
                c.arguments,
                _error_content({"error": msg, "tool": c.name, "arguments": c.arguments}),
                msg,
                "exception",
                None,
                _perf() - t0,
            )
        else:
            rec = ToolCallRecord(c.id, c.name, c.arguments, content, None, None, value, _perf() - t0)
        if emit:
            emit(ToolCallFinished(step, rec))
        return rec

    # -------------------------------------------------------------------------------- chat

    def chat(self, conversation: Conversation | None = None) -> ChatSession:
        """Start (or resume from ``conversation``) a multi-turn chat session."""
        return ChatSession(self, conversation)

    def __repr__(self) -> str:
        return f"Agent(name={self.name!r}, backend={self.backend.name!r}, tools={list(self._tools)})"


class ChatSession:
    """A multi-turn conversation with an agent; history keeps user messages and final answers only.

    Args:
        agent: the agent answering.
        conversation: history to resume from (copied); ``None`` starts empty.
    """

    def __init__(self, agent: Agent, conversation: Conversation | None = None) -> None:
        self.agent = agent
        self.conversation = Conversation.from_dict(conversation.to_dict()) if conversation else Conversation()
        self.results: list[RunResult] = []

    def send(
        self,
        message: str,
        *,
        deps: Any = None,
        on_event: EventCallback | None = None,
        images: Sequence[ImageSource] | None = None,
        vision_budget: int | None = None,
    ) -> RunResult:
        """Run one turn and append it to the history (``images``/``vision_budget`` as :meth:`Agent.arun`).

        A turn that fails (e.g. :class:`~agentkit.errors.MaxStepsExceeded`) raises and leaves the history
        unchanged.
        """
        result = self.agent.run(
            message,
            history=self.conversation,
            deps=deps,
            on_event=on_event,
            images=images,
            vision_budget=vision_budget,
        )
        self.conversation = result.conversation
        self.results.append(result)
        return result

    async def asend(
        self,
        message: str,
        *,
        deps: Any = None,
        on_event: EventCallback | None = None,
        images: Sequence[ImageSource] | None = None,
        vision_budget: int | None = None,
    ) -> RunResult:
        """Async :meth:`send`."""
        result = await self.agent.arun(
            message,
            history=self.conversation,
            deps=deps,
            on_event=on_event,
            images=images,
            vision_budget=vision_budget,
        )
        self.conversation = result.conversation
        self.results.append(result)
        return result

    def reset(self) -> None:
        """Forget the history."""
        self.conversation = Conversation()

    def save(self, path: str | Path) -> None:
        """Write the history as JSON (see :class:`~agentkit.history.Conversation`)."""
        self.conversation.save(path)
