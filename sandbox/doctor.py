"""Health checks behind ``agentkit sandbox doctor``: engine, image, limits support, runtimes, stale containers."""

from __future__ import annotations

import shutil
from dataclasses import dataclass

import docker

from sandbox import engine
from sandbox.errors import EngineUnavailableError
from sandbox.image import default_image, image_present

__all__ = ["Check", "diagnose"]


@dataclass
class Check:
    """One doctor line: ``name``, ``ok``, what was found (``detail``), how to ``fix`` it; a failing
    ``required`` check means the sandbox cannot run."""

    name: str
    ok: bool
    detail: str
    fix: str = ""
    required: bool = True


def _engine_checks(client: docker.DockerClient, ref: str) -> list[Check]:
    """The checks that need a reachable engine: version, image, cgroup limits, runtimes, network, containers."""
    checks: list[Check] = []
    ver = client.version()
    info = client.info()
    checks.append(
        Check(
            "engine",
            True,
            f"Docker {ver.get('Version')} (API {ver.get('ApiVersion')}), {info.get('OSType')}",
        )
    )
    present = image_present(client, ref)
    if present:
        size = client.images.get(ref).attrs.get("Size", 0)
        checks.append(Check("image", True, f"{ref} ({size / 1e6:.0f} MB)"))
    else:
        checks.append(
            Check("image", False, f"{ref} not found", "run `agentkit sandbox build-image` (~60 s, root)")
        )
    missing = [k for k in ("MemoryLimit", "SwapLimit", "CpuCfsQuota", "PidsLimit") if not info.get(k)]
    checks.append(
        Check(
            "limits",
            not missing,
            "memory, swap, CPU quota and pids limits supported" if not missing else f"unsupported: {missing}",
            "enable the cgroup controllers (memory, pids, cpu) in the kernel / host",
        )
    )
    runtimes = sorted((info.get("Runtimes") or {}).keys())
    has_runsc = "runsc" in runtimes
    checks.append(
        Check(
            "runtimes",
            True,
            f"{', '.join(runtimes)} (default {info.get('DefaultRuntime')})",
        )
    )
    checks.append(
        Check(
            "gvisor",
            has_runsc,
            "runsc available: Limits(runtime='runsc', pids=1024)" if has_runsc else "runsc not configured",
            "optional: apt-get install runsc and register it in /etc/docker/daemon.json runtimes",
            required=False,
        )
    )
    net = info.get("Plugins", {}).get("Network", [])
    checks.append(Check("network", "null" in net, f"network drivers: {', '.join(net)} (sandbox uses none)"))
    stale = [c for c in engine.list_sandbox_containers(client) if not engine.owner_alive(c.labels)]
    live = engine.list_sandbox_containers(client)
    checks.append(
        Check(
            "containers",
            not stale,
            f"{len(live)} sandbox containers, {len(stale)} stale (dead owner)",
            "the next Sandbox start reaps them (or: docker rm -f $(docker ps -aq -f label=agentkit.sandbox))",
            required=False,
        )
    )
    if not present:
        checks.append(
            Check(
                "debootstrap",
                shutil.which("debootstrap") is not None,
                "found" if shutil.which("debootstrap") else "not installed (needed to build the image)",
                "apt-get install -y --no-install-recommends debootstrap",
            )
        )
    return checks


def diagnose(image: str | None = None) -> list[Check]:
    """Run every check and return them in order; never raises for an unhealthy setup."""
    checks: list[Check] = []
    ref = image or default_image()
    try:
        client: docker.DockerClient | None = engine.connect(timeout_s=10)
    except EngineUnavailableError as exc:
        client = None
        checks.append(Check("engine", False, str(exc).split(". Fix:")[0], "run `bash scripts/services.sh`"))
    if client is not None:
        checks.extend(_engine_checks(client, ref))
    return checks
