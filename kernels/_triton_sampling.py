# mypy: disallow-untyped-defs=False
"""Triton kernels behind :func:`kernels.sampling.sample_triton` (imported lazily: triton is optional).

Set ``TRITON_INTERPRET=1`` before this module is first imported to run the kernels on CPU tensors with
Triton's interpreter (the tests do this).

Two launches per call:

1. ``_granule_kernel``: grid ``R * ceil(G / GRANULES_PER_PROGRAM)``, ``G = ceil(V / GRANULE)``. Each
   program reads ``GRANULES_PER_PROGRAM`` granules of ``GRANULE`` logits of one row exactly once and writes,
   per granule ``g``: the max ``m_g`` of the tempered, masked logits ``x``; ``s_g = sum exp(x - m_g)``;
   ``t_g = sum exp(x - m_g) * (x - m_g)``; the first argmax; a sample inside the granule (inverse CDF on
   the in-register cumulative sum, one Philox uniform); and the granule's Gumbel score
   ``m_g + log(s_g) + Gumbel`` (a second uniform of the same Philox call).
2. ``_combine_kernel``: one program per row merges the granule partials the way online softmax merges
   running (max, sum) pairs (Milakov & Gimelshein 2018): ``M = max m_g``, ``S = sum s_g exp(m_g - M)``,
   ``T = sum exp(m_g - M) (t_g + s_g (m_g - M))``; entropy ``log S - T / S``; max probability ``1 / S``;
   the sample is the in-granule sample of the granule with the best Gumbel score (Gumbel-max over granules).

Results do not depend on ``GRANULES_PER_PROGRAM`` or ``num_warps`` (performance knobs only); they depend on
``GRANULE``, which fixes which Philox counter drives which part of the vocabulary.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

_INT32_MAX = 2147483647


@triton.jit
def _philox(k0, k1, c0, c1, c2, c3):
    """Philox-4x32-10 on uint32 words (Triton's ``tl.philox`` body, kept here so the interpreter patches it)."""
    for _ in tl.static_range(10):
        _c0, _c2 = c0, c2
        c0 = tl.math.umulhi(0xCD9E8D57, _c2) ^ c1 ^ k0
        c2 = tl.math.umulhi(0xD2511F53, _c0) ^ c3 ^ k1
        c1 = tl.mul(0xCD9E8D57, _c2, sanitize_overflow=False)
        c3 = tl.mul(0xD2511F53, _c0, sanitize_overflow=False)
        k0 = tl.add(k0, 0x9E3779B9, sanitize_overflow=False)
        k1 = tl.add(k1, 0xBB67AE85, sanitize_overflow=False)
    return c0, c1, c2, c3


@triton.jit
def _lo_hi(value):
    """A non-negative int (i32 or i64 argument) -> its (low, high) 32-bit words as uint32."""
    v = tl.to_tensor(value).to(tl.int64)
    return (v & 0xFFFFFFFF).to(tl.uint32), ((v >> 32) & 0xFFFFFFFF).to(tl.uint32)


@triton.jit(do_not_specialize=["seed", "offset"])
def _granule_kernel(
    logits_ptr,
    stride_row,
    mask_ptr,
    stride_mask_row,
    temp_ptr,
    inv_temp_scalar,
    V,
    G,
    programs_per_row,
    seed,
    offset,
    pm_ptr,
    ps_ptr,
    pt_ptr,
    pscore_ptr,
    pamax_ptr,
    psidx_ptr,
    GRANULE: tl.constexpr,
    GRANULES_PER_PROGRAM: tl.constexpr,
    HAS_MASK: tl.constexpr,
    PER_ROW_TEMP: tl.constexpr,
    MIN_TEMP: tl.constexpr,
    FUSED_REDUCE: tl.constexpr,
):
    pid = tl.program_id(0)
    row = pid // programs_per_row
    chunk = pid - row * programs_per_row
    row64 = row.to(tl.int64)

    if PER_ROW_TEMP:
        t = tl.load(temp_ptr + row)
        t = tl.where(t > MIN_TEMP, t, MIN_TEMP)  # NaN -> MIN_TEMP here; the combine kernel flags the row
        inv_temp = tl.math.div_rn(1.0, t)
    else:
        inv_temp = inv_temp_scalar

    off_lo, off_hi = _lo_hi(offset)
    key_lo, key_hi = _lo_hi(seed)

    lane = tl.arange(0, GRANULE)
    for k in tl.static_range(GRANULES_PER_PROGRAM):
        g = chunk * GRANULES_PER_PROGRAM + k
        cols = g * GRANULE + lane
        inb = cols < V
        x = tl.load(logits_ptr + row64 * stride_row + cols, mask=inb, other=float("-inf")).to(tl.float32)
        x = x * inv_temp
        if HAS_MASK:
            words = tl.load(mask_ptr + row64 * stride_mask_row + (cols >> 5), mask=inb, other=0)
            allowed = ((words >> (cols & 31)) & 1) != 0
            x = tl.where(allowed, x, float("-inf"))
        x = tl.where(inb, x, float("-inf"))

        m, amax_local = tl.max(x, 0, return_indices=True, return_indices_tie_break_left=True)
        d = x - m
        e = tl.where(x == float("-inf"), 0.0, tl.exp(d))  # NaN logits stay NaN and poison s
        ed = tl.where(e > 0.0, e * d, 0.0)
        cs = tl.cumsum(e, 0)
        last_valid = tl.where(e > 0.0, cols, -1)
        if FUSED_REDUCE:  # one cross-warp round instead of three (the interpreter runs it element by element)
            t_g, s_g, last = tl.reduce((ed, e, last_valid), 0, _sum_sum_max)
        else:
            t_g = tl.sum(ed, 0)
            s_g = tl.sum(
                e, 0
            )  # a sum, not max(cs): max ignores NaN, the sum carries it to the combine's check
            last = tl.max(last_valid, 0)

        r0, r1, _r2, _r3 = _philox(key_lo, key_hi, g.to(tl.uint32), row.to(tl.uint32), off_lo, off_hi)
        u0 = ((r0 >> 9).to(tl.float32) + 0.5) * 1.1920928955078125e-07
        u1 = ((r1 >> 9).to(tl.float32) + 0.5) * 1.1920928955078125e-07
        thr = u0 * s_g
        sidx = tl.min(tl.where((cs > thr) & (e > 0.0), cols, _INT32_MAX), 0)
        sidx = tl.where(sidx == _INT32_MAX, last, sidx)
        gumbel = -tl.log(-tl.log(u1))
        score = tl.where(s_g > 0.0, m + tl.log(s_g) + gumbel, float("-inf"))

        ok = g < G
        p = row64 * G + g
        tl.store(pm_ptr + p, m, mask=ok)
        tl.store(ps_ptr + p, s_g, mask=ok)
        tl.store(pt_ptr + p, t_g, mask=ok)
        tl.store(pscore_ptr + p, score, mask=ok)
        tl.store(pamax_ptr + p, g * GRANULE + amax_local, mask=ok)
        tl.store(psidx_ptr + p, sidx, mask=ok)


@triton.jit
def _sum_sum_max(a0, b0, c0, a1, b1, c1):
    return a0 + a1, b0 + b1, tl.maximum(c0, c1)


@triton.jit
def _combine_kernel(
    pm_ptr,
    ps_ptr,
    pt_ptr,
    pscore_ptr,
    pamax_ptr,
    psidx_ptr,
    temp_ptr,
    G,
    argmax_ptr,
    sample_ptr,
    entropy_ptr,
    max_prob_ptr,
    G_POW2: tl.constexpr,
    PER_ROW_TEMP: tl.constexpr,
):
    row = tl.program_id(0)
    row64 = row.to(tl.int64)
    gi = tl.arange(0, G_POW2)
    ok = gi < G
    base = row64 * G
    m = tl.load(pm_ptr + base + gi, mask=ok, other=float("-inf"))
    s = tl.load(ps_ptr + base + gi, mask=ok, other=0.0)
    t = tl.load(pt_ptr + base + gi, mask=ok, other=0.0)
    score = tl.load(pscore_ptr + base + gi, mask=ok, other=float("-inf"))

    big_m = tl.max(m, 0)
    alpha = tl.where(m == float("-inf"), 0.0, tl.exp(m - big_m))
    big_s = tl.sum(alpha * s, 0)  # a NaN in s survives (0 * NaN = NaN) and marks the row bad
    big_t = tl.sum(tl.where(s > 0.0, alpha * (t + s * (m - big_m)), 0.0), 0)
    entropy = tl.log(big_s) - big_t / big_s
    max_prob = 1.0 / big_s

    g_arg = tl.min(tl.where(m == big_m, gi, G_POW2), 0)
    g_arg = tl.where(g_arg < G, g_arg, 0)
    argmax = tl.load(pamax_ptr + base + g_arg).to(tl.int64)
    _best, g_smp = tl.max(score, 0, return_indices=True, return_indices_tie_break_left=True)
    sample = tl.load(psidx_ptr + base + g_smp).to(tl.int64)

    good = (big_s >= 1.0) & (big_s < float("inf")) & (big_t == big_t) & (big_m < float("inf"))
    if PER_ROW_TEMP:
        temp = tl.load(temp_ptr + row)
        good = good & (temp >= 0.0)
    empty = (big_m == float("-inf")) & (big_s == 0.0)
    # Error codes for the host: -1 = no allowed token with a finite logit, -2 = NaN / +inf / bad temperature.
    code = tl.where(empty, -1, -2).to(tl.int64)
    tl.store(argmax_ptr + row, tl.where(good, argmax, code))
    tl.store(sample_ptr + row, tl.where(good, sample, code))
    tl.store(entropy_ptr + row, entropy)
    tl.store(max_prob_ptr + row, max_prob)


@triton.jit
def _philox_probe_kernel(seed, c_ptr, out_ptr, N, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = i < N
    c0 = tl.load(c_ptr + 4 * i, mask=ok, other=0).to(tl.uint32)
    c1 = tl.load(c_ptr + 4 * i + 1, mask=ok, other=0).to(tl.uint32)
    c2 = tl.load(c_ptr + 4 * i + 2, mask=ok, other=0).to(tl.uint32)
    c3 = tl.load(c_ptr + 4 * i + 3, mask=ok, other=0).to(tl.uint32)
    key_lo, key_hi = _lo_hi(seed)
    r0, r1, r2, r3 = _philox(key_lo, key_hi, c0, c1, c2, c3)
    tl.store(out_ptr + 4 * i, r0.to(tl.int64), mask=ok)
    tl.store(out_ptr + 4 * i + 1, r1.to(tl.int64), mask=ok)
    tl.store(out_ptr + 4 * i + 2, r2.to(tl.int64), mask=ok)
    tl.store(out_ptr + 4 * i + 3, r3.to(tl.int64), mask=ok)


def philox_triton(seed: int, counters: torch.Tensor) -> torch.Tensor:
    """Triton's ``tl.philox`` on [N, 4] int64 counters (uint32 values) -> [N, 4] int64 outputs (uint32 values).

    Test / GPU-check helper: compares the kernel's random bits with :func:`kernels.philox.philox4x32`.
    """
    if counters.dim() != 2 or counters.shape[1] != 4 or counters.dtype != torch.int64:
        raise ValueError(f"philox_triton: counters must be [N, 4] int64, got {tuple(counters.shape)}")
    counters = counters.contiguous()
    out = torch.empty_like(counters)
    n = counters.shape[0]
    block = 128
    _philox_probe_kernel[(triton.cdiv(n, block),)](seed, counters, out, n, BLOCK=block)
    return out
