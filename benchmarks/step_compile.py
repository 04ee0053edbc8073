"""torch.compile against eager for one denoising step (no constraint), batch 16, on CPU.

Two figures:
- the step's tensor part, what :class:`model.runtime.sampler.TorchSampler` compiles: temper the decoder logits,
  entropy and argmax in one pass, entropy-bound acceptance (no host synchronisation; the sample itself has one:
  it draws only at the accepted positions, a data-dependent shape);
- the whole step, decoder forward included: ``model.runtime.generate(..., compile_step=True)`` against eager on
  the embedded checkpoint (canvas 64, vocabulary 8,192, float32), 16 prompts of 300 tokens, time per step.

    .venv/bin/python benchmarks/step_compile.py [--quick] [--json] [--batch 16] [--threads N]

Target (issue #16): ship compile as an option only if it wins, i.e. compiled step time below eager.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from model.runtime.sampler import entropy_and_argmax, entropy_bound_accept, free_mean_entropy


def step_tensor_part(logits: torch.Tensor, temperature: float, bound: float) -> tuple[torch.Tensor, ...]:
    """Temper, entropy/argmax, accept, mean entropy: ``[B, C, V]`` float32 -> per-position tensors."""
    processed = logits / temperature
    entropy, argmax = entropy_and_argmax(processed)
    accepted = entropy_bound_accept(entropy, bound)
    return processed, entropy, argmax, accepted, free_mean_entropy(entropy, None)


def time_fn(fn, logits: torch.Tensor, reps: int) -> list[float]:
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn(logits, 0.6, 0.1)
        out.append(time.perf_counter() - t0)
    return out


def whole_step(batch: int, reps: int) -> dict[str, float]:
    """Median milliseconds per denoising step of ``generate`` on the embedded checkpoint, eager and compiled."""
    from model.checkpoint.loading import load_checkpoint
    from model.runtime import generate

    ck = load_checkpoint(None)
    ids = torch.randint(10, 8000, (batch, 300), generator=torch.Generator().manual_seed(0))
    settings = ck.settings.replace(max_new_tokens=ck.settings.canvas_length, max_denoising_steps=12)
    settings = settings.replace(stability_threshold=10_000)  # every call takes all 12 steps
    out: dict[str, float] = {}
    for comp in (False, True):
        generate(ck.model, ids, settings, seed=0, compile_step=comp)  # warm-up (and compile)
    times: dict[bool, list[float]] = {False: [], True: []}
    for i in range(reps):  # interleaved
        for comp in (False, True):
            r = generate(ck.model, ids, settings, seed=i, compile_step=comp)
            times[comp].append(r.stats.time_total_s / r.stats.total_steps)
    out["step_eager_ms"] = round(statistics.median(times[False]) * 1e3, 1)
    out["step_compiled_ms"] = round(statistics.median(times[True]) * 1e3, 1)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    reps = 5 if args.quick else 20
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(args.batch, 64, 8192, generator=g) * 4
    t0 = time.perf_counter()
    compiled = torch.compile(step_tensor_part, dynamic=False)
    want = step_tensor_part(logits, 0.6, 0.1)
    got = compiled(logits, 0.6, 0.1)
    compile_s = time.perf_counter() - t0
    same = bool(torch.equal(want[2], got[2]) and torch.equal(want[3], got[3]))
    max_entropy_diff = float((want[1] - got[1]).abs().max())
    time_fn(step_tensor_part, logits, 2)  # warm-up
    time_fn(compiled, logits, 2)
    eager, comp = [], []
    for _ in range(reps):  # interleaved, so drift hits both alike
        eager += time_fn(step_tensor_part, logits, 1)
        comp += time_fn(compiled, logits, 1)
    e_ms, c_ms = statistics.median(eager) * 1e3, statistics.median(comp) * 1e3
    whole = whole_step(args.batch, 1 if args.quick else 3)
    result = {
        "batch": args.batch,
        "threads": torch.get_num_threads(),
        "eager_ms": round(e_ms, 2),
        "compiled_ms": round(c_ms, 2),
        "compile_s": round(compile_s, 1),
        "argmax_and_acceptance_identical": same,
        "max_entropy_difference": max_entropy_diff,
        **whole,
        "targets": [
            {
                "name": "whole step: compiled / eager time (ship compile only if < 1)",
                "value": round(whole["step_compiled_ms"] / whole["step_eager_ms"], 3),
                "target": 1.0,
                "higher_is_better": False,
            },
            {
                "name": "tensor part: compiled / eager time",
                "value": round(c_ms / e_ms, 3),
                "target": 1.0,
                "higher_is_better": False,
            },
        ],
    }
    if args.json:
        print(json.dumps(result))
    else:
        for k, v in result.items():
            if k != "targets":
                print(f"{k}: {v}")
        for t in result["targets"]:  # type: ignore[attr-defined]
            print(f"{t['name']}: {t['value']}")


if __name__ == "__main__":
    main()
