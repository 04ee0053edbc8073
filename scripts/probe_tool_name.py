"""Probe of signs of whether a request fits an offered tool (issue #40; docs/TRAINING.md, "Experiment 2026-12-07
(2)" and "Declining when no tool fits": the library's rule, :func:`model.binding.fit.no_tool_fits`, is the third).

    .venv/bin/python scripts/probe_tool_name.py [-n 600] [--seed 1] [--bfcl simple_python] [--threads 1]

1. The model's own tool name: after the prompt's prefill, a canvas opening with ``<|tool_call>call:`` and uniform
   noise; each decoder pass commits the argmax of the next position, until a character no name holds (at most 12).
   ``fit``: the best :class:`difflib.SequenceMatcher` ratio against an offered name (or its last dotted part), or 1
   when a word after the first (the verb) is shared (4+ letters may match as a prefix)
   (``model.turn.prefill.Prefill.draft``, :func:`model.binding.fit.name_fit`).
2. The binding tagger: per tool, the lowest over its required parameters of the highest probability any request
   token has for it; the request's score is the best tool's (``req``).
3. The binder's rule: no content word shared with any declaration (``shares_a_word``) and ``fit`` below a
   threshold (``declined_no_shared_word_and_fit_below``).

On the held-out split (data seed ``--seed``, the first ``-n`` examples with tools): the call requests against the
requests for another tool's job and small talk, AUC and counts below thresholds. With ``--bfcl CATEGORY``: that
shipped BFCL category's requests (all fit), the counts below thresholds. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import torch
from probe_decline import CALL_KINDS, auc

from evals.bfcl import load_category, to_openai_tools
from model.binding.fit import TOOL_NAME, name_fit, shares_a_word
from model.binding.labelling import label_request
from model.threads import apply_threads
from model.training.data import Generator
from model.turn.chat import ChatModel
from model.turn.prefill import prefill_prompt
from schema import normalize_tool

THRESHOLDS = (0.3, 0.35, 0.4, 0.45, 0.5)


def tagger_req(cm: ChatModel, ids: list[int], tools: list[dict[str, Any]], pf: Any) -> float | None:
    """The binding tagger's relevance score of the request (see the module docstring); ``None`` without one."""
    lab = label_request(
        cm.model, cm.tokenizer, ids, tools, None if pf.memory is None else pf.memory.keys, pf.hidden
    )
    if lab is None:
        return None
    lo, hi = lab.user
    best = lab.logp[lab.token_at(lo) : lab.token_at(hi - 1) + 1].exp()[:, 1:].max(0).values
    scores = []
    for t in tools:
        f = t.get("function", t)
        req = set((f.get("parameters") or {}).get("required") or [])
        vals = [float(best[k]) for k, (tn, pn, _, _) in enumerate(lab.keys) if tn == f["name"] and pn in req]
        if vals:
            scores.append(min(vals))
    return max(scores) if scores else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=600)
    ap.add_argument("--seed", type=int, default=1, help="held-out data seed (1: the dev draw)")
    ap.add_argument("--bfcl", default=None, help="a shipped BFCL category instead of the held-out split")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    apply_threads(a.threads)
    cm = ChatModel.load(None)
    if a.bfcl:
        questions, _ = load_category(a.bfcl)
        items = [
            (
                "fit",
                "bfcl",
                q["question"][0] if isinstance(q["question"][0], list) else q["question"],
                to_openai_tools(q["function"]),
            )
            for q in questions
        ]
    else:
        items = []
        for e in Generator(a.seed, "heldout").take(a.n):
            lab = (
                "fit" if e.kind in CALL_KINDS else "unfit" if e.kind in ("unanswerable", "no_tool") else None
            )
            if e.tools and lab is not None:
                items.append((lab, e.kind, e.messages, e.tools))
    rows = []
    for lab, kind, messages, tools in items:
        try:
            ids = cm.encode(messages, tools)
        except ValueError:  # a prompt longer than the checkpoint's positions
            continue
        pf = prefill_prompt(cm.model, torch.tensor([ids]))
        name = pf.draft(cm.model, cm.tokenizer, "<|tool_call>call:", TOOL_NAME)
        offered = [t.get("function", t)["name"] for t in tools]
        request = [m for m in messages if m["role"] == "user"][-1]["content"]
        rows.append(
            {
                "label": lab,
                "kind": kind,
                "offered": offered,
                "draft": name,
                "fit": name_fit(name, offered),
                "shares_a_word": shares_a_word(request, [normalize_tool(t) for t in tools]),
                "req": tagger_req(cm, ids, tools, pf),
            }
        )
    groups = {k: [r for r in rows if r["kind"] == k] for k in ("unanswerable", "no_tool", "bfcl")}
    groups["call requests"] = [r for r in rows if r["label"] == "fit" and r["kind"] != "bfcl"]
    summary: dict[str, Any] = {}
    for g, grp in groups.items():
        if not grp:
            continue
        s: dict[str, Any] = {"n": len(grp)}
        s["fit_below"] = {t: sum(r["fit"] < t for r in grp) for t in THRESHOLDS}
        s["no_shared_word"] = sum(not r["shares_a_word"] for r in grp)
        s["declined_no_shared_word_and_fit_below"] = {
            t: sum(r["fit"] < t and not r["shares_a_word"] for r in grp) for t in THRESHOLDS
        }
        s["req_below_0.01"] = sum((r["req"] or 0.0) < 0.01 for r in grp)
        if g in ("unanswerable", "no_tool") and groups["call requests"]:
            fit = groups["call requests"]
            s["auc_fit"] = auc([r["fit"] for r in fit], [r["fit"] for r in grp])
            s["auc_req"] = auc([r["req"] or 0.0 for r in fit], [r["req"] or 0.0 for r in grp])
        summary[g] = s
    print(json.dumps({"summary": summary, "rows": rows}))


if __name__ == "__main__":
    main()
