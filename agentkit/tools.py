"""Tools: typed Python callables the model can call.

A :class:`Tool` is a name, a description, a JSON Schema for its arguments (the declaration the model sees), a
validator for the model's arguments and an implementation (sync or async) run with a timeout. :func:`tool` makes
one from a typed function (parameters from the type hints, descriptions from the docstring's ``Args:``,
``:param x:`` or NumPy ``Parameters`` section), from an explicit Pydantic model (``args_model=``) or from a raw
JSON Schema (``parameters=``, checked with ``jsonschema``; YAML bundles use it). A parameter annotated
:class:`ToolContext` is not declared; the planner passes the call's context into it.

Sync tools run in daemon worker threads: at the timeout the planner stops waiting and answers the model with
a timeout error (the thread finishes in the background). Async tools are cancelled at the timeout.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import json
import math
import re
import sys
import threading
import types
import typing
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import pydantic
import pydantic_core
from referencing.exceptions import Unresolvable

from agentkit.backends.base import ToolDeclaration
from agentkit.errors import ToolDefinitionError
from agentkit.tool_output import (
    int_at_least,
    run_sync_in_thread,
    serialize_result,
    tool_thread_limit,
    tool_threads_all_busy,
)
from agentkit.tool_schema import (
    Grounded,
    arguments_schema,
    check_schema_fits,
    field_alias,
    function_docstring,
    keywords_taken,
    mark_grounded,
    non_finite_numbers,
    parse_docstring,
    refuse_unbound_method,
    schema_problems,
    signature_and_hints,
    unresolvable_ref,
    unwrapped,
)
from schema import grammar_format_checker
from tools.args import format_validation_error

__all__ = [
    "DEFAULT_RETRIES",
    "DEFAULT_TIMEOUT_S",
    "Grounded",
    "Tool",
    "ToolArgumentsError",
    "ToolContext",
    "ToolOptions",
    "ToolTimeoutError",
    "as_tool",
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

    def __init__(self, tool_name: str, timeout: float, note: str = "") -> None:
        super().__init__(f"tool {tool_name!r} timed out after {timeout:g} s" + (f" ({note})" if note else ""))
        self.tool_name = tool_name
        self.timeout = timeout


def _is_async_callable(fn: Any) -> bool:
    fn, _ = unwrapped(fn)
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


def _bad_name(fname: str, name: Any) -> str:
    """The error for a tool name that is not valid: the function's own (``name`` None) or ``name`` as given
    (named after the function unless it has that name too, as MCP tools' wrappers do)."""
    rule = "use letters, digits, '_', '.', '-' (max 64), starting with a letter or '_'"
    if name is None:
        return f"invalid tool name {fname!r} (the function's name): {rule}; give name= one that is"
    if name == fname:
        return f"invalid tool name {name!r}: {rule}"
    return f"tool {fname!r}: invalid name {name!r}: {rule} (or None for the function's name)"


def _schema_error(name: str, problems: list[tuple[tuple[str | int, ...], str]]) -> ToolDefinitionError:
    """The error of a tool whose parameters schema has ``problems`` (the first named, with its path)."""
    (where, why), *_ = problems
    at = f" at '{'/'.join(map(str, where))}'" if where else ""
    return ToolDefinitionError(f"tool {name!r}: parameters{at}: {why}")


def _check_settings(
    name: str,
    timeout: float | None,
    retries: int,
    max_output_bytes: int | None,
    description: Any,
    grounded: Any,
    serializer: Any = None,
) -> None:
    """Raise :class:`ToolDefinitionError` for a bad timeout, retry budget, output limit, description,
    ``grounded`` given as one string or a serializer that cannot be called."""
    if serializer is not None and not callable(serializer):
        raise ToolDefinitionError(
            f"tool {name!r}: serializer must be a function (return value -> str) or None, got {serializer!r}"
        )
    if description is not None and not isinstance(description, str):
        raise ToolDefinitionError(f"tool {name!r}: description must be a string or None, got {description!r}")
    if isinstance(grounded, str):
        raise ToolDefinitionError(
            f"tool {name!r}: grounded must be a list of parameter names, got {grounded!r}: wrap it in a list"
        )
    if timeout is not None and (
        isinstance(timeout, bool)
        or not isinstance(timeout, (int, float))
        or not timeout > 0
        or (timeout != math.inf and timeout > sys.float_info.max)  # asyncio's clock cannot wait 10**400 s
    ):
        raise ToolDefinitionError(
            f"tool {name!r}: timeout must be a number > 0 (seconds, within a double's range) or None, got {timeout!r}"
        )
    if not int_at_least(retries, 0):
        raise ToolDefinitionError(f"tool {name!r}: retries must be an integer >= 0, got {retries!r}")
    if max_output_bytes is not None and not int_at_least(max_output_bytes, 1):
        raise ToolDefinitionError(
            f"tool {name!r}: max_output_bytes must be an integer >= 1 (bytes) or None, got {max_output_bytes!r}"
        )


def _format_message(e: Any) -> str:
    return f"{'.'.join(str(p) for p in e.path) or '(arguments)'}: {e.message}"


def _model_validator(
    model: type[pydantic.BaseModel], extra: Any, convert: Callable[[Any], Any]
) -> Callable[[dict[str, Any]], Any]:
    """Validates the model's arguments with ``model`` (an error: :class:`ToolArgumentsError`), then ``convert``."""

    def validate(arguments: dict[str, Any]) -> Any:
        try:
            inst = model.model_validate(arguments, extra=extra)
        except pydantic.ValidationError as exc:
            raise ToolArgumentsError(format_validation_error(exc)) from None
        return convert(inst)

    return validate


def _collected(
    invoke: Callable[[Any, ToolContext], Any], validated: Any, ctx: ToolContext, started: threading.Event
) -> Any:
    """``invoke(validated, ctx)`` with a generator's items listed on the worker thread, within the timeout."""
    started.set()
    result = invoke(validated, ctx)
    return list(result) if inspect.isgenerator(result) else result


class Tool:
    """A tool the model can call.

    Args:
        function: the implementation, sync or ``async``; called with keyword arguments, or with the validated
            ``args_model`` instance, plus its :class:`ToolContext` parameter if it declares one.
        name: the name shown to the model (default: the function's ``__name__``): letters, digits, ``_``,
            ``.``, ``-``, at most 64, starting with a letter or ``_``.
        description: what the tool does (default: the docstring's description part).
        args_model: explicit Pydantic model for the arguments.
        parameters: explicit JSON Schema (``type: object``) for the arguments, validated with ``jsonschema``.
        timeout: seconds one call may take before the model gets a timeout error; ``None`` = wait forever.
        retries: failed calls (invalid arguments, exception, timeout) the model may see per run; one more
            stops the run with :class:`agentkit.errors.ToolRetriesExceeded`.
        serializer: turns the return value into the tool response text (default :func:`serialize_result`).
        grounded: top-level string parameters whose value must be a span of the conversation (marked
            ``x-grounded: true``, enforced by the embedded backend's constraint; as ``Grounded[str]``).
        max_output_bytes: the most bytes (UTF-8) of one response the model sees (longer is cut with a marker,
            :func:`cap_output`); with ``Agent(max_tool_output_bytes=...)`` the smaller limit applies.

    Raises:
        ToolDefinitionError: bad name or setting, ``*args``/``**kwargs``, both ``args_model`` and
            ``parameters``, an invalid JSON Schema, ``parameters`` that do not fit the function, parameters
            that cannot be typed, or a ``grounded`` name that is not a string parameter.
    """

    __slots__ = (
        "__wrapped__",
        "_context_param",
        "_declaration",
        "_format_validator",
        "_options",
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
        if isinstance(function, Tool):  # it would be declared as 'Tool', with this class's docstring
            raise ToolDefinitionError(
                f"{function!r} is a Tool already: change its settings with tool(...)(t) or t.replace(...)"
            )
        self._options = ToolOptions(
            name=name, description=description, args_model=args_model, timeout=timeout
        )
        self._options |= {"parameters": parameters, "retries": retries, "serializer": serializer}
        self._options |= {"grounded": grounded, "max_output_bytes": max_output_bytes}
        base, _ = unwrapped(function)
        fname = getattr(base, "__name__", None) or type(base).__name__
        self.name: str = fname if name is None else name
        if not isinstance(self.name, str) or not _NAME_RE.match(self.name):
            raise ToolDefinitionError(_bad_name(fname, name))
        _check_settings(self.name, timeout, retries, max_output_bytes, description, grounded, serializer)
        self.max_output_bytes = max_output_bytes
        if args_model is not None and parameters is not None:
            raise ToolDefinitionError(f"tool {self.name!r}: give args_model or parameters, not both")
        self.function = function
        self.__wrapped__ = function
        self.timeout = timeout
        self.retries = retries
        self.serializer = serializer or serialize_result
        self.is_async = _is_async_callable(function)
        doc_desc, doc_params = parse_docstring(function_docstring(base))
        self.description = (description if description is not None else doc_desc).strip()
        self._context_param: str | None = None
        self._format_validator: Any = None

        sig, hints = signature_and_hints(self.name, function, fname)
        if sig is not None:
            for pname, p in sig.parameters.items():
                if _is_context_annotation(hints.get(pname, p.annotation)):
                    self._context_param = pname

        if parameters is not None:
            if sig is not None and self._context_param is not None:
                sig = sig.replace(
                    parameters=[p for n, p in sig.parameters.items() if n != self._context_param]
                )
            self._validate = self._init_from_schema(parameters, keywords_taken(sig))
            check_schema_fits(self.name, fname, sig, self.parameters)
        elif args_model is not None:
            self._validate = self._init_from_model(args_model, sig)
        else:
            if sig is None:
                raise ToolDefinitionError(f"tool {self.name!r}: cannot read the signature of {function!r}")
            self._validate = self._init_from_signature(sig, hints, doc_params)
        endless = [] if parameters is not None else [e for e in [unresolvable_ref(self.parameters)] if e]
        if problems := non_finite_numbers(self.parameters) + endless:  # a NaN bound, a model needing itself
            raise _schema_error(self.name, problems)
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

    # -- construction paths: each sets ``parameters`` and returns the validator of the model's arguments

    def _init_from_schema(
        self, parameters: dict[str, Any], takes: frozenset[str] | None
    ) -> Callable[[dict[str, Any]], Any]:
        import jsonschema
        from jsonschema_specifications import REGISTRY as SPECIFICATIONS

        if problems := schema_problems(parameters):
            raise _schema_error(self.name, problems)
        schema = {"type": "object", "properties": {}, **parameters}
        validator_cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        # the registry of the JSON Schema meta-schemas only: a $ref never makes jsonschema fetch a URL
        validator = validator_cls(schema, format_checker=grammar_format_checker(), registry=SPECIFICATIONS)
        # Declared to the model exactly as written (a copy: later edits of the caller's dict do not leak in).
        self.parameters = copy.deepcopy(parameters)

        def validate(arguments: dict[str, Any]) -> Any:
            try:
                errors = sorted(validator.iter_errors(arguments), key=lambda e: [str(p) for p in e.path])
            except Unresolvable as exc:  # left to call time by unresolvable_ref (a nested $id)
                raise ToolArgumentsError(
                    f"the tool's schema has a $ref that does not resolve ({exc}); agentkit fetches no schema"
                ) from None
            if errors:
                raise ToolArgumentsError("; ".join(_format_message(e) for e in errors))
            # a schema that allows other properties still calls a function that takes only its own keywords
            unknown = [k for k in arguments if takes is not None and k not in takes]
            if unknown:
                raise ToolArgumentsError("; ".join(f"{k}: unknown argument" for k in unknown))
            return arguments

        return validate

    def _init_from_model(
        self, model: type[pydantic.BaseModel], sig: inspect.Signature | None
    ) -> Callable[[dict[str, Any]], Any]:
        if not (isinstance(model, type) and issubclass(model, pydantic.BaseModel)):
            raise ToolDefinitionError(f"tool {self.name!r}: args_model must be a Pydantic model class")
        if sig is not None:
            others = [n for n in sig.parameters if n != self._context_param]
            if len(others) != 1:
                raise ToolDefinitionError(
                    f"tool {self.name!r}: with args_model the function must take exactly one argument (the "
                    f"model instance) besides an optional ToolContext, it takes {others}"
                )
        self.parameters, extra = arguments_schema(model)
        return _model_validator(model, extra, lambda inst: inst)

    def _init_from_signature(
        self, sig: inspect.Signature, hints: dict[str, Any], doc_params: dict[str, str]
    ) -> Callable[[dict[str, Any]], Any]:
        refuse_unbound_method(self.name, self.function, sig, hints)
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
            kwargs: dict[str, Any] = {"alias": field_alias(annotation) or pname}
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
            schema, extra = arguments_schema(model)
        except (pydantic.PydanticSchemaGenerationError, pydantic.PydanticUserError, TypeError) as exc:
            raise ToolDefinitionError(f"tool {self.name!r}: its parameters cannot be typed: {exc}") from exc
        except pydantic_core.SchemaError as exc:  # a constraint pydantic cannot build, e.g. pattern="["
            why = " ".join(str(exc).rpartition("SchemaError:")[2].split())  # the innermost cause
            bad = next((p for f, p in names if f'Field "{f}"' in str(exc)), None)
            where = f"parameter {bad!r}" if bad else "its parameters"
            raise ToolDefinitionError(f"tool {self.name!r}: {where}: invalid constraint: {why}") from None
        schema.setdefault("properties", {})
        self.parameters = schema
        return _model_validator(model, extra, lambda inst: {p: inst.__dict__[f] for f, p in names})

    # -- use

    def _invoke(self, validated: Any, ctx: ToolContext) -> Any:
        """The function called with validated arguments (keywords, or the one model instance) and its context."""
        extra = {} if self._context_param is None else {self._context_param: ctx}
        if self._options.get("args_model") is None:
            return self.function(**validated, **extra)
        return self.function(validated, **extra)

    def declaration(self) -> ToolDeclaration:
        """The OpenAI-style declaration ``{"type": "function", "function": {...}}`` (shared: do not mutate)."""
        return self._declaration

    def validate(self, arguments: dict[str, Any]) -> Any:
        """The model's arguments validated to what :meth:`acall` takes (keyword dict or model instance).

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

    def serialize(self, value: Any) -> str:
        """The response text of ``value`` (what the tool returned) by :attr:`serializer`, uncapped.

        Raises:
            TypeError: the serializer returned something other than ``str``, naming the tool.
            Exception: whatever the serializer raised.
        """
        if not isinstance(text := self.serializer(value), str):
            raise TypeError(f"the serializer of tool {self.name!r} returned {type(text).__name__}, not str")
        return text

    async def acall(self, validated: Any, ctx: ToolContext) -> Any:
        """Run the tool on validated arguments, within :attr:`timeout`.

        Raises:
            ToolTimeoutError: the call took longer than ``timeout`` seconds (a sync tool keeps running in
                its daemon thread; an async tool is cancelled).
            Exception: whatever the tool raised.
        """
        started = threading.Event()  # a sync tool's thread picked the call up
        cm = asyncio.timeout(self.timeout)  # None: no limit
        try:
            async with cm:
                if self.is_async:
                    result = await cast(Awaitable[Any], self._invoke(validated, ctx))
                else:
                    result = await run_sync_in_thread(_collected, self._invoke, validated, ctx, started)
                    result = await result if inspect.isawaitable(result) else result
                if inspect.isasyncgen(result):  # an async generator's items, within the timeout
                    result = [item async for item in result]
                return result
        except TimeoutError:
            if not cm.expired() or self.timeout is None:
                raise
            note = ""
            if not self.is_async and not started.is_set() and tool_threads_all_busy():
                note = (
                    f"it never started: all {tool_thread_limit()} of agentkit's tool threads are held by sync tool calls "
                    "still running past their timeouts (a tool that hangs: give it its own timeout, e.g. on its "
                    "network calls)"
                )
            raise ToolTimeoutError(self.name, self.timeout, note) from None

    def replace(self, **options: typing.Unpack[ToolOptions]) -> Tool:
        """A new tool of the same function with ``options`` (:func:`tool`'s keywords) in place of this one's
        settings; ``parameters`` replaces an ``args_model`` and the reverse. Raises as :class:`Tool`."""
        other = {"parameters": "args_model", "args_model": "parameters"}
        kept = {k: v for k, v in self._options.items() if other.get(k) not in options}
        return Tool(self.function, **{**kept, **options})  # type: ignore[arg-type]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the underlying function directly (a decorated function stays usable as a function)."""
        return self.function(*args, **kwargs)

    def __repr__(self) -> str:
        return (
            f"Tool(name={self.name!r}, timeout={self.timeout}, retries={self.retries}, async={self.is_async}, "
            f"max_output_bytes={self.max_output_bytes})"
        )


class ToolOptions(typing.TypedDict, total=False):
    """The keywords of :func:`tool` (``@tool(timeout=5, ...)``): those of :class:`Tool` after the function."""

    name: str | None
    description: str | None
    args_model: type[pydantic.BaseModel] | None
    parameters: dict[str, Any] | None
    timeout: float | None
    retries: int
    serializer: Callable[[Any], str] | None
    grounded: Sequence[str]
    max_output_bytes: int | None


@typing.overload
def tool(function: Callable[..., Any], /) -> Tool: ...


@typing.overload
def tool(**options: typing.Unpack[ToolOptions]) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    function: Callable[..., Any] | None = None, /, **options: typing.Unpack[ToolOptions]
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a :class:`Tool` from a function: ``@tool`` or ``@tool(timeout=5, retries=1, ...)``; given a
    :class:`Tool`, a copy with these settings changed (:meth:`Tool.replace`).

    The keywords (:class:`ToolOptions`) are those of :class:`Tool`; an unknown one raises ``TypeError``.

    Raises:
        ToolDefinitionError: see :class:`Tool`.
    """

    def make(fn: Callable[..., Any]) -> Tool:
        return fn.replace(**options) if isinstance(fn, Tool) else Tool(fn, **options)

    return make(function) if function is not None else make


def as_tool(obj: Tool | Callable[..., Any]) -> Tool:
    """Return ``obj`` if it is a :class:`Tool`, else wrap the callable with default settings."""
    return obj if isinstance(obj, Tool) else Tool(obj)
