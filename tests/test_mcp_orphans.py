"""No MCP server process outlives the agent: normal exit, an exception, SIGINT and SIGKILL of its process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mcp_helpers import FIXTURES, alive, wait_gone

ROOT = Path(__file__).resolve().parents[1]
AGENT = str(FIXTURES / "mcp_agent_proc.py")


def start(tmp_path: Path, mode: str) -> tuple[subprocess.Popen[str], Path]:
    pidfile = tmp_path / "server.pid"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, AGENT, str(pidfile), mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    return proc, pidfile


def server_pids(pidfile: Path) -> tuple[int, int]:
    """The server's pid and its parent's (the guard)."""
    pid = int(pidfile.read_text())
    ppid = int(Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[2])
    return pid, ppid


@pytest.mark.parametrize("mode", ["normal", "raise"])
def test_exit_and_exception_stop_the_server(tmp_path, mode):
    proc, pidfile = start(tmp_path, mode)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready three"
    pid, guard = server_pids(pidfile)
    _out, err = proc.communicate(timeout=15)
    assert proc.returncode == (0 if mode == "normal" else 1), err
    assert wait_gone(pid, 5) and wait_gone(guard, 5)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_signals_to_the_agent_stop_the_server(tmp_path, sig):
    proc, pidfile = start(tmp_path, "wait")
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready three"
    pid, guard = server_pids(pidfile)
    assert alive(pid) and alive(guard)
    t0 = time.monotonic()
    proc.send_signal(sig)
    proc.wait(15)
    assert wait_gone(pid, 6), f"server {pid} outlived the agent ({sig!r})"
    assert wait_gone(guard, 2)
    assert time.monotonic() - t0 < 8
