"""An offline fake of the Open-Meteo geocoding and forecast APIs, and the weather tools running on it.

:func:`fake_open_meteo` answers ``httpx`` requests with the real APIs' response shapes and parameter checks
(unknown variables, out-of-range dates: HTTP 400 ``{"error": true, "reason": ...}``) over fixed data: 4.0 °C and
slight rain at 2026-11-29 14:15, forecasts from 2026-11-29. :func:`get_current_weather`, :func:`get_forecast` and
:func:`geocode` are the tools of :mod:`tools.weather` answered by :func:`any_place_fake` (any unknown name gets
Berlin's data); ``examples/weather/offline.yaml`` uses them.
"""

from __future__ import annotations

import datetime as dt
import functools
import urllib.parse
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import httpx

from tools import weather

__all__ = [
    "PLACES",
    "TODAY",
    "any_place_fake",
    "fake_open_meteo",
    "geocode",
    "get_current_weather",
    "get_forecast",
]

_P = ParamSpec("_P")
_R = TypeVar("_R")

TODAY = dt.date(2026, 11, 29)

PLACES = {
    "berlin": [
        {
            "id": 2950159,
            "name": "Berlin",
            "latitude": 52.52437,
            "longitude": 13.41053,
            "elevation": 74.0,
            "feature_code": "PPLC",
            "country_code": "DE",
            "admin1_id": 2950157,
            "admin3_id": 6547383,
            "admin4_id": 6547539,
            "timezone": "Europe/Berlin",
            "population": 3426354,
            "postcodes": ["10967", "13347"],
            "country_id": 2921044,
            "country": "Germany",
            "admin1": "Land Berlin",
            "admin3": "Berlin, Stadt",
            "admin4": "Berlin",
        }
    ],
    "paris": [
        {
            "id": 2988507,
            "name": "Paris",
            "latitude": 48.85341,
            "longitude": 2.3488,
            "elevation": 43.0,
            "feature_code": "PPLC",
            "country_code": "FR",
            "admin1_id": 3012874,
            "admin2_id": 2968815,
            "timezone": "Europe/Paris",
            "population": 2138551,
            "country_id": 3017382,
            "country": "France",
            "admin1": "Île-de-France",
            "admin2": "Paris",
        },
        {
            "id": 4717560,
            "name": "Paris",
            "latitude": 33.66094,
            "longitude": -95.55551,
            "elevation": 180.0,
            "feature_code": "PPLA2",
            "country_code": "US",
            "admin1_id": 4736286,
            "admin2_id": 4699920,
            "timezone": "America/Chicago",
            "population": 24782,
            "postcodes": ["75460"],
            "country_id": 6252001,
            "country": "United States",
            "admin1": "Texas",
            "admin2": "Lamar",
        },
    ],
}

#: Current variables: (unit, sample value).
CURRENT_KNOWN: dict[str, tuple[str, float]] = {
    "temperature_2m": ("°C", 4.0),
    "apparent_temperature": ("°C", 0.5),
    "relative_humidity_2m": ("%", 81),
    "precipitation": ("mm", 0.2),
    "weather_code": ("wmo code", 61),
    "wind_speed_10m": ("km/h", 16.1),
    "wind_direction_10m": ("°", 250),
    "wind_gusts_10m": ("km/h", 33.8),
    "cloud_cover": ("%", 100),
}
#: Daily variables: (unit, value on a date).
DAILY_KNOWN: dict[str, tuple[str, Callable[[dt.date], float]]] = {
    "weather_code": ("wmo code", lambda d: 3 if d.day % 2 else 80),
    "temperature_2m_max": ("°C", lambda d: 5.0 + d.day % 7),
    "temperature_2m_min": ("°C", lambda d: -1.0 + d.day % 5),
    "precipitation_sum": ("mm", lambda d: 0.0 if d.day % 2 else 4.6),
    "precipitation_probability_max": ("%", lambda d: 10 if d.day % 2 else 75),
    "wind_speed_10m_max": ("km/h", lambda d: 20.0 + d.day % 3),
    "wind_gusts_10m_max": ("km/h", lambda d: 41.0),
}


def _bad(reason: str) -> httpx.Response:
    """The service's HTTP 400 body."""
    return httpx.Response(400, json={"error": True, "reason": reason})


def _convert(unit: str, value: float, q: dict[str, str]) -> tuple[str, float]:
    """``(unit, value)`` in the units the query asks for."""
    if unit == "°C" and q.get("temperature_unit") == "fahrenheit":
        return "°F", round(value * 9 / 5 + 32, 1)
    if unit == "km/h" and q.get("wind_speed_unit") == "mph":
        return "mp/h", round(value / 1.609344, 1)
    if unit == "mm" and q.get("precipitation_unit") == "inch":
        return "inch", round(value / 25.4, 3)
    return unit, value


