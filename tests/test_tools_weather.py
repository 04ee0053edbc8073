"""Weather tools against an offline fake of the Open-Meteo geocoding and forecast endpoints.

The fake answers with the real APIs' response shapes (keys, nesting, units blocks, error bodies) and checks
the query parameters the way the real service does (unknown variables and out-of-range dates -> HTTP 400
with ``{"error": true, "reason": ...}``).
"""

from __future__ import annotations

import datetime as dt
import http.server
import json
import threading
import time
import urllib.parse

import httpx
import pytest

from tools import weather
from tools.weather import (
    CurrentWeatherArgs,
    ForecastArgs,
    OpenMeteo,
    PlaceNotFoundError,
    WeatherAPIError,
    WeatherUnavailableError,
)
from tools.weather_fake import fake_open_meteo


class Recorder:
    """Wraps a handler; records every request and can fail the first ``fail`` calls on one path."""

    def __init__(self, handler=fake_open_meteo, *, fail_path: str = "", fail: int = 0, failure=None):
        self.handler, self.fail_path, self.fail, self.failure = handler, fail_path, fail, failure
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if self.fail and request.url.path == self.fail_path:
            self.fail -= 1
            if isinstance(self.failure, Exception):
                raise self.failure
            return self.failure
        return self.handler(request)

    def params(self, path: str) -> list[dict[str, str]]:
        return [
            dict(urllib.parse.parse_qsl(r.url.query.decode())) for r in self.requests if r.url.path == path
        ]


@pytest.fixture
def om():
    """Install a client on the fake transport; yield (client, recorder); restore the default after."""
    rec = Recorder()
    client = weather.configure(
        client=httpx.Client(transport=httpx.MockTransport(rec)), attempts=3, retry_wait=0.0
    )
    yield client, rec
    weather.set_client(None)


def test_geocode_returns_coordinates_of_best_match(om):
    _, rec = om
    out = weather.geocode("Berlin")
    assert out == {
        "matches": [
            {
                "name": "Berlin",
                "region": "Land Berlin",
                "country": "Germany",
                "country_code": "DE",
                "latitude": 52.52437,
                "longitude": 13.41053,
                "elevation": 74.0,
                "timezone": "Europe/Berlin",
                "population": 3426354,
            }
        ]
    }
    assert rec.params("/v1/search") == [{"name": "Berlin", "count": "1", "language": "en", "format": "json"}]


def test_geocode_qualifier_after_comma_filters_by_country_or_region(om):
    assert weather.geocode("Paris, US")["matches"][0]["region"] == "Texas"
    assert weather.geocode("Paris, texas")["matches"][0]["longitude"] == -95.55551
    assert weather.geocode("Paris, France")["matches"][0]["country_code"] == "FR"
    assert [m["country_code"] for m in weather.geocode("Paris", count=2)["matches"]] == ["FR", "US"]
    with pytest.raises(PlaceNotFoundError, match=r"No place named 'Paris' in 'Japan'"):
        weather.geocode("Paris, Japan")


def test_unknown_place_is_a_useful_error(om):
    _, rec = om
    with pytest.raises(PlaceNotFoundError) as info:
        weather.get_current_weather("Atlantisville")
    assert "No place named 'Atlantisville' was found" in str(info.value)
    assert "spelling" in str(info.value)
    assert rec.params("/v1/forecast") == []  # no forecast request without coordinates


def test_current_weather_metric(om):
    _, rec = om
    out = weather.get_current_weather("Berlin")
    assert out["place"]["name"] == "Berlin"
    assert out["time"] == "2026-11-29T14:15"
    assert out["temperature"] == 4.0
    assert out["apparent_temperature"] == 0.5
    assert out["precipitation"] == 0.2
    assert out["wind_speed"] == 16.1
    assert out["wind_direction"] == 250
    assert out["weather_code"] == 61
    assert out["conditions"] == "slight rain"
    assert out["units"]["temperature"] == "°C"
    assert out["units"]["wind_speed"] == "km/h"
    assert out["units"]["precipitation"] == "mm"
    (params,) = rec.params("/v1/forecast")
    assert params["latitude"] == "52.52437" and params["longitude"] == "13.41053"
    assert params["temperature_unit"] == "celsius" and params["timezone"] == "auto"
    assert "temperature_2m" in params["current"].split(",")


