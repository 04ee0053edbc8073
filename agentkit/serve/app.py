"""The ASGI app of ``agentkit serve``: OpenAI-compatible endpoints over the embedded runtime.

:func:`create_app` serves ``GET /health`` (and ``HEAD``; 503 while draining), ``GET /v1/models[/{id}]`` and ``POST
/v1/chat/completions`` (streamed as OpenAI's chunks with sse-starlette); every error is OpenAI's shape
``{"error": {"message", "type", "param", "code"}}`` (``docs/SERVING.md`` lists them). :func:`run_server` runs
it with uvicorn.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
import json
import os
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from agentkit import messages as M
from agentkit.serve import schemas as S
from agentkit.serve.engine import ServeEngine, ServeError, StreamView, finish_reason, usage

#: Default cap on a request body, bytes (a long conversation with tool results fits; a runaway upload does not).
DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
#: Environment variable read for the API key when none is passed.
API_KEY_ENV = "AGENTKIT_API_KEY"


#: The field names of the request's models: what a validation error's location keeps (not union branches).
_FIELDS = {
    f.alias or name
    for model in (*vars(S).values(), *vars(M).values())
    if isinstance(model, type) and issubclass(model, BaseModel)
    for name, f in model.model_fields.items()
}


def _param(loc: tuple[Any, ...]) -> str:
    """A pydantic error location as the request's path (``messages[0].content``): the fields and indexes, not the
    union branches, nor a tagged union member's tag (a part's ``text``, which is also a field's name)."""
    out = ""
    tag_next = False  # after a tagged union's branch (a list of parts): an index, then the member's tag
    for x in loc:
        if isinstance(x, int):
            out += f"[{x}]"
        elif tag_next:
            tag_next = False
        elif "tagged-union[" in x:
            tag_next = True
        elif x in _FIELDS:
            out += ("." if out else "") + x
    return out


#: The JSON type of a body that is no object, by its Python type.
_JSON_KINDS = {
    list: "array",
    str: "string",
    int: "number",
    float: "number",
    bool: "boolean",
    type(None): "null",
}


def _other_branch(loc: tuple[Any, ...], kind: str, errors: Any) -> bool:
    """Whether an error is a union branch the value is not of (``content``: not a string) while another error
    reaches inside a branch it is of (``content[0].text``): only the latter says what is wrong."""
    if not loc or not isinstance(loc[-1], str) or loc[-1] in _FIELDS or not kind.endswith("_type"):
        return False
    return any(len(e["loc"]) > len(loc) and tuple(e["loc"][: len(loc) - 1]) == loc[:-1] for e in errors)


def _validation_message(exc: RequestValidationError, content_type: str) -> tuple[str, str | None]:
    """The 400's message and ``param``: malformed JSON, a body that is no JSON object (a form, an array...), else
    the fields' problems (the first five)."""
    parts = []
    param = None
    errors = exc.errors()
    for err in errors:
        loc = tuple(err.get("loc", ()))
        if _other_branch(loc, str(err.get("type")), errors):
            continue
        if err.get("type") == "json_invalid":
            ctx = err.get("ctx") or {}
            at = next((f" at character {x}" for x in loc if isinstance(x, int)), "")
            return f"malformed JSON in the request body{at}: {ctx.get('error', err.get('msg'))}", None
        if loc == ("body",) and err.get("type") in ("model_attributes_type", "dict_type", "missing"):
            ctype = content_type.split(";", 1)[0].strip().lower()
            got = f"a JSON {_JSON_KINDS.get(type(exc.body), 'value')}"
            if ctype != "application/json":
                got = f"a body of Content-Type {ctype or '(none)'}"
            if err.get("type") == "missing":
                got = "an empty body"
            whole = "the request body must be a JSON object, sent with Content-Type: application/json"
            return f"{whole}; got {got}", None
        where = _param(loc)
        param = param or where or None
        parts.append(f"{where or 'body'}: {err.get('msg')}")
    unique = list(dict.fromkeys(parts))
    return "invalid request: " + "; ".join(unique[:5]) + (" ..." if len(unique) > 5 else ""), param


