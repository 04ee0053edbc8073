"""Calibrate the copy-head binder's forcing threshold on a dev split of the synthetic data.

For every call example of ``Generator(seed, "heldout")`` (seed 1 by default: the held-out evaluation uses
seed 0, so the two never share an example), the binder's best candidate for each parameter of the expected
calls (:func:`model.binding.scored_candidates`) is compared with the expected argument. The curve gives, for
each confidence threshold, the share of parameters whose best candidate would be forced (coverage) and the share
of those forced values that are right (precision); the threshold kept is the lowest whose precision reaches
``--precision`` (0.9 by default).

Usage: ``python -m evals.calibrate_binder [-n 300] [--seed 1] [--precision 0.9] [--json]``.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

THRESHOLDS = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 0.98)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return float(a) == float(b)
    return bool(a == b)


def collect(n: int, seed: int) -> list[tuple[float, bool]]:
    """``[(confidence, right)]`` of the best candidate of every expected argument that has candidates, over the
    call examples among the first ``n`` examples of the dev stream."""
    import torch

    from model.binding import label_request, scored_candidates
    from model.chat import ChatModel
    from model.constraints.schema import normalize_tool
    from model.training.data import Generator

    torch.set_num_threads(1)
    cm = ChatModel.load(None)
    out: list[tuple[float, bool]] = []
    for ex in Generator(seed, "heldout").take(n):
        if not ex.calls or not ex.tools:
            continue
        ids = cm.encode(ex.messages, ex.tools)
        labelling = label_request(cm.model, cm.tokenizer, ids, ex.tools)
        if labelling is None:
            continue
        scored = scored_candidates(labelling, [normalize_tool(t) for t in ex.tools])
        for name, args in ex.calls:
            for param, value in args.items():
                found = scored.get((name, param))
                if found:
                    out.append((found[0][1], _same(found[0][0], value)))
    return out


def curve(points: list[tuple[float, bool]]) -> list[dict[str, float]]:
    """Coverage and precision of forcing the best candidate at each of :data:`THRESHOLDS`."""
    rows = []
    for t in THRESHOLDS:
        forced = [right for conf, right in points if conf >= t]
        rows.append(
            {
                "threshold": t,
                "coverage": len(forced) / max(1, len(points)),
                "precision": sum(forced) / len(forced) if forced else 1.0,
                "n_forced": len(forced),
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-n", type=int, default=300, help="examples of the dev stream read")
    p.add_argument("--seed", type=int, default=1, help="dev stream seed (the held-out evaluation uses 0)")
    p.add_argument("--precision", type=float, default=0.9, help="precision the threshold must reach")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    points = collect(a.n, a.seed)
    rows = curve(points)
    chosen = next((r["threshold"] for r in rows if r["precision"] >= a.precision), None)
    any_right = sum(r for _, r in points) / max(1, len(points))
    report = {
        "n_arguments": len(points),
        "best_candidate_right": any_right,
        "curve": rows,
        "threshold": chosen,
    }
    if a.json:
        print(json.dumps(report))
        return 0
    print(f"{len(points)} arguments with candidates; best candidate right {any_right:.3f}")
    print("threshold  coverage  precision  forced")
    for r in rows:
        print(f"{r['threshold']:9.2f}  {r['coverage']:8.3f}  {r['precision']:9.3f}  {r['n_forced']:6d}")
    print(f"threshold for precision >= {a.precision}: {chosen}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
