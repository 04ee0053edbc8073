"""tools.httpclient.RetryingClient: what is retried, what is returned, what is raised (httpx.MockTransport)."""

import asyncio

import httpx
import pytest

from tools.httpclient import RetriesExhausted, RetryingClient


def scripted(*answers):
    """A MockTransport handler answering with ``answers`` in order (an exception instance is raised)."""
    seen = []

    def handler(request):
        seen.append(request)
        a = answers[len(seen) - 1]
        if isinstance(a, Exception):
            raise a
        return httpx.Response(a, text=f"answer {len(seen)}")

    return handler, seen


def client_for(handler):
    return RetryingClient(httpx.Client(transport=httpx.MockTransport(handler)), attempts=3, retry_wait=0)


def test_transient_failures_are_retried_until_an_answer():
    handler, seen = scripted(503, httpx.ConnectError("refused"), 200)
    resp, attempts = client_for(handler).request("GET", "http://x/a")
    assert (resp.status_code, resp.text, attempts, len(seen)) == (200, "answer 3", 3, 3)


def test_a_4xx_is_returned_at_once():
    handler, seen = scripted(404, 200)
    resp, attempts = client_for(handler).request("GET", "http://x/a")
    assert (resp.status_code, attempts, len(seen)) == (404, 1, 1)


def test_exhausted_attempts_carry_the_last_failure():
    handler, seen = scripted(500, 502, 429)
    with pytest.raises(RetriesExhausted) as ei:
        client_for(handler).request("GET", "http://x/a")
    assert (ei.value.attempts, ei.value.response.status_code, ei.value.error, len(seen)) == (3, 429, None, 3)
    assert str(ei.value) == "HTTP 429 (after 3 attempt(s))"
    handler, _seen = scripted(500, httpx.ReadTimeout("slow"), httpx.ReadTimeout("slow"))
    with pytest.raises(RetriesExhausted) as ei:
        client_for(handler).request("GET", "http://x/a")
    assert ei.value.response is None and isinstance(ei.value.error, httpx.ReadTimeout)
    assert str(ei.value) == "ReadTimeout: slow (after 3 attempt(s))"


def test_async_requests_retry_the_same_way():
    handler, _seen = scripted(503, 200)

    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as c:
            return await RetryingClient(attempts=2, retry_wait=0).arequest(lambda: c.get("http://x/a"))

    resp, attempts = asyncio.run(go())
    assert (resp.status_code, attempts) == (200, 2)


def test_waits_double_up_to_the_cap_and_honour_retry_after():
    http = RetryingClient(attempts=5, retry_wait=0.5, max_wait=3.0)
    assert [http.wait_seconds(k) for k in (1, 2, 3, 4)] == [0.5, 1.0, 2.0, 3.0]
    assert http.wait_seconds(1, httpx.Response(429, headers={"retry-after": "2"})) == 2.0
    assert http.wait_seconds(1, httpx.Response(429, headers={"retry-after": "60"})) == 3.0


@pytest.mark.parametrize(
    ("kwargs", "message"), [({"attempts": 0}, "attempts must be >= 1"), ({"retry_wait": -1}, "waits")]
)
def test_bad_settings_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        RetryingClient(**kwargs)


def test_a_sync_request_without_a_client_is_refused_by_name():
    with pytest.raises(ValueError, match=r"RetryingClient.request sends on the client given at construction"):
        RetryingClient(None, retry_wait=0).request("GET", "http://127.0.0.1:9/")
