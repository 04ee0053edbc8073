"""The binder with and without declining on one held-out draw (issue #40; docs/TRAINING.md, "Declining when no
tool fits"): each request's outcome both ways and the requests that changed.

    .venv/bin/python scripts/eval_decline.py [-n 600] [--seed 1] [--threads 1]

Prints one JSON object: per way (``declining``, ``not_declining``) the report's exact share, calls exactly right,
unfit requests in prose and fit requests with a call; then ``changed``: ``[index, kind, before, after]`` per
request whose score changed.
"""

from __future__ import annotations

import argparse
import json

from evals.heldout import evaluate_heldout
from model.binding import CopyHeadBinder
from model.threads import apply_threads
from model.turn.chat import ChatModel


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=600)
    ap.add_argument(
        "--seed", type=int, default=1, help="held-out data seed (1: the dev draw, 0: the confirm split)"
    )
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    apply_threads(a.threads)
    cm = ChatModel.load(None)
    reports = {
        way: evaluate_heldout(cm, limit=a.n, seed=a.seed, binder=CopyHeadBinder(decline=decline))
        for way, decline in (("declining", True), ("not_declining", False))
    }
    keys = ("accuracy", "call_accuracy", "unfit_in_prose", "fit_with_a_call")
    out: dict = {way: {k: r[k] for k in keys} for way, r in reports.items()}
    after, before = reports["declining"]["results"], reports["not_declining"]["results"]
    out["changed"] = [
        [i, b["kind"], b["correct"], x["correct"]]
        for i, (b, x) in enumerate(zip(before, after, strict=True))
        if b["correct"] != x["correct"]
    ]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
