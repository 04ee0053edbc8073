"""Nothing left behind: cleanup on close/exceptions/atexit/SIGTERM/SIGINT, and reaping after SIGKILL."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from sandbox import Sandbox

pytest_plugins = ["sandbox_fixtures"]
pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[1]

# The child owns a warm pool of 2, says its session id, then runs a program that starts `sleep 120`
# (mid-run when killed).
# The child is a foreground program: Ctrl-C reaches it as KeyboardInterrupt. A shell that starts the test run in
# the background (``cmd &``) makes SIGINT ignored in every descendant, so the child restores Python's handler.
CHILD = textwrap.dedent(
    """
    import signal
    import sys
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from sandbox import Sandbox
    sb = Sandbox(pool_size=2)
    sb.wait_ready(60)
    print(sb.session_id, flush=True)
    if sys.argv[1] == "exit":
        print(sb.run("print('done')").stdout, end="", flush=True)
        sys.exit(0)  # no close(): atexit must clean up
    sb.run("import subprocess; subprocess.run(['sleep', '120'])", timeout=300)
    """
)


def _session_containers(client, sid: str) -> list:
    # ignore_removed: a container removed between the listing and its inspection is gone, not a 404
    label = {"label": f"agentkit.sandbox.session={sid}"}
    return client.containers.list(all=True, filters=label, ignore_removed=True)


@pytest.fixture
def children():
    """Popen objects of child processes; any still running at the end of the test is killed."""
    procs: list[subprocess.Popen] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait(30)


def _start_child(mode: str, children: list) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, mode],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    children.append(proc)
    assert proc.stdout is not None
    sid = proc.stdout.readline().strip()
    if not sid:
        proc.kill()
        raise AssertionError(f"child failed: {proc.communicate()[1]}")
    return proc, sid


def _wait_mid_run(client, sid: str, timeout_s: float = 30.0) -> list:
    """Wait until the child's program runs in one container and the pool is refilled (3 running containers)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        cs = _session_containers(client, sid)
        running = [c for c in cs if c.status == "running"]
        if len(running) == 3 and len(cs) == 3:
            busy = [c for c in running if any("sleep 120" in " ".join(p) for p in c.top()["Processes"])]
            if busy:
                return cs
        time.sleep(0.1)
    raise AssertionError(f"child never reached mid-run: {_session_containers(client, sid)}")


def test_sigkill_leaves_containers_that_the_next_start_reaps(
    docker_client, sandbox_image, shared_sandbox, children
):
    proc, sid = _start_child("run", children)
    left = _wait_mid_run(docker_client, sid)
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    assert proc.returncode == -signal.SIGKILL
    # The measured pitfall: killing the client leaves its containers (and the running program) behind.
    time.sleep(0.5)
    assert sorted(c.id for c in _session_containers(docker_client, sid)) == sorted(c.id for c in left)
    mine = set(shared_sandbox.containers())
    with Sandbox(sandbox_image, pool_size=0, client=docker_client) as sb:
        assert set(sb.reaped) >= {c.id for c in left}
    assert _session_containers(docker_client, sid) == []
    assert mine and mine <= set(shared_sandbox.containers())  # a live owner's containers are kept
    assert shared_sandbox.run("print('still fine')").stdout == "still fine\n"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_mid_run_removes_everything(docker_client, sandbox_image, sig, children):
    proc, sid = _start_child("run", children)
    _wait_mid_run(docker_client, sid)
    t0 = time.monotonic()
    proc.send_signal(sig)
    proc.wait(60)
    assert time.monotonic() - t0 < 30
    assert proc.returncode != 0
    assert _session_containers(docker_client, sid) == []


def test_normal_exit_without_close_cleans_up(docker_client, sandbox_image, children):
    proc, sid = _start_child("exit", children)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out == "done\n"
    assert _session_containers(docker_client, sid) == []


def test_exception_in_with_block_cleans_up(docker_client, sandbox_image):
    with (
        pytest.raises(RuntimeError, match="boom"),
        Sandbox(sandbox_image, pool_size=1, client=docker_client) as sb,
    ):
        sid = sb.session_id
        sb.wait_ready(60)
        assert len(_session_containers(docker_client, sid)) == 1
        raise RuntimeError("boom")
    assert _session_containers(docker_client, sid) == []


def test_reaper_ignores_live_owners(docker_client, sandbox_image):
    with Sandbox(sandbox_image, pool_size=1, client=docker_client) as a:
        a.wait_ready(60)
        ids = a.containers()
        with Sandbox(sandbox_image, pool_size=0, client=docker_client) as b:
            assert not set(b.reaped) & set(ids)
        assert a.containers() == ids
