"""Sandbox behaviour against the real Docker engine: results, files, languages, pool, limits, CLI."""

from __future__ import annotations

import json
import threading
import time

import pytest
from typer.testing import CliRunner

from sandbox import ImageMissingError, Limits, Sandbox, SandboxClosedError, SandboxInputError

pytest_plugins = ["sandbox_fixtures"]
pytestmark = pytest.mark.docker


def test_run_returns_output_exit_code_and_uses_warm_pool(shared_sandbox):
    shared_sandbox.wait_ready(60)
    ex = shared_sandbox.run("import sys\nprint(6 * 7)\nprint('warn', file=sys.stderr)\nsys.exit(3)\n")
    assert ex.stdout == "42\n"
    assert ex.stderr == "warn\n"
    assert ex.exit_code == 3
    assert ex.warm is True
    assert not ex.timed_out and not ex.oom_killed and not ex.truncated
    assert 0 < ex.duration_s < 10
    ok = shared_sandbox.run("print('fine')")
    assert ok.ok and ok.to_dict()["stdout"] == "fine\n"
    json.dumps(ok.to_dict())


def test_syntax_error_and_unicode(shared_sandbox):
    ex = shared_sandbox.run("print('héllo ✓')\ndef (:\n")
    assert ex.exit_code == 1
    assert "SyntaxError" in ex.stderr and ex.stdout == ""  # parsed whole before running
    ex = shared_sandbox.run("print('héllo ✓')")
    assert ex.stdout == "héllo ✓\n"


def test_program_sees_a_normal_interpreter_exit(shared_sandbox):
    code = (
        "import atexit, sys, threading, time\n"
        "print(__name__, sys.argv, repr(sys.stdin.read()))\n"
        "atexit.register(lambda: print('atexit ran'))\n"
        "threading.Thread(target=lambda: (time.sleep(0.2), print('thread done'))).start()\n"
        "sys.exit(5)\n"
    )
    ex = shared_sandbox.run(code)
    assert ex.stdout == "__main__ ['-'] ''\nthread done\natexit ran\n"
    assert ex.exit_code == 5 and ex.stderr == ""


def test_exit_statuses_and_tracebacks(shared_sandbox):
    ex = shared_sandbox.run("import sys\nsys.exit('bad input')")
    assert (ex.exit_code, ex.stderr) == (1, "bad input\n")
    ex = shared_sandbox.run("def f(x):\n    return 1 / x\n\nf(0)\n")
    assert ex.exit_code == 1
    assert ex.stderr.startswith('Traceback (most recent call last):\n  File "<stdin>", line 4, in <module>\n')
    assert "    return 1 / x\n" in ex.stderr and ex.stderr.endswith("ZeroDivisionError: division by zero\n")
    assert "bootstrap" not in ex.stderr and "exec(" not in ex.stderr
    # Ending the interpreter directly: no completion marker, the status comes from the stopped container.
    ex = shared_sandbox.run("import os\nprint('bye', flush=True)\nos._exit(7)")
    assert (ex.exit_code, ex.stdout, ex.timed_out) == (7, "bye\n", False)
    ex = shared_sandbox.run("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)")
    assert ex.exit_code == 137 and not ex.oom_killed and not ex.timed_out


def test_oom_of_a_child_process_is_reported(shared_sandbox):
    code = (
        "import subprocess, sys\n"
        "r = subprocess.run([sys.executable, '-c', 's = b\"x\" * (600 << 20)'])\n"
        "print('child', r.returncode)\n"
    )
    ex = shared_sandbox.run(code, timeout=20)
    assert ex.stdout == "child -9\n" and ex.exit_code == 0
    assert ex.oom_killed is True


def test_files_in_and_out(shared_sandbox):
    files = {"helper.py": "BASE = 40\n", "data/in.txt": b"2\n", "keep.txt": "same"}
    code = (
        "import helper, os\n"
        "n = helper.BASE + int(open('data/in.txt').read())\n"
        "open('out.txt', 'w').write(str(n))\n"
        "os.makedirs('res', exist_ok=True)\n"
        "open('res/blob.bin', 'wb').write(bytes([0, 255, 1]))\n"
        "open('keep.txt', 'w').write('same')\n"  # rewritten with the same content: not returned
        "print(sorted(os.listdir('.')))\n"
    )
    ex = shared_sandbox.run(code, files=files, collect=["*"])
    assert ex.exit_code == 0, ex.stderr
    assert ex.stdout == "['data', 'helper.py', 'keep.txt', 'out.txt', 'res']\n"
    assert ex.files_out == {"out.txt": b"42", "res/blob.bin": bytes([0, 255, 1])}
    d = ex.to_dict()["files_out"]
    assert d["out.txt"] == {"encoding": "utf-8", "content": "42"}
    assert d["res/blob.bin"] == {"encoding": "base64", "content": "AP8B"}
    only = shared_sandbox.run("open('a.csv','w').write('1');open('b.txt','w').write('2')", collect=["*.csv"])
    assert only.files_out == {"a.csv": b"1"}


