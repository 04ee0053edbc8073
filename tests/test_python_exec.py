"""The python_exec tool: argument model and schema offline, execution against the real Docker engine."""

from __future__ import annotations

import inspect
import json

import pytest
from pydantic import ValidationError

from tools import python_exec as pe

pytest_plugins = ["sandbox_fixtures"]


def test_args_model_schema_and_signature():
    schema = pe.PythonExecArgs.model_json_schema()
    assert schema["required"] == ["code"]
    assert schema["properties"]["timeout_s"]["default"] == 10.0
    assert schema["properties"]["timeout_s"]["maximum"] == pe.MAX_TIMEOUT_S
    assert schema["properties"]["code"]["maxLength"] == pe.MAX_CODE_CHARS
    assert schema["additionalProperties"] is False
    params = inspect.signature(pe.python_exec).parameters
    assert list(params) == ["code", "timeout_s"] and params["timeout_s"].default == 10.0
    assert pe.python_exec.__doc__ and "Returns" in pe.python_exec.__doc__


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"code": ""}, "code"),
        ({"code": "x", "timeout_s": 0}, "timeout_s"),
        ({"code": "x", "timeout_s": 500}, "timeout_s"),
    ],
)
def test_bad_arguments_are_rejected_before_running(kwargs, field):
    pe.set_sandbox(None)
    with pytest.raises(ValidationError) as info:
        pe.python_exec(**kwargs)
    assert info.value.errors()[0]["loc"] == (field,)
    assert pe._sandbox is None  # nothing was started


@pytest.fixture
def tool_sandbox(shared_sandbox):
    pe.set_sandbox(shared_sandbox)
    yield shared_sandbox
    pe.set_sandbox(None)


@pytest.mark.docker
def test_python_exec_runs_in_the_sandbox(tool_sandbox):
    out = pe.python_exec("import statistics, os\nprint(statistics.mean([1, 2, 3, 6]), os.getuid())")
    assert out["stdout"] == "3 65534\n"
    assert out["exit_code"] == 0 and out["timed_out"] is False and out["oom_killed"] is False
    assert json.loads(json.dumps(out)) == out
    assert set(out) == {"stdout", "stderr", "exit_code", "timed_out", "oom_killed", "truncated", "duration_s"}


@pytest.mark.docker
def test_python_exec_reports_errors_and_timeouts(tool_sandbox):
    out = pe.python_exec("raise ValueError('nope')")
    assert out["exit_code"] == 1 and out["stderr"].rstrip().endswith("ValueError: nope")
    out = pe.python_exec("import time\ntime.sleep(30)", timeout_s=1)
    assert out["timed_out"] is True and out["exit_code"] == 137
    assert 1.0 <= out["duration_s"] < 3
