"""The example bundles load, declare the right tools, and run end to end with a scripted model.

The scripted model stands in for the LM only: the real tools run (code search on this repository, the
weather tools against an offline fake of Open-Meteo, the sandbox tool's program in a local Python or in
Docker), and the scripted final answer is built from the tool response the agent actually sent back.
"""

from __future__ import annotations

import ast
import json
import os
import pathlib
import subprocess
import sys
import types

import httpx
import pytest
from sandbox_fixtures import docker_client, sandbox_image  # noqa: F401  (fixtures)

from agentkit.backends.scripted import ScriptedBackend, answer, call
from agentkit.bundle import load_bundle
from agentkit.tools import tool
from tools import code_search, weather
from tools.weather_fake import fake_open_meteo

ROOT = pathlib.Path(__file__).resolve().parents[1]
WEATHER = ROOT / "examples" / "weather" / "bundle.yaml"
CODE_SEARCH = ROOT / "examples" / "code_search" / "bundle.yaml"
OFFLINE_WEATHER = ROOT / "examples" / "weather" / "offline.yaml"


def _tool_messages(messages):
    return [m for m in messages if m["role"] == "tool"]


def _where_defined(path: pathlib.Path, name: str) -> int:
    """The line of ``def name`` in ``path``, found independently of tools.code_search."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node.lineno
    raise AssertionError(f"{name} not in {path}")


# ------------------------------------------------------------------------------------------ loading


def test_weather_bundle_loads_with_typed_tools():
    b = load_bundle(WEATHER)
    assert b.name == "weather"
    assert b.model == {"backend": "embedded", "seed": 0}  # the embedded default checkpoint, reproducible
    assert [t.name for t in b.tools] == ["get_current_weather", "get_forecast", "geocode"]
    decl = {t.name: t.declaration()["function"] for t in b.tools}
    # declarations are the functions' own (type hints + docstring Args), identical to @tool's, with the
    # place grounded on the conversation (grounded: [place] in the bundle)
    for fn in (weather.get_current_weather, weather.get_forecast, weather.geocode):
        assert decl[fn.__name__] == tool(fn, grounded=["place"]).declaration()["function"]
        assert decl[fn.__name__]["parameters"]["properties"]["place"]["x-grounded"] is True
    fc = decl["get_forecast"]["parameters"]
    assert fc["required"] == ["place"]
    assert (fc["properties"]["days"]["minimum"], fc["properties"]["days"]["maximum"]) == (1, 16)
    assert fc["properties"]["units"]["enum"] == ["metric", "imperial"]
    assert "Number of forecast days" in fc["properties"]["days"]["description"]
    assert all(t.timeout and t.timeout >= 40 for t in b.tools)


def test_code_search_bundle_loads_with_typed_tools():
    b = load_bundle(CODE_SEARCH)
    assert b.name == "code-search"
    assert b.model == {"backend": "embedded", "seed": 0}
    assert [t.name for t in b.tools] == ["find_definition", "search_code", "read_file", "run_python"]
    decl = {t.name: t.declaration()["function"] for t in b.tools}
    grounded = {"find_definition": ["name"], "read_file": ["path"]}  # grounded: [...] in the bundle
    for fn in (
        code_search.find_definition,
        code_search.search_code,
        code_search.read_file,
        code_search.run_python,
    ):
        g = grounded.get(fn.__name__, [])
        assert decl[fn.__name__] == tool(fn, grounded=g).declaration()["function"]
        for k in g:
            assert decl[fn.__name__]["parameters"]["properties"][k]["x-grounded"] is True
    assert decl["find_definition"]["parameters"]["required"] == ["name"]
    assert decl["run_python"]["parameters"]["required"] == ["code"]
    assert "find_definition" in b.system_prompt


def test_bundle_model_can_be_switched_to_an_openai_server():
    b = load_bundle(CODE_SEARCH)
    backend = b.make_backend("openai", "google/diffusiongemma-26B-A4B-it")
    assert backend.name == "openai:google/diffusiongemma-26B-A4B-it"


# ------------------------------------------------------------------------------------------ code search


def test_code_search_bot_answers_where_load_bundle_is_defined():
    """The README's main question, on this repository, with the real tools."""
    expected = f"agentkit/bundle.py:{_where_defined(ROOT / 'agentkit' / 'bundle.py', 'load_bundle')}"

    def model(messages, tools, tool_choice):
        results = _tool_messages(messages)
        if not results:
            assert [t["function"]["name"] for t in tools] == [
                "find_definition",
                "search_code",
                "read_file",
                "run_python",
            ]
            return call("find_definition", name="load_bundle")
        top = json.loads(results[-1]["content"])["matches"][0]
        return answer(f"load_bundle is defined at {top['location']} ({top['signature'].split('(')[0]}).")

    code_search.set_root(ROOT)
    try:
        agent = load_bundle(CODE_SEARCH).make_agent(backend=ScriptedBackend(model))
        result = agent.run("Where is the function load_bundle defined?")
    finally:
        code_search.set_root(None)
    (step, _final) = result.steps
    (rec,) = step.tool_calls
    assert (rec.name, rec.arguments, rec.error) == ("find_definition", {"name": "load_bundle"}, None)
    assert rec.result["matches"][0]["location"] == expected
    assert result.answer == f"load_bundle is defined at {expected} (def load_bundle)."


