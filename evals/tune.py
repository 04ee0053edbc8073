"""Tune the shipped denoising settings on the held-out split.

``python -m evals.tune CHECKPOINT [--limit N] [--rows I,J,...] [--write]`` scores the rows of
:data:`GRID` (all, or those numbered from 0) and prints one JSON object per row; ``--write`` stores the best
(accuracy, ties: lower latency) in ``generation_config.json`` and ``agentkit_decoding.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from evals.heldout import evaluate_heldout
from model.checkpoint.loading import DECODING_FILE, DECODING_KEYS
from model.errors import CheckpointError
from model.threads import apply_threads
from model.training.train import generation_config
from model.turn.chat import ChatModel

#: The :class:`model.runtime.settings.DenoiseSettings` fields a :data:`GRID` row sets: the generation config's
#: four, then the decoding file's (:data:`DECODING_KEYS`).
FIELDS = ("t_max", "t_min", "max_denoising_steps", "entropy_bound", *DECODING_KEYS)
Setting = tuple[float, float, int, float, int | None, bool, bool, int | None, int, bool, bool, bool]
#: Candidate settings, one tuple of :data:`FIELDS` per row.
GRID: tuple[Setting, ...] = (
    (0.4, 0.1, 32, 0.1, None, False, True, None, 1, False, False, False),
    (0.1, 0.02, 32, 0.1, None, False, True, None, 1, False, False, False),
    (0.4, 0.1, 32, 0.1, 4, False, True, None, 1, False, False, False),
    (0.4, 0.1, 32, 0.1, 4, True, True, None, 1, False, False, False),
    (0.1, 0.02, 32, 0.1, 4, True, True, None, 1, False, False, False),
    (0.2, 0.05, 48, 0.1, 2, True, True, None, 1, False, False, False),
    (0.1, 0.02, 64, 0.1, 1, True, True, None, 1, False, False, False),
    (0.8, 0.4, 32, 0.1, 4, True, True, None, 1, False, False, False),
    # prose strictly left to right (one position per step), calls as before: a canvas needs up to 64 steps
    (0.1, 0.02, 64, 0.1, 1, True, False, None, 1, False, False, False),
    (0.4, 0.1, 64, 0.1, 1, True, False, None, 1, False, False, False),
    # row 9 with calls in bites of 4 tokens (prose stays one position per step)
    (0.4, 0.1, 64, 0.1, 1, True, False, 4, 1, False, False, False),
    # row 9 with prose words not repeated within 3 tokens
    (0.4, 0.1, 64, 0.1, 1, True, False, None, 3, False, False, False),
    # row 11 with bound values: the copy head's binding classifier fixes the words of bound parameters
    (0.4, 0.1, 64, 0.1, 1, True, False, None, 3, True, False, False),
    # row 12 with grounded answers: prose copies the conversation's numbers and dates whole
    (0.4, 0.1, 64, 0.1, 1, True, False, None, 3, True, True, False),
    # row 12 with whole-span copies in answers (a started tool-response span is committed in one decision)
    (0.4, 0.1, 64, 0.1, 1, True, False, None, 3, True, False, True),
)


def grid_rows(rows: list[int] | None) -> list[Setting]:
    """The :data:`GRID` settings numbered ``rows`` (``None``: all); ``ValueError`` for a number outside it."""
    if rows is None:
        return list(GRID)
    if any(not 0 <= r < len(GRID) for r in rows):
        raise ValueError(f"GRID rows are numbered 0..{len(GRID) - 1}, got {','.join(map(str, rows))}")
    return [GRID[r] for r in rows]


def tune(
    checkpoint: str, limit: int = 40, threads: int = 1, rows: list[int] | None = None
) -> list[dict[str, Any]]:
    """Score the :data:`GRID` rows numbered ``rows`` (:func:`grid_rows`) on ``limit`` held-out examples."""
    settings = grid_rows(rows)

    apply_threads(threads)
    cm = ChatModel.load(checkpoint)
    base = cm.settings
    out = []
    for setting in settings:
        row = dict(zip(FIELDS, setting, strict=True))
        cm.settings = base.replace(**row)
        rep = evaluate_heldout(cm, limit=limit, binder="auto")
        out.append(
            {
                **row,
                "accuracy": rep["accuracy"],
                "call_accuracy": rep["call_accuracy"],
                "mean_latency_s": rep["mean_latency_s"],
                "by_kind": rep["by_kind"],
            }
        )
        print(json.dumps(out[-1]), flush=True)
    return out


def write_best(checkpoint: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Write the most accurate setting (ties: lower latency) into ``checkpoint/generation_config.json``."""
    best = max(rows, key=lambda r: (r["accuracy"], -r["mean_latency_s"]))
    with open(f"{checkpoint}/config.json") as fh:
        canvas = int(json.load(fh)["canvas_length"])
    keys = ("t_max", "t_min", "max_denoising_steps", "entropy_bound")
    generation_config(canvas, {k: best[k] for k in keys}).save_pretrained(checkpoint)
    with open(f"{checkpoint}/{DECODING_FILE}", "w") as fh:
        json.dump({k: best[k] for k in DECODING_KEYS}, fh)
        fh.write("\n")
    return best


def main(argv: list[str] | None = None) -> int:
    """CLI entry point."""
    ap = argparse.ArgumentParser(prog="python -m evals.tune")
    ap.add_argument("checkpoint")
    ap.add_argument("--limit", type=int, default=40, help="held-out examples scored per row (>= 1)")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (>= 1)")
    ap.add_argument("--rows", default=None, help="comma-separated GRID row numbers (default: every row)")
    ap.add_argument("--write", action="store_true")
    a = ap.parse_args(argv)
    if a.limit < 1:
        ap.error(f"--limit must be >= 1, got {a.limit}")
    if a.threads < 1:
        ap.error(f"--threads must be >= 1, got {a.threads}")
    picked = None
    if a.rows is not None:
        try:
            picked = [int(x) for x in a.rows.split(",")]
        except ValueError:
            ap.error(f"--rows takes comma-separated row numbers, got {a.rows!r}")
        try:
            grid_rows(picked)
        except ValueError as exc:
            ap.error(f"--rows: {exc}")
    try:
        rows = tune(a.checkpoint, a.limit, a.threads, picked)
    except CheckpointError as exc:
        print(f"python -m evals.tune: {exc}", file=sys.stderr)
        return 2
    if a.write:
        print(json.dumps({"best": write_best(a.checkpoint, rows)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
