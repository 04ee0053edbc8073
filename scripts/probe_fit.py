"""Probe of a "does any offered tool fit?" score read from the copy head's binding tagger (issue #40;
docs/TRAINING.md, "Experiment 2026-12-06").

    .venv/bin/python scripts/probe_fit.py [-n 1000] [--seeds 1 0] [--keep 0.98] [--simulate EVAL.json]

For every held-out example (data seed each of ``--seeds``, first ``-n``) that is a call request or an unfit
request (tools offered, none fitting: small talk ``no_tool`` and another tool's job ``unanswerable``), the binder's
candidates (:func:`model.binding.scored_candidates`, one encoder pass, no decoding) give three scores:

* ``required``: per tool, the mean over its required string and number parameters of their best candidate's
  confidence (0 without a candidate); the max over tools; a tool without such parameters counts as fitting (1.0);
* ``required0``: the same, but a tool without such parameters scores 0;
* ``any``: the best candidate confidence of any parameter of any tool.

Prints one JSON object: per seed and score, the AUC of call requests (positives) against the unfit requests, all
and per kind, for the first 200 examples and for all ``-n``; the threshold that keeps ``--keep`` of the first
seed's call requests at or above it, and on every seed (and on BFCL simple_python's first ``--bfcl-n`` questions,
the dev category, all of which need their call) the share of call requests it keeps and the unfit requests
below it. ``--simulate`` takes ``agentkit eval heldout --json`` outputs of the same seed and size as the last seed
and adds, per score, the turn outcomes if every turn below the threshold answered in prose.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from typing import Any

from model.binding import label_request, scored_candidates
from model.binding.binder import kind_of
from model.threads import apply_threads
from model.training.data import Generator
from model.turn.chat import ChatModel
from schema import normalize_tool

CALL_KINDS = ("call", "parallel", "multi_call", "followup_call", "bot_call")
SCORES = ("required", "required0", "any")


def auc(pos: list[float], neg: list[float]) -> float:
    """Probability that a random positive scores above a random negative (ties count half); NaN if one is empty."""
    if not pos or not neg:
        return math.nan
    return sum((p > n) + 0.5 * (p == n) for p in pos for n in neg) / (len(pos) * len(neg))


def fit_scores(scored: dict[tuple[str, str], list[tuple[Any, float]]], specs: list[Any]) -> dict[str, float]:
    """The three scores (module docstring) of one request from its candidates ``{(tool, parameter): [(value,
    confidence 0..1), ...]}`` best first, and the turn's tools ``specs`` (``schema.ToolSpec``)."""
    best = {key: found[0][1] for key, found in scored.items() if found}
    per_tool: list[float | None] = []
    for spec in specs:
        props = spec.parameters.get("properties") or {}
        required = [
            p for p in spec.parameters.get("required") or [] if kind_of(props.get(p)) in ("string", "number")
        ]
        per_tool.append(
            statistics.mean(best.get((spec.name, p), 0.0) for p in required) if required else None
        )
    return {
        "required": max((1.0 if s is None else s for s in per_tool), default=0.0),
        "required0": max((0.0 if s is None else s for s in per_tool), default=0.0),
        "any": max(best.values(), default=0.0),
    }


def rows_of(cm: Any, seed: int, n: int) -> list[dict[str, Any]]:
    """``{"i", "kind", "unfit", **scores}`` for the call and unfit requests of the first ``n`` held-out examples."""
    rows = []
    for i, ex in enumerate(Generator(seed, "heldout").take(n)):
        unfit = ex.kind == "unanswerable" or (ex.kind == "no_tool" and bool(ex.tools))
        if not ex.tools or not (unfit or ex.kind in CALL_KINDS):
            continue
        labelling = label_request(cm.model, cm.tokenizer, cm.encode(ex.messages, ex.tools), ex.tools)
        specs = [normalize_tool(t) for t in ex.tools]
        scores = (
            fit_scores(scored_candidates(labelling, specs), specs)
            if labelling
            else dict.fromkeys(SCORES, 0.0)
        )
        rows.append({"i": i, "kind": ex.kind, "unfit": unfit, **scores})
    return rows


