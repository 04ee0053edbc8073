"""The program a sandbox container starts with: a Python interpreter that waits for one job on stdin.

It runs in the container as ``python3 -B -s -c <this file's source> WORKDIR CODEDIR`` (standard library only),
so a warm container's interpreter has started before any code arrives. The host attaches, writes the job and
closes stdin:

- job = one JSON header line ``{"nonce": hex, "language": "python"|"bash"|"sh", "ext": str,
  "keep_alive": bool}`` then a tar whose members are ``code/main.EXT`` and ``work/<input files>``;
- the files are written under CODEDIR and WORKDIR, the current directory becomes WORKDIR;
- Python programs run in this interpreter as a fresh ``__main__`` (source ``<stdin>``), then what interpreter
  exit does (join threads, atexit, flush), with CPython's exit statuses; shell programs as a child process;
- then a completion marker ends each stream (Docker does not order the two): ``\\0AK:<nonce>:end\\0`` on stdout,
  ``\\0AK:<nonce>:<status, 3 digits>:<1 if the OOM killer fired else 0>\\0`` on stderr, so the host need not
  wait for the container to stop; then it exits (with ``keep_alive``, waits to be killed while the host copies
  files out). A program that ends the interpreter itself writes no marker: the host asks the engine.
"""

from __future__ import annotations

import atexit
import builtins
import contextlib
import io
import json
import linecache
import os
import signal
import subprocess
import sys
import tarfile
import threading
import traceback
import types

OOM_FILES = ("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control")


def _oom_kills() -> int:
    """The container memory cgroup's ``oom_kill`` counter (cgroup v2 or v1), 0 if unreadable."""
    for path in OOM_FILES:
        try:
            with open(path) as f:
                for line in f:
                    key, _, val = line.partition(" ")
                    if key == "oom_kill":
                        return int(val)
        except (OSError, ValueError):
            continue
    return 0


def _unpack(body: bytes, work: str, code_dir: str) -> None:
    roots = {"work": work, "code": code_dir}
    with tarfile.open(fileobj=io.BytesIO(body)) as tar:
        for member in tar:
            top, _, rel = member.name.partition("/")
            parts = rel.split("/")
            if not member.isfile() or top not in roots or not rel or ".." in parts or rel.startswith("/"):
                continue
            dest = os.path.join(roots[top], *parts)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            src = tar.extractfile(member)
            with open(dest, "wb") as f:
                f.write(src.read() if src is not None else b"")


def _exit_status(exc: SystemExit) -> int:
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    with contextlib.suppress(Exception):
        print(code, file=sys.stderr)
    return 1


def _run_python(path: str) -> int:
    with open(path, "rb") as f:
        src = f.read()
    text = src.decode("utf-8", errors="replace")
    linecache.cache["<stdin>"] = (len(text), None, text.splitlines(True), "<stdin>")
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = main
    sys.argv[:] = ["-"]
    status = 0
    try:
        exec(compile(src, "<stdin>", "exec"), main.__dict__)
    except SystemExit as exc:
        status = _exit_status(exc)
    except BaseException as exc:
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename != "<stdin>":
            tb = tb.tb_next  # hide this bootstrap's frames, as if the program were the main script
        traceback.print_exception(type(exc), exc, tb)
        status = 1
    # What interpreter exit would do next: join non-daemon threads, run atexit functions.
    with contextlib.suppress(BaseException):
        threading._shutdown()  # type: ignore[attr-defined]
    with contextlib.suppress(BaseException):
        atexit._run_exitfuncs()
    return status


def _run_process(argv: list[str]) -> int:
    rc = subprocess.run(argv, stdin=subprocess.DEVNULL, check=False).returncode
    return 128 - rc if rc < 0 else rc


def main() -> None:
    """Read one job from stdin, run it, write the completion markers, exit (see the module docstring)."""
    work, code_dir = sys.argv[1], sys.argv[2]
    data = sys.stdin.buffer.read()
    head, _, body = data.partition(b"\n")
    job = json.loads(head)
    nonce = str(job["nonce"]).encode("ascii")
    _unpack(body, work, code_dir)
    del data, body
    os.chdir(work)
    path = os.path.join(code_dir, f"main.{job['ext']}")
    if job["language"] == "python":
        status = _run_python(path)
    else:
        status = _run_process([job["language"], path])
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        if stream is not None:
            with contextlib.suppress(Exception):
                stream.flush()
    oom = 1 if _oom_kills() else 0
    with contextlib.suppress(OSError):  # a closed stdout/stderr: the host asks the engine for the status
        os.write(1, b"\x00AK:" + nonce + b":end\x00")
        os.write(2, b"\x00AK:" + nonce + b":%03d:%d\x00" % (status, oom))
    if job.get("keep_alive"):
        while True:
            signal.pause()
    os._exit(status)


if __name__ == "__main__":
    main()
