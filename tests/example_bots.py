"""The shipped example bots (``examples/weather``, ``examples/code_search``) asked one question on a given
backend, offline: the weather bot against the fake Open-Meteo of tools/weather_fake.py, the code-search
bot over a given folder."""

from __future__ import annotations

import pathlib
from collections.abc import Callable
from typing import Any

import httpx

from agentkit.bundle import load_bundle
from tools import code_search, weather
from tools.weather_fake import fake_open_meteo

ROOT = pathlib.Path(__file__).resolve().parents[1]


def tool_calls(result: Any) -> list[Any]:
    """Every tool call record of a run result, in order."""
    return [rec for step in result.steps for rec in step.tool_calls]


def ask_code_search(
    backend: Any, root: pathlib.Path = ROOT, question: str = "Where is the function load_bundle defined?"
) -> Any:
    """Run the code-search bundle on ``backend`` over ``root``; the run result (the root reset after)."""
    code_search.set_root(root)
    try:
        agent = load_bundle(ROOT / "examples" / "code_search" / "bundle.yaml").make_agent(backend=backend)
        return agent.run(question)
    finally:
        code_search.set_root(None)


def ask_weather(
    backend: Any,
    question: str = "What is the weather in Berlin right now?",
    handler: Callable[[httpx.Request], httpx.Response] = fake_open_meteo,
) -> Any:
    """Run the weather bundle on ``backend``, its requests answered by ``handler``; the run result (the
    weather client reset after)."""
    weather.configure(client=httpx.Client(transport=httpx.MockTransport(handler)), retry_wait=0)
    try:
        agent = load_bundle(ROOT / "examples" / "weather" / "bundle.yaml").make_agent(backend=backend)
        return agent.run(question)
    finally:
        weather.set_client(None)