def test_current_weather_imperial_units(om):
    _, rec = om
    out = weather.get_current_weather("Berlin", units="imperial")
    assert out["temperature"] == 39.2  # 4.0 °C
    assert out["units"]["temperature"] == "°F"
    assert out["wind_speed"] == 10.0  # 16.1 km/h
    assert out["units"]["wind_speed"] == "mp/h"
    assert out["units"]["precipitation"] == "inch"
    (params,) = rec.params("/v1/forecast")
    assert (params["temperature_unit"], params["wind_speed_unit"], params["precipitation_unit"]) == (
        "fahrenheit",
        "mph",
        "inch",
    )


def test_forecast_days(om):
    _, rec = om
    out = weather.get_forecast("Berlin", days=5)
    assert [d["date"] for d in out["days"]] == [
        "2026-11-29",
        "2026-11-30",
        "2026-12-01",
        "2026-12-02",
        "2026-12-03",
    ]
    first = out["days"][0]
    assert first == {
        "date": "2026-11-29",
        "weather_code": 3,
        "temperature_max": 5.0 + 29 % 7,
        "temperature_min": -1.0 + 29 % 5,
        "precipitation_sum": 0.0,
        "precipitation_probability_max": 10,
        "wind_speed_max": 20.0 + 29 % 3,
        "wind_gusts_max": 41.0,
        "conditions": "overcast",
    }
    assert out["days"][1]["conditions"] == "slight rain showers"
    assert out["units"]["temperature_max"] == "°C"
    assert out["units"]["precipitation_sum"] == "mm"
    assert rec.params("/v1/forecast")[0]["forecast_days"] == "5"


def test_forecast_16_days_imperial(om):
    out = weather.get_forecast("Berlin", days=16, units="imperial")
    assert len(out["days"]) == 16
    assert out["units"]["temperature_max"] == "°F"
    assert out["days"][0]["temperature_max"] == round((5.0 + 29 % 7) * 9 / 5 + 32, 1)


@pytest.mark.parametrize("days", [0, 17, -3])
def test_forecast_days_out_of_range_is_rejected_before_any_request(om, days):
    _, rec = om
    with pytest.raises(ValueError, match=r"days: Input should be (greater|less) than or equal to"):
        weather.get_forecast("Berlin", days=days)
    assert rec.requests == []


def test_forecast_single_date(om):
    _, rec = om
    out = weather.get_forecast("Berlin", date="2026-12-05")
    assert [d["date"] for d in out["days"]] == ["2026-12-05"]
    params = rec.params("/v1/forecast")[0]
    assert params["start_date"] == params["end_date"] == "2026-12-05"
    assert "forecast_days" not in params


@pytest.mark.parametrize("days", [2, 7, 16])
def test_forecast_date_with_other_days_is_refused_before_any_request(om, days):
    _, rec = om
    with pytest.raises(ValueError) as info:
        weather.get_forecast("Berlin", days=days, date="2026-12-05")
    assert str(info.value) == (
        f"days ({days}) and date (2026-12-05) were both given: date asks for that one day, days for {days} days "
        "from today; give only one of them"
    )
    assert rec.requests == []


@pytest.mark.parametrize("days", [1, 3])
def test_forecast_date_with_one_or_the_default_days_is_that_day(om, days):
    out = weather.get_forecast("Berlin", days=days, date="2026-12-05")
    assert [d["date"] for d in out["days"]] == ["2026-12-05"]


def test_forecast_date_out_of_range_passes_api_reason_without_retry(om):
    _, rec = om
    with pytest.raises(WeatherAPIError) as info:
        weather.get_forecast("Berlin", date=dt.date(2027, 3, 1))
    assert info.value.status_code == 400
    assert info.value.reason == "Parameter 'start_date' is out of allowed range from 2026-08-29 to 2026-12-14"
    assert "rejected the request (HTTP 400)" in str(info.value)
    assert len(rec.params("/v1/forecast")) == 1  # 4xx is not retried