def test_code_search_tool_errors_reach_the_model_as_tool_responses():
    seen = []

    def model(messages, tools, tool_choice):
        results = _tool_messages(messages)
        if not results:
            return call("read_file", path="../../etc/passwd")
        seen.append(json.loads(results[-1]["content"]))
        return answer("That path is outside the repository.")

    code_search.set_root(ROOT)
    try:
        result = load_bundle(CODE_SEARCH).make_agent(backend=ScriptedBackend(model)).run("Show /etc/passwd")
    finally:
        code_search.set_root(None)
    assert result.answer == "That path is outside the repository."
    assert seen[0]["error"] == (
        "PathOutsideRootError: path '../../etc/passwd' is outside the repository root; "
        "give a path relative to the root"
    )


def test_code_search_bot_counts_with_python_over_repository_files(tmp_path):
    """run_python gets copies of the named files; a local Python stands in for Docker here."""
    ran = []

    def local_runner(code, files, timeout_s):
        work = tmp_path / f"run{len(ran)}"
        for name, data in files.items():
            (work / name).parent.mkdir(parents=True, exist_ok=True)
            (work / name).write_bytes(data)
        ran.append(sorted(files))
        out = subprocess.run(
            [sys.executable, "-c", code], cwd=work, capture_output=True, text=True, timeout=timeout_s
        )
        return types.SimpleNamespace(
            stdout=out.stdout, stderr=out.stderr, exit_code=out.returncode, timed_out=False, oom_killed=False
        )

    snippet = "print(open('tools/weather.py').read().count('\\ndef '))"
    expected = (ROOT / "tools" / "weather.py").read_text().count("\ndef ")

    def model(messages, tools, tool_choice):
        results = _tool_messages(messages)
        if not results:
            return call("run_python", code=snippet, files=["tools/weather.py"])
        out = json.loads(results[-1]["content"])
        return answer(f"tools/weather.py has {out['stdout'].strip()} top-level functions.")

    code_search.set_root(ROOT)
    code_search.set_sandbox_runner(local_runner)
    try:
        result = (
            load_bundle(CODE_SEARCH)
            .make_agent(backend=ScriptedBackend(model))
            .run("How many top-level functions does tools/weather.py define?")
        )
    finally:
        code_search.set_sandbox_runner(None)
        code_search.set_root(None)
    assert ran == [["tools/weather.py"]]
    assert result.answer == f"tools/weather.py has {expected} top-level functions."
    assert expected > 5


@pytest.mark.docker
@pytest.mark.usefixtures("sandbox_image")
def test_run_python_tool_in_docker():
    code_search.set_root(ROOT)
    try:
        tools_ = {t.name: t for t in load_bundle(CODE_SEARCH).tools}
        out = tools_["run_python"].function(
            code="import ast\nt = ast.parse(open('tools/code_search/repo.py').read())\n"
            "print(sum(isinstance(n, ast.ClassDef) for n in t.body))",
            files=["tools/code_search/repo.py"],
        )
    finally:
        code_search.set_root(None)
    tree = ast.parse((ROOT / "tools" / "code_search" / "repo.py").read_text())
    assert out["exit_code"] == 0 and out["timed_out"] is False
    assert out["stdout"] == f"{sum(isinstance(n, ast.ClassDef) for n in tree.body)}\n"
    assert out["files"] == ["tools/code_search/repo.py"]


