"""Tools: typed Python callables the model can call.

A :class:`Tool` is a name, a description, a JSON Schema for its arguments (the *tool declaration* the model
sees), a validator for the arguments the model sends, and an implementation (sync or async) run with a
timeout. Build one with:

* :func:`tool` on a typed function - parameters come from the type hints (``Annotated[..., Field(...)]``
  constraints included) and descriptions from the docstring's ``Args:`` section (Google style; Sphinx
  ``:param x:`` and NumPy ``Parameters`` sections work too). A Pydantic model is created from them; its JSON
  Schema is the declaration and it validates the model's arguments (unknown arguments are rejected).
* :func:`tool` / :class:`Tool` with ``args_model=`` - an explicit Pydantic model; the function receives
  the validated model instance.
* :class:`Tool` with ``parameters=`` - a raw JSON Schema, validated with ``jsonschema`` (used by YAML
  bundles); the function receives the arguments as keyword arguments.

A parameter annotated :class:`ToolContext` is not part of the schema; the planner passes the call's
context (tool name, call id, step, the run's ``deps``) into it.

Sync tools run in daemon worker threads so a hanging tool cannot block the planner: at the timeout the
planner stops waiting and answers the model with a timeout error (the thread itself cannot be killed and
finishes in the background; daemon threads do not keep the process alive at exit). Async tools run on the
caller's event loop and are cancelled at the timeout.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import copy
import dataclasses
import functools
import inspect
import json
import queue
import re
import threading
import types
import typing
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, cast

import pydantic
import pydantic_core

from agentkit.backends.base import ToolDeclaration
from agentkit.errors import ToolDefinitionError

__all__ = [
    "Grounded",
    "Tool",
    "ToolArgumentsError",
    "ToolContext",
    "ToolTimeoutError",
    "cap_output",
    "parse_docstring",
    "serialize_result",
    "tool",
]

#: Default per-call timeout of a tool, in seconds.
DEFAULT_TIMEOUT_S = 60.0
#: Default failure budget of a tool per run (see :class:`Tool`).
DEFAULT_RETRIES = 3

_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]{0,63}$")


@dataclass(slots=True)
class ToolContext:
    """Per-call context handed to a tool parameter annotated ``ToolContext``.

    Attributes:
        tool_name: the tool being called.
        call_id: id of the tool call (unique within the model turn).
        step: 0-based index of the model turn that requested the call.
        deps: whatever was passed as ``deps=`` to ``Agent.run`` (``None`` by default).
    """

    tool_name: str
    call_id: str
    step: int
    deps: Any = None


class ToolArgumentsError(ValueError):
    """The model's arguments do not match the tool's schema; the message lists every problem by field."""


class ToolTimeoutError(TimeoutError):
    """A tool call ran past its timeout (raised by :meth:`Tool.acall`, turned into a tool response)."""

    def __init__(self, tool_name: str, timeout: float) -> None:
        super().__init__(f"tool {tool_name!r} timed out after {timeout:g} s")
        self.tool_name = tool_name
        self.timeout = timeout


# --------------------------------------------------------------------------------------------- docstrings


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Split a docstring into the tool description and per-parameter descriptions.

    Parsed with griffe (``griffe.Docstring(...).parse("auto")``: Google ``Args:`` with ``name (type): text``
    entries, Sphinx ``:param name: text``, NumPy ``Parameters`` underlined with dashes), which is lenient: a
    malformed entry elsewhere (say in ``Raises:``) does not lose the parameters. Continuation lines are joined
    with spaces; griffe's warnings about the docstring are not logged.

    Args:
        doc: the raw docstring (``None`` allowed).

    Returns:
        ``(description, {parameter: description})``; the description is the text before the first section,
        with paragraphs kept.
    """
    if not doc:
        return "", {}
    import logging

    from griffe import Docstring

    log = logging.getLogger("griffe")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        sections = Docstring(inspect.cleandoc(doc)).parse("auto")
    finally:
        log.setLevel(level)
    desc: list[str] = []
    params: dict[str, str] = {}
    in_description = True
    for section in sections:
        kind = section.kind.value
        if kind == "text" and in_description:
            desc.append(str(section.value))
            continue
        in_description = False  # text after the first section is not the tool's description
        if kind in ("parameters", "other parameters"):
            for p in section.value:
                params[p.name.lstrip("*")] = " ".join(
                    x.strip() for x in p.description.splitlines() if x.strip()
                )
    return "\n\n".join(desc).strip(), params