def test_bad_date_string_is_a_clear_argument_error(om):
    with pytest.raises(ValueError, match=r"Invalid arguments: date: Input should be a valid date"):
        weather.get_forecast("Berlin", date="next friday")


def test_bad_units_is_rejected(om):
    with pytest.raises(ValueError, match=r"units: Input should be 'metric' or 'imperial'"):
        weather.get_current_weather("Berlin", units="kelvin")


def test_retries_transient_5xx_then_succeeds():
    rec = Recorder(fail_path="/v1/forecast", fail=2, failure=httpx.Response(503, text="Service Unavailable"))
    client = OpenMeteo(client=httpx.Client(transport=httpx.MockTransport(rec)), attempts=3, retry_wait=0)
    out = client.current("Berlin")
    assert out["temperature"] == 4.0
    assert len(rec.params("/v1/forecast")) == 3


def test_persistent_5xx_gives_up_with_message():
    failure = httpx.Response(502, json={"error": True, "reason": "upstream down"})
    rec = Recorder(fail_path="/v1/search", fail=99, failure=failure)
    client = OpenMeteo(client=httpx.Client(transport=httpx.MockTransport(rec)), attempts=4, retry_wait=0)
    with pytest.raises(WeatherAPIError) as info:
        client.geocode("Berlin")
    assert info.value.status_code == 502
    assert str(info.value) == (
        "The geocoding service is unavailable (HTTP 502: upstream down) after 4 tries; try again later."
    )
    assert len(rec.requests) == 4


def test_429_is_retried():
    rec = Recorder(fail_path="/v1/search", fail=1, failure=httpx.Response(429, text="Too Many Requests"))
    client = OpenMeteo(client=httpx.Client(transport=httpx.MockTransport(rec)), attempts=2, retry_wait=0)
    assert client.geocode("Berlin")[0]["name"] == "Berlin"
    assert len(rec.requests) == 2


def test_timeout_retried_then_reported():
    rec = Recorder(fail_path="/v1/forecast", fail=99, failure=httpx.ReadTimeout("timed out"))
    client = OpenMeteo(client=httpx.Client(transport=httpx.MockTransport(rec)), attempts=3, retry_wait=0)
    with pytest.raises(
        WeatherUnavailableError, match=r"did not answer in time after 3 tries \(ReadTimeout\)"
    ):
        client.forecast("Berlin", days=2)
    assert len(rec.params("/v1/forecast")) == 3


def test_connection_error_reported():
    rec = Recorder(fail_path="/v1/search", fail=99, failure=httpx.ConnectError("Name or service not known"))
    client = OpenMeteo(client=httpx.Client(transport=httpx.MockTransport(rec)), attempts=2, retry_wait=0)
    with pytest.raises(WeatherUnavailableError, match=r"Could not reach the geocoding service after 2 tries"):
        client.geocode("Berlin")


@pytest.mark.parametrize("body", ["<html>", "[1, 2]"])
def test_a_body_that_is_no_json_object_is_an_api_error(body):
    client = OpenMeteo(
        client=httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(200, text=body))),
        attempts=1,
    )
    with pytest.raises(
        WeatherAPIError, match="geocoding service returned a body that is not a JSON object"
    ) as ei:
        client.geocode("Berlin")
    assert (ei.value.status_code, ei.value.reason) == (200, body)


def test_retry_wait_is_exponential_and_configurable(monkeypatch):
    sleeps: list[float] = []
    monkeypatch.setattr(time, "sleep", sleeps.append)  # tenacity sleeps through time.sleep
    rec = Recorder(fail_path="/v1/search", fail=3, failure=httpx.Response(500, text="boom"))
    client = OpenMeteo(client=httpx.Client(transport=httpx.MockTransport(rec)), attempts=4, retry_wait=0.25)
    client.geocode("Berlin")
    assert sleeps == [0.25, 0.5, 1.0]


def test_bad_client_settings():
    with pytest.raises(ValueError, match="attempts must be >= 1"):
        OpenMeteo(attempts=0)


