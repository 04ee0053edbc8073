"""MCP server processes: how a server command is found (:func:`interpreter`, :func:`command_not_found`), and their
parent-death guard, run by path (this module imports nothing of agentkit).

``python guard.py PARENT_PID COMMAND [ARGS...]`` runs COMMAND as its child, in the process group the stdio
client made for it (the guard is the group's leader), and exits with the child's status. When the agent's
process dies, even by SIGKILL, the guard is told (Linux ``prctl(PR_SET_PDEATHSIG)``; elsewhere a poll of the
parent pid every 0.2 s) and kills its whole group, so no server process outlives the agent.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

PR_SET_PDEATHSIG = 1


def interpreter(command: str) -> str:
    """``command``, except that ``python`` and ``python3`` mean agentkit's own interpreter."""
    return sys.executable if command in ("python", "python3") else command


def command_not_found(command: str) -> str:
    """Why ``command`` cannot be run: not found, or a file that is not executable (say how to run a script)."""
    if Path(command).is_file():
        how = f"python {command}" if command.endswith(".py") else f"INTERPRETER {command}"
        return f"command {command!r} is a file but not executable (run it with its interpreter: {how})"
    return f"command {command!r} not found"


def _kill_group(*_: object) -> None:
    os.killpg(os.getpgid(0), signal.SIGKILL)


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(0.2)
    _kill_group()


def main(argv: list[str]) -> int:
    """Run ``argv[1:]`` guarded against the death of process ``argv[0]``; returns its exit status."""
    parent = int(argv[0])
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, _kill_group)
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:  # the agent died before the guard was armed
        return 1
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    try:
        child = subprocess.Popen(argv[1:])
    except OSError as exc:
        print(f"agentkit mcp guard: cannot start {argv[1]!r}: {exc}", file=sys.stderr)
        return 127
    return child.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