def fake_open_meteo(request: httpx.Request) -> httpx.Response:
    """Both endpoints, with the real services' parameters and shapes (an unknown place: no results)."""
    q = dict(urllib.parse.parse_qsl(request.url.query.decode()))
    if request.url.path == "/v1/search":
        if "name" not in q:
            return _bad("Parameter 'name' is missing")
        results = PLACES.get(q["name"].strip().lower(), [])[: int(q.get("count", 10))]
        body: dict = {"generationtime_ms": 0.61}
        if results:
            body = {"results": results, **body}
        return httpx.Response(200, json=body)
    if request.url.path == "/v1/forecast":
        try:
            lat, lon = float(q["latitude"]), float(q["longitude"])
        except KeyError:
            return _bad("Parameter 'latitude' and 'longitude' must have the same number of elements")
        body = {
            "latitude": round(lat, 2),
            "longitude": round(lon, 2),
            "generationtime_ms": 0.05,
            "utc_offset_seconds": 3600,
            "timezone": "Europe/Berlin" if q.get("timezone") == "auto" else "GMT",
            "timezone_abbreviation": "GMT+1",
            "elevation": 38.0,
        }
        if "current" in q:
            units: dict = {"time": "iso8601", "interval": "seconds"}
            cur: dict = {"time": "2026-11-29T14:15", "interval": 900}
            for var in q["current"].split(","):
                if var not in CURRENT_KNOWN:
                    return _bad(f"Cannot initialize ForecastSurfaceVariable from invalid String value {var}.")
                units[var], cur[var] = _convert(*CURRENT_KNOWN[var], q)
            body["current_units"], body["current"] = units, cur
        if "daily" in q:
            if "start_date" in q:
                start = dt.date.fromisoformat(q["start_date"])
                end = dt.date.fromisoformat(q["end_date"])
                lo, hi = TODAY - dt.timedelta(days=92), TODAY + dt.timedelta(days=15)
                if not (lo <= start <= hi and lo <= end <= hi):
                    return _bad(f"Parameter 'start_date' is out of allowed range from {lo} to {hi}")
            else:
                n = int(q.get("forecast_days", 7))
                if not 0 <= n <= 16:
                    return _bad("Forecast days is invalid. Allowed range 0 to 16.")
                start, end = TODAY, TODAY + dt.timedelta(days=n - 1)
            dates = [start + dt.timedelta(days=i) for i in range((end - start).days + 1)]
            units = {"time": "iso8601"}
            daily: dict = {"time": [d.isoformat() for d in dates]}
            for var in q["daily"].split(","):
                if var not in DAILY_KNOWN:
                    return _bad(f"Cannot initialize ForecastVariableDaily from invalid String value {var}.")
                unit, value_on = DAILY_KNOWN[var]
                units[var] = _convert(unit, 0.0, q)[0]
                daily[var] = [_convert(unit, value_on(d), q)[1] for d in dates]
            body["daily_units"], body["daily"] = units, daily
        return httpx.Response(200, json=body)
    return httpx.Response(404, text="Not Found")


def any_place_fake(request: httpx.Request) -> httpx.Response:
    """:func:`fake_open_meteo`, with any unknown place name geocoded to a made-up place of that name: Berlin's
    coordinates and data, country ``Offline sample`` (``XX``). The tools send the name without its
    qualifier, so ``"Springfield, Illinois"`` is not found (``"Paris, Texas"`` is: Paris is known)."""
    if request.url.path == "/v1/search":
        q = dict(urllib.parse.parse_qsl(request.url.query.decode()))
        name = q.get("name", "").strip()
        if name and name.lower() not in PLACES:
            keep = ("id", "latitude", "longitude", "elevation", "feature_code", "timezone")
            entry = {key: value for key, value in PLACES["berlin"][0].items() if key in keep}
            entry.update(name=name, country="Offline sample", country_code="XX", admin1=name)
            return httpx.Response(200, json={"results": [entry], "generationtime_ms": 0.5})
    return fake_open_meteo(request)


@functools.cache
def _shared_client() -> weather.OpenMeteo:
    """An :class:`tools.weather.OpenMeteo` whose requests :func:`any_place_fake` answers in-process."""
    return weather.OpenMeteo(client=httpx.Client(transport=httpx.MockTransport(any_place_fake)), retry_wait=0)


def _offline(fn: Callable[_P, _R]) -> Callable[_P, _R]:
    """``fn`` (a tool of :mod:`tools.weather`) run on the offline client; same signature and docstring."""

    @functools.wraps(fn)
    def _call(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        with weather.using_client(_shared_client()):
            return fn(*args, **kwargs)

    return _call


get_current_weather = _offline(weather.get_current_weather)
get_forecast = _offline(weather.get_forecast)
geocode = _offline(weather.geocode)