def test_argument_models_json_schema():
    schema = ForecastArgs.model_json_schema()
    props = schema["properties"]
    assert schema["required"] == ["place"]
    assert (props["days"]["minimum"], props["days"]["maximum"], props["days"]["default"]) == (1, 16, 3)
    assert props["units"]["enum"] == ["metric", "imperial"]
    assert {"type": "string", "format": "date"} in props["date"]["anyOf"]
    # the declaration the checkpoint was trained on (model/training/bot_tools.json): date is "instead of" days
    assert "instead of a number of days" in props["date"]["description"]
    assert CurrentWeatherArgs.model_json_schema()["properties"]["place"]["minLength"] == 2
    with pytest.raises(ValueError):
        ForecastArgs(place="Berlin", extra=1)


def test_env_overrides_default_urls(monkeypatch):
    monkeypatch.setenv(weather.GEOCODING_URL_ENV, "http://127.0.0.1:9/geo")
    monkeypatch.setenv(weather.FORECAST_URL_ENV, "http://127.0.0.1:9/fc")
    weather.set_client(None)
    try:
        client = weather.get_client()
        assert (client.geocoding_url, client.forecast_url) == (
            "http://127.0.0.1:9/geo",
            "http://127.0.0.1:9/fc",
        )
    finally:
        weather.set_client(None)


class _Handler(http.server.BaseHTTPRequestHandler):
    """Serves ``fake_open_meteo`` over real HTTP; ``/slow/...`` sleeps past the client timeout first."""

    def do_GET(self):
        path = self.path
        if path.startswith("/slow"):
            time.sleep(0.5)
            path = path[len("/slow") :]
        response = fake_open_meteo(httpx.Request("GET", "http://x" + path))
        body = response.content
        self.send_response(response.status_code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def local_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_over_real_http_with_real_timeout(local_server):
    client = OpenMeteo(
        geocoding_url=f"{local_server}/v1/search",
        forecast_url=f"{local_server}/v1/forecast",
        timeout=5.0,
        retry_wait=0,
    )
    out = client.forecast("Paris, France", days=2)
    assert out["place"]["timezone"] == "Europe/Paris"
    assert len(out["days"]) == 2
    slow = OpenMeteo(geocoding_url=f"{local_server}/slow/v1/search", timeout=0.1, attempts=2, retry_wait=0)
    t0 = time.monotonic()
    with pytest.raises(WeatherUnavailableError, match="did not answer in time after 2 tries"):
        slow.geocode("Berlin")
    assert time.monotonic() - t0 < 2.0


def test_error_messages_are_json_serialisable_tool_results(om):
    out = weather.get_forecast("Paris, France", days=1)
    assert json.loads(json.dumps(out, ensure_ascii=False)) == out


def test_shipped_offline_tools_answer_any_place_without_network(monkeypatch):
    from tools import weather_fake

    def no_network(*args, **kwargs):
        raise AssertionError("the offline tools opened a connection")

    monkeypatch.setattr(httpx.HTTPTransport, "handle_request", no_network)
    out = weather_fake.get_current_weather("Springfield", units="imperial")
    assert {k: out["place"][k] for k in ("name", "region", "country", "country_code")} == {
        "name": "Springfield",
        "region": "Springfield",
        "country": "Offline sample",
        "country_code": "XX",
    }
    assert (out["temperature"], out["units"]["temperature"], out["conditions"]) == (39.2, "°F", "slight rain")
    fc = weather_fake.get_forecast("Berlin", days=2)
    assert [d["date"] for d in fc["days"]] == ["2026-11-29", "2026-11-30"]
    assert weather_fake.geocode("Paris, Texas")["matches"][0]["region"] == "Texas"
    with pytest.raises(
        PlaceNotFoundError
    ):  # the tool sends the name alone: the fake cannot match a qualifier
        weather_fake.get_current_weather("Springfield, Illinois")
    with pytest.raises(WeatherAPIError):
        weather_fake.get_forecast("Berlin", date=dt.date(2027, 3, 1))  # out of the fake's range, as the API
