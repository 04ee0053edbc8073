"""Backend for any OpenAI-compatible server (vLLM, SGLang, llama.cpp, OpenAI...) over httpx.

Sends ``POST {base_url}/chat/completions``; HTTP 429, 5xx, timeouts and connection errors are retried with
exponential backoff (:class:`tools.httpclient.RetryingClient`, tenacity), other HTTP errors raise
:class:`~agentkit.errors.BackendError`. Arguments that are not a JSON object are returned with
:attr:`ToolCall.error` set (the planner sends the error back to the model), never repaired silently.
Inline thinking in ``content`` moves to :attr:`ModelTurn.thinking`; calls written as text are recovered
(:mod:`agentkit.backends.textcalls`), or set :attr:`ModelTurn.format_error` when they do not parse. The
server's reasoning field is sent back on the current turn's assistant tool-call messages (``replay_reasoning``).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import re
import threading
import weakref
from collections.abc import AsyncIterator
from typing import Any, cast

import httpx

from agentkit.backends.base import Backend, ModelTurn, PromptTooLong, TurnRequest, Usage, tool_choice_name
from agentkit.backends.textcalls import THINKING_TAGS, recover_calls, split_thinking
from agentkit.errors import BackendError
from agentkit.messages import ToolCall
from tools.httpclient import RetriesExhausted, RetryingClient

DEFAULT_BASE_URL = "http://127.0.0.1:8000/v1"


def escape_lone_surrogates(value: Any) -> Any:
    """``value`` with every lone surrogate in its strings (keys included) written as the text ``\\udXXX``
    (httpx cannot encode one as UTF-8)."""
    if isinstance(value, str):  # (a string without one comes back equal)
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {escape_lone_surrogates(k): escape_lone_surrogates(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [escape_lone_surrogates(v) for v in value]
    return value


#: "Prompt too long" messages with the counts: ``agentkit serve``'s (the prompt's; beside the request's
#: ``max_tokens``, in whole canvases), and OpenAI's and vLLM's.
_AGENTKIT_TOO_LONG = re.compile(r"the prompt is ([\d,]+) tokens but this model takes at most ([\d,]+)")
_AGENTKIT_BUDGET_TOO_LONG = re.compile(
    r"max_tokens=(\d+) does not fit with this prompt: the prompt is ([\d,]+) tokens of this model's ([\d,]+) "
    r"positions, and max_tokens is counted in whole canvases of (\d+) tokens"
)
_OPENAI_TOO_LONG = re.compile(
    r"maximum context length is ([\d,]+) tokens.*?(?:resulted in|requested) ([\d,]+) tokens"
    r"(?: \(([\d,]+) in the messages, ([\d,]+) in the completion\))?",
    re.DOTALL,
)


def context_overflow(resp: httpx.Response) -> PromptTooLong | None:
    """A server's 400 saying the prompt does not fit, as :class:`PromptTooLong` (the planner then trims the
    history); ``None`` for any other answer or wording."""
    try:
        message = str(resp.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return None

    def num(s: str) -> int:
        return int(s.replace(",", ""))

    if m := _AGENTKIT_TOO_LONG.search(message):
        return PromptTooLong(num(m[1]), num(m[2]))
    if m := _AGENTKIT_BUDGET_TOO_LONG.search(message):  # the prompt may take what the budget leaves
        budget = -(-num(m[1]) // num(m[4])) * num(m[4])
        return PromptTooLong(num(m[2]), num(m[3]) - budget, num(m[3]))
    if m := _OPENAI_TOO_LONG.search(message):
        if m[3] is not None:  # "(P in the messages, C in the completion)": the prompt may take the rest
            return PromptTooLong(num(m[3]), num(m[1]) - num(m[4]), num(m[1]))
        return PromptTooLong(num(m[2]), num(m[1]), num(m[1]))
    return None


def wire_content(content: Any) -> Any:
    """A message's content as OpenAI's API takes it: content parts lose agentkit's own ``vision_budget`` key."""
    if not isinstance(content, list):
        return content
    return [
        {k: v for k, v in p.items() if k != "vision_budget"} if isinstance(p, dict) else p for p in content
    ]


