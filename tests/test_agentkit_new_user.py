"""A new user's mistakes (trial 10): each is a one-line error naming the problem and where, never a traceback.
Offline, CPU."""

import asyncio
import json
import os
import pathlib
import subprocess
import sys
from typing import Annotated

import httpx
import pytest
from pydantic import Field
from typer.testing import CliRunner

import agentkit.tools as tools_module
from agentkit import Agent
from agentkit.backends.scripted import ScriptedBackend, call
from agentkit.bundle import load_bundle
from agentkit.cli import app
from agentkit.errors import ToolDefinitionError
from agentkit.history import Conversation
from agentkit.tools import tool

runner = CliRunner()


def test_a_pattern_pydantic_cannot_compile_is_a_tool_definition_error():
    def find(code: Annotated[str, Field(pattern="[")]) -> str:
        return code

    with pytest.raises(
        ToolDefinitionError, match=r"^tool 'find': parameter 'code': invalid constraint: regex parse"
    ):
        tool(find)


def test_check_reports_a_python_tool_whose_pattern_does_not_compile(tmp_path, tools_module):
    mod = tools_module(
        "nu_pattern",
        """
        from typing import Annotated
        from pydantic import Field

        def find(code: Annotated[str, Field(pattern="[")]) -> str:
            return code
        """,
    )
    p = tmp_path / "b.yaml"
    p.write_text(f"agentkit_bundle: 1\nname: b\ntools:\n  - name: find\n    python: '{mod}:find'\n")
    res = runner.invoke(app, ["check", str(p)])
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    assert (
        f"{p}:4:5: tools[0]: tool 'find': parameter 'code': invalid constraint: regex parse error"
        in res.output
    )


def test_saving_a_conversation_into_a_missing_folder_names_the_file_asked_for(tmp_path):
    target = tmp_path / "no" / "such" / "conv.json"
    with pytest.raises(FileNotFoundError) as err:
        Conversation().with_turn("q", "a").save(target)
    assert err.value.filename == str(target)
    assert str(err.value) == f"[Errno 2] No such file or directory: '{target}'"


HUGE = "1" + "0" * 400  # past a double's range (about 1.8e308)


def test_a_timeout_past_a_doubles_range_is_refused_when_the_tool_is_defined():
    def add(a: int) -> int:
        return a

    with pytest.raises(
        ToolDefinitionError, match=r"^tool 'add': timeout must be a number > 0 \(seconds, within"
    ):
        tool(timeout=int(HUGE))(add)
    assert tool(timeout=float("inf"))(add).timeout == float("inf")  # waits forever, as None does


def test_check_refuses_integers_past_a_doubles_range_and_past_pythons_digit_limit(tmp_path, tools_module):
    mod = tools_module("nu_big", "def add(a: int) -> int:\n    return a\n")
    p = tmp_path / "b.yaml"
    p.write_text(
        f"agentkit_bundle: 1\nname: b\ntools:\n  - name: add\n    python: '{mod}:add'\n    timeout: {HUGE}\n"
        f"  - name: sb\n    parameters: {{type: object}}\n    sandbox: {{code: 'print(1)', timeout: {HUGE}}}\n"
    )
    res = runner.invoke(app, ["check", str(p)])
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    why = "must be a finite number, got an integer of 401 digits, beyond a double's range"
    assert f"{p}:6:14: tools[0].timeout: {why}" in res.output
    assert f"{p}:9:42: tools[1].sandbox.timeout: {why}" in res.output
    p.write_text(f"agentkit_bundle: 1\nname: b\ntools: []\nagent: {{max_steps: 1{'0' * 5000}}}\n")
    res = runner.invoke(app, ["check", str(p)])
    assert res.exit_code == 2, res.output
    assert f"{p}: YAML: a number has more than 4,300 digits, which Python does not read" in res.output