class _Gate:
    """ASGI middleware for ``/v1/*``: 503 while draining, the API key, the declared body size (before the body
    is read; plain ASGI, so a handler still sees the client disconnect)."""

    def __init__(self, app: Any, state: Any, api_key: str | None, max_body_bytes: int | None = None) -> None:
        self.app = app
        self.state = state
        self.api_key = api_key
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/v1/"):
            err = self._refusal(Request(scope))
            if err is not None:
                headers = {"Retry-After": "1"} if err.status == 503 else None
                await JSONResponse(err.body(), status_code=err.status, headers=headers)(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _refusal(self, request: Request) -> ServeError | None:
        if self.state.draining:
            return ServeError(
                503, "the server is shutting down; retry on another replica", type="server_error"
            )
        if self.api_key is not None:
            auth = request.headers.get("authorization", "")
            scheme, _, given = auth.partition(" ")
            if not auth:
                return ServeError(
                    401, "missing API key: send 'Authorization: Bearer <key>'", code="invalid_api_key"
                )
            if scheme.lower() != "bearer" or not hmac.compare_digest(
                given.strip().encode(), self.api_key.encode()
            ):
                return ServeError(401, "invalid API key", code="invalid_api_key")
        declared = request.headers.get("content-length", "")
        if self.max_body_bytes is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
            return ServeError(  # (a chunked body is cut by FastAPI's own body limit)
                413,
                f"request body of {int(declared):,} bytes is over this server's cap of {self.max_body_bytes:,}",
                code="request_too_large",
            )
        return None


def _abandon(sub: Any, fut: Any) -> None:
    """Cancel ``sub``'s row; the outcome of ``fut`` (its future), which nobody waits for any more, is retrieved
    when it comes (no 'exception was never retrieved' log)."""
    sub.handle.cancel()
    if fut is not None:
        fut.add_done_callback(lambda f: f.cancelled() or f.exception())


#: What :func:`create_app` serves, for the 404 of any other route.
_ROUTES = "POST /v1/chat/completions, GET /v1/models, GET /v1/models/{id} and GET /health"


def _add_error_handlers(app: FastAPI) -> None:
    """Every error in OpenAI's shape: ours (:class:`ServeError`), validation (400), HTTP (404, 413...), crashes (500)."""

    @app.exception_handler(ServeError)
    async def _serve_error(_: Request, exc: ServeError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        message, param = _validation_message(exc, request.headers.get("content-type", ""))
        return JSONResponse(ServeError(400, message, param=param).body(), status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        message = str(exc.detail)
        where = f"{request.method} {request.url.path}"
        if exc.status_code == 404 and message == "Not Found":  # no such route (not a model: that is ours)
            message = f"no route {where}: this server answers {_ROUTES}"
        elif exc.status_code == 400 and message == "There was an error parsing the body":  # FastAPI's
            message = await _unparsable(request)
        elif exc.status_code == 413:  # a body without Content-Length, cut by FastAPI's own limit
            cap = request.app.state.max_body_bytes
            message = f"the request body is over this server's cap of {cap:,} bytes"
            err = ServeError(413, message, code="request_too_large")
            return JSONResponse(err.body(), status_code=413)
        elif exc.status_code == 405:
            allowed = (getattr(exc, "headers", None) or {}).get("Allow", "")
            message = f"{where} is not allowed" + (
                f": use {' or '.join(allowed.split(', '))}" if allowed else ""
            )
        err = ServeError(exc.status_code, message, type=kind)
        return JSONResponse(err.body(), status_code=exc.status_code, headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _crash(_: Request, exc: Exception) -> JSONResponse:
        err = ServeError(500, f"internal error: {type(exc).__name__}: {exc}", type="server_error")
        return JSONResponse(err.body(), status_code=500)


async def _unparsable(request: Request) -> str:
    """Why FastAPI could not parse a JSON body: not UTF-8 (the byte and where), else too deep or a huge number."""
    try:
        (await request.body()).decode("utf-8")
    except UnicodeDecodeError as exc:
        where = f"byte 0x{exc.object[exc.start]:02x} at offset {exc.start}"
        return f"the request body is not UTF-8 ({where}); send JSON encoded as UTF-8"
    return (
        "the request body could not be read as JSON (it nests too deeply, or holds a number of more than "
        "4,300 digits)"
    )


def create_app(
    engine: ServeEngine,
    *,
    api_key: str | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
) -> FastAPI:
    """The OpenAI-compatible ASGI app over ``engine``: ``api_key`` required on ``/v1/*`` when set, bodies over
    ``max_body_bytes`` refused (413). ``app.state.draining`` makes ``/v1/*`` answer 503; ``app.state.inflight``
    counts requests being answered."""
    app = FastAPI(title="agentkit serve", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.engine = engine
    app.state.draining = False
    app.state.inflight = 0
    app.state.max_body_bytes = max_body_bytes

    def leave() -> None:  # (the count changes on the event loop's thread only)
        app.state.inflight -= 1

    _add_error_handlers(app)
    app.add_middleware(_Gate, state=app.state, api_key=api_key, max_body_bytes=max_body_bytes)

    @app.api_route("/health", methods=["GET", "HEAD"])  # HEAD: load balancers, curl -I (no body)
    async def health() -> JSONResponse:
        status = "draining" if app.state.draining else "ok"
        body = {"status": status, "model": engine.model_id, "load": engine.batcher.load}
        return JSONResponse(body, status_code=503 if app.state.draining else 200)

    card = {"id": engine.model_id, "object": "model", "created": engine.created, "owned_by": "agentkit"}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [card]}

    @app.get("/v1/models/{model_id:path}")
    async def model_card(model_id: str) -> dict[str, Any]:
        engine.check_model(model_id)  # a hub id holds a '/': the path's rest is the id
        return card

    @app.post("/v1/chat/completions", response_model=None, max_body_size=max_body_bytes)
    async def chat_completions(req: S.ChatCompletionRequest, request: Request) -> Any:
        app.state.inflight += 1
        streaming = False
        try:
            engine.check_model(req.model)
            turn, _ = await run_in_threadpool(engine.prepare, req)
            if req.stream:
                from sse_starlette import EventSourceResponse

                streaming = True
                return EventSourceResponse(_stream(engine, turn, req, leave), sep="\n")
            sub = engine.submit(turn, req.seed)
            result = await _wait(sub, request)
            if result is None:  # the client went away; its row is freed
                return Response(status_code=499)
            return JSONResponse(engine.completion(sub, result))
        finally:
            if not streaming:
                leave()

    return app


async def _wait(sub: Any, request: Request) -> Any:
    """The batch result of ``sub``; ``None`` (and the row cancelled) when the client disconnects first."""
    from model.runtime.batcher import BatcherClosed, RequestCancelled

    fut = asyncio.wrap_future(sub.handle.future)
    try:
        while True:
            done, _ = await asyncio.wait({fut}, timeout=0.2)
            if done:
                break
            if await request.is_disconnected():
                _abandon(sub, fut)
                return None
        return fut.result()
    except RequestCancelled:
        return None
    except BatcherClosed as exc:
        raise ServeError(503, str(exc), type="server_error") from None
    except asyncio.CancelledError:
        _abandon(sub, fut)
        raise


def _event(engine: ServeEngine, sub: Any, choices: list[Any], **extra: Any) -> dict[str, str]:
    """One chunk's server-sent event: its ``choices`` and the ``extra`` keys (``usage``)."""
    data = {**engine.header(sub, "chat.completion.chunk"), "choices": choices, **extra}
    return {"data": json.dumps(data, ensure_ascii=False, separators=(",", ":"))}


async def _stream(
    engine: ServeEngine, turn: Any, req: S.ChatCompletionRequest, leave: Callable[[], None]
) -> AsyncIterator[dict[str, str]]:
    """Server-sent events of one streamed completion (OpenAI chunk format, ``[DONE]`` last); as OpenAI's,
    ``finish_reason``, ``logprobs`` (and ``usage``, when asked for) are ``null`` until set."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[list[int] | None] = asyncio.Queue()
    sub: Any = None
    fut: asyncio.Future[Any] | None = None
    with_usage = req.stream_options is not None and bool(req.stream_options.include_usage)

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, str]:
        choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
        return _event(engine, sub, [choice], **({"usage": None} if with_usage else {}))

    try:
        sub = engine.submit(turn, req.seed, lambda toks: loop.call_soon_threadsafe(queue.put_nowait, toks))
        view = StreamView(engine, bool(req.tools), req.tool_choice)
        for delta in view.opening:
            yield chunk(delta)
        fut = asyncio.wrap_future(sub.handle.future)
        fut.add_done_callback(lambda _: queue.put_nowait(None))  # queued after the canvases the batcher sent
        while (tokens := await queue.get()) is not None:
            for delta in view.feed(tokens):
                yield chunk(delta)
        try:
            result = fut.result()
        except Exception as exc:
            status = 503 if type(exc).__name__ == "BatcherClosed" else 500
            err = ServeError(status, f"generation failed: {type(exc).__name__}: {exc}", type="server_error")
            yield {"data": json.dumps(err.body())}
            yield {"data": "[DONE]"}
            return
        for delta in view.feed([], final=True):
            yield chunk(delta)
        yield chunk({}, finish_reason(sub, result, view.calls > 0))
        if with_usage:
            yield _event(engine, sub, [], usage=usage(result.prompt_tokens, len(result.tokens)))
        yield {"data": "[DONE]"}
    finally:
        if sub is not None and not sub.handle.future.done():
            _abandon(sub, fut)  # the client went away mid-stream: free the row
        leave()


def resolve_api_key(host: str, api_key: str | None) -> str | None:
    """The key to require: ``api_key``, else ``$AGENTKIT_API_KEY``; ValueError for none on a non-loopback
    ``host``."""
    key = api_key or os.environ.get(API_KEY_ENV) or None
    with contextlib.suppress(
        ValueError
    ):  # "localhost", or a loopback address, takes only this machine's clients
        host = "localhost" if ipaddress.ip_address(host).is_loopback else host
    if key is None and host != "localhost":
        raise ValueError(
            f"binding {host} exposes the server beyond this machine: set an API key with --api-key or "
            f"${API_KEY_ENV} (or bind 127.0.0.1)"
        )
    return key


def run_server(
    engine: ServeEngine,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    api_key: str | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    drain_timeout_s: float = 120.0,
    log_level: str = "info",
    on_ready: Callable[[int], None] | None = None,
) -> None:
    """Serve ``engine`` with uvicorn until SIGINT/SIGTERM; ``on_ready`` gets the bound port (``port=0``: an
    ephemeral one).

    The first signal drains: ``/v1/*`` answers 503 and requests in flight get ``drain_timeout_s`` seconds to
    finish, then a 503 error; a second signal stops at once. ValueError: see :func:`resolve_api_key`.
    """
    import uvicorn

    key = resolve_api_key(host, api_key)
    app = create_app(engine, api_key=key, max_body_bytes=max_body_bytes)

    class _Draining(uvicorn.Server):
        draining = False

        def handle_exit(self, sig: int, frame: Any) -> None:
            if self.draining:
                self.force_exit = True
                super().handle_exit(sig, frame)
                return
            self.draining = True
            app.state.draining = True
            threading.Thread(target=self._drain, name="serve-drain", daemon=True).start()

        def _drain(self) -> None:
            deadline = time.monotonic() + drain_timeout_s
            while (app.state.inflight > 0 or engine.batcher.load > 0) and time.monotonic() < deadline:
                time.sleep(0.05)
            if engine.batcher.load > 0:  # out of time: unfinished requests get a 503
                engine.close(wait=False)
                end = time.monotonic() + 5
                while app.state.inflight > 0 and time.monotonic() < end:
                    time.sleep(0.05)
            self.should_exit = True

        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets=sockets)
            if on_ready is not None and self.servers:
                on_ready(int(self.servers[0].sockets[0].getsockname()[1]))

    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, timeout_graceful_shutdown=5)
    server = _Draining(config)
    try:
        server.run()
    finally:
        engine.close(wait=False)
