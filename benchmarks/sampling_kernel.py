"""Benchmark + GPU check of the fused sampling kernel (dg_kernels/sampling.py).

On CUDA, in one run (< 2 minutes on an H200 including Triton compiles):

1. Correctness of the compiled kernel: Triton Philox bits vs the PyTorch emulation; ``fused_sample``'s
   Triton kernel vs its reference on [64, 262144] fp32 / bf16 logits with a bitmask, -inf logits, rows forced to one
   token and per-row temperatures (argmax exact, samples identical, entropy / max_prob errors); a chi-square
   test of 200k kernel samples against the softmax.
2. Speed on canvas logits [1, 256, 262144] and [16, 256, 262144] (fp32, bf16):
   * ``kernel_us``: device time of the two launches (CUDA-graph replay, else back-to-back launches),
     giving achieved read bandwidth ``logits bytes / kernel_us`` against a measured device-to-device copy of
     the same tensor (``2 * bytes / copy_us``, read + write);
   * ``call_us``: one ``fused_sample(kernel="triton")`` call end to end (host overhead + the validity sync), per-call CUDA
     events, plus the [B, C] entropy sort the runtime needs for the entropy-bound rule;
   * ``reference_us``: the torch sequence of transformers' DiffusionGemma denoising step
     (``generation_diffusion_gemma.py``: ``_denoising_step`` = temperature divide, softmax, multinomial,
     argmax; ``EntropyBoundSampler.accept_canvas`` = Categorical entropy + sort; the adaptive stop = a
     second Categorical entropy).
   Targets: bandwidth >= 70% of copy; ``reference_us / call_us >= 4``.
3. (full mode) a sweep on the [16, 256, 262144] shapes: other ``num_warps`` (results do not depend on it)
   and other granule sizes (these change which sample a seed gives, not the distribution), so that the
   defaults in dg_kernels/sampling.py can be set from measurements.

Without CUDA it times the reference paths on small shapes and reports the targets as not measured (null), and
times the CPU path's draw (``model.runtime.sampler.sample_positions``, inverse CDF) against ``torch.multinomial``
(``torch_path_draw``).

Usage: ``python benchmarks/sampling_kernel.py [--quick] [--json]``. ``--json`` prints one JSON object on
stdout (progress goes to stderr). When ``$OUT`` is set the JSON is also written to
``$OUT/sampling_kernel.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import target
from dg_kernels import sampling as S
from dg_kernels.philox import philox4x32

VOCAB = 262144
SHAPES = [(1, 256, VOCAB), (16, 256, VOCAB)]
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
TEMPERATURE = 0.8
BW_TARGET = 0.70
SPEEDUP_TARGET = 4.0


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------------------------------------
# the reference torch sequence (transformers DiffusionGemma generate step)
# ----------------------------------------------------------------------------------------------------------


def reference_step(logits: torch.Tensor, temperature: float, entropy_bound: float = 0.1) -> Any:
    """What transformers' DiffusionGemma does per denoising step with [B, C, V] logits."""
    batch, canvas, vocab = logits.shape
    processed = logits / temperature  # LinearTemperatureScheduleLogitsProcessor
    probs = torch.softmax(processed, dim=-1, dtype=torch.float32)
    denoiser = torch.multinomial(probs.view(-1, vocab), num_samples=1).view(batch, canvas)
    argmax = torch.argmax(processed, dim=-1)
    entropy = torch.distributions.Categorical(logits=processed).entropy()  # accept_canvas
    sorted_entropy, sorted_idx = torch.sort(entropy, dim=-1, descending=False)
    accept = torch.cumsum(sorted_entropy, dim=-1) - sorted_entropy <= entropy_bound
    accepted = torch.scatter(torch.zeros_like(accept), -1, sorted_idx, accept)
    confident = torch.distributions.Categorical(logits=processed).entropy().mean(-1) < 0.005  # stopping
    return denoiser, argmax, accepted, confident


