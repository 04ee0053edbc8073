"""Sandbox pieces that need no Docker engine: limits, output capping, payloads, exec stream protocol, pool,
ownership labels, mirror discovery, image recipe, connection errors."""

from __future__ import annotations

import io
import json
import os
import re
import socket
import struct
import subprocess
import sys
import tarfile
import threading
import time
from types import SimpleNamespace

import docker.errors
import pytest

from sandbox import (
    EngineUnavailableError,
    Execution,
    ImageBuildError,
    Limits,
    SandboxInputError,
    engine,
    image,
    parse_size,
)
from sandbox.core import _payload
from sandbox.execio import cap_text, exec_with_stdin
from sandbox.pool import WarmPool

# ------------------------------------------------------------------------------------------- limits


def test_parse_size():
    assert parse_size(123) == 123
    assert parse_size("256m") == 256 * 1024 * 1024
    assert parse_size("1.5g") == int(1.5 * 1024**3)
    assert parse_size("64MiB") == 64 * 1024 * 1024
    assert parse_size("10k") == 10240
    with pytest.raises(SandboxInputError, match="memory: cannot parse 'lots'"):
        parse_size("lots", what="memory")
    with pytest.raises(SandboxInputError, match=">= 0"):
        parse_size(-1)


def test_limits_validation():
    lim = Limits()
    assert (lim.memory_bytes, lim.pids, lim.cpus, lim.runtime) == (256 * 1024 * 1024, 64, 1.0, None)
    with pytest.raises(SandboxInputError, match=r"Limits\.pids=2 out of range"):
        Limits(pids=2)
    with pytest.raises(SandboxInputError, match=r"Limits\.memory_bytes"):
        Limits(memory_bytes=1024)
    with pytest.raises(SandboxInputError, match="runsc needs pids >= 1024"):
        Limits(runtime="runsc")
    assert Limits(runtime="runsc", pids=1024).runtime == "runsc"
    with pytest.raises(SandboxInputError, match="not a runtime name"):
        Limits(runtime="runc; rm -rf /")
    lim = Limits.from_options(memory="512m", cpus=2, pids=128)
    assert (lim.memory_bytes, lim.cpus, lim.pids) == (512 * 1024 * 1024, 2, 128)
    assert isinstance(ValueError(), Exception) and issubclass(SandboxInputError, ValueError)


# --------------------------------------------------------------------------------------- output caps


def test_cap_text_keeps_short_output():
    assert cap_text(b"hello\n", 6) == ("hello\n", False)
    assert cap_text(b"bad \xff", 5) == ("bad \ufffd", False)


def test_cap_text_marks_truncation_and_respects_utf8_boundaries():
    text, cut = cap_text(b"abcdef", 100)
    assert cut and text == "abcdef\n[... truncated 94 bytes]\n"
    # "é" is c3 a9: a cap that ends after c3 drops the partial character instead of printing U+FFFD.
    text, cut = cap_text(b"ab\xc3", 10)
    assert cut and text == "ab\n[... truncated 8 bytes]\n"
    # "✓" is e2 9c 93: cut after two of its bytes.
    text, _ = cap_text(b"x\xe2\x9c", 9)
    assert text == "x\n[... truncated 8 bytes]\n"
    # A complete character right at the cut stays.
    text, _ = cap_text("é".encode(), 5)
    assert text == "é\n[... truncated 3 bytes]\n"


# ------------------------------------------------------------------------------------------ payload


def test_payload_layout_and_name_checks():
    data, inputs = _payload("print(1)", "python", {"a.txt": "x", "d/b.bin": b"\x00\x01"}, "ab12", False)
    head, _, body = data.partition(b"\n")
    assert json.loads(head) == {"nonce": "ab12", "language": "python", "ext": "py", "keep_alive": False}
    with tarfile.open(fileobj=io.BytesIO(body)) as tar:
        names = {m.name: tar.extractfile(m).read() for m in tar}
    assert names == {"code/main.py": b"print(1)", "work/a.txt": b"x", "work/d/b.bin": b"\x00\x01"}
    assert inputs == {"a.txt": b"x", "d/b.bin": b"\x00\x01"}
    assert json.loads(_payload("echo", "bash", None, "n", True)[0].partition(b"\n")[0])["ext"] == "sh"
    for bad in ["../x", "/etc/passwd", "", "a/../../x", "."]:
        with pytest.raises(SandboxInputError, match="files"):
            _payload("", "python", {bad: "x"}, "n", False)
    with pytest.raises(SandboxInputError, match="expected bytes or str"):
        _payload("", "python", {"a": 3}, "n", False)  # type: ignore[dict-item]


