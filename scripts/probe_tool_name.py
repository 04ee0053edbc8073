"""Probe of two signs of whether a request fits an offered tool (issue #40; docs/TRAINING.md, "Experiment
2026-12-07 (2)"); neither is used by the library.

    .venv/bin/python scripts/probe_tool_name.py [-n 600] [--seed 1] [--bfcl simple_python] [--threads 1]

1. The model's own tool name: after the prompt's prefill, a canvas opening with ``<|tool_call>call:`` and uniform
   noise; each decoder pass commits the argmax of the next position, until a character no name holds (at most 12).
   ``fit``: the best :class:`difflib.SequenceMatcher` ratio against an offered name (or its last dotted part), or 1
   when a word after the first (the verb) is shared (4+ letters may match as a prefix). ``pmin``: the least
   probability among the drafted positions.
2. The binding tagger: per tool, the lowest over its required parameters of the highest probability any request
   token has for it; the request's score is the best tool's (``req``).

On the held-out split (data seed ``--seed``, the first ``-n`` examples with tools): the call requests against the
requests for another tool's job and small talk, AUC and counts below thresholds. With ``--bfcl CATEGORY``: that
shipped BFCL category's requests (all fit), the counts below thresholds. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
from typing import Any

import torch
from probe_decline import CALL_KINDS, auc

from evals.bfcl import load_category, to_openai_tools
from model.binding.labelling import label_request
from model.checkpoint import hf_compat as hf
from model.runtime.step import decoder_logits
from model.threads import apply_threads
from model.training.data import Generator
from model.turn.chat import ChatModel
from model.turn.prefill import prefill_prompt

NAME = re.compile(r"[A-Za-z0-9_.\-]*")
THRESHOLDS = (0.3, 0.35, 0.4, 0.45, 0.5)


def draft_name(cm: ChatModel, ids: list[int], passes: int = 12) -> tuple[str, float, Any]:
    """``(drafted name, least position probability, prefill)`` for prompt ``ids``."""
    m, tok = cm.model, cm.tokenizer
    pf = prefill_prompt(m, torch.tensor([ids]))
    opening = tok.encode("<|tool_call>call:", add_special_tokens=False)
    length, vocab, p_len = int(m.config.canvas_length), int(m.config.text_config.vocab_size), len(ids)
    canvas = torch.randint(0, vocab, (1, length), generator=torch.Generator().manual_seed(0))
    canvas[0, : len(opening)] = torch.tensor(opening)
    inputs: dict[str, Any] = {
        "cache": pf.cache,
        "decoder_attention_mask": hf.decoder_mask(
            m, canvas, pf.cache, torch.ones((1, p_len + length), dtype=torch.bool)
        ),
        "decoder_position_ids": torch.arange(p_len, p_len + length)[None].int(),
    }
    if pf.memory is not None:
        inputs["copy_memory"] = pf.memory
    out: list[int] = []
    probs: list[float] = []
    with torch.no_grad():
        for pos in range(len(opening), len(opening) + passes):
            p = torch.softmax(
                decoder_logits(m, decoder_input_ids=canvas, self_conditioning_logits=None, **inputs)[
                    0, pos
                ].float(),
                -1,
            )
            canvas[0, pos] = int(p.argmax())
            out.append(int(canvas[0, pos]))
            probs.append(float(p.max()))
            text = tok.decode(out, skip_special_tokens=False)
            if (name := NAME.match(text).group()) != text:  # type: ignore[union-attr]
                return name, min(probs), pf
    return tok.decode(out, skip_special_tokens=False), min(probs), pf


def _words(name: str) -> list[str]:
    return [w.lower() for w in re.findall(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+", name.rsplit(".", 1)[-1])]


def name_fit(drafted: str, offered: list[str]) -> float:
    """The draft's resemblance to the closest offered name, 0..1 (see the module docstring)."""
    ratio = max(
        (
            difflib.SequenceMatcher(None, drafted, f).ratio()
            for n in offered
            for f in {n, n.rsplit(".", 1)[-1]}
        ),
        default=0.0,
    )
    mine = _words(drafted)[1:]
    shared = any(
        x == y or (min(len(x), len(y)) >= 4 and (x.startswith(y) or y.startswith(x)))
        for n in offered
        for x in mine
        for y in _words(n)[1:]
    )
    return 1.0 if shared else ratio


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
        name, pmin, pf = draft_name(cm, ids)
        offered = [t.get("function", t)["name"] for t in tools]
        rows.append(
            {
                "label": lab,
                "kind": kind,
                "offered": offered,
                "draft": name,
                "fit": name_fit(name, offered),
                "pmin": pmin,
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
        s["fit_below_0.45_pmin_at_least_0.5"] = sum(r["fit"] < 0.45 and r["pmin"] >= 0.5 for r in grp)
        s["req_below_0.01"] = sum((r["req"] or 0.0) < 0.01 for r in grp)
        if g in ("unanswerable", "no_tool") and groups["call requests"]:
            fit = groups["call requests"]
            s["auc_fit"] = auc([r["fit"] for r in fit], [r["fit"] for r in grp])
            s["auc_req"] = auc([r["req"] or 0.0 for r in fit], [r["req"] or 0.0 for r in grp])
        summary[g] = s
    print(json.dumps({"summary": summary, "rows": rows}))


if __name__ == "__main__":
    main()
