"""What the embedded checkpoint can do: copying, held-out calls, BFCL, the main job, size (issue: copy head).

Runs, on one checkpoint (default: the embedded ``agentkit-tiny``), on the CPU:

* the copy probe (``python -m evals.probe``): accuracy of one decoder pass on the value tokens a call
  copies from the request, at noise level t = 0.25 (200 held-out calls; ``--quick``: 50);
* the held-out synthetic split (``agentkit eval heldout``): share of call examples whose calls match exactly,
  arguments included (200 examples; ``--quick``: 40);
* BFCL ``simple_python`` (all 400 questions; ``--quick``: 40) with AST matching, its parse rate and mean latency
  on 1 thread, and ``multiple``, ``parallel``, ``parallel_multiple`` (all 200 each; ``--quick``: 15);
* the README's main job: the code-search bot on this repository, "Where is the function load_bundle defined?",
  on 2 threads: the first call, the answer, and the model's time (seconds inside the backend);
* the checkpoint's size on disk.

``--json`` prints one JSON object whose ``targets`` list holds ``name, value, target, higher_is_better, met``;
targets are the issue's, reported as measured.

Usage: ``python benchmarks/checkpoint_quality.py [--checkpoint DIR] [--quick] [--json] [--skip-bfcl]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import emit, target  # noqa: E402


def _bfcl(cm: Any, category: str, limit: int | None) -> dict[str, Any]:
    from evals.bfcl import evaluate, load_category

    questions, gt = load_category(category)

    def chat(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Any:
        out = cm.chat(messages, tools, tool_choice="auto", seed=0)
        return [(c.name, c.arguments) for c in out.tool_calls], True, out.raw

    rep = evaluate(category, questions, gt, chat, limit=limit)
    errors: dict[str, int] = {}
    for r in rep.results:
        if not r["correct"]:
            errors[r["error_type"] or "?"] = errors.get(r["error_type"] or "?", 0) + 1
    return {
        "n": rep.n,
        "accuracy": rep.accuracy,
        "parse_rate": rep.parse_rate,
        "mean_latency_s": rep.mean_latency_s,
        "errors": dict(sorted(errors.items(), key=lambda kv: -kv[1])),
    }


def _main_job(checkpoint: str | None) -> dict[str, Any]:
    import torch

    from agentkit.backends import make_backend
    from agentkit.bundle import load_bundle
    from tools import code_search

    torch.set_num_threads(2)
    backend = make_backend("embedded", checkpoint, seed=0, threads=2)
    code_search.set_root(ROOT)
    try:
        agent = load_bundle(ROOT / "examples" / "code_search" / "bundle.yaml").make_agent(backend=backend)
        _ = backend.chat_model  # load the checkpoint outside the timed run
        result = agent.run("Where is the function load_bundle defined?")
    finally:
        code_search.set_root(None)
    calls = [rec for step in result.steps for rec in step.tool_calls]
    first = calls[0] if calls else None
    return {
        "first_call": None if first is None else {"name": first.name, "arguments": first.arguments},
        "answer": result.answer,
        "model_seconds": result.timing.model_seconds,
        "steps": len(result.steps),
        "call_ok": bool(
            first is not None
            and first.name == "find_definition"
            and first.arguments.get("name") == "load_bundle"
            and first.arguments.get("kind", "any") in ("any", "function")
        ),
        "answer_ok": bool(result.answer and "agentkit/bundle.py" in result.answer),
    }


def main(argv: list[str] | None = None) -> int:
    """Run the measurements; print a summary or one JSON object; return the exit code."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--checkpoint", default=None, help="checkpoint folder (default: the embedded agentkit-tiny)"
    )
    ap.add_argument("--quick", action="store_true", help="smaller samples (a few minutes)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument(
        "--skip-bfcl", action="store_true", help="leave BFCL out (its targets are reported as null)"
    )
    a = ap.parse_args(argv)

    import torch

    from evals.heldout import evaluate_heldout
    from evals.probe import copy_probe
    from model.checkpoint.loading import DEFAULT_CHECKPOINT
    from model.errors import CheckpointError
    from model.turn.chat import ChatModel

    ckpt = a.checkpoint or str(DEFAULT_CHECKPOINT)
    try:  # a missing folder or a bad decoding file: one line and exit status 2, before the long measurements
        cm = ChatModel.load(ckpt)
    except CheckpointError as exc:
        print(f"checkpoint_quality: {exc}", file=sys.stderr)
        return 2
    t0 = time.time()
    report: dict[str, Any] = {"checkpoint": ckpt, "quick": a.quick}
    torch.set_num_threads(1)
    report["probe"] = copy_probe(ckpt, n=50 if a.quick else 200)
    held = evaluate_heldout(cm, limit=40 if a.quick else 200, binder="auto")
    held.pop("results")
    report["heldout"] = held
    bfcl: dict[str, Any] = {}
    if not a.skip_bfcl:
        for cat, full_limit, quick_limit in (
            ("simple_python", None, 40),
            ("multiple", None, 15),
            ("parallel", None, 15),
            ("parallel_multiple", None, 15),
        ):
            bfcl[cat] = _bfcl(cm, cat, quick_limit if a.quick else full_limit)
    report["bfcl"] = bfcl
    report["main_job"] = _main_job(a.checkpoint)
    size = sum(f.stat().st_size for f in Path(ckpt).iterdir() if f.is_file())
    report["checkpoint_mb"] = size / 1e6
    sp = bfcl.get("simple_python", {})
    report["targets"] = [
        target(
            "copy probe: copied value tokens, one decoder pass at t=0.25",
            report["probe"]["diffusion_t0.25"]["copied"],
            0.8,
            True,
        ),
        target(
            "held-out synthetic: calls with exactly the right arguments", held["call_accuracy"], 0.7, True
        ),
        target("BFCL simple_python accuracy (FunctionGemma-270M bar)", sp.get("accuracy"), 0.616, True),
        target("BFCL simple_python accuracy (first milestone)", sp.get("accuracy"), 0.40, True),
        target(
            "BFCL parse-and-validate rate, all categories",
            min((b["parse_rate"] for b in bfcl.values()), default=None),
            1.0,
            True,
        ),
        target("BFCL simple_python mean latency on 1 thread (s)", sp.get("mean_latency_s"), 1.0, False),
        target("main job: model time on 2 threads (s)", report["main_job"]["model_seconds"], 5.0, False),
        target(
            "main job: find_definition(name='load_bundle') and the answer cites agentkit/bundle.py",
            float(report["main_job"]["call_ok"] and report["main_job"]["answer_ok"]),
            1.0,
            True,
        ),
        target("checkpoint size (MB)", report["checkpoint_mb"], 60.0, False),
    ]
    report["wall_s"] = time.time() - t0
    if not a.json:
        print(f"checkpoint {ckpt}  ({report['wall_s']:.0f} s)")
        p = report["probe"]
        print(f"  probe: {p['n_examples']} calls, copied tokens t=0.25 {p['diffusion_t0.25']['copied']:.3f}")
        print(
            f"  held-out: n={held['n']} calls exact {held['call_accuracy']:.3f} (n_calls={held['n_calls']})"
        )
        for cat, b in bfcl.items():
            print(
                f"  BFCL {cat}: n={b['n']} accuracy {b['accuracy']:.3f} parse {b['parse_rate']:.2f} "
                f"latency {b['mean_latency_s']:.2f}s errors {b['errors']}"
            )
        mj = report["main_job"]
        print(f"  main job: {mj['first_call']} -> {mj['answer']!r} ({mj['model_seconds']:.2f} s model time)")
    emit(report, a.json)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.exit(main())
