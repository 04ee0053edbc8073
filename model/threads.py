"""torch's intra-op thread count: the default agentkit sets, and ``--threads``. torch's own default (one thread per
core) collapses when another process holds a core (docs/BENCHMARKS.md), so the default is one thread on at most 2
usable cores, else half of them (at most 4). torch is imported only by :func:`apply_threads`."""

from __future__ import annotations

import os

#: Environment variable that sets the default thread count (an integer >= 1).
ENV_VAR = "AGENTKIT_THREADS"
#: The default never goes above this many threads.
MAX_DEFAULT_THREADS = 4
#: No setting may ask for more: past it the OS refuses torch's thread pool (a crash, or a segfault) or each
#: token takes seconds (1,024 threads on 2 cores: 30 times slower than 1).
MAX_THREADS = 1024


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS reports one), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


def default_threads(cores: int | None = None) -> int:
    """The intra-op thread count used when none is given: ``$AGENTKIT_THREADS`` when set, else a whole
    ``$OMP_NUM_THREADS`` >= 1, else 1 on at most 2 ``cores`` (default :func:`usable_cores`), else ``min(4, cores //
    2)``. ValueError for a ``$AGENTKIT_THREADS`` that is not an integer from 1 to :data:`MAX_THREADS`, or an
    ``$OMP_NUM_THREADS`` above it."""
    env = os.environ.get(ENV_VAR, "").strip()
    if env:
        if not env.isdigit() or int(env) < 1:
            raise ValueError(f"${ENV_VAR} must be an integer >= 1, got {env!r}")
        if int(env) > MAX_THREADS:
            raise ValueError(f"${ENV_VAR} must be at most {MAX_THREADS}, got {env!r}")
        return int(env)
    omp = os.environ.get("OMP_NUM_THREADS", "").strip()
    if omp.isdigit() and int(omp) > MAX_THREADS:
        raise ValueError(f"$OMP_NUM_THREADS must be at most {MAX_THREADS} for agentkit, got {omp!r}")
    if omp.isdigit() and int(omp) >= 1:
        return int(omp)
    n = usable_cores() if cores is None else cores
    return 1 if n <= 2 else min(MAX_DEFAULT_THREADS, n // 2)


def apply_threads(threads: int | None) -> int:
    """Set torch's intra-op threads to ``threads`` (``None``: :func:`default_threads`); returns the count set.
    ValueError outside 1 to :data:`MAX_THREADS` (``$OMP_NUM_THREADS`` included) or for a bad ``$AGENTKIT_THREADS``."""
    n = default_threads() if threads is None else threads
    if not 1 <= n <= MAX_THREADS:
        raise ValueError(f"threads must be from 1 to {MAX_THREADS}, got {n}")
    import torch

    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    return n