class OpenAIBackend(Backend):
    """OpenAI-compatible chat-completions backend (sync :meth:`complete` and async :meth:`acomplete`).

    Args:
        model: model name the server serves.
        base_url: API root including ``/v1``; default ``$AGENTKIT_OPENAI_BASE_URL``, ``$OPENAI_BASE_URL``,
            else ``http://127.0.0.1:8000/v1``.
        api_key: bearer token; default ``$api_key_env`` (if set).
        timeout: per-request timeout (seconds).
        max_retries: retries after the first attempt; retry_wait: first backoff (seconds), doubled each retry
            up to retry_wait_max (also the cap of ``Retry-After``).
        settings: extra request fields (``temperature``, ``max_tokens``, ``seed``...); headers: extra headers.
        transport / async_transport: httpx transports (``httpx.MockTransport`` in tests).
        recover_text_calls: recover tool calls written as text in ``content``.
        replay_reasoning: send the turn's reasoning back on its assistant tool-call messages.
        takes_images: send tool results' images (``False``: a note per image).
        reasoning_field: the request field that carries reasoning back; ``None``: the one the server used
            (``reasoning_content`` or ``reasoning``), nothing until it has used one.

    Raises:
        ValueError: a base URL that is not http(s).
        BackendError: (from :meth:`complete`) a non-retryable HTTP error, retries exhausted, or a response
            without choices / not JSON.
        agentkit.backends.base.PromptTooLong: (from :meth:`complete`) the server said the prompt does not fit.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        timeout: float = 60.0,
        max_retries: int = 4,
        retry_wait: float = 0.5,
        retry_wait_max: float = 8.0,
        settings: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        transport: httpx.BaseTransport | None = None,
        async_transport: httpx.AsyncBaseTransport | None = None,
        recover_text_calls: bool = True,
        replay_reasoning: bool = True,
        reasoning_field: str | None = None,
        takes_images: bool = True,
    ) -> None:
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        self.model = model
        self.name = f"openai:{model}"
        self.base_url = (
            base_url
            or os.environ.get("AGENTKIT_OPENAI_BASE_URL")
            or os.environ.get("OPENAI_BASE_URL")
            or DEFAULT_BASE_URL
        ).rstrip("/")
        if not self.base_url.startswith(("http://", "https://")):  # else every request is retried, then fails
            raise ValueError(
                f"the openai backend's base URL must start with http:// or https://, got {self.base_url!r} "
                "(from base_url, $AGENTKIT_OPENAI_BASE_URL or $OPENAI_BASE_URL)"
            )
        self.url = self.base_url + "/chat/completions"
        key = api_key if api_key is not None else os.environ.get(api_key_env)
        self.api_key_env = api_key_env
        self.headers = {"content-type": "application/json", **(headers or {})}
        if key:
            self.headers["authorization"] = f"Bearer {key}"
        self.timeout = timeout
        self.max_retries = max_retries
        self.retry_wait = retry_wait
        self.retry_wait_max = retry_wait_max
        self.settings = dict(settings or {})
        self._transport = transport
        self._async_transport = async_transport
        self._client: httpx.Client | None = None
        self._client_lock = threading.Lock()  # two threads' first requests make one client
        # per event loop: its client and the async generator that closes it when the loop shuts down
        self._aclients: dict[asyncio.AbstractEventLoop, tuple[httpx.AsyncClient, AsyncIterator[None]]] = {}
        self._ids = itertools.count()  # call_0, call_1... for calls the server sent without an id
        self.recover_text_calls = recover_text_calls
        self.replay_reasoning = replay_reasoning
        self.reasoning_field = reasoning_field
        self.takes_images = takes_images
        self._server_reasoning_field: str | None = None

    def build_request(self, request: TurnRequest) -> dict[str, Any]:
        """The JSON body for ``/chat/completions`` of ``request``.

        A tool message's images go in one user message after the step's tool messages, each tool's after a text
        part ``Images returned by tool NAME (call ID):`` (``role: tool`` takes none); arguments are JSON-encoded;
        only an assistant tool-call message's ``thinking`` is sent (as the reasoning field, when replay is on).
        """
        out: list[dict[str, Any]] = []
        field = self.reasoning_field or self._server_reasoning_field
        shown: list[dict[str, Any]] = []  # the parts of the user message with the images of tool responses
        messages, tools = request.messages, request.tools
        for i, m in enumerate(messages):
            content = wire_content(m.get("content"))
            if m["role"] == "tool":
                if isinstance(content, list):
                    if images := [p for p in content if p.get("type") == "image_url"]:
                        name, call_id = m.get("name") or "", m["tool_call_id"]
                        shown += [
                            {"type": "text", "text": f"Images returned by tool {name} (call {call_id}):"}
                        ]
                        shown += images
                    content = "".join(str(p.get("text", "")) for p in content if p.get("type") == "text")
                out.append({"role": "tool", "tool_call_id": m["tool_call_id"], "content": content})
            else:
                out.append({"role": m["role"], "content": content})
                if calls := m.get("tool_calls"):  # an assistant's, with its thinking when replayed
                    if m.get("thinking") and self.replay_reasoning and field:
                        out[-1][field] = m["thinking"]
                    out[-1]["tool_calls"] = [ToolCall.from_dict(tc).to_dict(wire=True) for tc in calls]
            if shown and (i + 1 == len(messages) or messages[i + 1].get("role") != "tool"):
                out.append({"role": "user", "content": shown})
                shown = []
        body: dict[str, Any] = {"model": self.model, "messages": out, **self.settings}
        if tools:
            body["tools"] = tools
            forced = tool_choice_name(request.tool_choice)
            body["tool_choice"] = (
                {"type": "function", "function": {"name": forced}}
                if forced is not None
                else request.tool_choice
            )
        return cast(dict[str, Any], escape_lone_surrogates(body))

    def parse_response(self, data: Any, request: TurnRequest | None = None, requests: int = 1) -> ModelTurn:
        """Turn a ``/chat/completions`` JSON response (that took ``requests`` HTTP requests) into a
        :class:`ModelTurn`; calls written as text are recovered only when ``request`` declared tools and its
        ``tool_choice`` is not ``"none"``.

        Raises:
            BackendError: no ``choices[0].message`` in the response, or a tool call without a function name.
        """
        try:
            msg = data["choices"][0]["message"]
        except (KeyError, IndexError, TypeError):
            raise BackendError(f"{self.url}: response has no choices[0].message: {str(data)[:300]}") from None
        if not isinstance(msg, dict):
            raise BackendError(f"{self.url}: choices[0].message is not an object: {str(msg)[:300]}")
        content = msg.get("content") or ""
        if isinstance(content, list):  # content parts: keep the text ones
            content = "".join(p.get("text") or "" for p in content if isinstance(p, dict))
        if not isinstance(content, str):
            raise BackendError(f"{self.url}: choices[0].message.content is not text: {str(content)[:300]}")
        key = next(
            (k for k in ("reasoning_content", "reasoning") if isinstance(msg.get(k), str) and msg[k]), None
        )
        if key is not None:
            self._server_reasoning_field = key
        text, inline = split_thinking(content)
        thinking = "\n\n".join(t for t in (msg[key] if key else "", inline) if t)
        try:
            calls = [ToolCall.from_dict(tc) for tc in msg.get("tool_calls") or []]
        except ValueError as exc:
            raise BackendError(f"{self.url}: choices[0].message.tool_calls: {exc}") from None
        format_error: str | None = None
        if (
            not calls
            and request
            and request.tools
            and request.tool_choice != "none"
            and self.recover_text_calls
        ):
            found = recover_calls(text)
            if (format_error := found.problem) is None:
                text, calls = found.text, found.calls
        # an open thinking tag with no close after it: the reply was cut short inside its thinking
        unclosed = any(content.rfind(o) > content.rfind(c) for o, c in THINKING_TAGS)
        if not calls and not text and inline and format_error is None and unclosed:  # and no answer after it
            format_error = (
                "the reply ended inside a thinking block, without an answer or a tool call after it"
            )
        for c in calls:
            c.id = c.id or f"call_{next(self._ids)}"
        u = data.get("usage") or {}
        usage = Usage(int(u.get("prompt_tokens") or 0), int(u.get("completion_tokens") or 0), requests)
        return ModelTurn(
            text=text, thinking=thinking, tool_calls=calls, usage=usage, raw=data, format_error=format_error
        )

    def _read(self, resp: httpx.Response, sent: int, request: TurnRequest) -> ModelTurn:
        """The turn of ``request``'s last response (``sent`` HTTP requests); BackendError for an error status."""
        if resp.status_code == 400 and (too_long := context_overflow(resp)) is not None:
            raise too_long
        if resp.status_code >= 400:
            hint = ""
            if resp.status_code == 404 and not self.base_url.endswith("/v1"):
                hint = f" (is the base URL {self.base_url!r} the API root? it usually ends in /v1)"
            elif resp.status_code == 401 and "authorization" not in self.headers:
                hint = (
                    f" (no API key was sent: pass api_key, or set ${self.api_key_env}, or the bundle's "
                    "model.api_key_env names the variable)"
                )
            elif resp.status_code == 401:
                hint = f" (the server refused the API key sent, from api_key or ${self.api_key_env})"
            raise BackendError(
                f"{self.url}: HTTP {resp.status_code}{hint}: {resp.text[:500]}", status_code=resp.status_code
            )
        try:
            data = resp.json()
        except ValueError:
            raise BackendError(f"{self.url}: response is not JSON: {resp.text[:300]}") from None
        return self.parse_response(data, request, requests=sent)

    def turn(self, request: TurnRequest) -> ModelTurn:
        """One chat-completions request, retried on transient failures."""
        body = self.build_request(request)
        with self._client_lock:
            client = self._client
            if client is None:
                client = self._client = httpx.Client(timeout=self.timeout, transport=self._transport)
                # closed with the backend, or at the latest when the program ends (not left to the teardown)
                weakref.finalize(self, client.close)
        try:
            resp, sent = self.http(client).request("POST", self.url, json=body, headers=self.headers)
        except RetriesExhausted as exc:
            raise self._gave_up(exc) from exc
        return self._read(resp, sent, request)

    def http(self, client: httpx.Client | None = None) -> RetryingClient:
        """This backend's retry policy over ``client``."""
        return RetryingClient(
            client, attempts=self.max_retries + 1, retry_wait=self.retry_wait, max_wait=self.retry_wait_max
        )

    def _gave_up(self, exc: RetriesExhausted) -> BackendError:
        """The error after the last retry; a refused connection names where the address comes from."""
        why = exc.reason(f"timeout after {self.timeout:g} s ({type(exc.error).__name__})")
        msg = f"{self.url}: gave up after {exc.attempts} attempt(s): {why}"
        if isinstance(exc.error, httpx.ConnectError):
            msg += (
                " (is a server listening there? the address comes from base_url, $AGENTKIT_OPENAI_BASE_URL "
                "or $OPENAI_BASE_URL)"
            )
        status = exc.response.status_code if exc.response is not None else None
        return BackendError(msg, status_code=status)

    async def aturn(self, request: TurnRequest) -> ModelTurn:
        """Async :meth:`turn` (one ``httpx.AsyncClient`` per event loop, see :meth:`aclient`)."""
        body = self.build_request(request)
        client = await self.aclient()
        try:
            resp, sent = await self.http().arequest(
                lambda: client.post(self.url, json=body, headers=self.headers)
            )
        except RetriesExhausted as exc:
            raise self._gave_up(exc) from exc
        return self._read(resp, sent, request)

    async def aclient(self) -> httpx.AsyncClient:
        """The running event loop's HTTP client, made on first use. An async generator registered with the loop
        closes it in the loop's ``shutdown_asyncgens()`` (``asyncio.run`` calls it); clients of loops closed
        without that are dropped at the next call."""
        loop = asyncio.get_running_loop()
        for old in [x for x in list(self._aclients) if x.is_closed()]:  # list(): other threads' loops add
            self._aclients.pop(old, None)
        entry = self._aclients.get(loop)
        if entry is None:
            client = httpx.AsyncClient(timeout=self.timeout, transport=self._async_transport)
            closer = self._close_with_loop(loop, client)
            await closer.__anext__()  # its first step registers it with the loop's shutdown_asyncgens()
            entry = self._aclients[loop] = (client, closer)
        return entry[0]

    async def _close_with_loop(
        self, loop: asyncio.AbstractEventLoop, client: httpx.AsyncClient
    ) -> AsyncIterator[None]:
        try:
            yield
        finally:
            self._aclients.pop(loop, None)
            await client.aclose()

    def close(self) -> None:
        """Close the sync HTTP client (async clients close when their event loop shuts down: :meth:`aclient`)."""
        with self._client_lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()