# ------------------------------------------------------------------------------------------------ schemas

_SCHEMA_MAPS = ("properties", "$defs", "definitions", "patternProperties", "dependentSchemas")


#: Keyword marking a grounded string parameter (see :class:`Grounded`).
GROUNDED_KEYWORD = "x-grounded"


class Grounded:
    """``Grounded[str]``: a string parameter whose value must be a span of the conversation.

    ``def find_definition(name: Grounded[str]) -> dict`` declares ``name`` with ``x-grounded: true``; the embedded
    backend's tool-call constraint then only lets the model write a span of the user's messages or of the tool
    responses so far (no invented identifier, path or id). Remote backends receive the keyword as a schema
    annotation. Equivalent: ``Tool(fn, grounded=["name"])``, or ``grounded: true`` on a parameter in a bundle.
    """

    def __class_getitem__(cls, item: Any) -> Any:
        return Annotated[item, pydantic.Field(json_schema_extra={GROUNDED_KEYWORD: True})]


def mark_grounded(tool: str, parameters: dict[str, Any], names: Sequence[str]) -> dict[str, Any]:
    """A copy of ``parameters`` with ``x-grounded: true`` on the top-level string properties ``names``.

    Raises:
        ToolDefinitionError: a name that is not a property, or a property that is not a string.
    """
    props = dict(parameters.get("properties") or {})
    for n in names:
        sub = props.get(n)
        if not isinstance(sub, dict):
            raise ToolDefinitionError(
                f"tool {tool!r}: grounded parameter {n!r} is not one of its parameters ({sorted(props)})"
            )
        types = [sub.get("type")] + [b.get("type") for b in sub.get("anyOf", []) if isinstance(b, dict)]
        if "string" not in types:
            raise ToolDefinitionError(
                f"tool {tool!r}: grounded parameter {n!r} must be a string (a span of the conversation)"
            )
        if sub.get("type") == "string":
            props[n] = {**sub, GROUNDED_KEYWORD: True}
        else:  # Optional[str]: the string branch of the anyOf
            props[n] = {
                **sub,
                "anyOf": [
                    {**b, GROUNDED_KEYWORD: True} if isinstance(b, dict) and b.get("type") == "string" else b
                    for b in sub["anyOf"]
                ],
            }
    return {**parameters, "properties": props}