def fused_step(logits: torch.Tensor, temperature: float, entropy_bound: float = 0.1) -> Any:
    """The same step with the fused kernel (plus the tiny [B, C] sort of the entropy-bound rule)."""
    batch, canvas, vocab = logits.shape
    out = S.fused_sample(logits.view(-1, vocab), temperature, kernel="triton")
    entropy = out.entropy.view(batch, canvas)
    sorted_entropy, sorted_idx = torch.sort(entropy, dim=-1, descending=False)
    accept = torch.cumsum(sorted_entropy, dim=-1) - sorted_entropy <= entropy_bound
    accepted = torch.scatter(torch.zeros_like(accept), -1, sorted_idx, accept)
    return out.sample, out.argmax, accepted, entropy.mean(-1) < 0.005


# ----------------------------------------------------------------------------------------------------------
# timing
# ----------------------------------------------------------------------------------------------------------


def time_per_call_us(fn: Callable[[], Any], n: int, warmup: int) -> float:
    """Median over n calls of CUDA-event time around each call (includes host overhead and syncs)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    events = []
    for _ in range(n):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        events.append((start, end))
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in events) * 1e3


def time_copy_us(src: torch.Tensor, n: int) -> float:
    """Median time of a device-to-device copy of ``src`` into a fresh tensor of the same size."""
    dst = torch.empty_like(src)
    return time_per_call_us(lambda: dst.copy_(src), n, 2)


def time_device_us(fn: Callable[[], Any], n: int, warmup: int) -> tuple[float, str]:
    """Device time of fn (no host sync inside): CUDA-graph replay when capture works, else back-to-back."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    try:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        graph.replay()
        torch.cuda.synchronize()
        return time_per_call_us(graph.replay, n, 1), "cuda_graph"
    except Exception as exc:  # capture not possible: fall back to queued launches
        log(f"  graph capture failed ({exc!r}); timing back-to-back launches")
        torch.cuda.synchronize()
    times = []
    for _ in range(3):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(n):
            fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / n)
    return statistics.median(times), "back_to_back"


def launcher(
    logits2d: torch.Tensor,
    temperature: float | torch.Tensor,
    bitmask: torch.Tensor | None = None,
    *,
    num_warps: int | None = None,
    granule: int = S.GRANULE,
) -> Callable[[], Any]:
    """The two kernel launches alone (no validation sync)."""
    prepared = S._prepare("benchmark", logits2d, temperature, bitmask, 1, 0)
    gran = S._Granule(granule, S.LANES, S.CHUNK)
    return lambda: S._launch_triton(prepared, granule=gran, num_warps=num_warps)


# ----------------------------------------------------------------------------------------------------------
# GPU correctness checks
# ----------------------------------------------------------------------------------------------------------


def chi2_pvalue(samples: torch.Tensor, probs: torch.Tensor) -> float:
    counts = torch.bincount(samples.cpu(), minlength=probs.numel()).double()
    expected = probs.double().cpu() * samples.numel()
    big = expected >= 5
    obs = torch.cat([counts[big], counts[~big].sum().view(1)])
    exp = torch.cat([expected[big], expected[~big].sum().view(1)])
    if exp[-1] < 5:
        obs = torch.cat([obs[:-2], (obs[-2] + obs[-1]).view(1)])
        exp = torch.cat([exp[:-2], (exp[-2] + exp[-1]).view(1)])
    stat = ((obs - exp) ** 2 / exp).sum()
    df = obs.numel() - 1
    if df < 1:
        return float("nan")  # too few samples for a test: reported, and the target reads as missed
    return float(torch.special.gammaincc(torch.tensor(df / 2.0, dtype=torch.float64), stat / 2.0))


def pack_bitmask(allowed: torch.Tensor) -> torch.Tensor:
    rows, vocab = allowed.shape
    words = (vocab + 31) // 32
    padded = torch.zeros(rows, words * 32, dtype=torch.int64, device=allowed.device)
    padded[:, :vocab] = allowed.long()
    packed = (padded.view(rows, words, 32) << torch.arange(32, device=allowed.device)).sum(-1)
    packed = torch.where(packed >= 2**31, packed - 2**32, packed)
    return packed.to(torch.int32)


