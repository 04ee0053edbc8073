"""The bridge between OpenAI requests and the embedded runtime's continuous batcher.

:class:`ServeEngine` turns a validated request into a prepared turn (:meth:`model.turn.chat.ChatModel.prepare`),
submits it to the one :class:`model.runtime.batcher.CanvasBatcher` and turns the tokens into OpenAI's shapes; a
refused request is a :class:`ServeError` (HTTP status, OpenAI's ``type``/``param``/``code``). OpenAI's
``temperature`` ``T`` scales the checkpoint's denoising schedule: ``t_max * T`` falling to ``t_min * T``
(``t_min`` at least 0.01, ``t_max`` at least twice ``t_min``).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Literal

import jsonschema

from agentkit.messages import TextPart, ToolCall, ToolMessage, to_template_messages
from agentkit.serve import schemas as S
from agentkit.tool_schema import unresolvable_ref
from grammar import special_tokens as st
from grammar.parse import ToolCallParseError, parse_tool_calls
from model.checkpoint.tokenizer import decode_marked
from model.heads.vision import ImageError
from model.turn.limits import PromptTooLong
from schema import MAX_NESTING, SchemaError, fingerprint, nesting, too_deep

#: The lowest temperature of a denoising step (``temperature = 0`` ends here, starting from twice this).
MIN_STEP_TEMPERATURE = 0.01


@dataclass(eq=False)
class ServeError(Exception):
    """A request the server refuses: HTTP ``status`` and OpenAI's error fields."""

    status: int
    message: str
    _: KW_ONLY
    type: str = "invalid_request_error"
    param: str | None = None
    code: str | None = None

    def __post_init__(self) -> None:
        super().__init__(self.message)

    def body(self) -> dict[str, Any]:
        """The JSON body: ``{"error": {"message", "type", "param", "code"}}``."""
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def _content(content: Any, where: str, *, images: bool = False) -> Any:
    """The text of a message's content, or, when ``images`` and it holds ``image_url`` parts, its text and image
    parts. ServeError (400) for an image outside a user message or one that is not a ``data:`` URL (never fetched)."""
    if not isinstance(content, list):
        return content or ""
    parts: list[dict[str, Any]] = []
    for j, p in enumerate(content):
        if isinstance(p, TextPart):
            parts.append({"type": "text", "text": p.text})
            continue
        if not images:
            raise ServeError(
                400,
                f"{where}[{j}]: content parts of type 'image_url' are not supported by this server here (text "
                "only: images go in user messages)",
                param=f"{where}[{j}].type",
            )
        if not p.image_url.url.startswith("data:"):
            raise ServeError(
                400,
                f"{where}[{j}]: an image_url part must hold the image as a data:image/...;base64, URL "
                "(this server does not fetch URLs or read files)",
                param=f"{where}[{j}].image_url.url",
            )
        parts.append(
            {"type": "image_url", "image_url": {"url": p.image_url.url}, "vision_budget": p.vision_budget}
        )
    if any(part["type"] == "image_url" for part in parts):
        return parts
    return "".join(part["text"] for part in parts)


