"""The ``python_exec`` tool: run a Python program in a fresh container of the hardened Docker sandbox (see
:mod:`sandbox`) and return what it printed. Calls share one process-wide :class:`sandbox.Sandbox` (warm pool
of 1, started on first use); :func:`set_sandbox` replaces it.
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
    """The process-wide sandbox, started on first use; :class:`sandbox.EngineUnavailableError` /
    :class:`sandbox.ImageMissingError` (saying how to fix them) when it cannot start."""
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
        ``{"stdout", "stderr", "exit_code", "timed_out", "oom_killed", "truncated", "duration_s"}`` of the
        :class:`sandbox.Execution` (each stream capped at 64 KiB; exit status 137 when killed).

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