def gpu_checks(quick: bool, dev: str = "cuda", vocab_big: int = VOCAB, rows: int = 64) -> dict[str, Any]:
    """Compiled kernel vs reference (the parameters let the same code run small under the interpreter)."""
    checks: dict[str, Any] = {}
    gen = torch.Generator(device=dev).manual_seed(0)

    counters = torch.randint(0, 2**32, (4096, 4), device=dev, dtype=torch.int64, generator=gen)
    seed = 0x299F31D0A4093822
    got = S._triton_module().philox_triton(seed, counters)
    c0, c1, c2, c3 = counters.unbind(1)
    want = torch.stack(philox4x32(seed, c0, c1, c2, c3), 1)
    checks["philox_bits_match"] = float((got == want).all(1).float().mean())

    worst: dict[str, float] = {
        "argmax_match": 1.0,
        "sample_match": 1.0,
        "entropy_err": 0.0,
        "max_prob_err": 0.0,
    }
    for dname, dtype in DTYPES.items():
        logits = (torch.randn(rows, vocab_big, device=dev, generator=gen) * 4).to(dtype)
        logits[2, vocab_big // 3] = 60.0
        with_inf = logits.clone()
        with_inf[1, ::7] = float("-inf")  # allowed -inf logits: exercises the clamped rerun
        allowed = torch.rand(rows, vocab_big, device=dev, generator=gen) < 0.5
        allowed[3] = False
        allowed[3, vocab_big - 1] = True
        bitmask = pack_bitmask(allowed)
        temps = torch.rand(rows, device=dev, generator=gen) * 1.5 + 0.05
        temps[4] = 0.0
        # one compile per configuration: Triton compiles cost seconds each
        for x, temperature, mask in ((with_inf, TEMPERATURE, None), (logits, temps, bitmask)):
            kern = S.fused_sample(x, temperature, bitmask=mask, seed=7, offset=3, kernel="triton")
            ref = S.fused_sample(x, temperature, bitmask=mask, seed=7, offset=3, kernel="reference")
            worst["argmax_match"] = min(
                worst["argmax_match"], float((kern.argmax == ref.argmax).float().mean())
            )
            worst["sample_match"] = min(
                worst["sample_match"], float((kern.sample == ref.sample).float().mean())
            )
            worst["entropy_err"] = max(worst["entropy_err"], float((kern.entropy - ref.entropy).abs().max()))
            worst["max_prob_err"] = max(
                worst["max_prob_err"], float((kern.max_prob - ref.max_prob).abs().max())
            )
            if mask is not None:
                ok = bool(allowed[torch.arange(rows, device=dev), kern.sample].all())
                checks[f"samples_allowed_{dname}"] = checks.get(f"samples_allowed_{dname}", True) and ok
        log(f"  checked {dname}: {worst}")
    checks.update(worst)

    n = (50_000 if quick else 200_000) if dev == "cuda" else 100
    vocab = 2 * S.GRANULE + 808  # 3 granules, the last partial
    base = torch.randn(vocab, device=dev, generator=gen) * 2
    allowed = torch.rand(vocab, device=dev, generator=gen) < 0.8
    mask = pack_bitmask(allowed[None, :]).expand(n, -1)
    out = S.fused_sample(base.expand(n, vocab), TEMPERATURE, bitmask=mask, seed=11, offset=0, kernel="triton")
    probs = torch.softmax((base / TEMPERATURE).masked_fill(~allowed, float("-inf")), -1)
    checks["chi2_pvalue"] = chi2_pvalue(out.sample, probs)
    checks["chi2_samples"] = n
    return checks


# ----------------------------------------------------------------------------------------------------------
# main
# ----------------------------------------------------------------------------------------------------------


def bench_shape(
    shape: tuple[int, int, int], dname: str, dtype: torch.dtype, quick: bool, sweep: bool
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Time copy, kernel, fused step and reference step on one [B, C, V] shape (+ the knob sweep)."""
    n_iter = 5 if quick else 20
    n_ref = 3 if quick else 7
    vocab = shape[-1]
    logits = torch.randn(shape, device="cuda", dtype=torch.float32).mul_(3).to(dtype)
    flat = logits.view(-1, vocab)
    nbytes = logits.numel() * logits.element_size()
    copy_us = time_copy_us(logits, n_iter)
    kernel_us, how = time_device_us(launcher(flat, TEMPERATURE), n_iter, 2)
    call_us = time_per_call_us(lambda: fused_step(logits, TEMPERATURE), n_iter, 2)
    reference_us = time_per_call_us(lambda: reference_step(logits, TEMPERATURE), n_ref, 1)
    copy_bw = 2 * nbytes / (copy_us * 1e-6)
    kernel_bw = nbytes / (kernel_us * 1e-6)
    row: dict[str, Any] = {
        "shape": list(shape),
        "dtype": dname,
        "bytes": nbytes,
        "copy_us": round(copy_us, 1),
        "copy_GBps": round(copy_bw / 1e9, 1),
        "kernel_us": round(kernel_us, 1),
        "kernel_timing": how,
        "kernel_GBps": round(kernel_bw / 1e9, 1),
        "bw_fraction_of_copy": round(kernel_bw / copy_bw, 3),
        "call_us": round(call_us, 1),
        "reference_us": round(reference_us, 1),
        "speedup_vs_reference": round(reference_us / call_us, 2),
    }
    if shape == SHAPES[-1] and dname == "bf16":
        words = torch.randint(-(2**31), 2**31, (flat.shape[0], (vocab + 31) // 32), device="cuda")
        masked_us, _ = time_device_us(launcher(flat, TEMPERATURE, words.to(torch.int32)), n_iter, 2)
        row["kernel_with_bitmask_us"] = round(masked_us, 1)
    log(f"  {row}")
    entries: list[dict[str, Any]] = []
    if sweep:
        default_warps = S._default_num_warps(dtype)
        variants: list[dict[str, Any]] = [
            dict(num_warps=w, granule=S.GRANULE) for w in (1, 2, 4) if w != default_warps
        ]
        if dtype == torch.bfloat16:  # keep the compile count (and the run) short
            variants = [dict(num_warps=2, granule=S.GRANULE), dict(num_warps=1, granule=2048)]
            variants.append(dict(num_warps=2, granule=8192))
        for knobs in variants:
            us, _ = time_device_us(launcher(flat, TEMPERATURE, **knobs), n_iter, 1)
            entry = {"dtype": dname, **knobs, "kernel_us": round(us, 1)}
            entry["bw_fraction_of_copy"] = round(nbytes / (us * 1e-6) / copy_bw, 3)
            entries.append(entry)
            log(f"  sweep {entry}")
    return row, entries


def bench_cuda(quick: bool) -> dict[str, Any]:
    props = torch.cuda.get_device_properties(0)
    report: dict[str, Any] = {
        "device": props.name,
        "defaults": {
            "granule": S.GRANULE,
            "num_warps": {str(k).replace("torch.", ""): v for k, v in S.NUM_WARPS.items()},
        },
        "results": [],
        "sweep": [],
    }
    t0 = time.time()
    log("correctness checks ...")
    report["checks"] = gpu_checks(quick)
    log(f"  done in {time.time() - t0:.1f} s")

    for shape in SHAPES:
        for dname, dtype in DTYPES.items():
            row, sweep = bench_shape(shape, dname, dtype, quick, sweep=not quick and shape == SHAPES[-1])
            report["results"].append(row)
            report["sweep"] += sweep
            torch.cuda.empty_cache()

    rows = {f"{'x'.join(map(str, r['shape']))}_{r['dtype']}": r for r in report["results"]}
    targets = _targets(rows, report["checks"])
    report["targets"] = targets
    return report


def _targets(rows: dict[str, dict[str, Any] | None], checks: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The issue's targets per shape/dtype tag plus the compiled-kernel checks (``None`` values: not measured)."""
    out = []
    for tag, row in rows.items():
        out.append(
            target(
                f"bw_fraction_of_copy_{tag}",
                None if row is None else row["bw_fraction_of_copy"],
                BW_TARGET,
                True,
            )
        )
        out.append(
            target(
                f"speedup_vs_reference_{tag}",
                None if row is None else row["speedup_vs_reference"],
                SPEEDUP_TARGET,
                True,
            )
        )
    c = checks or {}
    values = {
        "check_philox_bits_match": c.get("philox_bits_match"),
        "check_argmax_match": c.get("argmax_match"),
        "check_sample_match": c.get("sample_match"),
        "check_entropy_max_abs_err": c.get("entropy_err"),
        "check_chi2_pvalue": c.get("chi2_pvalue"),
        "check_samples_allowed_by_bitmask": (
            float(all(v for k, v in c.items() if k.startswith("samples_allowed_"))) if checks else None
        ),
    }
    for name, goal, higher in (
        ("check_philox_bits_match", 1.0, True),
        ("check_argmax_match", 1.0, True),
        ("check_sample_match", 0.99, True),
        ("check_entropy_max_abs_err", 1e-3, False),
        ("check_chi2_pvalue", 1e-3, True),
        ("check_samples_allowed_by_bitmask", 1.0, True),
    ):
        out.append(target(name, values[name], goal, higher))
    return out


def bench_cpu(quick: bool) -> dict[str, Any]:
    torch.set_num_threads(1)
    shapes = [(1, 64, 4096)] if quick else [(1, 64, 4096), (4, 64, 4096)]
    results = []
    for shape in shapes:
        logits = torch.randn(shape) * 3
        flat = logits.view(-1, shape[-1])
        n = 3 if quick else 7
        t_ref, t_fused = [], []
        for _ in range(n):
            t = time.perf_counter()
            reference_step(logits, TEMPERATURE)
            t_ref.append(time.perf_counter() - t)
            t = time.perf_counter()
            S.fused_sample(flat, TEMPERATURE, kernel="reference")
            t_fused.append(time.perf_counter() - t)
        results.append(
            {
                "shape": list(shape),
                "dtype": "fp32",
                "transformers_sequence_us": round(statistics.median(t_ref) * 1e6, 1),
                "sample_reference_us": round(statistics.median(t_fused) * 1e6, 1),
            }
        )
        log(f"  {results[-1]}")
    tags = [f"{'x'.join(map(str, shape))}_{dname}" for shape in SHAPES for dname in DTYPES]
    targets = _targets(dict.fromkeys(tags), None)
    return {
        "device": "cpu",
        "note": "no CUDA device: the Triton kernel was not run; targets not measured",
        "results": results,
        "torch_path_draw": bench_torch_draw(quick),
        "targets": targets,
    }


def bench_torch_draw(quick: bool) -> list[dict[str, Any]]:
    """The CPU path's draw at the accepted positions (:func:`model.runtime.sampler.sample_positions`: softmax and
    inverse-CDF lookup) against softmax + ``torch.multinomial`` on the same rows, one thread, at the embedded
    checkpoint's vocabulary (8,192) for 1 and 64 accepted positions; median microseconds per call."""
    from model.runtime.sampler import sample_positions

    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(0)
    n = 20 if quick else 100

    def median_us(fn: Callable[[], Any]) -> float:
        for _ in range(5):
            fn()
        times = []
        for _ in range(n):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        return statistics.median(times) * 1e6

    out = []
    for rows in (1, 64):
        logits = torch.randn(1, rows, 8192) * 3
        mask = torch.ones(1, rows, dtype=torch.bool)
        ours = median_us(lambda lg=logits, m=mask: sample_positions(lg, m, generator=gen))
        multi = median_us(
            lambda lg=logits, m=mask: torch.multinomial(torch.softmax(lg[m], -1), 1, generator=gen)
        )
        out.append(
            {
                "positions": rows,
                "vocab": 8192,
                "inverse_cdf_us": round(ours, 1),
                "multinomial_us": round(multi, 1),
            }
        )
        log(f"  torch-path draw: {out[-1]}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations, no knob sweep")
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    args = parser.parse_args(argv)
    t0 = time.time()
    if torch.cuda.is_available():
        if not S.triton_available():
            raise SystemExit("triton is not importable: install the gpu or dev extra")
        report = bench_cuda(args.quick)
    else:
        report = bench_cpu(args.quick)
    report = {"benchmark": "sampling_kernel", "quick": args.quick, **report}
    report["wall_s"] = round(time.time() - t0, 1)
    text = json.dumps(report, indent=None if args.json else 2)
    out_dir = os.environ.get("OUT")
    if out_dir:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        (Path(out_dir) / "sampling_kernel.json").write_text(json.dumps(report, indent=2))
    if args.json:
        print(text)
    else:
        for t in report["targets"]:
            v = t["value"]
            ok = (
                "not measured"
                if v is None
                else (
                    "MET" if (v >= t["target"] if t["higher_is_better"] else v <= t["target"]) else "MISSED"
                )
            )
            print(f"{t['name']:<48} value={v!s:<10} target={t['target']:<8} {ok}")
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
