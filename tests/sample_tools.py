"""Two small ``@tool`` functions that the backend tests share (weather with a default, integer addition)."""

from __future__ import annotations

from agentkit import tool


@tool
def get_weather(city: str, days: int = 1) -> dict:
    """Weather forecast for a city.

    Args:
        city: City name.
        days: Days ahead.
    """
    return {"city": city, "days": days, "sky": "clear"}


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b
