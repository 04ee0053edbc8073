"""Docker engine access: connecting, hardened container settings, ownership labels and the stale-container reaper.

Every sandbox container is labelled with its owner's pid and start time (so a recycled pid is not mistaken for
the owner), host and session (a random id per :class:`sandbox.Sandbox`); :func:`reap_stale` removes those of
this host whose owner is gone.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

import docker
import docker.errors
import requests

from sandbox.errors import EngineUnavailableError
from sandbox.models import Limits

LABEL_ROOT = "agentkit.sandbox"
LABEL_OWNER_PID = "agentkit.sandbox.owner_pid"
LABEL_OWNER_START = "agentkit.sandbox.owner_start"
LABEL_HOST = "agentkit.sandbox.host"
LABEL_SESSION = "agentkit.sandbox.session"

WORKDIR = "/work"  # a tmpfs, the only writable place besides /tmp
USER = "65534:65534"  # nobody:nogroup on Debian
CODE_DIR = "/tmp/.agentkit"  # where the program file is written
_BOOTSTRAP_SOURCE = (Path(__file__).with_name("bootstrap.py")).read_text(encoding="utf-8")
#: What a container runs: an interpreter waiting for its one job on stdin (:mod:`sandbox.bootstrap`).
BOOTSTRAP_COMMAND = ["python3", "-B", "-s", "-c", _BOOTSTRAP_SOURCE, WORKDIR, CODE_DIR]

_FIX_ENGINE = (
    "Fix: start the engine with `bash scripts/services.sh` (installs docker.io and starts "
    "`dockerd --bridge=none --iptables=false --ip-forward=false --ip-masq=false`), or point DOCKER_HOST at a "
    "running engine; `agentkit sandbox doctor` shows what is missing."
)


def connect(timeout_s: float = 60.0) -> docker.DockerClient:
    """A docker SDK client (``$DOCKER_HOST``, else the local socket; API calls time out after ``timeout_s``),
    pinged; :class:`EngineUnavailableError` with a fix when the engine does not answer."""
    try:
        client = docker.from_env(timeout=int(timeout_s))
        client.ping()
    except (docker.errors.DockerException, requests.exceptions.RequestException, OSError) as exc:
        where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        raise EngineUnavailableError(
            f"cannot reach the Docker engine at {where}: {exc}. {_FIX_ENGINE}"
        ) from exc
    return client


def process_start_ticks(pid: int) -> int | None:
    """Start time of process ``pid`` in clock ticks since boot (``/proc/PID/stat`` field 22), ``None`` if it is
    gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Field 2 (comm) may contain spaces and parentheses: split after the last ')'.
    rest = stat[stat.rfind(")") + 2 :].split()
    if not rest or rest[0] in ("Z", "X"):
        return None
    return int(rest[19])


def owner_labels(session: str) -> dict[str, str]:
    """Labels marking a container as owned by this process and sandbox ``session``."""
    pid = os.getpid()
    return {
        LABEL_ROOT: "1",
        LABEL_OWNER_PID: str(pid),
        LABEL_OWNER_START: str(process_start_ticks(pid) or 0),
        LABEL_HOST: socket.gethostname(),
        LABEL_SESSION: session,
    }


def owner_alive(labels: dict[str, str]) -> bool:
    """True unless the owner named by ``labels`` is certainly gone: same host, pid dead or recycled (another
    host's owner, on a shared engine, cannot be checked from here)."""
    if labels.get(LABEL_HOST) != socket.gethostname():
        return True
    try:
        pid = int(labels.get(LABEL_OWNER_PID, ""))
    except ValueError:
        return False
    ticks = process_start_ticks(pid)
    if ticks is None:
        return False
    want = labels.get(LABEL_OWNER_START, "0")
    return want in ("", "0") or str(ticks) == want


def container_kwargs(image: str, limits: Limits, labels: dict[str, str]) -> dict[str, Any]:
    """Keyword arguments of ``client.containers.create`` for a hardened container that waits for a job: no
    network, no swap, CPU quota, pids limit, read-only root with noexec tmpfs ``/work`` and ``/tmp``, every
    capability dropped, ``no-new-privileges``, uid 65534, docker's init as PID 1, private IPC."""
    kw: dict[str, Any] = {
        "image": image,
        "command": BOOTSTRAP_COMMAND,
        # stdin open for one attach: detach=False makes the SDK set AttachStdin/StdinOnce, so closing our side
        # of the attach closes the program's stdin (EOF).
        "stdin_open": True,
        "detach": False,
        "labels": labels,
        "network_mode": "none",
        "mem_limit": limits.memory_bytes,
        "memswap_limit": limits.memory_bytes,
        "mem_swappiness": 0,
        "cpu_period": 100_000,
        "cpu_quota": int(limits.cpus * 100_000),
        "pids_limit": limits.pids,
        "read_only": True,
        "tmpfs": {
            WORKDIR: f"rw,nosuid,nodev,noexec,size={limits.workdir_bytes},mode=1777",
            "/tmp": f"rw,nosuid,nodev,noexec,size={limits.tmp_bytes},mode=1777",
        },
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "user": USER,
        "init": True,
        "working_dir": WORKDIR,
        "ipc_mode": "private",
        "environment": {"HOME": WORKDIR, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"},
        "stop_signal": "SIGKILL",
        "ulimits": [docker.types.Ulimit(name="core", soft=0, hard=0)],
    }
    if limits.runtime:
        kw["runtime"] = limits.runtime
    return kw


def list_sandbox_containers(client: docker.DockerClient, session: str | None = None) -> list[Any]:
    """All sandbox containers (any state), or only those of ``session``."""
    label = f"{LABEL_SESSION}={session}" if session else LABEL_ROOT
    return list(client.containers.list(all=True, filters={"label": label}, ignore_removed=True))


def _remove(client: docker.DockerClient, cid: str) -> None:
    """Force-remove one container (gone counts as removed); wait while another thread removes it (~30 s)."""
    try:
        client.api.remove_container(cid, force=True, v=True)
    except docker.errors.NotFound:
        pass
    except docker.errors.APIError as exc:
        if "already in progress" not in str(exc):
            raise
        for _ in range(600):
            try:
                client.api.inspect_container(cid)
            except docker.errors.NotFound:
                break
            time.sleep(0.05)


def remove_containers(client: docker.DockerClient, ids: list[str]) -> list[str]:
    """Force-remove containers ``ids`` in parallel and return them (gone ones count as removed); errors other
    than "not found" propagate as ``docker.errors.APIError``."""
    errors: list[BaseException] = []

    def worker(cid: str) -> None:
        try:
            _remove(client, cid)
        except BaseException as exc:
            errors.append(exc)

    # Plain threads (an executor refuses work once the interpreter is shutting down, which is exactly when
    # atexit cleanup runs); the rest in this thread once no more threads can be started.
    threads: list[threading.Thread] = []
    for cid in ids[1:] if len(ids) > 1 else ():
        try:
            threads.append(threading.Thread(target=worker, args=(cid,), daemon=True))
            threads[-1].start()
        except RuntimeError:
            threads.pop()
            worker(cid)
    if ids:
        worker(ids[0])
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return list(ids)


def reap_stale(client: docker.DockerClient) -> list[str]:
    """Remove the sandbox containers of this host whose owner has died; return their ids."""
    stale = [c.id for c in list_sandbox_containers(client) if not owner_alive(c.labels)]
    return remove_containers(client, stale)
