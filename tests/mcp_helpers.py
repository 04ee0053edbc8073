"""Helpers of the MCP tests: the fixture server's path, starting it over HTTP, waiting for pids to go."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SERVER = str(FIXTURES / "mcp_fixture_server.py")
PY = sys.executable


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listens on {port}")


@contextlib.contextmanager
def http_process(args: list[str], port: int) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``args`` (a server listening on ``port``) until the block ends."""
    proc = subprocess.Popen(
        args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        wait_port(port, proc)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError):  # a zombie is dead
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
        return state != "Z"
    return True


def wait_gone(pid: int, timeout: float = 8.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return False


def embedded_test_backend(**settings: object) -> object:
    """The embedded default backend on one thread, seed 0 (``settings``: more backend keywords); skips, or fails
    in CI, when the shipped checkpoint is missing."""
    import pytest
    import torch

    from agentkit.backends import make_backend

    checkpoint = Path(__file__).resolve().parents[1] / "model" / "checkpoints" / "agentkit-tiny"
    if not (checkpoint / "config.json").is_file():
        msg = f"embedded default checkpoint missing at {checkpoint}"
        if os.environ.get("CI", "").strip().lower() in ("1", "true", "yes"):
            pytest.fail(msg)
        pytest.skip(msg)
    torch.set_num_threads(1)
    return make_backend("embedded", None, seed=0, threads=1, **settings)
