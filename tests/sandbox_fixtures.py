"""Fixtures for the sandbox tests that need the real Docker engine (loaded with ``pytest_plugins``).

Without a reachable engine or without the base image the tests are skipped locally, but FAIL when the
environment variable CI is true (.ci/run starts the engine and builds the image with scripts/services.sh, so
a missing engine there is a bug, never a reason to skip). The image is never built here: building takes ~60 s.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

CI = os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def _unavailable(msg: str) -> None:
    if CI:
        pytest.fail(f"{msg} (CI=true: the sandbox tests must run for real; see scripts/services.sh)")
    pytest.skip(msg)


@pytest.fixture(scope="session")
def docker_client():  # -> docker.DockerClient
    """A docker SDK client of a reachable engine, or skip (locally) / fail (CI)."""
    import docker

    try:
        client = docker.from_env(timeout=60)
        client.ping()
    except Exception as exc:
        _unavailable(f"Docker engine unreachable ({exc}); start it with `bash scripts/services.sh`")
    return client


@pytest.fixture(scope="session")
def sandbox_image(docker_client) -> str:
    """The tag of the base image built by scripts/services.sh (`agentkit sandbox build-image`)."""
    from sandbox.image import default_image, image_present

    ref = default_image()
    if not image_present(docker_client, ref):
        _unavailable(f"sandbox image {ref} missing; build it with `agentkit sandbox build-image`")
    return ref


@pytest.fixture(scope="session")
def shared_sandbox(docker_client, sandbox_image) -> Iterator:
    """One warm-pool Sandbox (pool of 2) shared by the docker tests; closed at the end of the session."""
    from sandbox import Sandbox

    sb = Sandbox(sandbox_image, pool_size=2, client=docker_client, timeout_s=20)
    sb.wait_ready(60)
    yield sb
    sb.close()
    assert sb.containers() == []
