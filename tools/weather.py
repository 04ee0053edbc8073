"""Weather tools over the public Open-Meteo APIs (no API key): geocoding
(``geocoding-api.open-meteo.com/v1/search``) and forecast (``api.open-meteo.com/v1/forecast``, current and daily
variables); both answer a bad request with HTTP 400 and ``{"error": true, "reason": ...}``.

The tool functions (:func:`geocode`, :func:`get_current_weather`, :func:`get_forecast`) take Pydantic-checked
arguments and return JSON-ready dicts; failures raise :class:`WeatherError` subclasses whose message is written
for the model. They use a process-wide :class:`OpenMeteo` client (:func:`configure`, :func:`set_client`,
:func:`using_client`); ``AGENTKIT_OPEN_METEO_GEOCODING_URL`` / ``AGENTKIT_OPEN_METEO_FORECAST_URL`` override the
default client's endpoints.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import os
import threading
from collections.abc import Iterator
from typing import Annotated, Any, Literal

import httpx
from pydantic import Field

from tools.args import args_model, validate_args
from tools.httpclient import RetriesExhausted, RetryingClient

__all__ = [
    "DEFAULT_DAYS",
    "DEFAULT_FORECAST_URL",
    "DEFAULT_GEOCODING_URL",
    "WMO_WEATHER_CODES",
    "CurrentWeatherArgs",
    "ForecastArgs",
    "GeocodeArgs",
    "OpenMeteo",
    "PlaceNotFoundError",
    "WeatherAPIError",
    "WeatherError",
    "WeatherUnavailableError",
    "configure",
    "geocode",
    "get_client",
    "get_current_weather",
    "get_forecast",
    "set_client",
    "using_client",
]

DEFAULT_GEOCODING_URL = "https://geocoding-api.open-meteo.com/v1/search"
DEFAULT_FORECAST_URL = "https://api.open-meteo.com/v1/forecast"
GEOCODING_URL_ENV = "AGENTKIT_OPEN_METEO_GEOCODING_URL"
FORECAST_URL_ENV = "AGENTKIT_OPEN_METEO_FORECAST_URL"

#: WMO weather interpretation codes as documented by Open-Meteo (https://open-meteo.com/en/docs, "WMO Weather
#: interpretation codes").
WMO_WEATHER_CODES: dict[int, str] = {
    0: "clear sky",
    1: "mainly clear",
    2: "partly cloudy",
    3: "overcast",
    45: "fog",
    48: "depositing rime fog",
    51: "light drizzle",
    53: "moderate drizzle",
    55: "dense drizzle",
    56: "light freezing drizzle",
    57: "dense freezing drizzle",
    61: "slight rain",
    63: "moderate rain",
    65: "heavy rain",
    66: "light freezing rain",
    67: "heavy freezing rain",
    71: "slight snowfall",
    73: "moderate snowfall",
    75: "heavy snowfall",
    77: "snow grains",
    80: "slight rain showers",
    81: "moderate rain showers",
    82: "violent rain showers",
    85: "slight snow showers",
    86: "heavy snow showers",
    95: "thunderstorm",
    96: "thunderstorm with slight hail",
    99: "thunderstorm with heavy hail",
}

# Variables requested from the forecast endpoint and their output names.
_CURRENT = {
    "temperature_2m": "temperature",
    "apparent_temperature": "apparent_temperature",
    "relative_humidity_2m": "relative_humidity",
    "precipitation": "precipitation",
    "weather_code": "weather_code",
    "wind_speed_10m": "wind_speed",
    "wind_direction_10m": "wind_direction",
    "wind_gusts_10m": "wind_gusts",
}
_DAILY = {
    "weather_code": "weather_code",
    "temperature_2m_max": "temperature_max",
    "temperature_2m_min": "temperature_min",
    "precipitation_sum": "precipitation_sum",
    "precipitation_probability_max": "precipitation_probability_max",
    "wind_speed_10m_max": "wind_speed_max",
    "wind_gusts_10m_max": "wind_gusts_max",
}
#: The keys of a place summary, in order (``region``: the API's ``admin1``).
_PLACE_KEYS = "name region country country_code latitude longitude elevation timezone population".split()
_UNIT_PARAMS: dict[str, dict[str, str]] = {
    "metric": {"temperature_unit": "celsius", "wind_speed_unit": "kmh", "precipitation_unit": "mm"},
    "imperial": {"temperature_unit": "fahrenheit", "wind_speed_unit": "mph", "precipitation_unit": "inch"},
}

# ---------------------------------------------------------------------------------------------------------
# Argument types (shared by the function signatures and the Pydantic argument models)

PlaceName = Annotated[
    str,
    Field(
        min_length=2,
        max_length=120,
        description="Place name, e.g. 'Berlin' or 'Paris, France' (a country or region after a comma narrows it).",
    ),
]
Units = Literal["metric", "imperial"]
UnitsArg = Annotated[
    Units,
    Field(description="'metric' (°C, km/h, mm) or 'imperial' (°F, mph, inch)."),
]
#: ``days`` of :meth:`OpenMeteo.forecast` and :func:`get_forecast` when not given.
DEFAULT_DAYS = 3
Days = Annotated[int, Field(ge=1, le=16, description="Number of forecast days, 1-16, starting today.")]
ForecastDate = Annotated[
    dt.date | None,
    Field(
        description="A single day to forecast (YYYY-MM-DD) instead of a number of days; at most 15 days ahead."
    ),
]
Count = Annotated[int, Field(ge=1, le=10, description="How many matching places to return, 1-10.")]


# ---------------------------------------------------------------------------------------------------------
# Errors


class WeatherError(RuntimeError):
    """A weather tool failed; ``str(exc)`` is a message meant for the model (what failed, what to try)."""


class PlaceNotFoundError(WeatherError, LookupError):
    """The geocoding API found no place matching the name (with its ``, qualifier``, if any)."""


class WeatherAPIError(WeatherError):
    """Open-Meteo answered with an HTTP error status (``status_code``); ``reason``: the API's ``reason`` field,
    else a short excerpt of the body."""

    def __init__(self, message: str, *, status_code: int, reason: str) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.reason = reason


class WeatherUnavailableError(WeatherError):
    """The API could not be reached (timeout, connection error) after all retries."""


def _api_reason(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("reason"), str):
        return body["reason"]
    text = response.text.strip()
    return text[:200] if text else response.reason_phrase


# ---------------------------------------------------------------------------------------------------------
# Client


class OpenMeteo:
    """A small Open-Meteo client: geocoding, current weather and daily forecast.

    Args:
        client: the ``httpx.Client`` to use (tests pass one with ``httpx.MockTransport``); by default one is
            created with ``timeout`` (seconds).
        geocoding_url, forecast_url: full URLs of the two endpoints.
        attempts: tries per request (1 = no retry) on timeouts, connection errors, HTTP 429 and 5xx.
        retry_wait, max_retry_wait: base and cap of the exponential back-off, seconds (0 in tests).

    Raises:
        ValueError: ``attempts < 1`` or a negative wait.
    """

    def __init__(
        self,
        *,
        client: httpx.Client | None = None,
        geocoding_url: str = DEFAULT_GEOCODING_URL,
        forecast_url: str = DEFAULT_FORECAST_URL,
        timeout: float = 8.0,
        attempts: int = 3,
        retry_wait: float = 0.5,
        max_retry_wait: float = 8.0,
    ) -> None:
        try:  # RetryingClient checks the retry settings (before a client is made)
            self._http = RetryingClient(
                client, attempts=attempts, retry_wait=retry_wait, max_wait=max_retry_wait
            )
        except ValueError as exc:
            raise ValueError(f"OpenMeteo: {exc}") from None
        self.client = self._http.client = client if client is not None else httpx.Client(timeout=timeout)
        self.geocoding_url = geocoding_url
        self.forecast_url = forecast_url
        self.attempts = attempts

    def _get_json(self, url: str, params: dict[str, Any], what: str) -> dict[str, Any]:
        """GET ``url`` with retries: the JSON object, or a :class:`WeatherError`."""
        try:
            response, _ = self._http.request("GET", url, params=params)
        except RetriesExhausted as exc:
            if exc.response is not None:
                status = exc.response.status_code
                reason = _api_reason(exc.response)
                raise WeatherAPIError(
                    f"The {what} service is unavailable (HTTP {status}: {reason}) after {self.attempts} "
                    "tries; try again later.",
                    status_code=status,
                    reason=reason,
                ) from exc
            if isinstance(exc.error, httpx.TimeoutException):
                raise WeatherUnavailableError(
                    f"The {what} service did not answer in time after {self.attempts} tries "
                    f"({type(exc.error).__name__}); try again later."
                ) from exc
            raise WeatherUnavailableError(
                f"Could not reach the {what} service after {self.attempts} tries "
                f"({type(exc.error).__name__}: {exc.error}); check the network and try again."
            ) from exc
        status = response.status_code
        if status >= 400:
            reason = _api_reason(response)
            raise WeatherAPIError(
                f"The {what} service rejected the request (HTTP {status}): {reason}",
                status_code=status,
                reason=reason,
            )
        try:
            data = response.json()
        except ValueError:
            data = None
        if not isinstance(data, dict):
            raise WeatherAPIError(
                f"The {what} service returned a body that is not a JSON object.",
                status_code=status,
                reason=response.text[:200],
            )
        if data.get("error") is True:  # an error body with a 200 status: treat it like a 400
            reason = str(data.get("reason", "unknown error"))
            raise WeatherAPIError(
                f"The {what} service rejected the request: {reason}", status_code=status, reason=reason
            )
        return data

    def geocode(self, place: str, count: int = 1) -> list[dict[str, Any]]:
        """Up to ``count`` matches of ``place``, best first.

        A qualifier after a comma (``"Paris, France"``, ``"Springfield, Illinois"``, ``"Paris, US"``) keeps
        only the matches whose country, country code or first-level region starts with it.

        Returns:
            ``[{"name", "region", "country", "country_code", "latitude", "longitude" (degrees), "elevation"
            (metres), "timezone", "population"}]``.

        Raises:
            PlaceNotFoundError: nothing matches. WeatherAPIError, WeatherUnavailableError: the API failed.
        """
        name, _, qualifier = (part.strip() for part in place.partition(","))
        if len(name) < 2:
            raise PlaceNotFoundError(
                f"Place name {place!r} is too short; give at least 2 letters of the name."
            )
        fetch = 20 if qualifier else count
        data = self._get_json(
            self.geocoding_url,
            {"name": name, "count": max(fetch, count), "language": "en", "format": "json"},
            "geocoding",
        )
        results = data.get("results") or []
        if not isinstance(results, list):
            raise WeatherAPIError(
                "The geocoding service returned 'results' that is not a list.", status_code=200, reason=""
            )
        if qualifier:
            q = qualifier.casefold()
            keys = ("country", "country_code", "admin1")
            results = [r for r in results if any(str(r.get(k) or "").casefold().startswith(q) for k in keys)]
        if not results:
            hint = f" in {qualifier!r}" if qualifier else ""
            raise PlaceNotFoundError(
                f"No place named {name!r}{hint} was found. Check the spelling, or use a larger nearby city "
                "(optionally with ', Country')."
            )
        return [_place_summary(r) for r in results[:count]]

    def _forecast(
        self, place: str, block: str, variables: dict[str, str], units: Units, **extra: Any
    ) -> tuple[dict[str, Any], dict[str, Any], dict[str, str]]:
        """``(place summary, the answer's `block`, {output name: unit})`` of a forecast request for
        ``variables`` at the best match for ``place``, in local time and ``units``."""
        loc = self.geocode(place, 1)[0]
        params = {
            "latitude": loc["latitude"],
            "longitude": loc["longitude"],
            block: ",".join(variables),
            "timezone": "auto",
            **_UNIT_PARAMS[units],
            **extra,
        }
        data = self._get_json(self.forecast_url, params, "forecast")
        values = data.get(block)
        if not isinstance(values, dict) or (block == "daily" and not isinstance(values.get("time"), list)):
            raise WeatherAPIError(
                f"The forecast service returned no {block!r} block.", status_code=200, reason=""
            )
        raw_units = data.get(f"{block}_units") or {}
        out_units = {
            key: raw_units[v] for v, key in variables.items() if v in raw_units and v != "weather_code"
        }
        return loc, values, out_units

    def current(self, place: str, units: Units = "metric") -> dict[str, Any]:
        """Current conditions at the best match for ``place`` (see :meth:`geocode`).

        Returns:
            ``{"place": {...}, "time" (local ISO time), "temperature", "apparent_temperature",
            "relative_humidity" (%), "precipitation", "weather_code", "wind_speed", "wind_direction" (degrees),
            "wind_gusts", "conditions" (text), "units": {variable: unit}}``.

        Raises:
            PlaceNotFoundError, WeatherAPIError, WeatherUnavailableError.
        """
        loc, current, out_units = self._forecast(place, "current", _CURRENT, units)
        out: dict[str, Any] = {"place": loc, "time": current.get("time")}
        out.update({key: current.get(var) for var, key in _CURRENT.items()})
        return {**out, "conditions": _describe(current.get("weather_code")), "units": out_units}

    def forecast(
        self, place: str, days: int = DEFAULT_DAYS, units: Units = "metric", date: dt.date | None = None
    ) -> dict[str, Any]:
        """Daily forecast at the best match for ``place``: ``days`` (1-16) days from today, or, when ``date`` is
        given, that single day (the API accepts roughly today - 92 days to today + 15 days); ``days`` must then
        be left at its default (or be 1).

        Returns:
            ``{"place": {...}, "days": [{"date", "weather_code", "temperature_max", "temperature_min",
            "precipitation_sum", "precipitation_probability_max" (%), "wind_speed_max", "wind_gusts_max",
            "conditions"}], "units": {variable: unit}}``.

        Raises:
            ValueError: ``days`` outside 1-16; ``date`` with another ``days`` than the default or 1.
            PlaceNotFoundError, WeatherAPIError (e.g. a date out of the API's range, with its reason),
            WeatherUnavailableError.
        """
        if not 1 <= days <= 16:
            raise ValueError(f"days must be between 1 and 16, got {days}")
        if date is not None and days not in (1, DEFAULT_DAYS):
            raise ValueError(
                f"days ({days}) and date ({date.isoformat()}) were both given: date asks for that one day, days for "
                f"{days} days from today; give only one of them"
            )
        span = (
            {"start_date": date.isoformat(), "end_date": date.isoformat()}
            if date
            else {"forecast_days": days}
        )
        loc, daily, out_units = self._forecast(place, "daily", _DAILY, units, **span)
        rows: list[dict[str, Any]] = []
        for i, day in enumerate(daily["time"]):
            row: dict[str, Any] = {"date": day}
            for var, key in _DAILY.items():
                series = daily.get(var)
                row[key] = series[i] if isinstance(series, list) and i < len(series) else None
            row["conditions"] = _describe(row["weather_code"])
            rows.append(row)
        return {"place": loc, "days": rows, "units": out_units}


def _place_summary(r: dict[str, Any]) -> dict[str, Any]:
    try:
        lat, lon = float(r["latitude"]), float(r["longitude"])
    except (KeyError, TypeError, ValueError) as exc:
        raise WeatherAPIError(
            f"The geocoding service returned a place without coordinates: {str(r)[:200]}",
            status_code=200,
            reason="",
        ) from exc
    place = {key: r.get("admin1" if key == "region" else key) for key in _PLACE_KEYS}
    return {**place, "latitude": lat, "longitude": lon}


def _describe(code: Any) -> str | None:
    if code is None:
        return None
    try:
        return WMO_WEATHER_CODES.get(int(code), f"WMO code {code}")
    except (TypeError, ValueError):
        return f"WMO code {code}"


# ---------------------------------------------------------------------------------------------------------
# Process-wide default client and the tool functions

_lock = threading.Lock()
_default: OpenMeteo | None = None
_scoped: contextvars.ContextVar[OpenMeteo | None] = contextvars.ContextVar("open_meteo_client", default=None)


def configure(**kwargs: Any) -> OpenMeteo:
    """Build an :class:`OpenMeteo` from ``kwargs`` (e.g. ``client=``, ``forecast_url=``, ``retry_wait=0``) and
    make it the client of the tool functions; return it.

    Raises:
        ValueError: bad retry settings.
    """
    client = OpenMeteo(**kwargs)
    set_client(client)
    return client


def set_client(client: OpenMeteo | None) -> None:
    """Make ``client`` the client of the tool functions; ``None`` restores the lazily built default."""
    global _default
    with _lock:
        _default = client


@contextlib.contextmanager
def using_client(client: OpenMeteo) -> Iterator[OpenMeteo]:
    """Within the block (this thread or task only), the tool functions use ``client``."""
    token = _scoped.set(client)
    try:
        yield client
    finally:
        _scoped.reset(token)


def get_client() -> OpenMeteo:
    """The client of the tool functions: that of an enclosing :func:`using_client`, else the process default
    (created on first use, its URLs from the environment)."""
    global _default
    scoped = _scoped.get()
    if scoped is not None:
        return scoped
    with _lock:
        if _default is None:
            _default = OpenMeteo(
                geocoding_url=os.environ.get(GEOCODING_URL_ENV, DEFAULT_GEOCODING_URL),
                forecast_url=os.environ.get(FORECAST_URL_ENV, DEFAULT_FORECAST_URL),
            )
        return _default


# The tool functions' parameters are described by their annotations; each raises ValueError for invalid
# arguments and the WeatherError subclasses (messages written for the model).


def geocode(place: PlaceName, count: Count = 1) -> dict[str, Any]:
    """Find the coordinates of a place by name.

    Returns:
        ``{"matches": [...]}`` as :meth:`OpenMeteo.geocode`, best match first.
    """
    return {"matches": get_client().geocode(**dict(validate_args(GeocodeArgs, place=place, count=count)))}


def get_current_weather(place: PlaceName, units: UnitsArg = "metric") -> dict[str, Any]:
    """Get the current weather at a place: temperature, precipitation, wind and conditions.

    Returns:
        See :meth:`OpenMeteo.current`.
    """
    return get_client().current(**dict(validate_args(CurrentWeatherArgs, place=place, units=units)))


def get_forecast(
    place: PlaceName, days: Days = DEFAULT_DAYS, units: UnitsArg = "metric", date: ForecastDate = None
) -> dict[str, Any]:
    """Get the daily weather forecast at a place: min/max temperature, precipitation, wind and conditions.

    Returns:
        See :meth:`OpenMeteo.forecast`.
    """
    args = validate_args(ForecastArgs, place=place, days=days, units=units, date=date)
    return get_client().forecast(**dict(args))


GeocodeArgs = args_model(geocode, "GeocodeArgs")
CurrentWeatherArgs = args_model(get_current_weather, "CurrentWeatherArgs")
ForecastArgs = args_model(get_forecast, "ForecastArgs")