def clean_schema(schema: Any) -> Any:
    """Drop Pydantic's auto-generated ``title`` keywords from a JSON Schema (they only cost prompt tokens).

    Property *names* called ``title`` are kept: only the keyword is removed, never a key inside
    ``properties`` / ``$defs``.

    Args:
        schema: a JSON Schema (dict), or any JSON value inside one.

    Returns:
        A new schema without ``title`` keywords.
    """
    if isinstance(schema, list):
        return [clean_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {k: clean_schema(v) for k, v in value.items()}
        else:
            out[key] = clean_schema(value)
    return out


def _format_validation_error(exc: pydantic.ValidationError) -> str:
    parts = []
    for err in exc.errors(include_url=False):
        loc = ".".join(str(p) for p in err["loc"]) or "(arguments)"
        msg = err["msg"]
        if err["type"] not in ("missing", "extra_forbidden"):
            msg += f" (got {err['input']!r})"
        elif err["type"] == "extra_forbidden":
            msg = "unknown argument"
        parts.append(f"{loc}: {msg}")
    return "; ".join(parts)


# ---------------------------------------------------------------------------------------------- threads


class _DaemonThreadPool:
    """A growable pool of daemon threads for sync tools.

    Unlike :class:`concurrent.futures.ThreadPoolExecutor`, its threads are daemons and are not joined at
    interpreter exit, so a tool that hangs past its timeout cannot keep the process alive. A new thread is
    started whenever every existing one is busy (a hung tool holds its thread), up to ``max_workers``.
    """

    def __init__(self, max_workers: int = 64, name: str = "agentkit-tool") -> None:
        self._queue: queue.SimpleQueue[tuple[concurrent.futures.Future[Any], Callable[[], Any]]] = (
            queue.SimpleQueue()
        )
        self._lock = threading.Lock()
        self._idle = 0
        self._pending = 0
        self._threads = 0
        self._max = max_workers
        self._name = name

    def submit(self, fn: Callable[[], Any]) -> concurrent.futures.Future[Any]:
        """Run ``fn()`` on a worker thread; returns its future."""
        fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self._lock:
            self._pending += 1
            if self._pending > self._idle and self._threads < self._max:
                self._threads += 1
                t = threading.Thread(target=self._work, name=f"{self._name}-{self._threads}", daemon=True)
                t.start()
            self._queue.put((fut, fn))
        return fut

    def _work(self) -> None:
        while True:
            with self._lock:
                self._idle += 1
            fut, fn = self._queue.get()
            with self._lock:
                self._idle -= 1
                self._pending -= 1
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                result = fn()
            except BaseException as exc:
                fut.set_exception(exc)
            else:
                fut.set_result(result)
            del fut, fn


_POOL = _DaemonThreadPool()


def run_sync_in_thread(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> asyncio.Future[Any]:
    """Schedule ``fn(*args, **kwargs)`` on agentkit's daemon tool threads; await the returned future.

    The current :mod:`contextvars` context is copied into the thread (as :func:`asyncio.to_thread` does).
    Must be called from a running event loop.
    """
    ctx = contextvars.copy_context()
    return asyncio.wrap_future(_POOL.submit(functools.partial(ctx.run, fn, *args, **kwargs)))


# -------------------------------------------------------------------------------------------------- Tool


#: Line appended to a tool response whose bytes were not valid UTF-8 (``{n}``: invalid byte sequences replaced).
INVALID_UTF8_NOTE = (
    "[agentkit: the tool output was not valid UTF-8; {n} invalid byte sequence(s) replaced with U+FFFD]"
)
_REPLACEMENT_UTF8 = "\ufffd".encode()


def decode_utf8(data: bytes | bytearray | memoryview) -> tuple[str, int]:
    """Decode bytes as UTF-8, replacing each invalid byte sequence with U+FFFD.

    Returns:
        ``(text, n)``: the text and the number of invalid sequences replaced (0 for valid UTF-8).
    """
    raw = bytes(data)
    text = raw.decode("utf-8", errors="replace")
    return text, text.count("\ufffd") - raw.count(_REPLACEMENT_UTF8)


def _decode_nested_bytes(value: Any) -> tuple[Any, int]:
    """``value`` with bytes inside dicts, lists, tuples, sets, Pydantic models and dataclasses decoded by
    :func:`decode_utf8`; returns the new value and the number of invalid sequences replaced."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return decode_utf8(value)
    if isinstance(value, pydantic.BaseModel):
        return _decode_nested_bytes(value.model_dump())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _decode_nested_bytes(dataclasses.asdict(value))
    if isinstance(value, dict):
        out, bad = {}, 0
        for k, v in value.items():
            k2, n1 = _decode_nested_bytes(k)
            v2, n2 = _decode_nested_bytes(v)
            out[k2] = v2
            bad += n1 + n2
        return out, bad
    if isinstance(value, (list, tuple, set, frozenset)):
        pairs = [_decode_nested_bytes(v) for v in value]
        return [v for v, _ in pairs], sum(n for _, n in pairs)
    return value, 0


def serialize_result(value: Any) -> str:
    """Turn a tool's return value into the text of the tool response.

    ``str`` is sent as is; ``bytes`` are decoded as UTF-8 text; Pydantic models as their JSON; anything else
    (dicts, lists, numbers, ``None``, dataclasses, datetimes...) as JSON via ``pydantic_core.to_json``, with
    ``str()`` for unknown types. Bytes that are not valid UTF-8 (at the top or nested) are decoded with
    U+FFFD in place of each invalid sequence, and the text ends with a line :data:`INVALID_UTF8_NOTE` saying
    how many were replaced: the output reaches the model instead of failing the call.
    """
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        text, bad = decode_utf8(value)
        return text + ("\n" + INVALID_UTF8_NOTE.format(n=bad) if bad else "")
    try:
        if isinstance(value, pydantic.BaseModel):
            return value.model_dump_json()
        return pydantic_core.to_json(value, fallback=str).decode()
    except pydantic_core.PydanticSerializationError:
        fixed, bad = _decode_nested_bytes(value)
        if not bad:
            raise
    return pydantic_core.to_json(fixed, fallback=str).decode() + "\n" + INVALID_UTF8_NOTE.format(n=bad)


def _cut_marker(cut: int, total: int, limit: int) -> str:
    return f"\n[agentkit: cut {cut:,} of {total:,} bytes of this tool output (limit {limit:,} bytes)]"


def cap_output(text: str, limit: int | None) -> str:
    """Cut a tool response to at most ``limit`` bytes of UTF-8, a marker saying how much was cut included.

    The head is kept, cut on a character boundary, and followed by one line
    ``[agentkit: cut N of M bytes of this tool output (limit L bytes)]`` (under 100 bytes; when ``limit`` is
    smaller than the marker, the marker alone is returned). Bytes, not characters, because a byte never
    becomes more than one token with byte-fallback tokenizers (Gemma's), so a byte limit is also a token
    limit whatever the script.

    Args:
        text: the tool response.
        limit: the most bytes returned (>= 0); ``None`` keeps everything.

    Returns:
        ``text`` itself when it fits, else the cut text ending with the marker.
    """
    if limit is None or len(text) <= limit // 4:  # 4 bytes per character at most: fits without encoding
        return text
    data = text.encode("utf-8", "surrogatepass")
    total = len(data)
    if total <= limit:
        return text
    keep = max(limit - len(_cut_marker(total, total, limit).encode()), 0)  # the longest marker: cut <= total
    while keep > 0 and (data[keep] & 0xC0) == 0x80:  # do not split a multi-byte character
        keep -= 1
    head = data[:keep].decode("utf-8", "surrogatepass")
    return head + _cut_marker(total - keep, total, limit)


def cap_output_tokens(
    text: str, max_tokens: int, count_tokens: Callable[[str], int], total_bytes: int | None = None
) -> str:
    """Cut a tool response to at most ``max_tokens`` tokens of the model that reads it, marker included.

    Used on top of :func:`cap_output` when the backend can count its tokens (the embedded backend): a byte cap
    that must hold for any text has to assume one token per byte, which cuts ordinary JSON (2.5-4 bytes per
    token) to a third of what fits. The head is kept (the longest prefix that fits, found by bisection over
    characters, O(log n) tokenizer calls) and followed by the marker of :func:`cap_output`, whose limit is
    given in tokens: ``[agentkit: cut N of M bytes of this tool output (limit L tokens)]``.

    Args:
        text: the tool response (already byte-capped).
        max_tokens: the most tokens returned (>= 1).
        count_tokens: the model's token count of a text.
        total_bytes: size of the whole response when ``text`` is already a head of it (for the marker).

    Returns:
        ``text`` itself when it fits, else the cut text ending with the marker.
    """
    if count_tokens(text) <= max_tokens and total_bytes is None:
        return text
    total = len(text.encode("utf-8", "surrogatepass")) if total_bytes is None else total_bytes

    def with_marker(k: int) -> str:
        head = text[:k]
        cut = total - len(head.encode("utf-8", "surrogatepass"))
        return (
            head
            + f"\n[agentkit: cut {cut:,} of {total:,} bytes of this tool output (limit {max_tokens:,} tokens)]"
        )

    lo, hi = 0, len(text)
    while lo < hi:  # largest k with count_tokens(with_marker(k)) <= max_tokens
        mid = (lo + hi + 1) // 2
        if count_tokens(with_marker(mid)) <= max_tokens:
            lo = mid
        else:
            hi = mid - 1
    return with_marker(lo)


def _is_async_callable(fn: Any) -> bool:
    while isinstance(fn, functools.partial):
        fn = fn.func
    if inspect.iscoroutinefunction(fn):
        return True
    return not inspect.isroutine(fn) and inspect.iscoroutinefunction(fn.__call__)


def _is_context_annotation(annotation: Any) -> bool:
    if annotation is ToolContext:
        return True
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _is_context_annotation(typing.get_args(annotation)[0])
    if origin is typing.Union or origin is types.UnionType:  # Optional[ToolContext], ToolContext | None
        return any(_is_context_annotation(a) for a in typing.get_args(annotation) if a is not type(None))
    return isinstance(annotation, type) and issubclass(annotation, ToolContext)


@functools.cache
def grammar_format_checker() -> Any:
    """A ``jsonschema.FormatChecker`` that checks exactly the string formats the tool-call grammar enforces.

    Each format of ``model.constraints.schema.FORMATS`` (date, time, date-time, duration, email, hostname,
    ipv4, ipv6, uuid, uri; regexes written from the RFCs named there) is checked with the same regex the
    grammar uses, as a full match, so a remote model's arguments are held to what the embedded model can
    produce. Other formats are not checked (a tool cannot declare them: registration refuses them). Values
    that are not strings pass (``format`` applies to strings only).

    Returns:
        The checker (built once).
    """
    import jsonschema

    from model.constraints.schema import FORMATS

    checker = jsonschema.FormatChecker(formats=())
    for fmt, rx in FORMATS.items():
        compiled = re.compile(rx)

        def check(value: Any, _rx: re.Pattern[str] = compiled) -> bool:
            return not isinstance(value, str) or _rx.fullmatch(value) is not None

        checker.checks(fmt)(check)
    return checker


def _format_message(e: Any) -> str:
    return f"{'.'.join(str(p) for p in e.path) or '(arguments)'}: {e.message}"


class Tool:
    """A tool the model can call.

    Args:
        function: the implementation, sync or ``async``. Called with keyword arguments (typed-function and
            ``parameters=`` tools) or with the validated model instance (``args_model=`` tools), plus the
            :class:`ToolContext` parameter if it declares one.
        name: tool name shown to the model (default: the function's ``__name__``); letters, digits, ``_``,
            ``.``, ``-``; at most 64 characters; must start with a letter or ``_``.
        description: what the tool does (default: the docstring's description part).
        args_model: explicit Pydantic model for the arguments.
        parameters: explicit JSON Schema (``type: object``) for the arguments, validated with ``jsonschema``.
        timeout: seconds one call may take before the model gets a timeout error; ``None`` = wait forever.
        retries: failure budget per run: the model may see this many failed calls of this tool (invalid
            arguments, exception, timeout) and try again; one more failure stops the run with
            :class:`agentkit.errors.ToolRetriesExceeded`.
        serializer: turns the return value into the tool response text (default :func:`serialize_result`).
        grounded: names of top-level string parameters whose value must be a span of the conversation (the
            user's messages and the tool responses so far): marked ``x-grounded: true`` in the schema, which the
            embedded backend's constraint enforces during denoising (same as annotating ``Grounded[str]``).
        max_output_bytes: the most bytes (UTF-8) of one tool response the model sees; a longer response is cut
            with a marker saying how much (see :func:`cap_output`). ``None``: only the agent's limit
            (``Agent(max_tool_output_bytes=...)``) applies; when both are set, the smaller one does.

    Raises:
        ToolDefinitionError: bad name, ``max_output_bytes < 1``, ``*args``/``**kwargs``, both ``args_model`` and
            ``parameters``, an invalid JSON Schema, a function whose parameters cannot be turned into a Pydantic
            model, or a ``grounded`` name that is not a string parameter.
    """

    __slots__ = (
        "__wrapped__",
        "_context_param",
        "_declaration",
        "_format_validator",
        "_invoke",
        "_validate",
        "description",
        "function",
        "is_async",
        "max_output_bytes",
        "name",
        "parameters",
        "retries",
        "serializer",
        "timeout",
    )

    def __init__(
        self,
        function: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        args_model: type[pydantic.BaseModel] | None = None,
        parameters: dict[str, Any] | None = None,
        timeout: float | None = DEFAULT_TIMEOUT_S,
        retries: int = DEFAULT_RETRIES,
        serializer: Callable[[Any], str] | None = None,
        grounded: Sequence[str] = (),
        max_output_bytes: int | None = None,
    ) -> None:
        if not callable(function):
            raise ToolDefinitionError(f"tool implementation must be callable, got {function!r}")
        fname = getattr(function, "__name__", None) or type(function).__name__
        self.name = name or fname
        if not _NAME_RE.match(self.name):
            raise ToolDefinitionError(
                f"invalid tool name {self.name!r}: use letters, digits, '_', '.', '-' (max 64), starting "
                "with a letter or '_'"
            )
        if timeout is not None and not timeout > 0:
            raise ToolDefinitionError(
                f"tool {self.name!r}: timeout must be > 0 seconds or None, got {timeout}"
            )
        if retries < 0:
            raise ToolDefinitionError(f"tool {self.name!r}: retries must be >= 0, got {retries}")
        if max_output_bytes is not None and (
            isinstance(max_output_bytes, bool)
            or not isinstance(max_output_bytes, int)
            or max_output_bytes < 1
        ):
            raise ToolDefinitionError(
                f"tool {self.name!r}: max_output_bytes must be an integer >= 1 (bytes) or None, got "
                f"{max_output_bytes!r}"
            )
        self.max_output_bytes = max_output_bytes
        if args_model is not None and parameters is not None:
            raise ToolDefinitionError(f"tool {self.name!r}: give args_model or parameters, not both")
        self.function = function
        self.__wrapped__ = function
        self.timeout = timeout
        self.retries = retries
        self.serializer = serializer or serialize_result
        self.is_async = _is_async_callable(function)
        doc_desc, doc_params = parse_docstring(inspect.getdoc(function))
        self.description = (description if description is not None else doc_desc).strip()
        self._context_param: str | None = None
        self._format_validator: Any = None

        try:
            sig = inspect.signature(function)
        except (TypeError, ValueError):
            sig = None
        hints: dict[str, Any] = {}
        if sig is not None:
            try:
                hints = typing.get_type_hints(function, include_extras=True)
            except Exception:
                target = function.__call__ if not inspect.isroutine(function) else function  # type: ignore[operator]
                try:
                    hints = typing.get_type_hints(target, include_extras=True)
                except Exception as exc:
                    raise ToolDefinitionError(
                        f"tool {self.name!r}: cannot resolve the type hints of {fname}: {exc}"
                    ) from exc
            for pname, p in sig.parameters.items():
                if _is_context_annotation(hints.get(pname, p.annotation)):
                    self._context_param = pname

        if parameters is not None:
            self._init_from_schema(parameters)
        elif args_model is not None:
            self._init_from_model(args_model, sig)
        else:
            if sig is None:
                raise ToolDefinitionError(f"tool {self.name!r}: cannot read the signature of {function!r}")
            self._init_from_signature(sig, hints, doc_params)
        if grounded:
            self.parameters: dict[str, Any] = mark_grounded(self.name, self.parameters, grounded)
        self._declaration: ToolDeclaration = {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }
        if parameters is None and '"format"' in json.dumps(self.parameters):
            # Pydantic validates the values; the formats its schema declares are checked as the grammar does.
            import jsonschema

            self._format_validator = jsonschema.Draft202012Validator(
                self.parameters, format_checker=grammar_format_checker()
            )

    # -- construction paths

    def _init_from_schema(self, parameters: dict[str, Any]) -> None:
        import jsonschema

        if not isinstance(parameters, dict) or parameters.get("type", "object") != "object":
            raise ToolDefinitionError(
                f"tool {self.name!r}: parameters must be a JSON Schema with type 'object'"
            )
        schema = dict(parameters)
        schema.setdefault("type", "object")
        schema.setdefault("properties", {})
        try:
            validator_cls = jsonschema.validators.validator_for(
                schema, default=jsonschema.Draft202012Validator
            )
            validator_cls.check_schema(schema)
        except jsonschema.SchemaError as exc:
            path = "/".join(str(p) for p in exc.path)
            raise ToolDefinitionError(
                f"tool {self.name!r}: parameters is not a valid JSON Schema at '{path}': {exc.message}"
            ) from exc
        validator = validator_cls(schema, format_checker=grammar_format_checker())
        # Declared to the model exactly as written (a copy: later edits of the caller's dict do not leak in).
        self.parameters = copy.deepcopy(parameters)
        ctx_param = self._context_param
        fn = self.function

        def validate(arguments: dict[str, Any]) -> Any:
            errors = sorted(validator.iter_errors(arguments), key=lambda e: [str(p) for p in e.path])
            if errors:
                raise ToolArgumentsError("; ".join(_format_message(e) for e in errors))
            return arguments

        def invoke(validated: Any, ctx: ToolContext) -> Any:
            if ctx_param is not None:
                return fn(**validated, **{ctx_param: ctx})
            return fn(**validated)

        self._validate = validate
        self._invoke = invoke

    def _init_from_model(self, model: type[pydantic.BaseModel], sig: inspect.Signature | None) -> None:
        if not (isinstance(model, type) and issubclass(model, pydantic.BaseModel)):
            raise ToolDefinitionError(f"tool {self.name!r}: args_model must be a Pydantic model class")
        if sig is not None:
            others = [n for n in sig.parameters if n != self._context_param]
            if len(others) != 1:
                raise ToolDefinitionError(
                    f"tool {self.name!r}: with args_model the function must take exactly one argument (the "
                    f"model instance) besides an optional ToolContext, it takes {others}"
                )
        self.parameters = clean_schema(model.model_json_schema())
        ctx_param = self._context_param
        fn = self.function

        def validate(arguments: dict[str, Any]) -> Any:
            try:
                return model.model_validate(arguments)
            except pydantic.ValidationError as exc:
                raise ToolArgumentsError(_format_validation_error(exc)) from None

        def invoke(validated: Any, ctx: ToolContext) -> Any:
            if ctx_param is not None:
                return fn(validated, **{ctx_param: ctx})
            return fn(validated)

        self._validate = validate
        self._invoke = invoke

    def _init_from_signature(
        self, sig: inspect.Signature, hints: dict[str, Any], doc_params: dict[str, str]
    ) -> None:
        fields: dict[str, Any] = {}
        names: list[tuple[str, str]] = []  # (field name in the model, parameter name)
        for idx, (pname, p) in enumerate(sig.parameters.items()):
            if pname == self._context_param:
                continue
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise ToolDefinitionError(
                    f"tool {self.name!r}: *args / **kwargs cannot be declared to a model; use named parameters "
                    "or args_model="
                )
            if p.kind is p.POSITIONAL_ONLY:
                raise ToolDefinitionError(
                    f"tool {self.name!r}: positional-only parameter {pname!r} cannot be passed by name"
                )
            annotation = hints.get(pname, Any)
            kwargs: dict[str, Any] = {"alias": pname}
            if doc_params.get(pname):
                kwargs["description"] = doc_params[pname]
            if p.default is not inspect.Parameter.empty:
                kwargs["default"] = p.default
            fname = f"f{idx}"
            fields[fname] = (annotation, pydantic.Field(**kwargs))
            names.append((fname, pname))
        try:
            model = pydantic.create_model(  # type: ignore[call-overload]
                f"{self.name.replace('.', '_').replace('-', '_')}_arguments",
                __config__=pydantic.ConfigDict(extra="forbid", arbitrary_types_allowed=False),
                **fields,
            )
            schema = model.model_json_schema()
        except (pydantic.PydanticSchemaGenerationError, pydantic.PydanticUserError, TypeError) as exc:
            raise ToolDefinitionError(f"tool {self.name!r}: its parameters cannot be typed: {exc}") from exc
        schema = clean_schema(schema)
        schema.setdefault("properties", {})
        self.parameters = schema
        ctx_param = self._context_param
        fn = self.function
        validator = model.__pydantic_validator__

        def validate(arguments: dict[str, Any]) -> Any:
            try:
                inst = validator.validate_python(arguments)
            except pydantic.ValidationError as exc:
                raise ToolArgumentsError(_format_validation_error(exc)) from None
            d = inst.__dict__
            return {pname: d[fname] for fname, pname in names}

        def invoke(validated: Any, ctx: ToolContext) -> Any:
            if ctx_param is not None:
                return fn(**validated, **{ctx_param: ctx})
            return fn(**validated)

        self._validate = validate
        self._invoke = invoke

    # -- use

    def declaration(self) -> ToolDeclaration:
        """The OpenAI-style tool declaration ``{"type": "function", "function": {name, description,
        parameters}}`` (the same object each time; do not mutate)."""
        return self._declaration

    def validate(self, arguments: dict[str, Any]) -> Any:
        """Validate the model's arguments.

        Returns:
            What :meth:`acall` takes (keyword dict or model instance).

        Raises:
            ToolArgumentsError: every problem, by field (``days: Input should be a valid integer (got 'x')``).
        """
        if not isinstance(arguments, dict):
            raise ToolArgumentsError(f"arguments must be a JSON object, got {type(arguments).__name__}")
        if self._format_validator is not None:
            bad = [e for e in self._format_validator.iter_errors(arguments) if e.validator == "format"]
            if bad:
                raise ToolArgumentsError("; ".join(_format_message(e) for e in bad))
        return self._validate(arguments)

    async def acall(self, validated: Any, ctx: ToolContext) -> Any:
        """Run the tool on validated arguments, within :attr:`timeout`.

        Raises:
            ToolTimeoutError: the call took longer than ``timeout`` seconds (a sync tool keeps running in
                its daemon thread; an async tool is cancelled).
            Exception: whatever the tool raised.
        """
        if self.is_async:
            coro = cast(Awaitable[Any], self._invoke(validated, ctx))
            if self.timeout is None:
                return await coro
            cm = asyncio.timeout(self.timeout)
            try:
                async with cm:
                    return await coro
            except TimeoutError:
                if cm.expired():
                    raise ToolTimeoutError(self.name, self.timeout) from None
                raise
        fut = run_sync_in_thread(self._invoke, validated, ctx)
        if self.timeout is None:
            result = await fut
            if inspect.isawaitable(result):
                result = await result
            return result
        cm = asyncio.timeout(self.timeout)
        try:
            async with cm:
                result = await fut
                if inspect.isawaitable(result):
                    result = await result
                return result
        except TimeoutError:
            if cm.expired():
                raise ToolTimeoutError(self.name, self.timeout) from None
            raise

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the underlying function directly (a decorated function stays usable as a function)."""
        return self.function(*args, **kwargs)

    def __repr__(self) -> str:
        return (
            f"Tool(name={self.name!r}, timeout={self.timeout}, retries={self.retries}, async={self.is_async}, "
            f"max_output_bytes={self.max_output_bytes})"
        )


@typing.overload
def tool(function: Callable[..., Any], /) -> Tool: ...


@typing.overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    args_model: type[pydantic.BaseModel] | None = None,
    parameters: dict[str, Any] | None = None,
    timeout: float | None = DEFAULT_TIMEOUT_S,
    retries: int = DEFAULT_RETRIES,
    serializer: Callable[[Any], str] | None = None,
    grounded: Sequence[str] = (),
    max_output_bytes: int | None = None,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    function: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    args_model: type[pydantic.BaseModel] | None = None,
    parameters: dict[str, Any] | None = None,
    timeout: float | None = DEFAULT_TIMEOUT_S,
    retries: int = DEFAULT_RETRIES,
    serializer: Callable[[Any], str] | None = None,
    grounded: Sequence[str] = (),
    max_output_bytes: int | None = None,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a :class:`Tool` from a function: ``@tool`` or ``@tool(timeout=5, retries=1, ...)``.

    Example::

        @tool
        def get_weather(city: str, days: int = 1) -> dict:
            \"\"\"Weather forecast for a city.

            Args:
                city: City name, e.g. "Paris".
                days: Number of days, 1-7.
            \"\"\"

    The keyword arguments are those of :class:`Tool`.

    Raises:
        ToolDefinitionError: see :class:`Tool`.
    """

    def wrap(fn: Callable[..., Any]) -> Tool:
        return Tool(
            fn,
            name=name,
            description=description,
            args_model=args_model,
            parameters=parameters,
            timeout=timeout,
            retries=retries,
            serializer=serializer,
            grounded=grounded,
            max_output_bytes=max_output_bytes,
        )

    if function is not None:
        return wrap(function)
    return wrap


def as_tool(obj: Tool | Callable[..., Any]) -> Tool:
    """Return ``obj`` if it is a :class:`Tool`, else wrap the callable with default settings."""
    return obj if isinstance(obj, Tool) else Tool(obj)