def from_wire_messages(messages: list[Any]) -> list[dict[str, Any]]:
    """OpenAI request messages -> the chat template's message dicts (:func:`agentkit.messages.to_template_messages`);
    a tool message is named by the call it answers.

    Raises:
        ServeError: (400) arguments that are not a JSON object, two calls of one message with one id, a tool
            message that answers no earlier call and has no ``name``, or (as OpenAI) an assistant message whose ``tool_calls`` the tool messages right
            after it do not all answer.
    """
    out: list[dict[str, Any]] = []
    names: dict[str, str] = {}
    pending: dict[str, None] = {}  # the calls of the assistant message at ``asked`` not answered yet
    asked = 0
    for i, m in enumerate([*messages, None]):
        if pending and not isinstance(m, ToolMessage):
            raise ServeError(
                400,
                f"messages[{asked}]: an assistant message with 'tool_calls' must be followed by tool messages "
                f"answering each tool_call_id; not answered: {', '.join(map(repr, pending))}",
                param=f"messages[{asked}].tool_calls",
            )
        if m is None:
            break
        msg: dict[str, Any] = {"role": "system" if m.role == "developer" else m.role}
        if isinstance(m, ToolMessage):
            if (name := m.name or names.get(m.tool_call_id)) is None:
                raise ServeError(
                    400,
                    f"messages[{i}]: tool_call_id {m.tool_call_id!r} answers no earlier assistant tool call "
                    "(and the message has no 'name')",
                    param=f"messages[{i}].tool_call_id",
                )
            msg.update(tool_call_id=m.tool_call_id, name=name)
            pending.pop(m.tool_call_id, None)
        msg["content"] = _content(m.content, f"messages[{i}].content", images=m.role == "user")
        for j, tc in enumerate(calls := getattr(m, "tool_calls", None) or []):
            if tc.error is not None:
                where = f"messages[{i}].tool_calls[{j}].function.arguments"
                raise ServeError(400, f"{where}: {tc.error}", param=where)
            if tc.id in pending:  # (``pending`` holds this message's calls so far)
                where = f"messages[{i}].tool_calls[{j}].id"
                why = f"{tc.id!r} is the id of an earlier call of this message"
                raise ServeError(400, f"{where}: {why}; each tool call needs its own id", param=where)
            names[tc.id], pending[tc.id], asked = tc.name, None, i
        if calls:
            msg["tool_calls"] = [tc.to_dict() for tc in calls]
        out.append(msg)
    return to_template_messages(out)


@dataclass
class Submission:
    """A request on its way through the batcher."""

    id: str
    created: int
    prompt_tokens: int
    handle: Any  # model.runtime.batcher.RequestHandle
    constraint: Any = None  # the turn's GrammarConstraint (``budget_closed``: the budget forced the end)
    started: float = field(default_factory=time.perf_counter)


def _refuse_unsupported(req: S.ChatCompletionRequest) -> None:
    """400 for what this server does not do: ``n != 1``, stop sequences, logprobs; and, as OpenAI,
    ``stream_options`` without ``stream: true``."""
    if req.n is not None and req.n != 1:
        raise ServeError(400, f"n={req.n} is not supported: this server returns one choice (n=1)", param="n")
    if req.stop:
        raise ServeError(
            400,
            "stop sequences are not supported by this server (a canvas is denoised in parallel; "
            "limit the length with max_tokens)",
            param="stop",
        )
    if req.logprobs:
        raise ServeError(400, "logprobs are not supported by this server", param="logprobs")
    if req.stream_options is not None and not req.stream:
        raise ServeError(400, "stream_options is only allowed when stream is true", param="stream_options")


def _tool_choice(req: S.ChatCompletionRequest, tools: list[dict[str, Any]]) -> Any:
    """The runtime's tool choice: ``"auto"``/``"required"``/``"none"`` or ``{"name": NAME}`` of a declared tool."""
    choice: Any = req.tool_choice or "auto"
    if isinstance(choice, S.NamedToolChoice):
        name = choice.function.name
        declared = [t["function"]["name"] for t in tools]
        if name not in declared:
            raise ServeError(
                400,
                f"tool_choice names tool {name!r}, which is not among the request's tools {declared}",
                param="tool_choice",
            )
        return {"name": name}
    if choice == "required" and not tools:
        raise ServeError(
            400, "tool_choice='required' needs at least one tool in 'tools'", param="tool_choice"
        )
    return choice


def _check_nesting(schema: Any, where: str, param: str) -> None:
    """ServeError (400) when ``schema`` nests deeper than ``schema.MAX_NESTING`` (checked before anything
    recurses into it)."""
    n = nesting(schema)
    if n > MAX_NESTING:
        raise ServeError(
            400,
            f"{where}: the schema is {too_deep(n)}",
            param=param,
            code="unsupported_schema",
        )


