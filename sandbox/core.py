"""The :class:`Sandbox`: hardened, single-use Docker containers for model-written code, with a warm pool.

Each container (settings: :func:`sandbox.engine.container_kwargs`) serves one execution and is removed; a
timeout kills the container itself. Containers are labelled with their owner and removed on
:meth:`Sandbox.close`, at interpreter exit, on SIGTERM/SIGHUP (SIGINT when KeyboardInterrupt is disabled);
those of owners that died anyway (SIGKILL) are reaped when the next :class:`Sandbox` starts.
"""

from __future__ import annotations

import atexit
import contextlib
import fnmatch
import io
import json
import logging
import os
import posixpath
import queue
import re
import secrets
import signal
import tarfile
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from types import FrameType, TracebackType
from typing import Any

import docker
import docker.errors
import requests

from sandbox import engine
from sandbox.errors import SandboxClosedError, SandboxError, SandboxInputError
from sandbox.execio import Markers, cap_text, exec_with_stdin, pump
from sandbox.image import default_image, ensure_image
from sandbox.models import Execution, Limits
from sandbox.pool import WarmPool

__all__ = ["LANGUAGES", "Sandbox"]

log = logging.getLogger(__name__)

#: Supported languages and their program file's extension (Python runs in :mod:`sandbox.bootstrap`'s
#: interpreter, shells as its child process).
LANGUAGES: dict[str, str] = {"python": "py", "bash": "sh", "sh": "sh"}

_LIVE: weakref.WeakSet[Sandbox] = weakref.WeakSet()
_HOOKS_LOCK = threading.Lock()
_SIGNALS_INSTALLED = False
_PREV_HANDLERS: dict[int, Any] = {}


def _close_all_live(fast: bool) -> None:
    for sb in list(_LIVE):
        with contextlib.suppress(Exception):
            sb._close(fast=fast)


atexit.register(_close_all_live, False)


def _on_signal(signum: int, frame: FrameType | None) -> None:
    _close_all_live(fast=True)
    prev = _PREV_HANDLERS.get(signum, signal.SIG_DFL)
    if callable(prev):
        prev(signum, frame)
    elif prev == signal.SIG_DFL:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


def _install_signal_handlers() -> None:
    """SIGTERM/SIGHUP handlers (SIGINT too when it is SIG_DFL: KeyboardInterrupt unwinds by itself) that chain
    to the previous ones, once, from the main thread."""
    global _SIGNALS_INSTALLED
    with _HOOKS_LOCK:
        if _SIGNALS_INSTALLED:
            return
        if threading.current_thread() is not threading.main_thread():
            log.debug("sandbox: not in the main thread; no signal handlers (atexit and the reaper remain)")
            return
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            prev = signal.getsignal(sig)
            if prev == signal.SIG_IGN or (sig == signal.SIGINT and prev is signal.default_int_handler):
                continue
            _PREV_HANDLERS[sig] = prev
            signal.signal(sig, _on_signal)
        _SIGNALS_INSTALLED = True


def _check_name(name: object) -> str:
    if not isinstance(name, str) or not name or "\x00" in name:
        raise SandboxInputError(f"files: bad file name {name!r} (need a non-empty relative path)")
    norm = posixpath.normpath(name)
    if name.startswith("/") or norm.startswith("..") or norm in (".", ""):
        raise SandboxInputError(f"files: {name!r} must be a relative path inside the work dir (no '/', '..')")
    return norm


def _payload(
    code: str, language: str, files: Mapping[str, bytes | str] | None, nonce: str, keep_alive: bool
) -> tuple[bytes, dict[str, bytes]]:
    """``(job, {normalised input name: bytes})``: the job for :mod:`sandbox.bootstrap` is a JSON header line,
    then a tar of ``code/main.EXT`` and ``work/<file>``."""
    inputs: dict[str, bytes] = {}
    buf = io.BytesIO()
    ext = LANGUAGES[language]
    header = {"nonce": nonce, "language": language, "ext": ext, "keep_alive": keep_alive}
    buf.write(json.dumps(header).encode() + b"\n")
    now = time.time()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:

        def add(path: str, data: bytes) -> None:
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime = len(data), 0o644, now
            tar.addfile(info, io.BytesIO(data))

        add(f"code/main.{ext}", code.encode("utf-8"))
        for name, content in (files or {}).items():
            rel = _check_name(name)
            if isinstance(content, str):
                data = content.encode("utf-8")
            elif isinstance(content, bytes | bytearray | memoryview):
                data = bytes(content)
            else:
                raise SandboxInputError(
                    f"files[{name!r}]: expected bytes or str, got {type(content).__name__}"
                )
            inputs[rel] = data
            add(f"work/{rel}", data)
    return buf.getvalue(), inputs


