"""Probe of the call-or-prose decision (issue #40; docs/TRAINING.md, "Experiment 2026-12-06").

    .venv/bin/python scripts/probe_decline.py [--checkpoint DIR] [-n 200] [--seed 0] [--binding none] [--branch-first]

Takes the held-out split's first ``-n`` examples (data seed ``--seed``, 0 as ``agentkit eval heldout``): the unfit
requests (tools offered, none fitting: small talk and another tool's job) and as many call requests, each decoded
with its eval seed. For canvas position 0, on every denoising step until the turn commits it, it records the model's
masked probability of ``<|tool_call>`` there (``p_call``: tempered as the sampler sees it; ``p_call_raw``:
untempered), the entropy, the argmax, whether the sampler accepted it, the draft to its right, and the token
committed; then the turn's number of calls. Prints one JSON object: per example rows, and per group (all unfit,
small talk, another tool's job) the AUC of the first step's probability against the call requests (call requests =
positives), its range, and the share in prose. ``--branch-first`` is the counterfactual decoding: position 0
committed on the turn's first step from its masked argmax, whatever the sampler accepted (the branch decided first,
from the fully noised canvas).
"""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

import torch

from grammar import special_tokens as st
from model.constraints.denoise import GrammarConstraint
from model.threads import apply_threads
from model.training.data import Generator
from model.turn.chat import ChatModel

#: The held-out kinds whose target is a call (as ``evals.heldout`` counts ``fit_with_a_call``).
CALL_KINDS = ("call", "parallel", "multi_call", "followup_call", "bot_call")


def auc(pos: list[float], neg: list[float]) -> float:
    """Probability that a random positive scores above a random negative (ties count half); NaN if one is empty."""
    if not pos or not neg:
        return math.nan
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


class PositionZeroProbe:
    """Wraps :meth:`GrammarConstraint.commit` (class-wide, from :meth:`install`) to trace canvas position 0 of
    each turn until it is committed; :attr:`steps` holds one dict per denoising step of the current turn."""

    def __init__(self, chat_model: Any, branch_first: bool = False) -> None:
        self.cm = chat_model
        self.tok = chat_model.tokenizer
        self.call_id = int(self.tok.convert_tokens_to_ids(st.TOOL_CALL_START))
        self.branch_first = branch_first
        self.steps: list[dict[str, Any]] = []

    def install(self) -> None:
        """Replace ``GrammarConstraint.commit`` by the tracing wrapper (for this process)."""
        orig = GrammarConstraint.commit
        probe = self

        def commit(self: GrammarConstraint, tokens: list[int], accepted: list[bool], logits: Any = None,
                   entropy_bound: float = 0.0) -> list[int]:  # fmt: skip
            first = not self.all_tokens
            if first and logits is not None:
                probe.record(logits, accepted)
                if probe.branch_first and len(probe.steps) == 1:
                    tokens, accepted = list(tokens), list(accepted)
                    tokens[0], accepted[0] = int(logits[0].argmax()), True
            out = orig(self, tokens, accepted, logits, entropy_bound)
            if first and self.all_tokens and probe.steps:
                probe.steps[-1]["committed0"] = probe.tok.decode([self.all_tokens[0]])
            return out

        GrammarConstraint.commit = commit  # type: ignore[method-assign]

    def record(self, logits: torch.Tensor, accepted: list[bool]) -> None:
        """One step's trace from its tempered, masked logits ``[C, V]`` and acceptance ``[C]``."""
        s = self.cm.settings
        temp = s.temperature(s.max_denoising_steps - len(self.steps))  # the step's temperature
        lp = torch.log_softmax(logits[0].float(), -1)
        p = lp.exp()
        raw = torch.softmax(logits[0].float() * temp, -1)
        self.steps.append(
            {
                "p_call": float(p[self.call_id]),
                "p_call_raw": float(raw[self.call_id]),
                "h0": float(-(p * torch.where(p > 0, lp, torch.zeros_like(lp))).sum()),
                "argmax0": self.tok.decode([int(logits[0].argmax())]),
                "acc0": bool(accepted[0]),
                "right": self.tok.decode(logits[1:7].float().argmax(-1).tolist()),
            }
        )


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per group of unfit rows: AUC of the first step's ``p_call`` / ``p_call_raw`` against the fit rows, the
    untempered range, and how many turns made no call; the fit rows' range and calls."""
    fit = [r for r in rows if r["label"] == "fit" and r["p_call"]]
    groups = {
        "unfit": [r for r in rows if r["label"] == "unfit"],
        "small_talk": [r for r in rows if r["kind"] == "no_tool"],
        "other_tool": [r for r in rows if r["kind"] == "unanswerable"],
    }
    out: dict[str, Any] = {
        "fit": {
            "n": len(fit),
            "called": sum(r["calls"] > 0 for r in fit),
            "raw_range": [min(r["p_call_raw"][0] for r in fit), max(r["p_call_raw"][0] for r in fit)],
        }
    }
    for name, grp in groups.items():
        grp = [r for r in grp if r["p_call"]]
        out[name] = {
            "n": len(grp),
            "in_prose": sum(r["calls"] == 0 for r in grp),
            "auc": auc([r["p_call"][0] for r in fit], [r["p_call"][0] for r in grp]),
            "auc_raw": auc([r["p_call_raw"][0] for r in fit], [r["p_call_raw"][0] for r in grp]),
            "raw_range": [min(r["p_call_raw"][0] for r in grp), max(r["p_call_raw"][0] for r in grp)]
            if grp
            else [],
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoint", default=None, help="checkpoint folder (default: the shipped one)")
    ap.add_argument("-n", type=int, default=200, help="held-out examples to draw the requests from")
    ap.add_argument("--binding", default="none", help="binder: none, copy-head or auto")
    ap.add_argument("--seed", type=int, default=0, help="data seed (the held-out stream of this seed)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--branch-first", action="store_true", help="commit position 0 on the first step")
    args = ap.parse_args()
    apply_threads(args.threads)
    cm = ChatModel.load(args.checkpoint)
    examples = list(enumerate(Generator(args.seed, "heldout").take(args.n)))
    unfit = [
        (i, e) for i, e in examples if e.kind == "unanswerable" or (e.kind == "no_tool" and bool(e.tools))
    ]
    fit = [(i, e) for i, e in examples if e.kind in CALL_KINDS][: len(unfit)]
    probe = PositionZeroProbe(cm, branch_first=args.branch_first)
    probe.install()
    rows = []
    for label, group in (("unfit", unfit), ("fit", fit)):
        for i, ex in group:
            probe.steps = []
            out = cm.chat(ex.messages, ex.tools or None, seed=i, binder=args.binding)
            last = ex.messages[-1]["content"]
            rows.append(
                {
                    "i": i,
                    "label": label,
                    "kind": ex.kind,
                    "question": last[:60] if isinstance(last, str) else "",
                    "p_call": [round(s["p_call"], 4) for s in probe.steps],
                    "p_call_raw": [round(s["p_call_raw"], 4) for s in probe.steps],
                    "commit_step": len(probe.steps),
                    "committed0": probe.steps[-1].get("committed0") if probe.steps else None,
                    "steps": probe.steps,
                    "calls": len(out.tool_calls),
                }
            )
    print(json.dumps({"summary": summary(rows), "rows": rows}))


if __name__ == "__main__":
    main()