def bfcl_rows(cm: Any, n: int) -> list[dict[str, Any]]:
    """The scores of BFCL simple_python's first ``n`` questions (the dev category; every one needs its call)."""
    from evals.bfcl import load_category, to_openai_tools

    rows = []
    for i, q in enumerate(load_category("simple_python")[0][:n]):
        tools = to_openai_tools(q["function"])
        labelling = label_request(cm.model, cm.tokenizer, cm.encode(q["question"][0], tools), tools)
        specs = [normalize_tool(t) for t in tools]
        scores = (
            fit_scores(scored_candidates(labelling, specs), specs)
            if labelling
            else dict.fromkeys(SCORES, 0.0)
        )
        rows.append({"i": i, "kind": "call", "unfit": False, **scores})
    return rows


def separation(rows: list[dict[str, Any]], score: str) -> dict[str, float]:
    """AUC of ``score``: call requests against all unfit requests, small talk, another tool's job."""
    fit = [r[score] for r in rows if not r["unfit"]]
    return {
        group: round(auc(fit, [r[score] for r in rows if r["unfit"] and r["kind"] in kinds]), 3)
        for group, kinds in (("unfit", ("no_tool", "unanswerable")), ("small_talk", ("no_tool",)),
                             ("other_tool", ("unanswerable",)))
    }  # fmt: skip


def operating_point(rows: list[dict[str, Any]], score: str, threshold: float) -> dict[str, Any]:
    """Share of call requests at or above ``threshold``; unfit requests below it, per kind."""
    fit = [r[score] >= threshold for r in rows if not r["unfit"]]
    below = [r["kind"] for r in rows if r["unfit"] and r[score] < threshold]
    return {
        "fit_kept": round(sum(fit) / max(1, len(fit)), 4),
        "unfit_below": f"{len(below)}/{sum(r['unfit'] for r in rows)}",
        "small_talk_below": f"{below.count('no_tool')}/{sum(r['kind'] == 'no_tool' for r in rows)}",
        "other_tool_below": f"{below.count('unanswerable')}/{sum(r['kind'] == 'unanswerable' for r in rows)}",
    }


def simulate(
    rows: list[dict[str, Any]], evaluation: dict[str, Any], score: str, threshold: float
) -> dict[str, Any]:
    """Held-out outcomes (``evaluation``: ``agentkit eval heldout --json`` of the rows' seed) with every turn below
    ``threshold`` answered in prose: unfit in prose, call requests with a call, exact overall."""
    results, forced = evaluation["results"], {r["i"] for r in rows if r[score] < threshold}
    mine = list(enumerate(results))
    unfit = [r["calls_made"] == 0 or i in forced for i, r in mine if r["unfit"]]
    fit = [r["calls_made"] > 0 and i not in forced for i, r in mine if r["kind"] in CALL_KINDS]
    exact = [r["unfit"] if i in forced else bool(r["correct"]) for i, r in mine]
    return {
        "unfit_in_prose": f"{sum(unfit)}/{len(unfit)}",
        "fit_with_a_call": f"{sum(fit)}/{len(fit)}",
        "exact": round(sum(exact) / len(exact), 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("-n", type=int, default=1000, help="held-out examples per seed")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 0], help="data seeds; the first calibrates")
    ap.add_argument("--keep", type=float, default=0.98, help="share of the first seed's call requests kept")
    ap.add_argument(
        "--simulate", nargs="*", default=[], help="agentkit eval heldout --json outputs, last seed"
    )
    ap.add_argument("--bfcl-n", type=int, default=200, help="BFCL simple_python questions scored (0: none)")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    apply_threads(args.threads)
    cm = ChatModel.load(None)
    draws = {seed: rows_of(cm, seed, args.n) for seed in args.seeds}
    bfcl = bfcl_rows(cm, args.bfcl_n) if args.bfcl_n else []
    report: dict[str, Any] = {}
    for score in SCORES:
        dev = sorted(r[score] for r in draws[args.seeds[0]] if not r["unfit"])
        threshold = dev[int((1 - args.keep) * len(dev))]
        entry: dict[str, Any] = {"threshold": round(threshold, 4)}
        for seed, rows in draws.items():
            entry[f"seed {seed}"] = {
                "auc_first_200": separation([r for r in rows if r["i"] < 200], score),
                f"auc_first_{args.n}": separation(rows, score),
                "at_threshold": operating_point(rows, score, threshold),
            }
        for path in args.simulate:
            with open(path) as f:
                evaluation = json.load(f)
            last = [r for r in draws[args.seeds[-1]] if r["i"] < len(evaluation["results"])]
            entry[f"simulated {path}"] = simulate(last, evaluation, score, threshold)
        if bfcl:
            entry["bfcl simple_python kept"] = operating_point(bfcl, score, threshold)["fit_kept"]
        report[score] = entry
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
