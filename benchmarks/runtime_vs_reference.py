"""Our denoising loop (fast mode) vs transformers' DiffusionGemmaForBlockDiffusion.generate, same process.

Same random-weight checkpoint (vocab 4096, hidden 192, 3 layers), same prompts (64 tokens) and seeds; the two
implementations alternate run by run. Both run every denoising step (random weights never stop early), so
ms per denoising step compares the loops directly. Prints tokens/s, ms per step and the ratio for batch 1 and
16, canvas 64 and 256. torch threads are fixed (``--threads``, default 1).

Targets (issue #3): >= 1.5x the reference at batch 1, >= 2x at batch 16.

    python benchmarks/runtime_vs_reference.py [--quick] [--json] [--threads 1] [--reps N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks._common import emit, target
from model.checkpoint.loading import load_checkpoint
from model.runtime import generate
from model.testing import make_tiny_checkpoint


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer steps and repetitions")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--reps",
        type=int,
        default=None,
        help="timed repetitions per shape (default 1 with --quick, else 2): more average out a busy machine",
    )
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    steps = 4 if args.quick else 8
    reps = args.reps if args.reps is not None else (1 if args.quick else 2)
    if reps < 1:
        ap.error(f"--reps must be >= 1, got {reps}")
    rows = []
    tmp = Path(tempfile.mkdtemp(prefix="bench_rt_"))
    for canvas in (64, 256):
        path = make_tiny_checkpoint(
            tmp / f"c{canvas}",
            canvas_length=canvas,
            vocab_size=4096,
            hidden_size=192,
            num_layers=3,
            generation={"max_denoising_steps": steps},
        )
        ck = load_checkpoint(path, device=args.device)
        model = ck.model
        settings = ck.settings.replace(max_new_tokens=canvas, max_denoising_steps=steps)
        for batch in (1, 16):
            g = torch.Generator().manual_seed(batch)
            ids = torch.randint(20, 4096, (batch, 64), generator=g).to(args.device)
            t_ref, t_ours, s_ref, s_ours = [], [], 0, 0
            for rep in range(reps + 1):  # first repetition is warm-up
                torch.manual_seed(rep)
                t0 = time.perf_counter()
                model.generate(ids, max_new_tokens=canvas, max_denoising_steps=steps)
                dt_ref = time.perf_counter() - t0
                t0 = time.perf_counter()
                out = generate(model, ids, settings, seed=rep)
                dt_ours = time.perf_counter() - t0
                if rep:
                    t_ref.append(dt_ref)
                    t_ours.append(dt_ours)
                    s_ref += steps
                    s_ours += out.stats.total_steps
            ref_ms = 1000 * sum(t_ref) / s_ref
            ours_ms = 1000 * sum(t_ours) / s_ours
            tokens = batch * canvas
            row = {
                "canvas": canvas,
                "batch": batch,
                "ref_ms_per_step": round(ref_ms, 2),
                "ours_ms_per_step": round(ours_ms, 2),
                "ref_tokens_per_s": round(tokens / statistics.mean(t_ref), 1),
                "ours_tokens_per_s": round(tokens / statistics.mean(t_ours), 1),
                "speedup": round(ref_ms / ours_ms, 3),
            }
            rows.append(row)
            if not args.json:
                print(
                    f"canvas {canvas:3d} batch {batch:2d}: reference {ref_ms:8.1f} ms/step, ours {ours_ms:8.1f}"
                    f" ms/step, speedup {ref_ms / ours_ms:.2f}x  (tokens/s {row['ref_tokens_per_s']} ->"
                    f" {row['ours_tokens_per_s']})"
                )
    b1 = min(r["speedup"] for r in rows if r["batch"] == 1)
    b16 = min(r["speedup"] for r in rows if r["batch"] == 16)
    report = {
        "benchmark": "runtime_vs_reference",
        "device": args.device,
        "threads": args.threads,
        "denoising_steps": steps,
        "rows": rows,
        "targets": [
            target("speedup_batch1_min_over_canvas", b1, 1.5, True),
            target("speedup_batch16_min_over_canvas", b16, 2.0, True),
        ],
    }
    emit(report, args.json)


if __name__ == "__main__":
    main()