def _check_valid(schema: Any, where: str, param: str) -> None:
    """ServeError (400, code ``invalid_schema``, the keyword's JSON pointer named) unless ``schema`` is valid JSON
    Schema under its ``$schema`` (2020-12 when none): ``"required": "a"`` would otherwise be ignored."""
    try:
        jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator).check_schema(
            schema
        )
    except jsonschema.SchemaError as exc:
        pointer = "/" + "/".join(str(x) for x in exc.path)
        message = f"{where}: not a valid JSON Schema: {exc.message} (at {pointer})"
        raise ServeError(400, message, param=param, code="invalid_schema") from None


def _response_format(req: S.ChatCompletionRequest) -> dict[str, Any] | None:
    """The runtime's ``response_format`` (``None`` for plain text); ServeError for a missing or too deep schema."""
    rf = req.response_format
    if rf is None or rf.type == "text":
        return None
    if rf.type == "json_schema" and rf.json_schema is None:
        raise ServeError(
            400, "response_format type 'json_schema' needs a 'json_schema' object", param="response_format"
        )
    out: dict[str, Any] = {"type": rf.type}
    if rf.json_schema is not None:
        _check_nesting(rf.json_schema.schema_, "response_format", "response_format")
        _check_valid(rf.json_schema.schema_, "response_format", "response_format")
        out["json_schema"] = {"schema": rf.json_schema.schema_, "strict": bool(rf.json_schema.strict)}
    return out


def _context_error(
    exc: PromptTooLong,
    max_tokens: int | None,
    asked: int,
    canvas: int,
    response_format: dict[str, Any] | None,
) -> ServeError:
    """The 400 (``context_length_exceeded``) naming the culprit: the schema, ``max_tokens`` or the prompt
    (``asked``: the budget asked for, rounded up to whole canvases of ``canvas`` tokens)."""
    if exc.max_positions is None or exc.generation_tokens is None:  # the chat model always gives both
        return ServeError(400, str(exc), param="messages", code="context_length_exceeded")
    if exc.generation_tokens > asked:  # raised to the constraint's shortest completion: the schema's fault
        json_value = response_format is not None
        what = "response_format value" if json_value else "tool call"
        return ServeError(
            400,
            f"the shortest {what} the request's schema allows needs {exc.generation_tokens:,} tokens (whole "
            f"canvases of {canvas}), which with the {exc.prompt_tokens:,}-token prompt exceed this model's "
            f"{exc.max_positions:,} positions; relax the schema (a long minItems, minLength or pattern) or "
            "shorten the prompt",
            param="response_format" if json_value else "tools",
            code="context_length_exceeded",
        )
    message = str(exc)
    if exc.prompt_tokens < exc.max_positions - canvas:  # the prompt would fit with a smaller budget
        fits = (exc.max_positions - exc.prompt_tokens) // canvas * canvas
        if max_tokens is not None:  # the culprit is max_tokens
            return ServeError(
                400,
                f"max_tokens={max_tokens} does not fit with this prompt: the prompt is {exc.prompt_tokens:,} "
                f"tokens of this model's {exc.max_positions:,} positions, and max_tokens is counted in "
                f"whole canvases of {canvas} tokens; lower max_tokens to {fits:,} or less",
                param="max_tokens",
                code="context_length_exceeded",
            )
        message += (
            f"; that budget is this server's default: a max_tokens of at most {fits:,} fits this prompt"
        )
    if exc.limit <= 0:  # the prompt alone leaves no room for one canvas (exc's text blames max_new_tokens)
        message = (
            f"the prompt is {exc.prompt_tokens:,} tokens but this model takes at most "
            f"{exc.max_positions - canvas:,} ({exc.max_positions:,} positions minus one canvas of {canvas} "
            "tokens to answer in)"
        )
    return ServeError(400, message, param="messages", code="context_length_exceeded")