# ------------------------------------------------------------------------------------------ weather


@pytest.fixture
def fake_weather():
    requests: list[httpx.Request] = []

    def handler(request):
        requests.append(request)
        return fake_open_meteo(request)

    weather.configure(client=httpx.Client(transport=httpx.MockTransport(handler)), retry_wait=0)
    yield requests
    weather.set_client(None)


def test_weather_bot_forecast_end_to_end(fake_weather):
    def model(messages, tools, tool_choice):
        results = _tool_messages(messages)
        if not results:
            return call("get_forecast", place="Berlin", days=2)
        data = json.loads(results[-1]["content"])
        tomorrow = data["days"][1]
        u = data["units"]
        return answer(
            f"Tomorrow ({tomorrow['date']}) in {data['place']['name']}: {tomorrow['conditions']}, "
            f"{tomorrow['temperature_min']}-{tomorrow['temperature_max']} {u['temperature_max']}, "
            f"{tomorrow['precipitation_sum']} {u['precipitation_sum']} of precipitation."
        )

    result = (
        load_bundle(WEATHER)
        .make_agent(backend=ScriptedBackend(model))
        .run("Will it rain in Berlin tomorrow?")
    )
    (rec,) = result.steps[0].tool_calls
    assert (rec.name, rec.arguments, rec.error) == ("get_forecast", {"place": "Berlin", "days": 2}, None)
    assert [r.url.path for r in fake_weather] == ["/v1/search", "/v1/forecast"]
    # 2026-11-30 in the fake: even day -> rain showers, 4.6 mm, min -1+30%5, max 5+30%7
    assert result.answer == (
        "Tomorrow (2026-11-30) in Berlin: slight rain showers, -1.0-7.0 °C, 4.6 mm of precipitation."
    )


def test_weather_bot_unknown_place_is_reported_to_the_model(fake_weather):
    seen = []

    def model(messages, tools, tool_choice):
        results = _tool_messages(messages)
        if not results:
            return call("get_current_weather", place="Atlantisville", units="imperial")
        seen.append(json.loads(results[-1]["content"]))
        return answer("I could not find Atlantisville.")

    result = load_bundle(WEATHER).make_agent(backend=ScriptedBackend(model)).run("Weather in Atlantisville?")
    assert result.answer == "I could not find Atlantisville."
    assert seen[0]["error"].startswith("PlaceNotFoundError: No place named 'Atlantisville' was found.")
    assert [r.url.path for r in fake_weather] == ["/v1/search"]


def test_offline_weather_bundle_runs_on_the_shipped_fake_without_network(monkeypatch):
    def no_network(*args, **kwargs):
        raise AssertionError("the offline bundle opened a connection")

    monkeypatch.setattr(httpx.HTTPTransport, "handle_request", no_network)
    online, offline = load_bundle(WEATHER), load_bundle(OFFLINE_WEATHER)
    # the same agent (prompt, settings, tool declarations): only the tools' data source differs
    assert (offline.name, offline.system_prompt, offline.agent_settings) == (
        online.name,
        online.system_prompt,
        online.agent_settings,
    )
    assert [t.declaration() for t in offline.tools] == [t.declaration() for t in online.tools]

    def model(messages, tools, tool_choice):
        results = _tool_messages(messages)
        if not results:
            return call("get_current_weather", place="Tokyo", units="imperial")
        data = json.loads(results[-1]["content"])
        return answer(f"{data['place']['name']}: {data['temperature']} {data['units']['temperature']}")

    result = offline.make_agent(backend=ScriptedBackend(model)).run("Weather in Tokyo?")
    # any place name is accepted; the fixed sample's 4.0 °C in Fahrenheit
    assert result.answer == "Tokyo: 39.2 °F"
    assert result.steps[0].tool_calls[0].error is None


def test_bundles_run_from_any_directory(tmp_path):
    """``python:`` implementations import from the installed project, not the working directory."""
    code = (
        "from agentkit.bundle import load_bundle\n"
        f"print(len(load_bundle({str(WEATHER)!r}).tools), len(load_bundle({str(CODE_SEARCH)!r}).tools))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["3", "4"]
