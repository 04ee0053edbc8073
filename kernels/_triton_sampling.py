# mypy: disallow-untyped-defs=False
"""Triton kernels behind :func:`kernels.sampling.sample_triton` (imported lazily: triton is optional).

Set ``TRITON_INTERPRET=1`` before triton is first imported to run them on CPU tensors with Triton's
interpreter (the tests do this).

All arithmetic is in base 2: ``x = logit * (log2(e) / T)`` so that ``exp`` is one ``ex2`` instruction.

Two launches per call:

1. ``_granule_kernel``: one program per (row, granule of ``GRANULE`` tokens); grid ``R * G``,
   ``G = ceil(V / GRANULE)``. The granule is read once as a ``[GRANULE / CH, CH]`` tile, ``CH`` = 16 bytes
   of logits (4 fp32 / 8 bf16), so each thread owns whole 16-byte chunks and every per-element operation is
   thread-local: chunk max, then ``d = x - m`` (clamped at -1000 with NaN kept), ``e = 2**d``, chunk sums
   of ``e`` and ``e * d``. Only per-chunk vectors cross threads: the granule max ``m``, ``s = sum e``,
   ``t = sum e * d``; the first chunk holding ``m``; the chunk where the cumulative mass first exceeds
   ``u0 * s``. Those two chunks (``CH`` logits each, cache hits) are re-read to find the exact argmax and
   the sampled token (inverse CDF). Per granule it writes ``m, s, t``, the argmax, the sample and the
   granule's Gumbel score ``m + log2(s) + log2(e) * Gumbel(u1)``; ``u0, u1`` come from one Philox-4x32-10
   call with key ``seed`` and counter ``(granule, row, offset lo, offset hi)``.
2. ``_combine_kernel``: one program per row merges the granule partials like online softmax merges running
   (max, sum) pairs (Milakov & Gimelshein 2018): ``M = max m``, ``S = sum s 2**(m - M)``,
   ``T = sum 2**(m - M) (t + s (m - M))``; entropy ``ln(2) (log2 S - T / S)`` nats; max probability
   ``1 / S``; the sample is that of the granule with the best Gumbel score (Gumbel-max over granule masses).

Results depend on ``GRANULE`` (which Philox counter covers which tokens), not on ``num_warps``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

_INT32_MAX = tl.constexpr(2147483647)


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


@triton.jit
def _load_masked(row_ptr, mask_row_ptr, cols, V, EVEN: tl.constexpr, HAS_MASK: tl.constexpr):
    """float32 logits at ``cols`` (any shape); -inf past ``V`` and where the bitmask forbids the token."""
    if EVEN:
        x = tl.load(row_ptr + cols).to(tl.float32)
    else:
        x = tl.load(row_ptr + cols, mask=cols < V, other=float("-inf")).to(tl.float32)
    if HAS_MASK:
        if EVEN:
            words = tl.load(mask_row_ptr + (cols >> 5))
        else:
            words = tl.load(mask_row_ptr + (cols >> 5), mask=cols < V, other=0)
        x = tl.where(((words >> (cols & 31)) & 1) != 0, x, float("-inf"))
    return x


@triton.jit
def _exp2_rel(raw, inv_temp2, m_safe):
    """(d, 2**d) with d = raw * inv_temp2 - m clamped at -1000 (2**-1000 == 0, and 0 * -1000 == 0, where
    -inf would give NaN); NaN stays NaN."""
    d = tl.maximum(raw * inv_temp2 - m_safe, -1000.0, propagate_nan=tl.PropagateNan.ALL)
    return d, tl.exp2(d)


@triton.jit(do_not_specialize=["seed", "offset"])
def _granule_kernel(
    logits_ptr,
    stride_row,
    mask_ptr,
    stride_mask_row,
    temp_ptr,
    inv_temp2_scalar,
    V,
    G,
    seed,
    offset,
    pm_ptr,
    ps_ptr,
    pt_ptr,
    pscore_ptr,
    pamax_ptr,
    psidx_ptr,
    GRANULE: tl.constexpr,
    CH: tl.constexpr,
    EVEN: tl.constexpr,
    HAS_MASK: tl.constexpr,
    PER_ROW_TEMP: tl.constexpr,
    MIN_TEMP: tl.constexpr,
):
    NCH: tl.constexpr = GRANULE // CH
    LOG2E: tl.constexpr = 1.4426950408889634
    pid = tl.program_id(0)
    row = pid // G
    g = pid - row * G
    row64 = row.to(tl.int64)
    row_ptr = logits_ptr + row64 * stride_row
    mask_row_ptr = mask_ptr + row64 * stride_mask_row

    if PER_ROW_TEMP:
        t = tl.load(temp_ptr + row)
        t = tl.where(t > MIN_TEMP, t, MIN_TEMP)  # NaN -> MIN_TEMP here; the combine kernel flags the row
        inv_temp2 = tl.math.div_rn(LOG2E, t)
    else:
        inv_temp2 = inv_temp2_scalar

    base = g * GRANULE
    ci = tl.arange(0, NCH)
    cj = tl.arange(0, CH)
    cols = base + ci[:, None] * CH + cj[None, :]
    raw = _load_masked(row_ptr, mask_row_ptr, cols, V, EVEN, HAS_MASK)

    # The max is taken on the raw logits (x = raw * inv_temp2 is monotone in raw): one multiply less per
    # logit, and the argmax is exactly torch.argmax of the masked logits.
    chunk_max = tl.max(raw, 1)
    m_raw = tl.max(chunk_max, 0)
    m = m_raw * inv_temp2
    m_safe = tl.where(m == float("-inf"), 0.0, m)
    d, e = _exp2_rel(raw, inv_temp2, m_safe)
    chunk_s = tl.sum(e, 1)
    chunk_t = tl.sum(e * d, 1)
    s_g = tl.sum(chunk_s, 0)  # NaN logits make it NaN: the combine kernel flags the row
    t_g = tl.sum(chunk_t, 0)

    # argmax: the first chunk holding the max, then the first position in it
    ca = tl.min(tl.where(chunk_max == m_raw, ci, NCH - 1), 0)
    cols_a = base + ca * CH + cj
    raw_a = _load_masked(row_ptr, mask_row_ptr, cols_a, V, EVEN, HAS_MASK)
    amax = tl.min(tl.where(raw_a == m_raw, cols_a, _INT32_MAX), 0)

    # sample: inverse CDF, first over the chunk masses, then inside the chosen chunk
    key_lo, key_hi = _lo_hi(seed)
    off_lo, off_hi = _lo_hi(offset)
    r0, r1, _r2, _r3 = _philox(key_lo, key_hi, g.to(tl.uint32), row.to(tl.uint32), off_lo, off_hi)
    u0 = ((r0 >> 9).to(tl.float32) + 0.5) * 1.1920928955078125e-07
    u1 = ((r1 >> 9).to(tl.float32) + 0.5) * 1.1920928955078125e-07
    thr = u0 * s_g
    chunk_cs = tl.cumsum(chunk_s, 0)
    cs = tl.min(tl.where((chunk_cs > thr) & (chunk_s > 0.0), ci, NCH), 0)
    cs = tl.where(cs == NCH, ca, cs)  # float rounding put thr past the total: use the argmax chunk
    before = tl.sum(tl.where(ci == cs, chunk_cs - chunk_s, 0.0), 0)
    cols_s = base + cs * CH + cj
    raw_s = _load_masked(row_ptr, mask_row_ptr, cols_s, V, EVEN, HAS_MASK)
    _ds, es = _exp2_rel(raw_s, inv_temp2, m_safe)
    inner_cs = before + tl.cumsum(es, 0)
    sidx = tl.min(tl.where((inner_cs > thr) & (es > 0.0), cols_s, _INT32_MAX), 0)
    last = tl.max(tl.where(es > 0.0, cols_s, -1), 0)
    sidx = tl.where(sidx == _INT32_MAX, last, sidx)
    gumbel = -tl.log(-tl.log(u1))
    score = tl.where(s_g > 0.0, m + tl.log2(s_g) + gumbel * LOG2E, float("-inf"))

    p = row64 * G + g
    tl.store(pm_ptr + p, m)
    tl.store(ps_ptr + p, s_g)
    tl.store(pt_ptr + p, t_g)
    tl.store(pscore_ptr + p, score)
    tl.store(pamax_ptr + p, amax)
    tl.store(psidx_ptr + p, sidx)


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
    alpha = tl.where(m == float("-inf"), 0.0, tl.exp2(m - big_m))
    big_s = tl.sum(alpha * s, 0)  # a NaN in s survives (0 * NaN = NaN) and marks the row bad
    big_t = tl.sum(tl.where(s > 0.0, alpha * (t + s * (m - big_m)), 0.0), 0)
    # The max logit's own term is 2**(rounding residual of a fused multiply-add), not exactly 1: clamp.
    entropy = tl.maximum((tl.log2(big_s) - big_t / big_s) * 0.6931471805599453, 0.0)
    max_prob = tl.minimum(1.0 / big_s, 1.0)

    g_arg = tl.min(tl.where(m == big_m, gi, G_POW2), 0)
    g_arg = tl.where(g_arg < G, g_arg, 0)
    argmax = tl.load(pamax_ptr + base + g_arg).to(tl.int64)
    _best, g_smp = tl.max(score, 0, return_indices=True, return_indices_tie_break_left=True)
    sample = tl.load(psidx_ptr + base + g_smp).to(tl.int64)

    good = (big_s >= 0.5) & (big_s < float("inf")) & (big_t == big_t) & (big_m < float("inf"))
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