def test_bootstrap_protocol_on_the_host_interpreter(tmp_path):
    """The container's bootstrap, run here by this Python: job in, output + completion markers out."""
    src = engine.BOOTSTRAP_COMMAND[4]
    work, code_dir = tmp_path / "work", tmp_path / "code"
    work.mkdir()
    code_dir.mkdir()
    job, _ = _payload(
        "import sys\nprint(open('in/x.txt').read(), end='')\nprint('err', file=sys.stderr)\nsys.exit(3)\n",
        "python",
        {"in/x.txt": "data"},
        "feed",
        False,
    )
    r = subprocess.run(
        [sys.executable, "-B", "-s", "-c", src, str(work), str(code_dir)],
        input=job,
        capture_output=True,
        timeout=60,
    )
    assert r.returncode == 3
    assert r.stdout == b"data\x00AK:feed:end\x00"
    assert r.stderr == b"err\n\x00AK:feed:003:0\x00"
    assert (work / "in/x.txt").read_text() == "data"
    job, _ = _payload("echo $((1+2)); exit 4", "sh", None, "beef", False)
    r = subprocess.run(
        [sys.executable, "-c", src, str(work), str(code_dir)], input=job, capture_output=True, timeout=60
    )
    assert (r.returncode, r.stdout, r.stderr) == (4, b"3\n\x00AK:beef:end\x00", b"\x00AK:beef:004:0\x00")


def test_exec_stream_stops_at_completion_markers_and_strips_them():
    from sandbox.execio import Markers, pump

    frames = [(1, b"hello"), (2, b"warn\x00AK:n1:007:1\x00"), (1, b"\x00AK:n1:end\x00")]
    api = FakeExecAPI(frames, hang=True)  # the connection stays open: only the markers can end the read
    markers = Markers(b"\x00AK:n1:end\x00", re.compile(rb"\x00AK:n1:(\d{3}):([01])\x00$"), 14)
    t0 = time.monotonic()
    res = pump(
        api.exec_start("x", socket=True),
        b"job",
        deadline=time.monotonic() + 4,
        output_cap=3,
        on_timeout=lambda: None,
        markers=markers,
    )
    assert time.monotonic() - t0 < 2
    assert res.how == "marker" and res.marker.group(1) == b"007" and res.marker.group(2) == b"1"
    assert (res.stdout, res.stdout_total, res.stderr, res.stderr_total) == (b"hel", 5, b"war", 4)


def test_execution_to_dict_is_json():
    ex = Execution("o", "e", 0, duration_s=0.123456, files_out={"t.txt": b"hi", "b.bin": b"\xff"})
    d = json.loads(json.dumps(ex.to_dict()))
    assert d["files_out"] == {
        "t.txt": {"encoding": "utf-8", "content": "hi"},
        "b.bin": {"encoding": "base64", "content": "/w=="},
    }
    assert d["duration_s"] == 0.1235 and ex.ok
    assert not Execution("", "", 0, timed_out=True).ok


# ------------------------------------------------------------------------------- exec stream protocol


class FakeExecAPI:
    """Plays the engine's side of a hijacked exec over a socketpair: reads stdin to EOF, then answers."""

    def __init__(self, frames: list[tuple[int, bytes]], exit_code: int = 0, hang: bool = False):
        self.frames, self.exit_code, self.hang = frames, exit_code, hang
        self.stdin = b""
        self.created: dict = {}

    def exec_create(self, cid, cmd, **kw):
        self.created = {"cid": cid, "cmd": cmd, **kw}
        return {"Id": "exec1"}

    def exec_start(self, exec_id, socket=False):
        ours, theirs = _socketpair()

        def engine_side():
            buf = b""
            while chunk := theirs.recv(65536):
                buf += chunk
            self.stdin = buf
            for kind, body in self.frames:
                theirs.sendall(struct.pack(">BxxxI", kind, len(body)) + body)
            if self.hang:
                time.sleep(5)
            theirs.close()

        threading.Thread(target=engine_side, daemon=True).start()
        return ours

    def exec_inspect(self, exec_id):
        return {"Running": False, "ExitCode": self.exit_code}


def _socketpair():
    return socket.socketpair()


def test_exec_stream_demultiplexes_caps_and_sends_stdin():
    frames = [(1, b"out1 "), (2, b"err"), (1, b"out2"), (1, b"x" * 100)]
    api = FakeExecAPI(frames, exit_code=3)
    timeouts = []
    out = exec_with_stdin(
        api,
        "cid",
        ["python3", "-"],
        b"print(1)",
        deadline=time.monotonic() + 5,
        output_cap=12,
        on_timeout=lambda: timeouts.append(1),
        workdir="/work",
    )
    assert api.stdin == b"print(1)"
    assert api.created["cmd"] == ["python3", "-"] and api.created["stdin"] is True
    assert out.stdout == b"out1 out2xxx" and out.stdout_total == 109
    assert out.stderr == b"err" and out.stderr_total == 3
    assert out.how == "eof" and out.exit_code == 3 and timeouts == []


