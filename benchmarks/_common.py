"""Shared helpers of the benchmark scripts: target records and the one-JSON-object output."""

from __future__ import annotations

import json
import sys
from typing import Any


def target(name: str, value: float | None, goal: float, higher_is_better: bool) -> dict[str, Any]:
    """A target record: ``value`` is ``None`` when it could not be measured here (never hidden, never lowered)."""
    met = None if value is None else (value >= goal if higher_is_better else value <= goal)
    return {"name": name, "value": value, "target": goal, "higher_is_better": higher_is_better, "met": met}


def emit(report: dict[str, Any], as_json: bool) -> None:
    """Print ``report`` as one JSON object (``--json``) or as a readable summary of its targets."""
    if as_json:
        json.dump(report, sys.stdout)
        sys.stdout.write("\n")
        return
    for t in report.get("targets", []):
        status = {True: "MET", False: "MISSED", None: "NOT MEASURED"}[t["met"]]
        cmp = ">=" if t["higher_is_better"] else "<="
        print(f"  target {t['name']}: {t['value']} ({cmp} {t['target']}) {status}")
