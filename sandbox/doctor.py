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
    ver, info = client.version(), client.info()
    present = image_present(client, ref)
    missing = [k for k in ("MemoryLimit", "SwapLimit", "CpuCfsQuota", "PidsLimit") if not info.get(k)]
    runtimes = sorted((info.get("Runtimes") or {}).keys())
    has_runsc = "runsc" in runtimes
    net = info.get("Plugins", {}).get("Network", [])
    live = engine.list_sandbox_containers(client)
    stale = [c for c in live if not engine.owner_alive(c.labels)]
    checks = [
        Check(
            "engine", True, f"Docker {ver.get('Version')} (API {ver.get('ApiVersion')}), {info.get('OSType')}"
        ),
        Check("image", True, f"{ref} ({client.images.get(ref).attrs.get('Size', 0) / 1e6:.0f} MB)")
        if present
        else Check("image", False, f"{ref} not found", "run `agentkit sandbox build-image` (~60 s, root)"),
        Check(
            "limits",
            not missing,
            "memory, swap, CPU quota and pids limits supported" if not missing else f"unsupported: {missing}",
            "enable the cgroup controllers (memory, pids, cpu) in the kernel / host",
        ),
        Check("runtimes", True, f"{', '.join(runtimes)} (default {info.get('DefaultRuntime')})"),
        Check(
            "gvisor",
            has_runsc,
            "runsc available: Limits(runtime='runsc', pids=1024)" if has_runsc else "runsc not configured",
            "optional: apt-get install runsc and register it in /etc/docker/daemon.json runtimes",
            required=False,
        ),
        Check("network", "null" in net, f"network drivers: {', '.join(net)} (sandbox uses none)"),
        Check(
            "containers",
            not stale,
            f"{len(live)} sandbox containers, {len(stale)} stale (dead owner)",
            "the next Sandbox start reaps them (or: docker rm -f $(docker ps -aq -f label=agentkit.sandbox))",
            required=False,
        ),
    ]
    if not present:
        found = shutil.which("debootstrap") is not None
        checks.append(
            Check(
                "debootstrap",
                found,
                "found" if found else "not installed (needed to build the image)",
                "apt-get install -y --no-install-recommends debootstrap",
            )
        )
    return checks


def diagnose(image: str | None = None) -> list[Check]:
    """Run every check and return them in order; never raises for an unhealthy setup."""
    try:
        client = engine.connect(timeout_s=10)
    except EngineUnavailableError as exc:
        return [Check("engine", False, str(exc).split(". Fix:")[0], "run `bash scripts/services.sh`")]
    return _engine_checks(client, image or default_image())
