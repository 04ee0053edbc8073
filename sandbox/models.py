"""Value types of the sandbox: resource :class:`Limits` and the :class:`Execution` result."""

from __future__ import annotations

import base64
import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any

from sandbox.errors import SandboxInputError

__all__ = ["MIB", "Execution", "Limits", "parse_size"]

MIB = 1024 * 1024
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)
_SIZE_MULT = {"": 1, "k": 1024, "m": MIB, "g": 1024 * MIB, "t": 1024 * 1024 * MIB}


def parse_size(value: int | str, *, what: str = "size") -> int:
    """Bytes of an int or a string such as ``"256m"``, ``"1.5g"``, ``"64MiB"`` (binary units);
    :class:`SandboxInputError` naming ``what`` on bad input."""
    if isinstance(value, bool):
        raise SandboxInputError(f"{what}: expected a byte count, got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise SandboxInputError(f"{what}: must be >= 0 bytes, got {value}")
        return value
    m = _SIZE_RE.match(str(value))
    if not m:
        raise SandboxInputError(f"{what}: cannot parse {value!r} as a size (examples: 262144, '256m', '1g')")
    return int(float(m.group(1)) * _SIZE_MULT[m.group(2).lower()])


@dataclass(frozen=True)
class Limits:
    """Resource limits of one sandbox container (sizes in bytes; the defaults are the hardened ones).

    ``memory_bytes`` (swap the same: none; over it, ``Execution.oom_killed``), ``cpus`` (CPU quota in cores),
    ``pids`` (processes and threads), ``workdir_bytes`` / ``tmp_bytes`` (the tmpfs at ``/work`` and ``/tmp``),
    ``output_bytes`` (kept of each of stdout and stderr), ``files_out_bytes`` (total of
    ``Execution.files_out``), ``runtime`` (OCI runtime, ``None`` for the engine's default, ``"runsc"`` for
    gVisor, which needs ``pids >= 1024``). :class:`SandboxInputError` names a field out of range.
    """

    memory_bytes: int = 256 * MIB
    cpus: float = 1.0
    pids: int = 64
    workdir_bytes: int = 64 * MIB
    tmp_bytes: int = 16 * MIB
    output_bytes: int = 64 * 1024
    files_out_bytes: int = 8 * MIB
    runtime: str | None = None

    def __post_init__(self) -> None:
        checks: list[tuple[str, bool, str]] = [
            ("memory_bytes", self.memory_bytes >= 16 * MIB, ">= 16 MiB"),
            ("cpus", 0.01 <= self.cpus <= 64, "between 0.01 and 64 cores"),
            ("pids", 8 <= self.pids <= 65536, "between 8 and 65536"),
            ("workdir_bytes", MIB <= self.workdir_bytes <= 16 * 1024 * MIB, "between 1 MiB and 16 GiB"),
            ("tmp_bytes", MIB <= self.tmp_bytes <= 16 * 1024 * MIB, "between 1 MiB and 16 GiB"),
            ("output_bytes", 64 <= self.output_bytes <= 256 * MIB, "between 64 B and 256 MiB"),
            ("files_out_bytes", 0 <= self.files_out_bytes <= 1024 * MIB, "between 0 and 1 GiB"),
        ]
        for name, ok, expected in checks:
            if not ok:
                raise SandboxInputError(
                    f"Limits.{name}={getattr(self, name)!r} out of range: must be {expected}"
                )
        if self.runtime is not None and not re.fullmatch(r"[A-Za-z0-9_.-]+", self.runtime):
            raise SandboxInputError(f"Limits.runtime={self.runtime!r} is not a runtime name (e.g. 'runsc')")
        if self.runtime == "runsc" and self.pids < 1024:
            raise SandboxInputError(
                f"Limits.pids={self.pids} is too low for gVisor: runsc needs pids >= 1024 "
                "(it runs its own threads inside the container's pids cgroup)"
            )

    @classmethod
    def from_options(
        cls,
        *,
        memory: int | str | None = None,
        cpus: float | None = None,
        pids: int | None = None,
        runtime: str | None = None,
    ) -> Limits:
        """Limits from CLI-style options (sizes may be strings like ``"512m"``) over the defaults."""
        given: dict[str, Any] = {"cpus": cpus, "pids": pids, "runtime": runtime}
        if memory is not None:
            given["memory_bytes"] = parse_size(memory, what="memory")
        return cls(**{k: v for k, v in given.items() if v is not None})


@dataclass
class Execution:
    """The result of one :meth:`sandbox.Sandbox.run`.

    ``stdout`` / ``stderr``: decoded output (errors replaced), each capped at ``Limits.output_bytes`` and then
    ending ``[... truncated N bytes]``; ``exit_code``: 137 when killed (timeout or OOM), -1 when the engine
    reported none; ``timed_out``, ``oom_killed``: what ended it; ``duration_s``: seconds in the container;
    ``files_out``: ``{relative path: bytes}`` created or changed, for the ``collect=`` globs; ``truncated``: a
    stream or ``files_out`` hit its cap; ``container_id``: the single-use container; ``warm``: it came from the
    pool.
    """

    stdout: str
    stderr: str
    exit_code: int
    timed_out: bool = False
    oom_killed: bool = False
    duration_s: float = 0.0
    files_out: dict[str, bytes] = field(default_factory=dict)
    truncated: bool = False
    container_id: str = ""
    warm: bool = False

    @property
    def ok(self) -> bool:
        """True when the program exited 0 without timeout or OOM."""
        return self.exit_code == 0 and not self.timed_out and not self.oom_killed

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict. ``files_out`` values become ``{"encoding": "utf-8"|"base64", "content"}``."""
        files: dict[str, dict[str, str]] = {}
        for name, data in self.files_out.items():
            try:
                files[name] = {"encoding": "utf-8", "content": data.decode("utf-8")}
            except UnicodeDecodeError:
                files[name] = {"encoding": "base64", "content": base64.b64encode(data).decode("ascii")}
        return {**dataclasses.asdict(self), "duration_s": round(self.duration_s, 4), "files_out": files}
