"""One retrying HTTP client for every outbound request agentkit makes (bundle ``http:`` tools, the ``openai``
backend, the weather tool).

:class:`RetryingClient` retries with tenacity on timeouts, transport errors, HTTP 429 and 5xx; the wait before
retry ``k`` (1-based) is ``retry_wait * 2**(k-1)`` seconds, capped at ``max_wait``, lengthened to a numeric
``Retry-After`` (same cap). Any other answer, 4xx included, is returned; when the attempts run out,
:class:`RetriesExhausted` carries the last failure, so each caller words its own error.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import tenacity

__all__ = ["RetriesExhausted", "RetryingClient"]


class RetriesExhausted(Exception):
    """Every attempt failed in a retryable way: ``attempts`` requests sent, the last ``response`` when it was a
    429 or 5xx (else ``None``), the last ``error`` when it was an httpx timeout / transport error (else ``None``).
    """

    def __init__(self, attempts: int, response: httpx.Response | None, error: httpx.HTTPError | None) -> None:
        self.attempts = attempts
        self.response = response
        self.error = error
        what = f"HTTP {response.status_code}" if response is not None else f"{type(error).__name__}: {error}"
        super().__init__(f"{what} (after {attempts} attempt(s))")

    def reason(self, timed_out: str) -> str:
        """The last failure in words: ``"HTTP <status>: <the body's first 300 characters>"``, ``timed_out`` for
        a timeout, else ``"<error type>: <error>"``."""
        if self.response is not None:
            return f"HTTP {self.response.status_code}: {self.response.text[:300]}"
        if isinstance(self.error, httpx.TimeoutException):
            return timed_out
        return f"{type(self.error).__name__}: {self.error}"


def _transient(response: httpx.Response) -> bool:
    return response.status_code == 429 or response.status_code >= 500


def _exhausted(state: tenacity.RetryCallState) -> Any:
    """Raise :class:`RetriesExhausted` for the last attempt of ``state`` (tenacity's ``retry_error_callback``)."""
    assert state.outcome is not None
    error = state.outcome.exception()
    response = None if error is not None else state.outcome.result()
    raise RetriesExhausted(state.attempt_number, response, error) from error  # type: ignore[arg-type]


class RetryingClient:
    """Send requests with retries (see the module docstring).

    Args:
        client: the ``httpx.Client`` for :meth:`request` (``None`` for :meth:`arequest` only, which sends on
            the caller's client); tests pass one with an ``httpx.MockTransport``.
        attempts: requests per call, at least 1 (1 = no retry).
        retry_wait: first wait between attempts, seconds (0 in tests); doubled each retry.
        max_wait: cap of one wait, seconds (also for ``Retry-After``).

    Raises:
        ValueError: ``attempts < 1`` or a negative wait.
    """

    def __init__(
        self,
        client: httpx.Client | None = None,
        *,
        attempts: int = 3,
        retry_wait: float = 0.5,
        max_wait: float = 8.0,
    ) -> None:
        if attempts < 1:
            raise ValueError(f"attempts must be >= 1, got {attempts}")
        if retry_wait < 0 or max_wait < 0:
            raise ValueError(f"waits must be >= 0, got {retry_wait} and {max_wait}")
        self.client = client
        self.attempts = attempts
        self.retry_wait = retry_wait
        self.max_wait = max_wait

    def wait_seconds(self, attempt: int, response: httpx.Response | None = None) -> float:
        """The wait after failed attempt ``attempt`` (1-based), seconds, given its 429/5xx ``response``."""
        base = min(self.retry_wait * (2 ** (attempt - 1)), self.max_wait)
        try:  # a numeric Retry-After only
            after = float(response.headers["retry-after"]) if response is not None else base
        except (KeyError, ValueError):
            after = base
        return min(max(base, after), self.max_wait)

    def _wait(self, state: tenacity.RetryCallState) -> float:
        o = state.outcome
        return self.wait_seconds(state.attempt_number, None if o is None or o.failed else o.result())

    def _retrying_kwargs(self) -> dict[str, Any]:
        return {
            "stop": tenacity.stop_after_attempt(self.attempts),
            "wait": self._wait,
            # httpx.TimeoutException is a TransportError
            "retry": tenacity.retry_if_exception_type(httpx.TransportError)
            | tenacity.retry_if_result(_transient),
            "retry_error_callback": _exhausted,
        }

    def request(self, method: str, url: str, **kwargs: Any) -> tuple[httpx.Response, int]:
        """``client.request(method, url, **kwargs)`` with retries.

        Returns:
            ``(response, attempts)``: the first answer that is neither a 429 nor a 5xx, and the requests sent.

        Raises:
            RetriesExhausted: every attempt timed out, failed to connect or got a 429/5xx.
            ValueError: the object was made without a client (only :meth:`arequest` takes the caller's).
        """
        if self.client is None:
            raise ValueError(
                "RetryingClient.request sends on the client given at construction, and none was given"
            )
        retrying = tenacity.Retrying(**self._retrying_kwargs())
        return retrying(self.client.request, method, url, **kwargs), retrying.statistics["attempt_number"]

    async def arequest(self, send: Callable[[], Awaitable[httpx.Response]]) -> tuple[httpx.Response, int]:
        """Await ``send()`` (one request on the caller's ``httpx.AsyncClient``) with retries, as :meth:`request`."""

        async def once() -> httpx.Response:  # tenacity awaits only what a coroutine function returns
            return await send()

        retrying = tenacity.AsyncRetrying(**self._retrying_kwargs())
        return await retrying(once), retrying.statistics["attempt_number"]