def test_exec_stream_deadline_calls_on_timeout():
    api = FakeExecAPI([(1, b"partial")], hang=True)
    timeouts = []
    t0 = time.monotonic()
    out = exec_with_stdin(
        api,
        "cid",
        ["x"],
        b"",
        deadline=time.monotonic() + 0.3,
        output_cap=100,
        on_timeout=lambda: timeouts.append(1),
    )
    assert 0.3 <= time.monotonic() - t0 < 2
    assert out.how == "timeout" and out.exit_code is None
    assert out.stdout == b"partial" and timeouts == [1]


# ------------------------------------------------------------------------------------------- pool


def test_pool_fills_hands_out_and_closes():
    created, destroyed = [], []
    lock = threading.Lock()

    def create():
        time.sleep(0.02)
        with lock:
            created.append(f"c{len(created)}")
            return created[-1]

    pool = WarmPool(create, destroyed.extend, size=2)
    assert pool.wait_full(5)
    assert pool.acquire() == "c0"
    assert pool.acquire() == "c1"
    # Empty, but the refiller is creating c2: the first caller waits for it, a second one would not.
    assert pool.acquire(wait_s=5) == "c2"
    assert pool.wait_full(5)
    left = pool.close()
    assert sorted(left) == ["c3", "c4"]
    assert pool.acquire() is None
    assert len(created) == 5 and destroyed == []


def test_pool_does_not_make_callers_queue_behind_one_creation():
    gate = threading.Event()

    def create():
        gate.wait(5)
        return "slow"

    pool = WarmPool(create, lambda ids: None, size=1)
    time.sleep(0.05)
    got = []
    t = threading.Thread(target=lambda: got.append(pool.acquire(wait_s=5)))
    t.start()
    time.sleep(0.05)
    t0 = time.monotonic()
    assert pool.acquire(wait_s=5) is None  # one creation in flight, one waiter already: create your own
    assert time.monotonic() - t0 < 0.5
    gate.set()
    t.join(5)
    assert got == ["slow"]
    pool.close()


def test_pool_records_errors_and_destroys_what_it_made_after_close():
    calls = {"n": 0}
    destroyed: list[str] = []
    release = threading.Event()

    def create():
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("engine down")
        release.wait(5)
        return "late"

    pool = WarmPool(create, destroyed.extend, size=1)
    deadline = time.monotonic() + 5
    while pool.error is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert isinstance(pool.error, RuntimeError)
    while calls["n"] < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    threading.Timer(0.1, release.set).start()
    assert pool.close(join_s=5) == []
    assert destroyed == ["late"]  # finished creating after close: removed, not leaked
    with pytest.raises(ValueError):
        WarmPool(create, destroyed.extend, size=0)


# ------------------------------------------------------------------------------ ownership and reaping


def test_owner_labels_and_liveness():
    labels = engine.owner_labels("abc")
    assert labels[engine.LABEL_SESSION] == "abc" and labels[engine.LABEL_OWNER_PID] == str(os.getpid())
    assert engine.owner_alive(labels)
    # A recycled pid (same number, other start time) is not the owner.
    assert not engine.owner_alive({**labels, engine.LABEL_OWNER_START: "1"})
    # Another host's containers cannot be judged from here: kept.
    assert engine.owner_alive({**labels, engine.LABEL_HOST: "elsewhere", engine.LABEL_OWNER_PID: "999999999"})
    assert not engine.owner_alive({**labels, engine.LABEL_OWNER_PID: "garbage"})


def test_dead_and_zombie_processes_are_not_alive():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 10
    while engine.process_start_ticks(proc.pid) is not None and time.monotonic() < deadline:
        time.sleep(0.01)  # exited but not waited for: a zombie counts as dead
    assert engine.process_start_ticks(proc.pid) is None
    proc.wait()
    labels = {**engine.owner_labels("s"), engine.LABEL_OWNER_PID: str(proc.pid)}
    assert not engine.owner_alive(labels)
    assert isinstance(engine.process_start_ticks(os.getpid()), int)


def test_container_kwargs_are_hardened():
    kw = engine.container_kwargs("img", Limits(), {"l": "1"})
    assert kw["network_mode"] == "none"
    assert kw["mem_limit"] == kw["memswap_limit"] == 256 * 1024 * 1024
    assert kw["pids_limit"] == 64 and kw["cpu_quota"] == 100_000
    assert kw["read_only"] is True and kw["cap_drop"] == ["ALL"]
    assert kw["security_opt"] == ["no-new-privileges"] and kw["user"] == "65534:65534" and kw["init"] is True
    assert set(kw["tmpfs"]) == {"/work", "/tmp"} and "noexec" in kw["tmpfs"]["/work"]
    assert "runtime" not in kw
    assert engine.container_kwargs("img", Limits(runtime="runsc", pids=2048), {})["runtime"] == "runsc"


