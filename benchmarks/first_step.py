"""The main job's start-up and model time on this machine, quiet or with a busy neighbour, per thread setting.

Runs ``agentkit run examples/code_search/bundle.yaml "Where is the function load_bundle defined?" --json`` in a
fresh process per try and reports, per setting, the min and median of:

- ``first_step_s``: from just before the process starts to the end of the first denoising step (imports,
  bundle, checkpoint, prompt);
- ``model_s``: the run's time inside the backend (``timing.model_seconds``);
- ``wall_s``: the whole command.

``--busy`` runs ``python -c "while True: pass"`` pinned to the last core (``taskset``) while measuring: a
neighbour holding one core. Settings are interleaved per repeat so they share the machine's load.

Usage::

    .venv/bin/python benchmarks/first_step.py [--busy] [--repeats N] [--threads default,1,2] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BUNDLE = "examples/code_search/bundle.yaml"
QUESTION = "Where is the function load_bundle defined?"
_MARK = "FIRST_STEP_S="


def _child(argv: list[str]) -> None:
    """Run the CLI with ``argv``, printing the time of the first denoising step (from ``$FIRST_STEP_T0``)."""
    sys.path.insert(0, str(ROOT))
    from agentkit.backends.embedded import EmbeddedBackend

    t0 = float(os.environ["FIRST_STEP_T0"])
    seen: list[bool] = []
    init = EmbeddedBackend.__init__

    def on_event(_ev: Any) -> None:
        if not seen:
            seen.append(True)
            print(f"{_MARK}{time.time() - t0:.3f}", file=sys.stderr, flush=True)

    def patched(self: EmbeddedBackend, *a: Any, **kw: Any) -> None:
        kw.setdefault("on_event", on_event)
        init(self, *a, **kw)

    EmbeddedBackend.__init__ = patched  # type: ignore[method-assign]
    from agentkit.cli import app

    app(argv, prog_name="agentkit")


def _once(threads: str) -> dict[str, float]:
    """One run of the main job with ``--threads`` (``default``: none given)."""
    cmd = [sys.executable, __file__, "--child", "run", BUNDLE, QUESTION, "--json"]
    if threads != "default":
        cmd += ["--threads", threads]
    env = {**os.environ, "FIRST_STEP_T0": repr(time.time())}
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"exit {proc.returncode}: {proc.stderr[-2000:]}")
    first = next(float(x[len(_MARK) :]) for x in proc.stderr.splitlines() if x.startswith(_MARK))
    result = json.loads(proc.stdout)
    return {"first_step_s": first, "model_s": result["timing"]["model_seconds"], "wall_s": wall}


def _summary(rows: list[dict[str, float]]) -> dict[str, Any]:
    out: dict[str, Any] = {"n": len(rows)}
    for key in ("first_step_s", "model_s", "wall_s"):
        vals = [r[key] for r in rows]
        out[key] = {"min": round(min(vals), 2), "median": round(statistics.median(vals), 2)}
    return out


def main() -> None:
    """Measure and print one JSON object (``--json``) or a line per setting."""
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _child(sys.argv[2:])
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--busy", action="store_true", help="a busy-looping neighbour pinned to the last core")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", default="default,2", help="comma-separated: default or a number")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    settings = args.threads.split(",")
    neighbour = None
    if args.busy:
        last = str(max(os.sched_getaffinity(0)))
        spin = [sys.executable, "-c", "while True: pass"]
        neighbour = subprocess.Popen(["taskset", "-c", last, *spin])
    rows: dict[str, list[dict[str, float]]] = {s: [] for s in settings}
    try:
        for _ in range(args.repeats):
            for s in settings:
                rows[s].append(_once(s))
    finally:
        if neighbour is not None:
            neighbour.kill()
            neighbour.wait()
    report = {"busy": args.busy, "cores": len(os.sched_getaffinity(0)), "settings": {}}
    for s in settings:
        report["settings"][s] = {**_summary(rows[s]), "runs": rows[s]}
    if args.json:
        print(json.dumps(report))
        return
    for s, r in report["settings"].items():
        parts = [
            f"{k} min {r[k]['min']} median {r[k]['median']}" for k in ("first_step_s", "model_s", "wall_s")
        ]
        print(f"threads={s} busy={args.busy} n={r['n']}: " + "; ".join(parts))


if __name__ == "__main__":
    main()