class Sandbox(contextlib.AbstractContextManager["Sandbox"]):
    """Run untrusted code in hardened, single-use Docker containers; thread-safe, a context manager.

    ``image`` defaults to :func:`sandbox.image.default_image`; ``pool_size`` containers are kept warm (0: every
    run starts a cold one); ``limits`` and ``timeout_s`` (seconds) are the runs' defaults; ``reap`` removes
    stale containers of dead owners; ``handle_signals`` installs SIGTERM/SIGHUP cleanup (main thread only).
    Raises :class:`EngineUnavailableError` or :class:`ImageMissingError`, each saying how to fix it.
    """

    def __init__(
        self,
        image: str | None = None,
        *,
        pool_size: int = 2,
        limits: Limits | None = None,
        timeout_s: float = 10.0,
        client: docker.DockerClient | None = None,
        reap: bool = True,
        handle_signals: bool = True,
    ) -> None:
        if not isinstance(pool_size, int) or not 0 <= pool_size <= 64:
            raise SandboxInputError(f"Sandbox(pool_size={pool_size!r}): must be an int in 0..64")
        self.timeout_s = self._check_timeout(timeout_s, "Sandbox(timeout_s)")
        self.limits = limits or Limits()
        self.client = client or engine.connect()
        self.image = ensure_image(self.client, image or default_image())
        #: Random id of this sandbox, the ``agentkit.sandbox.session`` label of its containers.
        self.session_id = secrets.token_hex(8)
        self._labels = engine.owner_labels(self.session_id)
        self._closed = False
        #: Ids of stale containers (dead owners) removed when this sandbox started.
        self.reaped: list[str] = engine.reap_stale(self.client) if reap else []
        self._trash: queue.Queue[str | None] = queue.Queue()
        self._remover = threading.Thread(target=self._remove_loop, name="sandbox-remover", daemon=True)
        self._remover.start()
        _LIVE.add(self)
        if handle_signals:
            _install_signal_handlers()
        self.pool: WarmPool | None = (
            WarmPool(lambda: self._start_container(self.limits), self._remove_now, pool_size)
            if pool_size
            else None
        )

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Stop the pool and remove every container of this sandbox (ready, running or being removed)."""
        self._close(fast=False)

    def _close(self, fast: bool) -> None:
        if self._closed and not fast:
            return
        self._closed = True
        ids: list[str] = []
        if self.pool is not None:
            ids += self.pool.close(join_s=5.0, lock=not fast)
        # Let the remover finish what it is removing, so the sweep below does not race it.
        self._trash.put(None)
        if threading.current_thread() is not self._remover:
            self._remover.join(5.0)
        client = self.client
        if fast:
            # From a signal handler: a fresh client, no locks the interrupted code could hold.
            with contextlib.suppress(Exception):
                client = docker.from_env(timeout=30)
        with contextlib.suppress(Exception):
            ids += [c.id for c in engine.list_sandbox_containers(client, self.session_id)]
        with contextlib.suppress(Exception):
            engine.remove_containers(client, sorted(set(ids)))
        _LIVE.discard(self)

    def wait_ready(self, timeout_s: float = 60.0) -> bool:
        """Block until the warm pool is full and used containers are removed (True), or ``timeout_s`` seconds
        pass (False). Without a pool only the removals are waited for."""
        deadline = time.monotonic() + timeout_s
        if self.pool is not None and not self.pool.wait_full(timeout_s):
            return False
        while self._trash.unfinished_tasks and not self._closed:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)
        return True

    def containers(self) -> list[str]:
        """Ids of this sandbox's containers that exist in the engine now (any state)."""
        return [c.id for c in engine.list_sandbox_containers(self.client, self.session_id)]

    def _start_container(self, limits: Limits) -> str:
        if self._closed:
            raise SandboxClosedError("sandbox is closed")
        kw = engine.container_kwargs(self.image, limits, self._labels)
        try:
            c = self.client.containers.create(**kw)
        except docker.errors.ImageNotFound as exc:
            raise SandboxError(
                f"image {self.image!r} disappeared: run `agentkit sandbox build-image`"
            ) from exc
        except docker.errors.APIError as exc:
            if limits.runtime and "runtime" in str(exc).lower():
                raise SandboxError(
                    f"runtime {limits.runtime!r} is not configured in the Docker engine ({exc.explanation}). "
                    "Fix: install it (e.g. apt-get install runsc) and add it to /etc/docker/daemon.json "
                    '"runtimes", then restart dockerd; `agentkit sandbox doctor` lists available runtimes.'
                ) from exc
            raise
        try:
            c.start()
        except BaseException:
            self._remove_now([c.id])
            raise
        return str(c.id)

    def _remove_now(self, ids: list[str]) -> None:
        with contextlib.suppress(docker.errors.DockerException, requests.exceptions.RequestException):
            engine.remove_containers(self.client, ids)

    def _remove_loop(self) -> None:
        while True:
            cid = self._trash.get()
            if cid is None:
                return
            try:
                self._remove_now([cid])
            finally:
                self._trash.task_done()

    @staticmethod
    def _check_timeout(timeout: float, where: str) -> float:
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout <= 86400:
            raise SandboxInputError(f"{where}={timeout!r}: must be a number of seconds in (0, 86400]")
        return float(timeout)

    def run(
        self,
        code: str,
        language: str = "python",
        files: Mapping[str, bytes | str] | None = None,
        timeout: float | None = None,
        limits: Limits | None = None,
        collect: Sequence[str] | None = None,
    ) -> Execution:
        """Run ``code`` (a :data:`LANGUAGES` program) once in a fresh container and return its :class:`Execution`.

        ``files`` (``{relative path: bytes | str}``) are written under the work dir ``/work``, the current
        directory. At ``timeout`` seconds (default ``timeout_s``) the container is killed and removed before
        this returns (``timed_out``, exit code 137). ``limits`` other than the default run in a cold container.
        Files matching the ``collect`` globs (e.g. ``["*.png", "out/*"]``) that the program created or changed
        come back in ``files_out``. Raises :class:`SandboxInputError` (bad arguments),
        :class:`SandboxClosedError` (after :meth:`close`), :class:`SandboxError` (the engine failed).
        """
        if self._closed:
            raise SandboxClosedError("Sandbox.run called after close(); create a new Sandbox")
        if not isinstance(code, str):
            raise SandboxInputError(f"Sandbox.run: code must be a str, got {type(code).__name__}")
        if language not in LANGUAGES:
            raise SandboxInputError(
                f"Sandbox.run: unknown language {language!r}; supported: {sorted(LANGUAGES)}"
            )
        run_timeout = self._check_timeout(
            self.timeout_s if timeout is None else timeout, "Sandbox.run(timeout)"
        )
        lim = limits or self.limits
        if not isinstance(lim, Limits):
            raise SandboxInputError(f"Sandbox.run: limits must be a sandbox.Limits, got {type(lim).__name__}")
        if collect is not None and (isinstance(collect, str) or not all(isinstance(p, str) for p in collect)):
            raise SandboxInputError("Sandbox.run: collect must be a list of glob patterns, e.g. ['*.csv']")
        nonce = secrets.token_hex(16)
        payload, inputs = _payload(code, language, files, nonce, keep_alive=bool(collect))
        if len(payload) > lim.workdir_bytes:
            raise SandboxInputError(
                f"Sandbox.run: program + files are {len(payload)} bytes, over the work dir size "
                f"Limits.workdir_bytes={lim.workdir_bytes}"
            )

        cid = self.pool.acquire() if self.pool is not None and lim == self.limits else None
        warm = cid is not None
        try:
            if cid is None:
                cid = self._start_container(lim)
            return self._execute(cid, payload, nonce, inputs, run_timeout, lim, collect, warm)
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            if self._closed:
                raise SandboxClosedError("sandbox closed during the run") from exc
            raise SandboxError(f"Docker engine error while running code: {exc}") from exc
        finally:
            if cid is not None:
                self._trash.put(cid)

    def _execute(
        self,
        cid: str,
        payload: bytes,
        nonce: str,
        inputs: dict[str, bytes],
        timeout: float,
        lim: Limits,
        collect: Sequence[str] | None,
        warm: bool,
    ) -> Execution:
        def kill() -> None:
            engine.remove_containers(self.client, [cid])

        n = nonce.encode("ascii")
        markers = Markers(
            out=b"\x00AK:" + n + b":end\x00",
            err=re.compile(rb"\x00AK:" + n + rb":(\d{3}):([01])\x00$"),
            err_max_len=len(n) + 12,
        )
        t0 = time.monotonic()
        deadline = t0 + timeout
        hijacked = self.client.api.attach_socket(
            cid, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
        )
        res = pump(
            hijacked,
            payload,
            deadline=deadline,
            output_cap=lim.output_bytes,
            on_timeout=kill,
            markers=markers,
        )
        timed_out = res.how == "timeout"
        oom = False
        if res.marker is not None:
            exit_code, oom = int(res.marker.group(1)), res.marker.group(2) == b"1"
        elif not timed_out:
            # The program ended the interpreter itself (os._exit, a signal, the OOM killer): ask the engine.
            state = self._final_state(cid, deadline)
            if state is None:
                kill()
                timed_out = True
            else:
                exit_code, oom = int(state.get("ExitCode", -1)), bool(state.get("OOMKilled"))
        if timed_out:
            exit_code = 137
        duration = time.monotonic() - t0
        stdout, t1 = cap_text(res.stdout, res.stdout_total)
        stderr, t2 = cap_text(res.stderr, res.stderr_total)
        files_out, files_truncated = (
            self._collect(cid, collect, inputs, lim) if collect and res.marker is not None else ({}, False)
        )
        return Execution(
            stdout=stdout,
            stderr=stderr,
            exit_code=exit_code,
            timed_out=timed_out,
            oom_killed=oom,
            duration_s=duration,
            files_out=files_out,
            truncated=t1 or t2 or files_truncated,
            container_id=cid,
            warm=warm,
        )

    def _final_state(self, cid: str, deadline: float) -> dict[str, Any] | None:
        """The container's ``State`` once it has stopped, or None if it still runs at ``deadline``."""
        while True:
            try:
                state: dict[str, Any] = self.client.api.inspect_container(cid)["State"]
            except docker.errors.NotFound:
                return {"ExitCode": -1, "OOMKilled": False}
            if not state.get("Running"):
                return state
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.005)

    def _collect(
        self, cid: str, patterns: Sequence[str], inputs: dict[str, bytes], lim: Limits
    ) -> tuple[dict[str, bytes], bool]:
        """Files of the work dir matching ``patterns`` that are new or changed, and whether some were cut."""
        cap = lim.files_out_bytes + 1024 * 1024  # tar headers and padding
        out = exec_with_stdin(
            self.client.api,
            cid,
            ["tar", "-c", "-f", "-", "-C", engine.WORKDIR, "."],
            b"",
            deadline=time.monotonic() + 30.0,
            output_cap=cap,
            on_timeout=lambda: None,
        )
        truncated = out.stdout_total > len(out.stdout)
        files: dict[str, bytes] = {}
        total = 0
        try:
            with tarfile.open(fileobj=io.BytesIO(out.stdout), mode="r:") as tar:
                for member in tar:
                    if not member.isfile():
                        continue
                    name = posixpath.normpath(member.name)
                    if not any(fnmatch.fnmatchcase(name, p) for p in patterns):
                        continue
                    fh = tar.extractfile(member)
                    data = fh.read() if fh is not None else b""
                    if inputs.get(name) == data:
                        continue
                    if total + len(data) > lim.files_out_bytes:
                        truncated = True
                        break
                    files[name] = data
                    total += len(data)
        except (tarfile.TarError, EOFError):
            truncated = True
        return files, truncated
