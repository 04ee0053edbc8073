"""Attacks on the sandbox, against the real Docker engine: each must be contained and reported in Execution."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import textwrap
import time

import docker
import docker.errors
import pytest

pytest_plugins = ["sandbox_fixtures"]
pytestmark = pytest.mark.docker


def _gone(client, cid: str) -> bool:
    try:
        client.containers.get(cid)
    except docker.errors.NotFound:
        return True
    return False


def _json_line(stdout: str) -> dict:
    return json.loads(stdout.strip().splitlines()[-1])


def test_infinite_loop_times_out_and_container_is_gone(shared_sandbox, docker_client):
    t0 = time.monotonic()
    ex = shared_sandbox.run("print('started', flush=True)\nwhile True:\n    pass\n", timeout=1.0)
    wall = time.monotonic() - t0
    assert ex.timed_out is True
    assert ex.exit_code == 137
    assert ex.stdout == "started\n"  # output before the timeout is kept
    assert 1.0 <= ex.duration_s < 3.0
    assert wall < 5.0
    assert _gone(docker_client, ex.container_id)  # the timeout killed and removed the container itself


def test_fork_bomb_is_contained_by_pids_limit(shared_sandbox, docker_client):
    # Count how many processes the bomb can make before fork fails: bounded by Limits.pids (64).
    counting = textwrap.dedent(
        """
        import os, time, json
        n, err = 0, None
        while n < 10000:
            try:
                pid = os.fork()
            except OSError as e:
                err = e.errno
                break
            if pid == 0:
                time.sleep(30)
                os._exit(0)
            n += 1
        print(json.dumps({"forks": n, "errno": err}))
        """
    )
    ex = shared_sandbox.run(counting, timeout=15)
    res = _json_line(ex.stdout)
    assert res["errno"] == 11  # EAGAIN: the pids cgroup refused the fork
    assert 10 <= res["forks"] < shared_sandbox.limits.pids
    # A real, unbounded bomb: ends by the timeout, the host keeps working, the container is gone.
    ex = shared_sandbox.run(
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n", timeout=2
    )
    assert ex.timed_out and ex.exit_code == 137
    assert _gone(docker_client, ex.container_id)
    assert subprocess.run(["true"], check=False).returncode == 0
    assert shared_sandbox.run("print('after')").stdout == "after\n"


def test_memory_hog_is_oom_killed(shared_sandbox):
    ex = shared_sandbox.run("s = b'x' * (600 << 20)\nprint('allocated', len(s))\n", timeout=20)
    assert ex.oom_killed is True
    assert ex.exit_code == 137
    assert ex.timed_out is False
    assert "allocated" not in ex.stdout


def test_writes_outside_the_work_dir_fail(shared_sandbox):
    code = textwrap.dedent(
        """
        import json, errno
        res = {}
        for p in ["/etc/evil", "/usr/bin/evil", "/evil", "/var/evil", "/root/evil", "/proc/sys/kernel/hostname",
                  "/work/ok.txt", "/tmp/ok.txt"]:
            try:
                with open(p, "w") as f:
                    f.write("x")
                res[p] = "written"
            except OSError as e:
                res[p] = errno.errorcode.get(e.errno, str(e.errno))
        print(json.dumps(res))
        """
    )
    ex = shared_sandbox.run(code)
    res = _json_line(ex.stdout)
    assert res.pop("/work/ok.txt") == "written"
    assert res.pop("/tmp/ok.txt") == "written"
    for path, outcome in res.items():
        assert outcome in ("EROFS", "EACCES", "EPERM"), (path, outcome)


def _host_ip() -> str:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect(("10.254.254.254", 1))  # UDP connect sends nothing; it picks the outgoing address
        return s.getsockname()[0]
    finally:
        s.close()


def test_network_to_host_and_outside_is_unreachable(shared_sandbox):
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("0.0.0.0", 0))
    server.listen(8)
    server.setblocking(False)
    port = server.getsockname()[1]
    host_ip = _host_ip()
    assert not host_ip.startswith("127.")
    code = textwrap.dedent(
        f"""
        import json, socket, errno
        res = {{}}
        for host, port in [("{host_ip}", {port}), ("1.1.1.1", 53), ("8.8.8.8", 443), ("127.0.0.1", {port})]:
            s = socket.socket()
            s.settimeout(3)
            try:
                s.connect((host, port))
                res[host] = "connected"
            except OSError as e:
                res[host] = errno.errorcode.get(e.errno, str(e))
        try:
            socket.getaddrinfo("deb.debian.org", 80)
            res["dns"] = "resolved"
        except OSError as e:
            res["dns"] = "failed"
        res["ifaces"] = sorted(n for _, n in socket.if_nameindex())
        print(json.dumps(res))
        """
    )
    try:
        ex = shared_sandbox.run(code, timeout=20)
        res = _json_line(ex.stdout)
        with pytest.raises(BlockingIOError):
            server.accept()  # nothing ever reached the host
    finally:
        server.close()
    assert res[host_ip] == "ENETUNREACH"
    assert res["1.1.1.1"] == "ENETUNREACH"
    assert res["8.8.8.8"] == "ENETUNREACH"
    assert res["127.0.0.1"] == "ECONNREFUSED"  # the container's own loopback, not the host's
    assert res["dns"] == "failed"
    assert res["ifaces"] == ["lo"]


def test_huge_output_is_capped_and_bad_utf8_is_replaced(shared_sandbox):
    cap = shared_sandbox.limits.output_bytes
    code = (
        "import sys\nsys.stdout.write('y' * 30_000_000)\nsys.stderr.buffer.write(b'bad \\xff\\xfe bytes')\n"
    )
    t0 = time.monotonic()
    ex = shared_sandbox.run(code, timeout=30)
    assert time.monotonic() - t0 < 15
    assert ex.exit_code == 0 and ex.truncated
    body, marker = ex.stdout.rsplit("\n[... truncated ", 1)
    assert body == "y" * cap
    assert marker == f"{30_000_000 - cap} bytes]\n"
    assert ex.stderr == "bad \ufffd\ufffd bytes"


def test_privilege_escalation_fails(shared_sandbox):
    code = textwrap.dedent(
        """
        import json, os, stat, subprocess
        res = {"uid": os.getuid(), "euid": os.geteuid(), "gid": os.getgid()}
        status = dict(l.split(":", 1) for l in open("/proc/self/status") if ":" in l)
        res["CapEff"] = status["CapEff"].strip()
        res["CapBnd"] = status["CapBnd"].strip()
        res["NoNewPrivs"] = status["NoNewPrivs"].strip()
        for name, fn in [("setuid", lambda: os.setuid(0)), ("chroot", lambda: os.chroot("/tmp")),
                         ("chown", lambda: os.chown("/work", 0, 0))]:
            try:
                fn()
                res[name] = "allowed"
            except OSError as e:
                res[name] = e.errno
        res["setuid_bits"] = sorted(p for p in ["/bin/su", "/usr/bin/passwd", "/bin/mount", "/usr/bin/newgrp"]
                                    if os.path.exists(p) and os.stat(p).st_mode & (stat.S_ISUID | stat.S_ISGID))
        r = subprocess.run(["su", "-c", "id -u", "root"], input=b"", capture_output=True)
        res["su"] = r.returncode
        r = subprocess.run(["mount", "-t", "tmpfs", "x", "/mnt"], capture_output=True)
        res["mount"] = r.returncode
        print(json.dumps(res))
        """
    )
    ex = shared_sandbox.run(code, timeout=20)
    res = _json_line(ex.stdout)
    assert res["uid"] == res["euid"] == res["gid"] == 65534
    assert res["CapEff"] == "0000000000000000"
    assert res["CapBnd"] == "0000000000000000"
    assert res["NoNewPrivs"] == "1"
    assert res["setuid"] == 1 and res["chroot"] == 1 and res["chown"] == 1  # EPERM
    assert res["setuid_bits"] == []
    assert res["su"] != 0
    assert res["mount"] != 0


def test_host_files_are_not_mounted(shared_sandbox, tmp_path):
    secret = tmp_path / "host-secret.txt"
    token = os.urandom(8).hex()
    secret.write_text(token)
    code = textwrap.dedent(
        f"""
        import json, os, socket
        res = {{}}
        for p in [{str(secret)!r}, "/var/run/docker.sock", "/run/docker.sock", "/work/main/pyproject.toml",
                  "/root/.bash_history", "/etc/shadow"]:
            try:
                res[p] = open(p).read()[:40]
            except OSError as e:
                res[p] = type(e).__name__
        res["pid1"] = open("/proc/1/cmdline").read().split("\\0")[0]
        res["hostname"] = socket.gethostname()
        res["mounts"] = sorted(l.split()[1] for l in open("/proc/mounts"))
        print(json.dumps(res))
        """
    )
    ex = shared_sandbox.run(code)
    res = _json_line(ex.stdout)
    assert token not in ex.stdout
    assert res[str(secret)] == "FileNotFoundError"
    assert res["/var/run/docker.sock"] == "FileNotFoundError"
    assert res["/run/docker.sock"] == "FileNotFoundError"
    assert res["/work/main/pyproject.toml"] == "FileNotFoundError"
    assert res["/etc/shadow"] == "PermissionError"
    assert res["/root/.bash_history"] in ("FileNotFoundError", "PermissionError")
    assert res["pid1"].endswith("docker-init")  # own PID namespace: the host's processes are not visible
    assert res["hostname"] != socket.gethostname()
    assert not [m for m in res["mounts"] if m.startswith(("/work/main", "/var/lib/docker", "/home", "/root"))]