def test_connect_error_says_how_to_fix(monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no.sock")
    with pytest.raises(EngineUnavailableError, match=r"scripts/services\.sh"):
        engine.connect(timeout_s=2)


# ------------------------------------------------------------------------------------ image recipe


def test_recipe_hash_is_stable_and_sensitive(monkeypatch):
    h = image.recipe_hash()
    assert len(h) == 12 and int(h, 16) >= 0
    assert image.recipe_hash(dict(image.RECIPE)) == h
    assert image.recipe_hash({**image.RECIPE, "include": ["python3", "curl"]}) != h
    monkeypatch.delenv(image.IMAGE_ENV, raising=False)
    assert image.default_image() == f"agentkit-sandbox:{h}"
    monkeypatch.setenv(image.IMAGE_ENV, "mine:1")
    assert image.default_image() == "mine:1"


def test_find_debian_mirror(tmp_path, monkeypatch):
    monkeypatch.delenv(image.MIRROR_ENV, raising=False)
    d = tmp_path / "sources.list.d"
    d.mkdir()
    (d / "debian.sources").write_text(
        "Types: deb\n# comment\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n"
        "Components: main\n\nTypes: deb-src\nURIs: http://src.example/debian\nSuites: bookworm\n\n"
        "Types: deb\nURIs: http://mirror.example/debian/\nSuites: bookworm bookworm-updates\nComponents: main\n"
    )
    assert image.find_debian_mirror("bookworm", tmp_path) == "http://mirror.example/debian"
    (d / "debian.sources").unlink()
    (tmp_path / "sources.list").write_text(
        "# x\ndeb [arch=amd64 signed-by=/k.gpg] http://old.example/debian bookworm main\n"
    )
    assert image.find_debian_mirror("bookworm", tmp_path) == "http://old.example/debian"
    with pytest.raises(ImageBuildError, match="AGENTKIT_SANDBOX_MIRROR"):
        image.find_debian_mirror("trixie", tmp_path)
    monkeypatch.setenv(image.MIRROR_ENV, "http://override/debian")
    assert image.find_debian_mirror("trixie", tmp_path) == "http://override/debian"


class _FakeImages:
    def __init__(self, present: bool):
        self.present = present

    def get(self, ref):
        if not self.present:
            raise docker.errors.ImageNotFound(ref)
        return SimpleNamespace(attrs={"Size": 1})


def test_build_image_is_idempotent_and_explains_missing_tools(monkeypatch):
    logs: list[str] = []
    client = SimpleNamespace(images=_FakeImages(True))
    assert image.build_image(client, log=logs.append) == (f"agentkit-sandbox:{image.recipe_hash()}", False)
    assert "already present" in logs[0]
    monkeypatch.setattr(image.shutil, "which", lambda name: None)
    monkeypatch.setattr(image.os, "geteuid", lambda: 0)
    with pytest.raises(ImageBuildError, match=r"debootstrap not found.*apt-get install"):
        image.build_image(SimpleNamespace(images=_FakeImages(False)), log=logs.append)
    monkeypatch.setattr(image.os, "geteuid", lambda: 1000)
    with pytest.raises(ImageBuildError, match="needs root"):
        image.build_image(SimpleNamespace(images=_FakeImages(False)), log=logs.append)


def test_trim_strips_setuid_and_prepares_work_dir(tmp_path):
    root = tmp_path / "rootfs"
    (root / "usr/share/doc/pkg").mkdir(parents=True)
    (root / "usr/share/doc/pkg/README").write_text("x")
    (root / "usr/bin").mkdir(parents=True)
    su = root / "usr/bin/su"
    su.write_text("#!/bin/sh\n")
    os.chmod(su, 0o4755)
    (root / "usr/bin/python3").write_text("")
    image._trim(root, image.RECIPE)
    assert list((root / "usr/share/doc").iterdir()) == []
    assert su.stat().st_mode & 0o7777 == 0o755
    assert (root / "work").stat().st_mode & 0o7777 == 0o1777
    assert os.readlink(root / "usr/bin/python") == "python3"


def test_cli_names_an_unknown_language_before_reaching_the_engine(tmp_path, monkeypatch):
    # `agentkit sandbox run -l ruby ...` said only that the Docker engine was unreachable (or, with one, left
    # the language to Sandbox.run after starting a container)
    from typer.testing import CliRunner

    from agentkit.cli import app

    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    res = CliRunner().invoke(app, ["sandbox", "run", "--language", "ruby", "puts 1"])
    assert res.exit_code == 2, res.output
    assert "'ruby' is not one of 'python', 'bash', 'sh'" in re.sub(r"[│\s]+", " ", res.output), res.output
    assert "Docker engine" not in res.output