def test_a_sync_call_that_times_out_before_its_thread_starts_blames_no_thread_shortage(monkeypatch):
    # the tool threads are free (none held): a call not yet picked up when a tiny timeout ends is no sign of
    # hung calls; the note "all 64 ... threads are held" was added whatever the pool's state
    monkeypatch.setattr(
        tools_module, "run_sync_in_thread", lambda *a, **k: asyncio.get_running_loop().create_future()
    )

    @tool(timeout=0.05)
    def quick() -> str:
        return "now"

    result = Agent(ScriptedBackend([call("quick"), "done"]), [quick]).run("?")
    assert result.tool_calls[0].error == "tool 'quick' timed out after 0.05 s"


def test_from_bundle_refuses_a_backend_object_given_as_model(tmp_path):
    # Agent(model=...) takes a backend; from_bundle's model= is a name, and an object became the embedded
    # backend's checkpoint folder "<agentkit.backends.scripted.ScriptedBackend object at 0x...>"
    p = tmp_path / "b.yaml"
    p.write_text("agentkit_bundle: 1\nname: b\ntools: []\n")
    with pytest.raises(TypeError, match=r"got ScriptedBackend: pass a backend object as backend=$"):
        Agent.from_bundle(p, model=ScriptedBackend(["hi"]))
    with pytest.raises(TypeError, match=r"a name\), got int$"):
        Agent.from_bundle(p, backend="openai", model=5)
    assert Agent.from_bundle(p, backend=ScriptedBackend(["hi"])).run("q").answer == "hi"


ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", ["tools", "model"])
def test_a_users_module_named_like_an_agentkit_package_is_named_on_import(tmp_path, name):
    # a tools.py beside the user's script came first on sys.path: `from agentkit import Agent` failed with
    # "No module named 'tools.args'; 'tools' is not a package"
    (tmp_path / f"{name}.py").write_text("X = 1\n")
    (tmp_path / "main.py").write_text("from agentkit import Agent\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "main.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 1
    assert out.stderr.strip().endswith(
        f"ImportError: agentkit's package {name!r} is hidden by {tmp_path / name}.py, found first on sys.path "
        f"(the folder of the script you run, or the current folder with python -m): rename it, e.g. to my_{name}.py"
    )


def test_a_users_sandbox_or_evals_module_does_not_stop_import_agentkit(tmp_path):
    # agentkit loads its sandbox and evals packages only for sandbox tools and `agentkit eval`
    for name in ("sandbox", "evals"):
        (tmp_path / f"{name}.py").write_text("X = 1\n")
    (tmp_path / "main.py").write_text(
        "from agentkit import Agent\nimport sandbox\nprint(Agent.__name__, sandbox.X)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "main.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert (out.returncode, out.stdout) == (0, "Agent 1\n"), out.stderr


def test_a_bundle_helper_named_like_an_agentkit_package_is_refused_where_it_is_named(tmp_path):
    # importing it replaced agentkit's own `model` package: the embedded backend then failed at its first turn
    # with "No module named 'model.checkpoint'; 'model' is not a package"
    (tmp_path / "model.py").write_text("def shout(text: str) -> str:\n    return text.upper()\n")
    p = tmp_path / "b.yaml"
    p.write_text("agentkit_bundle: 1\nname: b\ntools:\n  - name: shout\n    python: model:shout\n")
    res = runner.invoke(app, ["check", str(p)])
    assert res.exit_code == 2, res.output
    assert (
        f"{p}:5:13: tools[0].python: cannot import 'model:shout': {tmp_path / 'model.py'} has the name of "
        "agentkit's own package 'model'; rename it, e.g. to my_model"
    ) in res.output.replace("\n  ", " ").replace("\n", "")
    assert sys.modules["model"].__file__ == str(ROOT / "model" / "__init__.py")


def test_run_prints_an_answer_and_tool_output_holding_lone_surrogates(tmp_path, tools_module):
    # a tool reading a file name that is not UTF-8 (os.listdir's surrogate escapes) or a server's "\ud800":
    # printing the panel or --json raised UnicodeEncodeError: surrogates not allowed
    mod = tools_module("nu_names", "def names() -> str:\n    return 'caf\\udce9.txt'\n")
    (tmp_path / "script.json").write_text(
        json.dumps([{"tool_calls": [{"name": "names", "arguments": {}}]}, "got \ud800 it"])
    )
    p = tmp_path / "b.yaml"
    p.write_text(
        "agentkit_bundle: 1\nname: b\nmodel: {backend: scripted, name: script.json}\n"
        f"tools:\n  - name: names\n    python: '{mod}:names'\n"
    )
    res = runner.invoke(app, ["run", str(p), "q"])
    assert res.exit_code == 0, res.output
    assert "← names" in res.output and ": caf\\udce9.txt" in res.output
    assert "│ got \\ud800 it" in res.output
    res = runner.invoke(app, ["run", str(p), "q", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["answer"] == "got \ud800 it" and out["steps"][0]["tool_calls"][0]["content"] == "caf\udce9.txt"


def test_check_says_what_a_name_url_or_device_must_look_like_not_the_regex(tmp_path):
    p = tmp_path / "b.yaml"
    p.write_text(
        "agentkit_bundle: 1\nname: my bot\nmodel: {device: gpu}\ntools:\n"
        "  - name: 1st\n    parameters: {type: object}\n    http: {url: 'localhost:8000/x'}\n"
    )
    res = runner.invoke(app, ["check", str(p)])
    assert res.exit_code == 2 and "does not match" not in res.output, res.output
    lines = [line.strip() for line in res.output.splitlines()]
    assert lines[1:] == [
        f"{p}:2:7: name: use letters, digits, '_', '.', '-' (at most 64, starting with a letter or digit), got "
        "'my bot'",
        f"{p}:3:17: model.device: must be 'cpu', 'cuda' or 'cuda:N', got 'gpu'",
        f"{p}:5:11: tools[0].name: use letters, digits, '_', '.', '-' (at most 64, starting with a letter or '_'), "
        "got '1st'",
        f"{p}:7:17: tools[0].http.url: must start with http:// or https:// (or a ${{ENV}} placeholder), got "
        "'localhost:8000/x'",
    ]


def test_an_empty_yaml_value_is_named_as_empty_not_as_pythons_none(tmp_path):
    p = tmp_path / "b.yaml"
    p.write_text("agentkit_bundle: 1\nname: b\nagent:\n  max_steps:\ntools:\n")
    res = runner.invoke(app, ["check", str(p)])
    assert res.exit_code == 2 and "None" not in res.output, res.output
    assert res.output.splitlines()[1:] == [
        f"  {p}:4:13: agent.max_steps: the value is empty (YAML reads it as null), expected an integer",
        f"  {p}:5:7: tools: the value is empty (YAML reads it as null), expected a list",
    ]


def test_an_http_tools_error_shows_its_url_without_user_password(tmp_path, monkeypatch):
    # the docs promise the query string is never echoed (keys); http://user:${KEY}@host/ echoed the key
    monkeypatch.setenv("NU_SECRET", "hunter2")
    p = tmp_path / "b.yaml"
    p.write_text(
        "agentkit_bundle: 1\nname: b\ntools:\n  - name: get\n    parameters: {type: object}\n"
        "    http: {url: 'https://bot:${NU_SECRET}@api.example/v1/x?key=${NU_SECRET}#top', retries: 0}\n"
    )
    client = httpx.Client(transport=httpx.MockTransport(lambda request: httpx.Response(503, text="busy")))
    agent = load_bundle(p, http_client=client).make_agent(ScriptedBackend([call("get"), "done"]))
    (record,) = agent.run("q").tool_calls
    assert record.error == "RuntimeError: GET https://api.example/v1/x: HTTP 503: busy (after 1 attempt(s))"


@pytest.mark.parametrize("command", ["run", "chat"])
def test_threads_with_a_backend_other_than_embedded_is_refused_not_ignored(tmp_path, command):
    (tmp_path / "script.json").write_text('["hi"]')
    p = tmp_path / "b.yaml"
    p.write_text("agentkit_bundle: 1\nname: b\nmodel: {backend: scripted, name: script.json}\ntools: []\n")
    args = [command, str(p), *(["q"] if command == "run" else []), "--threads", "2"]
    res = runner.invoke(app, args, input="hi\n")
    assert res.exit_code == 2, res.output
    assert f"{p}: --threads applies to the embedded backend only (backend is 'scripted')" in res.output
    assert runner.invoke(app, args[:-2], input="hi\n").exit_code == 0
