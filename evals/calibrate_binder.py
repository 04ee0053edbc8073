"""Calibrate the copy-head binder's forcing thresholds on dev splits, one threshold per kind of parameter.

Two dev sources: the synthetic data's dev stream (``Generator(1, "heldout")``; the held-out evaluation reads
seed 0, so they never share an example) and BFCL's shipped categories (the project's dev set: they were
studied question by question; BFCL's live categories, the test set, are never read). For every expected argument
that has candidates (:func:`model.binding.scored_candidates`), the best candidate's confidence and whether it
is the expected value (BFCL: one of the accepted values, after BFCL's string normalisation) are collected, by
kind: ``string``, ``number`` (integers and numbers) and ``array``. The curve gives, per threshold, the share of
those arguments whose best candidate would be forced (coverage) and the share of forced values that are right
(precision); the threshold kept for a kind is the lowest whose precision reaches ``--precision`` on every
source, or none (that kind is never forced); ``--precision`` defaults to the shipped
``model.binding.binder.FORCE_PRECISION``.

Usage: ``python -m evals.calibrate_binder [-n 300] [--bfcl-n 200] [--precision P] [--json]``.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

THRESHOLDS = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 0.98)
KINDS = ("string", "number", "array")
Point = tuple[str, float, bool]


def _kind(schema: Any) -> str | None:
    t = schema.get("type") if isinstance(schema, dict) else None
    t = next((x for x in t if x != "null"), None) if isinstance(t, list) else t
    return {"string": "string", "integer": "number", "number": "number", "array": "array"}.get(t or "")


def _same(got: Any, accepted: list[Any]) -> bool:
    from evals.bfcl import normalize_string

    def norm(v: Any) -> Any:
        if isinstance(v, str):
            return normalize_string(v)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v)
        if isinstance(v, list):
            return [norm(x) for x in v]
        return v

    return norm(got) in [norm(a) for a in accepted]


def _points(
    cm: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]], expected: Any
) -> list[Point]:
    """``(kind, confidence, right)`` for every expected ``{tool: {param: [accepted...]}}`` argument with candidates."""
    from model.binding import label_request, scored_candidates
    from schema import normalize_tool

    labelling = label_request(cm.model, cm.tokenizer, cm.encode(messages, tools), tools)
    if labelling is None:
        return []
    specs = [normalize_tool(t) for t in tools]
    schemas = {(s.name, p): v for s in specs for p, v in (s.parameters.get("properties") or {}).items()}
    scored = scored_candidates(labelling, specs)
    out = []
    for name, args in expected:
        for param, accepted in args.items():
            found, kind = scored.get((name, param)), _kind(schemas.get((name, param)))
            if found and kind:
                out.append((kind, found[0][1], _same(found[0][0], accepted)))
    return out


def collect(n: int, bfcl_n: int) -> dict[str, list[Point]]:
    """The points of both dev sources: ``{"synthetic": [...], "bfcl": [...]}``."""
    import torch

    from evals.bfcl import load_category, to_openai_tools
    from model.training.data import Generator
    from model.turn.chat import ChatModel

    torch.set_num_threads(1)
    cm = ChatModel.load(None)
    synthetic: list[Point] = []
    for ex in Generator(1, "heldout").take(n):
        if ex.calls and ex.tools:
            expected = [(name, {k: [v] for k, v in args.items()}) for name, args in ex.calls]
            synthetic += _points(cm, ex.messages, ex.tools, expected)
    bfcl: list[Point] = []
    questions, answers = load_category("simple_python")
    for q in questions[:bfcl_n]:
        expected = [(name, args) for call in answers[q["id"]] for name, args in call.items()]  # type: ignore[index]
        bfcl += _points(cm, q["question"][0], to_openai_tools(q["function"]), expected)
    return {"synthetic": synthetic, "bfcl": bfcl}


def curve(points: list[Point], kind: str) -> list[dict[str, float]]:
    """Coverage and precision of forcing the best candidate of ``kind`` arguments at each of :data:`THRESHOLDS`."""
    mine = [(c, right) for k, c, right in points if k == kind]
    rows = []
    for t in THRESHOLDS:
        forced = [right for c, right in mine if c >= t]
        rows.append(
            {
                "threshold": t,
                "coverage": len(forced) / max(1, len(mine)),
                "precision": sum(forced) / len(forced) if forced else 1.0,
                "n_forced": len(forced),
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("-n", type=int, default=300, help="examples of the synthetic dev stream read")
    p.add_argument("--bfcl-n", type=int, default=200, help="BFCL simple_python (dev) questions read")
    from model.binding.binder import FORCE_PRECISION

    p.add_argument(
        "--precision", type=float, default=FORCE_PRECISION, help="precision a threshold must reach"
    )
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    points = collect(a.n, a.bfcl_n)
    report: dict[str, Any] = {"thresholds": {}, "curves": {}}
    for kind in KINDS:
        curves = {src: curve(pts, kind) for src, pts in points.items()}
        report["curves"][kind] = curves
        ok = [
            t
            for i, t in enumerate(THRESHOLDS)
            if all(rows[i]["precision"] >= a.precision for rows in curves.values())
        ]
        report["thresholds"][kind] = ok[0] if ok else None
    if a.json:
        print(json.dumps(report))
        return 0
    for kind in KINDS:
        n = {src: sum(k == kind for k, _, _ in pts) for src, pts in points.items()}
        print(f"{kind}: arguments with candidates {n}; threshold {report['thresholds'][kind]}")
        print("  threshold  " + "  ".join(f"{src:>26s}" for src in points))
        for i, t in enumerate(THRESHOLDS):
            cells = [report["curves"][kind][src][i] for src in points]
            print(
                f"  {t:9.2f}  "
                + "  ".join(
                    f"cov {c['coverage']:.3f} prec {c['precision']:.3f} ({c['n_forced']:3.0f})" for c in cells
                )
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