class ServeEngine:
    """A loaded :class:`model.turn.chat.ChatModel` behind a :class:`model.runtime.batcher.CanvasBatcher`;
    ``model_id`` is what clients name in ``model``, ``binding`` the binder of requests that name none."""

    def __init__(self, chat_model: Any, model_id: str, max_batch: int = 16, binding: str = "none") -> None:
        from model.runtime.batcher import CanvasBatcher

        self.chat_model = chat_model
        self.binding = binding
        self.model_id = model_id
        self.created = int(time.time())
        self.batcher = CanvasBatcher(chat_model.model, chat_model.settings, max_batch=max_batch)
        self._checked: set[str] = set()  # SHA-256 of the tools whose schema passed _check_tool

    def check_model(self, name: str) -> None:
        """Raises :class:`ServeError` (404) unless ``name`` is the served model's id."""
        if name != self.model_id:
            raise ServeError(
                404,
                f"model {name!r} does not exist; this server serves {self.model_id!r}",
                param="model",
                code="model_not_found",
            )

    def _check_tool(self, i: int, tool: dict[str, Any]) -> None:
        """ServeError (400) unless ``tools[i]``'s schema compiles and a forced call of it fits in 4,096 tokens
        (a required property that recurses into itself has no end)."""
        key = fingerprint(tool)  # (a digest: a tool's JSON may be megabytes, and 1,024 are kept)
        if key in self._checked:  # clients resend the same tools with every request
            return
        name = tool["function"]["name"]
        param = f"tools[{i}].function.parameters"
        _check_nesting(tool["function"].get("parameters"), f"tools[{i}] ({name})", param)
        try:
            constraint = self.chat_model.make_constraint([tool], {"name": name})
            _check_valid(tool["function"].get("parameters"), f"tools[{i}] ({name})", param)
            if endless := unresolvable_ref(tool["function"].get("parameters", {})):  # before the 4096 below
                where, why = endless
                message = f"tools[{i}] ({name}): {why} (at /{'/'.join(map(str, where))})"
                raise ServeError(400, message, param=param, code="unsupported_schema")
            shortest = constraint.min_completion_tokens(4096)
        except SchemaError as exc:
            if exc.keyword == "name" and not exc.path:  # the tool's name, not its parameters
                param = f"tools[{i}].function.name"
            raise ServeError(
                400, f"tools[{i}] ({name}): unsupported schema: {exc}", param=param, code="unsupported_schema"
            ) from None
        except RecursionError:
            raise ServeError(
                400,
                f"tools[{i}] ({name}): the schema is nested too deeply",
                param=param,
                code="unsupported_schema",
            ) from None
        except ValueError as exc:
            raise ServeError(400, f"tools[{i}] ({name}): {exc}", param=f"tools[{i}]") from None
        if shortest >= 4096:
            raise ServeError(
                400,
                f"tools[{i}] ({name}): no call of this tool fits in 4096 tokens (a required property whose "
                "schema recurses into itself, or a length or item bound in the thousands)",
                param=param,
                code="unsupported_schema",
            )
        if len(self._checked) >= 1024:
            self._checked.clear()
        self._checked.add(key)

    def prepare(self, req: S.ChatCompletionRequest) -> Any:
        """Validate ``req`` against the checkpoint; ``(model.turn.chat.PreparedTurn, tools)``.

        Raises:
            ServeError: 400 for what the server does not support, a bad ``tool_choice``, an unsupported schema,
                a prompt or ``max_tokens`` over the context, an unreadable image.
        """
        _refuse_unsupported(req)
        tools = [t.model_dump(exclude_none=True) for t in req.tools or []]
        names = [t["function"]["name"] for t in tools]
        for i, t in enumerate(tools):
            if names.index(names[i]) < i:
                raise ServeError(
                    400,
                    f"tools[{i}]: the tool name {names[i]!r} is taken by tools[{names.index(names[i])}]; "
                    "tool names must be unique",
                    param=f"tools[{i}].function.name",
                )
            self._check_tool(i, t)
        choice = _tool_choice(req, tools)
        response_format = _response_format(req)
        if choice not in ("auto", "none"):  # the turn is a call: response_format shapes text answers only
            response_format = None
        max_tokens = req.max_completion_tokens or req.max_tokens
        temperature = None
        if req.temperature is not None:
            s = self.chat_model.settings
            t_min = max(s.t_min * req.temperature, MIN_STEP_TEMPERATURE)
            temperature = (max(s.t_max * req.temperature, 2 * t_min), t_min)
        messages = from_wire_messages(req.messages)
        try:
            turn = self.chat_model.prepare(
                messages,
                tools or None,
                choice,
                max_new_tokens=max_tokens,
                temperature=temperature,
                response_format=response_format,
                binder=req.binding or self.binding,
                parallel_tool_calls=req.parallel_tool_calls is not False,
            )
        except RecursionError:
            raise ServeError(
                400,
                "a schema in the request (a tool's parameters or response_format) is nested too deeply",
                code="unsupported_schema",
            ) from None
        except PromptTooLong as exc:
            canvas = self.chat_model.settings.canvas_length
            asked = max_tokens or self.chat_model.settings.max_new_tokens
            raise _context_error(
                exc, max_tokens, -(-asked // canvas) * canvas, canvas, response_format
            ) from None
        except ImageError as exc:  # an image of the messages, whatever else was asked
            if exc.part is None:  # not one part's fault (a checkpoint without a vision tower)
                raise ServeError(400, str(exc), param="messages") from None
            path = "messages[{}].content[{}].image_url.url".format(*exc.part)
            raise ServeError(400, f"{path}: {exc}", param=path) from None
        except SchemaError as exc:
            raise ServeError(
                400,
                f"response_format: unsupported schema: {exc}",
                param="response_format",
                code="unsupported_schema",
            ) from None
        except ValueError as exc:  # with a response_format: its schema has no short value (as a tool's)
            param = "response_format" if response_format is not None else None
            code = "unsupported_schema" if param else None
            raise ServeError(400, str(exc), param=param, code=code) from None
        return turn, tools

    def submit(self, turn: Any, seed: int | None, on_canvas: Any = None) -> Submission:
        """Queue a prepared turn in the batcher; ServeError (503) while it shuts down."""
        from model.runtime.batcher import BatcherClosed

        try:
            handle = self.batcher.submit(  # the binder's prefill, if any: the prompt is encoded once
                turn.input_ids,
                turn.settings,
                turn.constraint,
                seed,
                on_canvas,
                vision=turn.vision,
                prefill=turn.prefill,
            )
        except BatcherClosed as exc:
            raise ServeError(503, f"the server is shutting down: {exc}", type="server_error") from None
        return Submission(
            id=f"chatcmpl-{uuid.uuid4().hex[:24]}",
            created=int(time.time()),
            prompt_tokens=len(turn.input_ids),
            handle=handle,
            constraint=turn.constraint,
        )

    @staticmethod
    def tool_calls(calls: list[Any]) -> list[dict[str, Any]]:
        """OpenAI tool calls (fresh ids, JSON-string arguments) of parsed calls (``name``, ``arguments``)."""
        return [
            ToolCall(f"call_{uuid.uuid4().hex[:24]}", c.name, dict(c.arguments)).to_dict(wire=True)
            for c in calls
        ]

    def completion(self, sub: Submission, result: Any) -> dict[str, Any]:
        """The non-streaming response (``chat.completion``) for a finished ``model.runtime.batcher.BatchOutput``."""
        out = self.chat_model.finish(result.tokens, result.prompt_tokens, result.stats, sub.started)
        calls = self.tool_calls(out.tool_calls)
        message: dict[str, Any] = {
            "role": "assistant",
            "content": out.text if (out.text or not calls) else None,
        }
        if calls:
            message["tool_calls"] = calls
        if out.thinking:
            message["reasoning_content"] = out.thinking
        choice = {"index": 0, "message": message, "finish_reason": finish_reason(sub, result, bool(calls))}
        return {
            **self.header(sub, "chat.completion"),
            "choices": [{**choice, "logprobs": None}],
            "usage": usage(result.prompt_tokens, len(result.tokens)),
        }

    def header(self, sub: Submission, kind: str) -> dict[str, Any]:
        """The keys a response (``kind``: ``chat.completion`` or ``chat.completion.chunk``) starts with."""
        return {"id": sub.id, "object": kind, "created": sub.created, "model": self.model_id}

    def close(self, wait: bool = True, timeout: float | None = None) -> None:
        """Stop the batcher (see :meth:`model.runtime.batcher.CanvasBatcher.close`)."""
        self.batcher.close(wait=wait, timeout=timeout)


def finish_reason(sub: Submission, result: Any, has_calls: bool) -> Literal["stop", "length", "tool_calls"]:
    """``tool_calls`` when there are calls; else ``length`` when the budget ended the turn (or the constraint
    forced the end: ``budget_closed``); else ``stop``."""
    if has_calls:
        return "tool_calls"
    if result.finish_reason == "length" or bool(getattr(sub.constraint, "budget_closed", False)):
        return "length"
    return "stop"


def usage(prompt: int, completion: int) -> dict[str, int]:
    """OpenAI ``usage`` from token counts."""
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


class StreamView:
    """What a streamed response has sent so far, and the deltas up to a longer output (content per canvas,
    a tool call whole once its ``<tool_call|>`` is generated, thinking as ``reasoning_content``).

    As OpenAI's, the first delta has ``role`` and ``content``: ``""`` for prose, ``null`` for a tool call. A turn
    that can only be one (no tools, or a ``tool_choice`` other than ``auto``) opens at once (:attr:`opening`),
    one that may be either with its first delta."""

    def __init__(self, engine: ServeEngine, tools: bool, tool_choice: Any) -> None:
        self.engine = engine
        self.sent = {"reasoning_content": "", "content": ""}  # the text of each field sent so far
        self.calls = 0
        self.tokens: list[int] = []
        self.opened = not tools or tool_choice not in (None, "auto")
        prose = not tools or tool_choice == "none"
        self.opening = [{"role": "assistant", "content": "" if prose else None}] if self.opened else []

    def _view(self, final: bool) -> tuple[str, str, list[Any]]:
        text = decode_marked(self.engine.chat_model.tokenizer, self.tokens)
        body = text.lstrip()
        if body.startswith(st.CHANNEL_START) and st.CHANNEL_END not in body and not final:
            thought = body[len(st.CHANNEL_START) :].removeprefix("thought")
            return st.unmark_text(thought.strip()), "", []
        if not final:
            last_close = text.rfind(st.TOOL_CALL_END)
            open_at = text.find(st.TOOL_CALL_START, last_close + 1 if last_close >= 0 else 0)
            if open_at >= 0:
                text = text[:open_at]
        try:
            parsed = parse_tool_calls(text, syntax=self.engine.chat_model.syntax)
        except ToolCallParseError:
            return self.sent["reasoning_content"], self.sent["content"], []
        return parsed.thinking or "", parsed.text, parsed.calls

    def feed(self, tokens: list[int], final: bool = False) -> list[dict[str, Any]]:
        """Add a committed canvas's ``tokens`` (``final``: the turn's last); the deltas to send, the opening
        first when not sent yet: ``role`` (``content: null``) on a first tool call's delta, else its own
        ``content: ""`` delta."""
        delta = self._delta(tokens, final)
        if self.opened or not (delta or final):
            return [delta] if delta else []
        self.opened = True
        if "tool_calls" in delta and not delta.keys() & {"content", "reasoning_content"}:
            return [{"role": "assistant", "content": None, **delta}]
        return [{"role": "assistant", "content": ""}, *([delta] if delta else [])]

    def _delta(self, tokens: list[int], final: bool) -> dict[str, Any]:
        self.tokens.extend(tokens)
        reasoning, content, calls = self._view(final)
        delta: dict[str, Any] = {}
        for key, text in (("reasoning_content", reasoning), ("content", content)):
            if text.startswith(self.sent[key]) and len(text) > len(self.sent[key]):
                delta[key], self.sent[key] = text[len(self.sent[key]) :], text
        if len(calls) > self.calls:
            fresh = self.engine.tool_calls(calls[self.calls :])
            delta["tool_calls"] = [{"index": self.calls + k, **c} for k, c in enumerate(fresh)]
            self.calls = len(calls)
        return delta
