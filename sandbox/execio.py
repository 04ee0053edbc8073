"""Hijacked Docker streams: a stdin payload in, capped stdout/stderr out, a wall-clock deadline.

The docker SDK's ``exec_run`` has no timeout and cannot send stdin, so this module drives the Engine API's
hijacked attach/exec connections itself: it writes the payload, shuts the write side (EOF on stdin) and reads
Docker's multiplexed stream (frames of an 8-byte header ``[stream, 0, 0, 0, size (uint32 BE)]``, stream 1 =
stdout, 2 = stderr). At the deadline ``on_timeout`` is called (the caller kills the container).
"""

from __future__ import annotations

import codecs
import contextlib
import re
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import docker

from sandbox.errors import SandboxError

__all__ = ["Markers", "Pumped", "cap_text", "exec_with_stdin", "pump"]

_HEADER = struct.Struct(">BxxxI")


class _Capped:
    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.buf = bytearray()
        self.total = 0

    def add(self, data: bytes | memoryview) -> None:
        self.total += len(data)
        room = self.cap - len(self.buf)
        if room > 0:
            self.buf += data[:room]

    def strip_tail(self, n: int) -> None:
        """Forget the last ``n`` bytes written (a completion marker), kept or dropped."""
        self.total -= n
        del self.buf[self.total :]


def cap_text(data: bytes, total: int) -> tuple[str, bool]:
    """``(text, truncated)``: ``data``, the kept prefix of ``total`` bytes, decoded (errors replaced), cut back to
    a character boundary and ending ``[... truncated N bytes]`` when ``total`` is larger."""
    if total <= len(data):
        return data.decode("utf-8", errors="replace"), False
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    text = decoder.decode(data)  # not final: a partial character at the end stays in the decoder
    cut = len(data) - len(decoder.getstate()[0])
    sep = "" if text.endswith("\n") or not text else "\n"
    return f"{text}{sep}[... truncated {total - cut} bytes]\n", True


def _raw_socket(sock: Any) -> tuple[socket.socket, bytes]:
    """The OS socket under the SDK's hijacked stream, and the bytes http.client already buffered."""
    raw = getattr(sock, "_sock", sock)
    if not isinstance(raw, socket.socket):
        raise SandboxError(
            f"unsupported Docker transport for exec streams ({type(sock).__name__}); use a unix socket or tcp "
            "DOCKER_HOST"
        )
    leftover = b""
    # http.client reads the 101 response headers through a BufferedReader that may have read past them.
    buffered = getattr(
        getattr(getattr(getattr(sock, "_response", None), "raw", None), "_fp", None), "fp", None
    )
    if buffered is not None and hasattr(buffered, "read1"):
        raw.setblocking(False)
        try:
            leftover = buffered.read1(1 << 16) or b""
        except (BlockingIOError, OSError, ValueError):
            leftover = b""
        finally:
            raw.setblocking(True)
    return raw, leftover


@dataclass
class Pumped:
    """What :func:`pump` read: kept bytes and written totals per stream; ``how``: ``"eof"``, ``"marker"`` or
    ``"timeout"``; ``marker``: the match of the stderr completion marker; ``exit_code``: an exec's status
    (:func:`exec_with_stdin`; ``None`` when the engine reports none)."""

    stdout: bytes
    stderr: bytes
    stdout_total: int
    stderr_total: int
    how: str
    marker: re.Match[bytes] | None = None
    exit_code: int | None = None


@dataclass(frozen=True)
class Markers:
    """Completion markers expected as the last bytes of stdout (``out``, exact) and stderr (``err``, regex)."""

    out: bytes
    err: re.Pattern[bytes]
    err_max_len: int


def pump(
    hijacked: Any,
    stdin: bytes,
    *,
    deadline: float,
    output_cap: int,
    on_timeout: Callable[[], None],
    markers: Markers | None = None,
) -> Pumped:
    """Write ``stdin`` to a hijacked attach/exec connection, half-close it, then read the multiplexed stream
    (``output_cap`` bytes kept per stream) until EOF, both ``markers`` (removed from the result) or ``deadline``
    (monotonic seconds; then ``on_timeout()`` is called). Closes the connection."""
    out, err = _Capped(output_cap), _Capped(output_cap)
    tails = {1: b"", 2: b""}
    keep = max(len(markers.out), markers.err_max_len) if markers else 0
    how = "timeout"
    match: re.Match[bytes] | None = None
    try:
        raw, leftover = _raw_socket(hijacked)
        buf = bytearray(leftover)
        # a timeout is handled below; a process that exited without reading its stdin still has its output
        with contextlib.suppress(OSError):
            raw.settimeout(max(0.001, deadline - time.monotonic()))
            if stdin:
                raw.sendall(stdin)
            raw.shutdown(socket.SHUT_WR)
        while True:
            pos = 0
            got = False
            while len(buf) - pos >= _HEADER.size:
                kind, size = _HEADER.unpack_from(buf, pos)
                if len(buf) - pos - _HEADER.size < size:
                    break
                body = bytes(buf[pos + _HEADER.size : pos + _HEADER.size + size])
                if kind in (1, 2):
                    (out if kind == 1 else err).add(body)
                    if keep:
                        tails[kind] = (tails[kind] + body)[-keep:]
                    got = True
                pos += _HEADER.size + size
            if pos:
                del buf[:pos]
            if markers is not None and got and tails[1].endswith(markers.out):
                match = markers.err.search(tails[2])
                if match is not None:
                    how = "marker"
                    out.strip_tail(len(markers.out))
                    err.strip_tail(len(match.group(0)))
                    break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            raw.settimeout(remaining)
            try:
                chunk = raw.recv(1 << 16)
            except TimeoutError:
                break
            except OSError:
                chunk = b""
            if not chunk:
                how = "eof"
                break
            buf += chunk
    finally:
        if how == "timeout":
            on_timeout()
        with contextlib.suppress(Exception):
            hijacked.close()
        with contextlib.suppress(Exception):  # the HTTP response under it, where the SDK keeps one
            hijacked._response.close()
    return Pumped(bytes(out.buf), bytes(err.buf), out.total, err.total, how, match)


def exec_with_stdin(
    api: docker.APIClient,
    container_id: str,
    cmd: list[str],
    stdin: bytes,
    *,
    deadline: float,
    output_cap: int,
    on_timeout: Callable[[], None],
    workdir: str | None = None,
) -> Pumped:
    """Run ``cmd`` in the running container ``container_id``, feeding ``stdin``, and :func:`pump` its output;
    ``docker.errors.APIError`` when the engine refuses the exec."""
    exec_id = api.exec_create(
        container_id,
        cmd,
        stdin=True,
        stdout=True,
        stderr=True,
        tty=False,
        workdir=workdir,
    )["Id"]
    hijacked = api.exec_start(exec_id, socket=True)
    res = pump(hijacked, stdin, deadline=deadline, output_cap=output_cap, on_timeout=on_timeout)
    if res.how == "eof":  # the stream can end a moment before the engine records the exit: poll briefly
        for _ in range(200):
            info = api.exec_inspect(exec_id)
            if not info.get("Running") and info.get("ExitCode") is not None:
                res.exit_code = int(info["ExitCode"])
                break
            time.sleep(0.005)
    return res
