"""The ``python_exec`` tool: run a Python program in the hardened Docker sandbox and return what it printed.

:func:`python_exec` is a plain typed function (its arguments are described by :class:`PythonExecArgs`) that
returns a JSON-ready dict built from :class:`sandbox.Execution`; agentkit wraps it with its tool API, and YAML
bundles can point at it. Each call runs in a fresh, single-use container: no network, 256 MiB memory, 1 CPU,
64 processes, read-only root with a writable work dir, unprivileged user (see :mod:`sandbox`). Executions
share one process-wide :class:`sandbox.Sandbox` (warm pool of 1, started on first use); :func:`set_sandbox`
replaces it (tests, or a caller that owns its sandbox).
"""

from __future__ import annotations

import threading
from typing import Annotated, Any

from pydantic import Field

from sandbox import Sandbox
from tools.args import args_model

__all__ = ["MAX_CODE_CHARS", "MAX_TIMEOUT_S", "PythonExecArgs", "get_sandbox", "python_exec", "set_sandbox"]

MAX_CODE_CHARS = 100_000
MAX_TIMEOUT_S = 120.0

Code = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_CODE_CHARS,
        description="A complete Python 3.11 program (standard library only, no network). Use print() to show "
        "results: only stdout and stderr come back.",
    ),
]
Timeout = Annotated[
    float,
    Field(gt=0, le=MAX_TIMEOUT_S, description="Wall-clock limit in seconds (default 10, at most 120)."),
]


_lock = threading.Lock()
_sandbox: Sandbox | None = None


def get_sandbox() -> Sandbox:
    """The process-wide sandbox, started on first use (warm pool of 1).

    Raises :class:`sandbox.EngineUnavailableError` / :class:`sandbox.ImageMissingError` with how to fix them.
    """
    global _sandbox
    with _lock:
        if _sandbox is None:
            _sandbox = Sandbox(pool_size=1)
        return _sandbox


def set_sandbox(sandbox: Sandbox | None) -> None:
    """Use ``sandbox`` for later calls (``None``: start the default one on next use). The caller owns it."""
    global _sandbox
    with _lock:
        _sandbox = sandbox


def python_exec(code: Code, timeout_s: Timeout = 10.0) -> dict[str, Any]:
    """Run a Python program in an isolated sandbox and return its output.

    The program runs once in a fresh container (Python 3.11, standard library only, no network, 256 MiB
    memory, work dir /work). Print what you want to see.

    Args:
        code: the complete program text (1..100000 characters).
        timeout_s: wall-clock limit in seconds, in (0, 120]; the program is killed when it is reached.

    Returns:
        ``{"stdout", "stderr", "exit_code", "timed_out", "oom_killed", "truncated", "duration_s"}``: output
        as text (each stream capped at 64 KiB, marked ``[... truncated N bytes]``), the exit status (137 when
        killed), whether the time or memory limit ended it, and the run time in seconds.

    Raises:
        pydantic.ValidationError: bad arguments (empty or too long code, timeout out of range).
        sandbox.SandboxError: Docker or the sandbox image is unavailable (the message says how to fix it).
    """
    args = dict(PythonExecArgs(code=code, timeout_s=timeout_s))
    ex = get_sandbox().run(args["code"], language="python", timeout=args["timeout_s"])
    return {
        "stdout": ex.stdout,
        "stderr": ex.stderr,
        "exit_code": ex.exit_code,
        "timed_out": ex.timed_out,
        "oom_killed": ex.oom_killed,
        "truncated": ex.truncated,
        "duration_s": round(ex.duration_s, 3),
    }


PythonExecArgs = args_model(python_exec, "PythonExecArgs")
