"""The sandbox base image, built offline with debootstrap (no registry needed).

:data:`RECIPE`: ``debootstrap --variant=minbase --include=python3 bookworm`` from the Debian mirror of the
machine's apt sources (``$AGENTKIT_SANDBOX_MIRROR`` overrides), trimmed (caches, docs, locales, setuid bits),
then ``docker import``. The tag ``agentkit-sandbox:<12 hex digits of sha256(recipe)>`` changes with the recipe,
so an unchanged one is never rebuilt (40-60 s, ~117 MB).
"""

from __future__ import annotations

import contextlib
import email
import email.message
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker
import docker.errors

from sandbox.errors import ImageBuildError, ImageMissingError

IMAGE_REPOSITORY = "agentkit-sandbox"
MIRROR_ENV = "AGENTKIT_SANDBOX_MIRROR"
IMAGE_ENV = "AGENTKIT_SANDBOX_IMAGE"

#: Everything that determines the image's content. Change anything here and the tag changes.
RECIPE: dict[str, Any] = {
    "version": 1,
    "suite": "bookworm",
    "variant": "minbase",
    "include": ["python3"],
    # Paths (relative to the rootfs) whose contents are deleted after debootstrap.
    "trim": "var/cache/apt var/lib/apt/lists var/cache/debconf var/log usr/share/doc usr/share/man usr/share/info "
    "usr/share/locale usr/share/lintian usr/share/common-licenses".split(),
    "strip_setuid": True,
    "changes": [
        "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "ENV LANG=C.UTF-8",
        "ENV PYTHONDONTWRITEBYTECODE=1",
        "ENV PYTHONUNBUFFERED=1",
        "ENV HOME=/work",
        "WORKDIR /work",
    ],
    # Directories created in the image (octal mode): the tmpfs mounted there copies the mode, and the
    # code runs as uid 65534, so the work dir is world-writable and sticky like /tmp.
    "mkdirs": {"work": "1777"},
    # Symlinks created in the image: `python` as well as `python3` (models and other tools call `python`).
    "symlinks": {"usr/bin/python": "python3"},
}


def recipe_hash(recipe: dict[str, Any] | None = None) -> str:
    """First 12 hex digits of the sha256 of ``recipe``'s canonical JSON (default :data:`RECIPE`)."""
    blob = json.dumps(recipe or RECIPE, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def default_image() -> str:
    """The image reference to use: ``$AGENTKIT_SANDBOX_IMAGE`` or ``agentkit-sandbox:<recipe hash>``."""
    return os.environ.get(IMAGE_ENV) or f"{IMAGE_REPOSITORY}:{recipe_hash()}"


def image_present(client: docker.DockerClient, image: str | None = None) -> bool:
    """True when ``image`` (default :func:`default_image`) exists in the engine."""
    try:
        client.images.get(image or default_image())
    except docker.errors.ImageNotFound:
        return False
    return True


def ensure_image(client: docker.DockerClient, image: str | None = None) -> str:
    """Return ``image`` (default :func:`default_image`) if present, else raise :class:`ImageMissingError`."""
    ref = image or default_image()
    if not image_present(client, ref):
        raise ImageMissingError(
            f"sandbox image {ref!r} is not in the Docker engine. Fix: run `agentkit sandbox build-image` "
            "(needs root, debootstrap and the Debian mirror of the machine's apt sources; ~60 s), "
            "or `bash scripts/services.sh` which also installs and starts the engine."
        )
    return ref


def _parse_deb822(text: str) -> list[email.message.Message]:
    """The stanzas of a deb822 file (RFC 822-style fields, blank lines between stanzas, ``#`` comments)."""
    kept = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
    return [email.message_from_string(s) for s in re.split(r"\n[ \t]*\n", kept) if s.strip()]


def find_debian_mirror(suite: str = RECIPE["suite"], apt_dir: Path = Path("/etc/apt")) -> str:
    """The URI of a Debian archive serving ``suite``: ``$AGENTKIT_SANDBOX_MIRROR``, else from the deb822
    ``sources.list.d/*.sources``, else the one-line ``sources.list(.d/*.list)``; :class:`ImageBuildError`
    (saying how to set one) when none does."""
    env = os.environ.get(MIRROR_ENV)
    if env:
        return env
    candidates: list[tuple[str, list[str]]] = []
    d = apt_dir / "sources.list.d"
    for path in sorted(d.glob("*.sources")) if d.is_dir() else []:
        with contextlib.suppress(OSError):
            for st in _parse_deb822(path.read_text(encoding="utf-8", errors="replace")):
                if (
                    "deb" not in str(st.get("types", "")).split()
                    or str(st.get("enabled", "yes")).lower() == "no"
                ):
                    continue
                for uri in str(st.get("uris", "")).split():
                    candidates.append((uri, str(st.get("suites", "")).split()))
    lists = [apt_dir / "sources.list", *(sorted(d.glob("*.list")) if d.is_dir() else [])]
    for path in lists:
        if not path.is_file():
            continue
        with contextlib.suppress(OSError):
            for raw in path.read_text(encoding="utf-8", errors="replace").splitlines():
                parts = re.sub(r"\[[^\]]*\]", " ", raw.split("#", 1)[0]).split()
                if len(parts) >= 3 and parts[0] == "deb":
                    candidates.append((parts[1], [parts[2]]))
    for uri, suites in candidates:
        if suite in suites and "security" not in uri:
            return uri.rstrip("/")
    raise ImageBuildError(
        f"no Debian mirror serving {suite!r} found in {apt_dir}/sources.list(.d). Fix: set "
        f"{MIRROR_ENV}=http://<your Debian mirror>/debian or pass --mirror."
    )


def _run(cmd: list[str], what: str, log: Callable[[str], None]) -> None:
    log(f"$ {' '.join(cmd)}")
    proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace", check=False)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-20:])
        raise ImageBuildError(f"{what} failed (exit {proc.returncode}):\n{tail}")


def _trim(root: Path, recipe: dict[str, Any]) -> None:
    for rel in recipe["trim"]:
        p = root / rel
        if p.is_dir():
            for child in p.iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child)
                else:
                    child.unlink()
    if recipe.get("strip_setuid"):
        for dirpath, _dirs, files in os.walk(root):
            for name in files:
                fp = os.path.join(dirpath, name)
                st = os.lstat(fp)
                if not os.path.islink(fp) and st.st_mode & 0o6000:
                    os.chmod(fp, st.st_mode & ~0o6000 & 0o7777)
    for rel, mode in recipe.get("mkdirs", {}).items():
        (root / rel).mkdir(exist_ok=True)
        os.chmod(root / rel, int(mode, 8))
    for rel, target in recipe.get("symlinks", {}).items():
        if not (root / rel).exists():
            os.symlink(target, root / rel)


