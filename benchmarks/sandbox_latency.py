"""Sandbox latency per execution: cold container, warm pool, and llm-sandbox, on the same engine and image.

A small snippet (``print(sum(range(1000)))``) is run N times in each configuration, interleaved round-robin so
that all share the machine's load; each sample is the wall time from the call until the result is in hand:

- ``cold``: ``Sandbox(pool_size=0).run``: create + start a hardened container, one exec; the container is
  removed in the background afterwards (not timed, but finished before the next sample).
- ``warm``: ``Sandbox(pool_size=2).run`` with the pool full: one ``docker exec`` into a pre-started container.
- ``llm_sandbox_fresh``: llm-sandbox (PyPI) with one session per execution, i.e. the same isolation as ours
  (one container per execution): ``SandboxSession(...).open()`` + ``run()``; closing is not timed.
- ``llm_sandbox_reused``: llm-sandbox's best case, one open session whose container serves every execution
  (state leaks between executions; shown for reference).

llm-sandbox runs offline against the local image (``image=``, ``skip_environment_setup=True``, an idle command
since the image has none, ``keep_template=True`` so it never deletes the image); our image links ``python``
to ``python3`` because llm-sandbox calls ``python``.

Usage::

    .venv/bin/python benchmarks/sandbox_latency.py [--quick] [--json] [--runs N]

Targets: warm-pool p50 <= 100 ms; llm-sandbox p50 / warm-pool p50 >= 3 (per execution, both isolation levels
reported; fresh-session is the like-for-like comparison).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import emit, target

SNIPPET = "print(sum(range(1000)))"
EXPECTED = "499500\n"
TARGET_WARM_P50_MS = 100.0
TARGET_SPEEDUP = 3.0


def _stats(samples: list[float]) -> dict[str, float]:
    ms = sorted(1000 * s for s in samples)
    p95 = statistics.quantiles(ms, n=20, method="inclusive")[18] if len(ms) >= 2 else ms[0]
    return {"p50_ms": round(statistics.median(ms), 1), "p95_ms": round(p95, 1), "n": len(ms)}


def _llm_sandbox_runners(image: str) -> tuple[Callable[[], Any], Callable[[], Any], Callable[[], None]] | str:
    try:
        from llm_sandbox import SandboxSession
    except ImportError:
        return "llm-sandbox not installed (pip install -e '.[dev]' or pip install llm-sandbox)"

    def session() -> Any:
        return SandboxSession(
            lang="python",
            image=image,
            skip_environment_setup=True,
            keep_template=True,
            runtime_configs={"command": ["sleep", "infinity"], "init": True},
            verbose=False,
        )

    def fresh() -> tuple[str, Callable[[], None]]:
        s = session()
        s.open()
        out = s.run(SNIPPET).stdout
        return out, s.close

    reused = session()
    reused.open()

    def again() -> tuple[str, Callable[[], None]]:
        return reused.run(SNIPPET).stdout, lambda: None

    return fresh, again, reused.close


def measure(runs: int, warmup: int = 2) -> dict[str, Any]:
    from sandbox import Sandbox
    from sandbox.image import default_image

    image = default_image()
    cold_sb = Sandbox(image, pool_size=0)
    warm_sb = Sandbox(image, pool_size=2)
    warm_sb.wait_ready(120)

    def ours(sb: Sandbox) -> Callable[[], tuple[str, Callable[[], None]]]:
        def go() -> tuple[str, Callable[[], None]]:
            ex = sb.run(SNIPPET)
            if ex.exit_code != 0:
                raise RuntimeError(f"sandbox run failed: {ex}")
            return ex.stdout, lambda: None

        return go

    configs: dict[str, Callable[[], tuple[str, Callable[[], None]]]] = {
        "cold": ours(cold_sb),
        "warm": ours(warm_sb),
    }
    llm = _llm_sandbox_runners(image)
    close_llm: Callable[[], None] = lambda: None  # noqa: E731
    llm_note = ""
    if isinstance(llm, str):
        llm_note = llm
    else:
        configs["llm_sandbox_fresh"], configs["llm_sandbox_reused"], close_llm = llm
    samples: dict[str, list[float]] = {k: [] for k in configs}
    try:
        for i in range(warmup + runs):
            for name, fn in configs.items():
                cold_sb.wait_ready(60)
                warm_sb.wait_ready(60)
                t0 = time.perf_counter()
                out, cleanup = fn()
                dt = time.perf_counter() - t0
                cleanup()
                if out != EXPECTED:
                    raise RuntimeError(f"{name}: unexpected output {out!r}")
                if i >= warmup:
                    samples[name].append(dt)
    finally:
        close_llm()
        cold_sb.close()
        warm_sb.close()
    result: dict[str, Any] = {name: _stats(s) for name, s in samples.items()}
    result["note"] = llm_note
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="10 runs per configuration instead of 50 (~20 s)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument(
        "--runs", type=int, default=None, help="timed runs per configuration (default 50, quick 10)"
    )
    args = ap.parse_args(argv)
    runs = args.runs or (10 if args.quick else 50)
    from sandbox import SandboxError

    try:
        res = measure(runs)
    except SandboxError as exc:
        print(f"sandbox unavailable: {exc}", file=sys.stderr)
        return 2
    warm = res["warm"]["p50_ms"]
    fresh = res.get("llm_sandbox_fresh", {}).get("p50_ms")
    reused = res.get("llm_sandbox_reused", {}).get("p50_ms")
    report = {
        "benchmark": "sandbox_latency",
        "snippet": SNIPPET,
        "runs": runs,
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "cpus": os.cpu_count(),
        **res,
        "targets": [
            target("warm_pool_p50_ms", warm, TARGET_WARM_P50_MS, False),
            target(
                "speedup_vs_llm_sandbox_fresh_session_p50",
                round(fresh / warm, 2) if fresh else None,
                TARGET_SPEEDUP,
                True,
            ),
            target(
                "speedup_vs_llm_sandbox_reused_session_p50",
                round(reused / warm, 2) if reused else None,
                TARGET_SPEEDUP,
                True,
            ),
        ],
    }
    if args.json:
        emit(report, True)
        return 0
    print(f"sandbox latency per execution of {SNIPPET!r}, {runs} runs each (ms, wall time to result)")
    print(f"{'':22s}{'p50':>8s}{'p95':>8s}")
    for name in ("cold", "warm", "llm_sandbox_fresh", "llm_sandbox_reused"):
        if name in res:
            print(f"{name:22s}{res[name]['p50_ms']:8.1f}{res[name]['p95_ms']:8.1f}")
    if res["note"]:
        print(f"llm-sandbox: {res['note']}")
    print(f"load average (1 min) {report['load_avg_1m']} on {report['cpus']} CPUs")
    emit(report, False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
