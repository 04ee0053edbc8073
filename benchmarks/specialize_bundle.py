"""``agentkit specialize`` on the greenhouse bundle: held-out exact-call accuracy before and after, training
minutes and cores, adapter size.

The bundle (``examples/greenhouse/bundle.yaml``) has five tools that occur nowhere in the embedded checkpoint's
training data (``tests/test_specialize.py`` checks it). The run generates the bundle's dialogues, scores the
base on the held-out split, fine-tunes LoRA adapters for ``--minutes`` on every core, saves the adapter, loads it
back onto the base and scores the same held-out split (see :mod:`model.training.specialize`).

Usage::

    .venv/bin/python benchmarks/specialize_bundle.py [--quick] [--json] [--minutes M] [--eval N] [--out DIR]
    .venv/bin/python benchmarks/specialize_bundle.py --rescore DIR [--json]   # score a saved adapter again

``--quick``: 2 minutes of fine-tuning and 20 held-out dialogues (a smoke run; the targets need the full run:
20 minutes, 100 held-out dialogues).

Targets (issue #17): exact-call accuracy +30 points or more; at most 20 minutes of fine-tuning on 2 CPU cores;
adapter at most 10% of the base checkpoint.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import emit, target

BUNDLE = Path(__file__).resolve().parents[1] / "examples" / "greenhouse" / "bundle.yaml"


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; prints the figures (or one JSON object with ``--json``)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="2 minutes, 20 held-out dialogues")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--minutes", type=float, default=None, help="fine-tuning budget (default 20; quick 2)")
    ap.add_argument("--eval", type=int, default=None, help="held-out dialogues (default 100; quick 20)")
    ap.add_argument("--lora-rank", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="adapter folder (default: a temporary one)")
    ap.add_argument(
        "--rescore",
        default=None,
        metavar="DIR",
        help="score an adapter folder from an earlier run again (its report.json gives the training figures)",
    )
    args = ap.parse_args(argv)
    if args.rescore:
        return rescore(Path(args.rescore), args)

    from agentkit.commands.specialize import bundle_declarations
    from evals.heldout import evaluate_examples
    from model.training.specialize import SpecializeConfig, specialize

    minutes = args.minutes if args.minutes is not None else (2.0 if args.quick else 20.0)
    n_eval = args.eval if args.eval is not None else (20 if args.quick else 100)
    out = args.out or tempfile.mkdtemp(prefix="specialize-")
    declarations, system_prompt = bundle_declarations(BUNDLE)
    cfg = SpecializeConfig(
        bundle=str(BUNDLE), out=out, minutes=minutes, n_eval=n_eval, lora_rank=args.lora_rank, seed=args.seed
    )
    log = (lambda line: print(line, file=sys.stderr)) if args.json else print
    r = specialize(cfg, declarations, system_prompt, log=log, evaluate=evaluate_examples)
    report = {
        "benchmark": "specialize_bundle",
        "quick": args.quick,
        "bundle": str(BUNDLE),
        "adapter": out,
        "exact_call_accuracy_before": r["exact_call_accuracy_before"],
        "exact_call_accuracy_after": r["exact_call_accuracy_after"],
        "held_out_call_dialogues": r["held_out_call_dialogues"],
        "train_minutes": r["train_minutes"],
        "steps": r["steps"],
        "threads": r["threads"],
        "cores": os.cpu_count(),
        "adapter_bytes": r["adapter_bytes"],
        "base_bytes": r["base_bytes"],
        "targets": [
            target("exact_call_accuracy_gain_points", round(r["gain_points"], 1), 30.0, True),
            target("train_minutes_on_2_cores", round(r["train_minutes"], 2), 20.0, False),
            target("adapter_share_of_base", round(r["adapter_share_of_base"], 4), 0.10, False),
        ],
    }
    emit(report, args.json)
    return 0


def rescore(folder: Path, args: argparse.Namespace) -> int:
    """Score the adapter in ``folder`` again on its run's held-out split with the current loader."""
    import json

    from agentkit.commands.specialize import bundle_declarations
    from evals.heldout import evaluate_examples
    from model.checkpoint.loading import load_checkpoint
    from model.training.bundle_data import train_and_heldout
    from model.turn.chat import ChatModel

    r = json.loads((folder / "report.json").read_text())
    cfg = r["config"]
    declarations, system_prompt = bundle_declarations(Path(cfg["bundle"]))
    _, held = train_and_heldout(declarations, system_prompt, cfg["n_train"], cfg["n_eval"], cfg["seed"])
    after = evaluate_examples(ChatModel(load_checkpoint(r["base"], adapter=folder)), held)
    gain = 100.0 * (after["call_accuracy"] - r["exact_call_accuracy_before"])
    report = {
        "benchmark": "specialize_bundle",
        "rescored": str(folder),
        "exact_call_accuracy_before": r["exact_call_accuracy_before"],
        "exact_call_accuracy_after": after["call_accuracy"],
        "after_by_kind": after["by_kind"],
        "held_out_call_dialogues": after["n_calls"],
        "train_minutes": r["train_minutes"],
        "steps": r["steps"],
        "threads": r["threads"],
        "adapter_bytes": r["adapter_bytes"],
        "base_bytes": r["base_bytes"],
        "targets": [
            target("exact_call_accuracy_gain_points", round(gain, 1), 30.0, True),
            target("train_minutes_on_2_cores", round(r["train_minutes"], 2), 20.0, False),
            target("adapter_share_of_base", round(r["adapter_share_of_base"], 4), 0.10, False),
        ],
    }
    emit(report, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