def build_image(
    client: docker.DockerClient,
    *,
    mirror: str | None = None,
    force: bool = False,
    log: Callable[[str], None] = print,
) -> tuple[str, bool]:
    """Build the base image offline (as root, with ``debootstrap``); idempotent.

    Returns:
        ``(image tag, built)``; ``built`` is False when the tag was present and ``force`` not set.

    Raises:
        ImageBuildError: the failing step and how to fix it.
    """
    tag = f"{IMAGE_REPOSITORY}:{recipe_hash()}"
    if not force and image_present(client, tag):
        log(f"image {tag} already present; nothing to do")
        return tag, False
    if os.geteuid() != 0:
        raise ImageBuildError(
            "building the sandbox image needs root (debootstrap chroots). Fix: run as root."
        )
    if shutil.which("debootstrap") is None:
        raise ImageBuildError(
            "debootstrap not found. Fix: apt-get install -y --no-install-recommends debootstrap "
            "(or run `bash scripts/services.sh`)."
        )
    mirror = mirror or find_debian_mirror(RECIPE["suite"])
    t0 = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="agentkit-rootfs-", dir="/var/tmp"))
    try:
        rootfs = tmp / "rootfs"
        cmd = ["debootstrap", f"--variant={RECIPE['variant']}", f"--include={','.join(RECIPE['include'])}"]
        keyring = Path("/usr/share/keyrings/debian-archive-keyring.gpg")
        if keyring.is_file():
            cmd.append(f"--keyring={keyring}")
        cmd += [RECIPE["suite"], str(rootfs), mirror]
        _run(cmd, "debootstrap", log)
        log(f"debootstrap done in {time.monotonic() - t0:.1f} s; trimming")
        _trim(rootfs, RECIPE)
        tarball = tmp / "rootfs.tar"
        _run(
            ["tar", "--numeric-owner", "-C", str(rootfs), "-cf", str(tarball), "."], "tar of the rootfs", log
        )
        changes = [*RECIPE["changes"], f"LABEL agentkit.sandbox.recipe={recipe_hash()}"]
        log(f"docker import ({tarball.stat().st_size / 1e6:.0f} MB) as {tag}")
        try:
            client.api.import_image_from_file(
                str(tarball), repository=IMAGE_REPOSITORY, tag=recipe_hash(), changes=changes
            )
        except docker.errors.APIError as exc:
            raise ImageBuildError(f"docker import failed: {exc.explanation or exc}") from exc
        if not image_present(client, tag):
            raise ImageBuildError(f"docker import finished but {tag} is not in the engine")
        log(f"built {tag} in {time.monotonic() - t0:.1f} s")
        return tag, True
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
