"""A real ``agentkit serve`` server for tests: uvicorn on 127.0.0.1 with an ephemeral port, in a thread."""

from __future__ import annotations

import contextlib
import os
import pathlib
import threading
import time
from collections.abc import Iterator
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
CHECKPOINT = ROOT / "model" / "checkpoints" / "agentkit-tiny"
MODEL = "agentkit-tiny"  # the name agentkit serve gives it

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name"},
                "units": {"type": "string", "enum": ["metric", "imperial"]},
            },
            "required": ["city"],
        },
    },
}

ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two integers",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}


def chat_body(**kw: Any) -> dict[str, Any]:
    """A chat completions body for agentkit-tiny: ``q`` the user's text (default "Hello there"), the rest as given."""
    return {"model": MODEL, "messages": [{"role": "user", "content": kw.pop("q", "Hello there")}], **kw}


@contextlib.contextmanager
def running_server(engine: Any, **app_kwargs: Any) -> Iterator[tuple[str, Any]]:
    """Yield ``(base_url, app)`` of a server over ``engine``; stopped (not the engine) on exit."""
    import uvicorn

    from agentkit.serve.app import create_app

    app = create_app(engine, **app_kwargs)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("test server did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", app
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def load_test_engine(max_batch: int = 16) -> Any:
    """The embedded default behind a batcher, torch on 1 thread; skips (fails in CI) without the checkpoint."""
    import pytest

    if not (CHECKPOINT / "config.json").is_file():
        if os.environ.get("CI", "").strip().lower() in ("1", "true", "yes"):
            pytest.fail(f"embedded default checkpoint missing at {CHECKPOINT}")
        pytest.skip("embedded default checkpoint missing")
    import torch

    from agentkit.serve import load_engine

    torch.set_num_threads(1)
    return load_engine(None, max_batch=max_batch)