def test_bash_and_sh(shared_sandbox):
    ex = shared_sandbox.run('echo "$((6*7)) $(id -u) $PWD"; exit 4', language="bash")
    assert ex.stdout == "42 65534 /work\n" and ex.exit_code == 4
    ex = shared_sandbox.run("cat in.txt", language="sh", files={"in.txt": "hi"})
    assert ex.stdout == "hi"


def test_each_execution_gets_a_fresh_container(shared_sandbox):
    first = shared_sandbox.run(
        "open('/work/state','w').write('1'); open('/tmp/state','w').write('1'); print('ok')"
    )
    second = shared_sandbox.run(
        "import os; print(os.path.exists('/work/state'), os.path.exists('/tmp/state'))"
    )
    assert first.stdout == "ok\n"
    assert second.stdout == "False False\n"
    assert first.container_id != second.container_id


def test_containers_are_hardened(shared_sandbox, docker_client):
    shared_sandbox.wait_ready(60)
    ids = shared_sandbox.containers()
    assert ids
    hc = docker_client.api.inspect_container(ids[0])["HostConfig"]
    cfg = docker_client.api.inspect_container(ids[0])["Config"]
    lim = shared_sandbox.limits
    assert hc["NetworkMode"] == "none"
    assert hc["ReadonlyRootfs"] is True
    assert hc["CapDrop"] == ["ALL"] and not hc["CapAdd"]
    assert hc["SecurityOpt"] == ["no-new-privileges"]
    assert hc["Memory"] == hc["MemorySwap"] == lim.memory_bytes
    assert hc["PidsLimit"] == lim.pids
    assert hc["CpuQuota"] == int(lim.cpus * 100_000) and hc["CpuPeriod"] == 100_000
    assert hc["Init"] is True
    assert hc["Privileged"] is False
    assert set(hc["Tmpfs"]) == {"/work", "/tmp"}
    assert cfg["User"] == "65534:65534"
    assert cfg["Labels"]["agentkit.sandbox.session"] == shared_sandbox.session_id


def test_concurrent_runs(shared_sandbox):
    results: dict[int, str] = {}

    def go(i: int) -> None:
        results[i] = shared_sandbox.run(f"print({i} * 2)").stdout

    threads = [threading.Thread(target=go, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert results == {i: f"{i * 2}\n" for i in range(4)}


def test_custom_limits_use_a_cold_container_with_those_limits(shared_sandbox):
    lim = Limits(memory_bytes=128 * 1024 * 1024, pids=32, cpus=0.5)
    code = (
        "import os\n"
        "for p in ['/sys/fs/cgroup/memory.max', '/sys/fs/cgroup/memory/memory.limit_in_bytes']:\n"
        "    if os.path.exists(p): print(open(p).read().strip())\n"
    )
    ex = shared_sandbox.run(code, limits=lim)
    assert ex.warm is False
    assert ex.stdout == f"{128 * 1024 * 1024}\n"


def test_cold_sandbox_without_pool(docker_client, sandbox_image):
    with Sandbox(sandbox_image, pool_size=0, client=docker_client) as sb:
        ex = sb.run("print('cold')")
        assert ex.stdout == "cold\n" and ex.warm is False
        sid = sb.session_id
    label = {"label": f"agentkit.sandbox.session={sid}"}
    assert docker_client.containers.list(all=True, filters=label, ignore_removed=True) == []
    with pytest.raises(SandboxClosedError):
        sb.run("print(1)")


def test_bad_input_is_rejected(shared_sandbox):
    with pytest.raises(SandboxInputError, match="unknown language 'ruby'"):
        shared_sandbox.run("puts 1", language="ruby")
    with pytest.raises(SandboxInputError, match=r"\.\."):
        shared_sandbox.run("print(1)", files={"../escape.txt": "x"})
    with pytest.raises(SandboxInputError, match="timeout"):
        shared_sandbox.run("print(1)", timeout=0)
    with pytest.raises(SandboxInputError, match="collect"):
        shared_sandbox.run("print(1)", collect="*.txt")


def test_missing_image_says_how_to_build(docker_client):
    with pytest.raises(ImageMissingError, match="agentkit sandbox build-image"):
        Sandbox("agentkit-sandbox:does-not-exist", client=docker_client)


def test_cli_run_doctor_and_build_image(sandbox_image):
    from agentkit.cli import app

    runner = CliRunner()
    res = runner.invoke(app, ["sandbox", "run", "--json", "print(6*7)"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["stdout"] == "42\n" and data["exit_code"] == 0
    res = runner.invoke(app, ["sandbox", "run", "--timeout", "1", "while True: pass"])
    assert res.exit_code == 124
    res = runner.invoke(app, ["sandbox", "doctor", "--json"])
    assert res.exit_code == 0, res.output
    checks = {c["name"]: c for c in json.loads(res.stdout)}
    assert checks["engine"]["ok"] and checks["image"]["ok"] and checks["limits"]["ok"]
    assert sandbox_image in checks["image"]["detail"]
    t0 = time.monotonic()
    res = runner.invoke(app, ["sandbox", "build-image"])  # idempotent: present, nothing rebuilt
    assert res.exit_code == 0, res.output
    assert f"{sandbox_image} present" in res.stdout
    assert time.monotonic() - t0 < 10
