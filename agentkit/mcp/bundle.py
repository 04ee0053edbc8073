"""A bundle's ``toolsets:`` section (``- mcp: {command: ...}`` or ``- mcp: {url: ...}``): what its JSON Schema
cannot check (``${ENV}`` placeholders, the command, the URL), each problem reported at its field."""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from agentkit.mcp.client import MCPToolset

__all__ = ["interpolate", "toolsets_of"]

Path_ = tuple[str | int, ...]
_ENV_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_OPTIONS = ("name", "prefix", "include", "exclude", "on_unsupported", "timeout", "startup_timeout", "retries")


def interpolate(value: str) -> str:
    """``value`` with each ``${NAME}`` replaced by the environment variable NAME (KeyError: NAME not set)."""
    return _ENV_RE.sub(lambda m: os.environ[m.group(1)], value)


class _Reader:
    def __init__(self, add: Callable[[Path_, str], None], base: Path_) -> None:
        self.add, self.base, self.ok = add, base, True

    def sub(self, value: str, *where: str | int) -> str:
        try:
            return interpolate(value)
        except KeyError as exc:
            self.add((*self.base, *where), f"environment variable {exc.args[0]} is not set")
            self.ok = False
            return value

    def fail(self, message: str, *where: str | int) -> None:
        self.add((*self.base, *where), message)
        self.ok = False


def interpreter(command: str) -> str:
    """``command``, except that ``python`` and ``python3`` mean agentkit's own interpreter."""
    return sys.executable if command in ("python", "python3") else command


def _command(r: _Reader, spec: dict[str, Any], bundle_dir: Path) -> tuple[str, str | None]:
    cmd = r.sub(spec["command"], "command")
    cwd = r.sub(spec["cwd"], "cwd") if "cwd" in spec else None
    if cwd is not None and not Path(cwd).is_absolute():
        cwd = str(bundle_dir / cwd)
    if (exe := interpreter(cmd)) != cmd:  # no PATH lookup nor bundle-relative path for agentkit's own
        return exe, cwd
    if "/" in cmd and not Path(cmd).is_absolute():
        cmd = str(bundle_dir / cmd)
    if r.ok and shutil.which(cmd) is None:
        from agentkit.mcp.client import command_not_found

        why = command_not_found(cmd)
        r.fail(why if "is a file" in why else f"{why} (not on PATH, or not an executable file)", "command")
    return cmd, cwd


def toolset_of(spec: dict[str, Any], add: Callable[[Path_, str], None], at: Path_, bundle_dir: Path) -> Any:
    """One ``mcp:`` entry as an :class:`~agentkit.mcp.MCPToolset`, or ``None`` with its issues added."""
    from agentkit.mcp.client import MCPToolset

    r = _Reader(add, at)
    opts = {k: spec[k] for k in _OPTIONS if k in spec}
    if "url" in spec:  # exactly one of url and command, and only their own settings: checked by the schema
        url = r.sub(spec["url"], "url")
        parts = urlsplit(url)
        if r.ok and (parts.scheme not in ("http", "https") or not parts.hostname):
            r.fail(f"url must be http:// or https:// with a host, got {url!r}", "url")
        headers = {k: r.sub(v, "headers", k) for k, v in (spec.get("headers") or {}).items()}
        return MCPToolset.http(url, headers=headers, **opts) if r.ok else None
    cmd, cwd = _command(r, spec, bundle_dir)
    args = [r.sub(a, "args", i) for i, a in enumerate(spec.get("args") or [])]
    env = {k: r.sub(v, "env", k) for k, v in (spec.get("env") or {}).items()}
    return MCPToolset.stdio(cmd, args, env=env or None, cwd=cwd, **opts) if r.ok else None


def toolsets_of(
    specs: list[dict[str, Any]],
    add: Callable[[Path_, str], None],
    bundle_dir: Path,
    where: Callable[[Path_], str],
) -> list[MCPToolset]:
    """The bundle's toolsets; problems go to ``add(field_path, message)``, ``where(path)`` into start errors."""
    out: list[MCPToolset] = []
    for i, entry in enumerate(specs):
        at: Path_ = ("toolsets", i, "mcp")
        made = toolset_of(entry["mcp"], add, at, bundle_dir)
        if made is not None:
            made.opts.origin = f"{where(at)} toolsets[{i}].mcp"
            out.append(made)
    return out
