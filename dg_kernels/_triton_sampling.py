# mypy: disallow-untyped-defs=False
"""Triton kernels behind ``dg_kernels.sampling.fused_sample(kernel="triton")`` (imported lazily: triton is
optional; ``TRITON_INTERPRET=1`` set before triton's import runs them on CPU tensors, as the tests do). All
arithmetic is in base 2 (``x = logit * (log2(e) / T)``, so ``exp`` is one ``ex2``). Two launches per call:

1. ``_granule_kernel``: one program per (row, granule of ``GRANULE`` tokens). The granule is read once as a
   ``[K, LANES, CHUNK]`` tile (token ``(k * LANES + l) * CHUNK + j``: consecutive lanes read consecutive
   chunks), and every per-logit operation is thread-local (chunk max, ``d = x - m``, ``e = 2**d``, chunk sums
   of ``e`` and ``e * d``); across threads go only the granule max ``m``, ``s = sum e``, ``t = sum e * d``, the
   first chunk holding the max, and the inverse-CDF search for ``u0 * s`` in (lane, k, j) order (a scan over
   the lane totals, then a thread-local scan over ``k``). The argmax and sampled chunks are re-read to pick the
   exact tokens. It writes ``m, s, t``, the Gumbel score ``m + log2(s) + log2(e) * Gumbel(u1)`` (planes of a
   float32 ``[4, R, G]`` buffer) and the argmax and sample (an int32 ``[2, R, G]`` one); ``u0, u1`` are words 0
   and 1 of one Philox-4x32-10 call (Salmon et al., SC 2011; key ``seed``, counter ``(granule, row, offset lo,
   offset hi)``). Forbidden tokens read as ``NEG_SENTINEL`` (finite, so ``e * d`` needs no clamp); an allowed
   ``-inf`` logit makes ``t`` NaN, code -3, and the host reruns with ``SAFE=True`` (``d`` clamped at -1000).
2. ``_combine_kernel``: one program per row merges the partials as online softmax does (Milakov & Gimelshein
   2018): ``M = max m``, ``S = sum s 2**(m - M)``, ``T = sum 2**(m - M) (t + s (m - M))``; entropy
   ``ln(2) (log2 S - T / S)`` nats, max probability ``1 / S``, the sample of the best Gumbel score. Invalid
   rows get argmax = sample = -1 (no allowed finite logit), -2 (NaN / +inf / bad temperature) or -3.

Results depend on ``GRANULE``, ``LANES`` and ``CHUNK``, not on ``num_warps``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

_INT32_MAX = tl.constexpr(2147483647)
# Forbidden / out-of-range tokens read as this finite value, not -inf: 2**(-1e30 * scale - m) is 0 and so is
# its product with the exponent, where -inf would give 0 * -inf = NaN. Logits <= NEG_SENTINEL count as -inf.
NEG_SENTINEL = tl.constexpr(-1e30)


@triton.jit
def _philox(k0, k1, c0, c1, c2, c3):
    """Philox-4x32-10 on uint32 words (Triton's ``tl.philox`` body, kept here so the interpreter patches it)."""
    for _ in tl.static_range(10):
        _c0, _c2 = c0, c2
        c0 = tl.math.umulhi(0xCD9E8D57, _c2) ^ c1 ^ k0
        c2 = tl.math.umulhi(0xD2511F53, _c0) ^ c3 ^ k1
        c1 = _c2 * 0xCD9E8D57  # uint32 arithmetic wraps (overflow checks run only in debug mode)
        c3 = _c0 * 0xD2511F53
        k0 = k0 + 0x9E3779B9
        k1 = k1 + 0xBB67AE85
    return c0, c1, c2, c3


@triton.jit
def _lo_hi(value):
    """A non-negative int (i32 or i64 argument) -> its (low, high) 32-bit words as uint32."""
    v = tl.to_tensor(value).to(tl.int64)
    return (v & 0xFFFFFFFF).to(tl.uint32), ((v >> 32) & 0xFFFFFFFF).to(tl.uint32)


@triton.jit
def _load_masked(row_ptr, mask_row_ptr, cols, start, jbit, V, EVEN: tl.constexpr, HAS_MASK: tl.constexpr):
    """float32 logits at ``cols = start + j`` (chunks of CHUNK <= 32 tokens starting at multiples of CHUNK, so
    one bitmask word covers a chunk); ``NEG_SENTINEL`` past ``V`` and where the bitmask forbids the token.
    ``start`` broadcasts against ``cols``; ``jbit = 1 << j``."""
    if EVEN:
        x = tl.load(row_ptr + cols).to(tl.float32)
    else:
        x = tl.load(row_ptr + cols, mask=cols < V, other=NEG_SENTINEL).to(tl.float32)
    if HAS_MASK:
        if EVEN:
            words = tl.load(mask_row_ptr + (start >> 5))
        else:
            words = tl.load(mask_row_ptr + (start >> 5), mask=start < V, other=0)
        x = tl.where(((words >> (start & 31)) & jbit) != 0, x, NEG_SENTINEL)
    return x


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
    fpart_ptr,
    ipart_ptr,
    plane,
    GRANULE: tl.constexpr,
    LANES: tl.constexpr,
    CHUNK: tl.constexpr,
    EVEN: tl.constexpr,
    HAS_MASK: tl.constexpr,
    PER_ROW_TEMP: tl.constexpr,
    MIN_TEMP: tl.constexpr,
    SAFE: tl.constexpr,
):
    # The granule is a [K, LANES, CHUNK] tile: token base + (k * LANES + l) * CHUNK + j. Memory order is
    # (k, l, j), so consecutive lanes read consecutive chunks (coalesced); the sampling CDF runs in (l, k, j)
    # order, so the scan over k is thread-local and only the LANES lane totals are scanned across threads.
    K: tl.constexpr = GRANULE // (LANES * CHUNK)
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
    k2 = tl.arange(0, K)[:, None]
    l2 = tl.arange(0, LANES)[None, :]
    j1 = tl.arange(0, CHUNK)
    jbit = 1 << j1
    chunk_id = k2 * LANES + l2  # [K, LANES], chunk index in memory order
    start = base + chunk_id[:, :, None] * CHUNK  # [K, LANES, 1]
    cols = start + j1[None, None, :]
    raw = _load_masked(row_ptr, mask_row_ptr, cols, start, jbit[None, None, :], V, EVEN, HAS_MASK)

    # The max is taken on the raw logits (x = raw * inv_temp2 is monotone in raw): one multiply less per
    # logit, and the argmax is exactly torch.argmax of the masked logits.
    chunk_max = tl.max(raw, 2)
    m_raw = tl.max(tl.max(chunk_max, 0), 0)  # reduce k (in-thread) before lanes (shuffles)
    empty = m_raw <= NEG_SENTINEL  # no allowed token with a logit above the sentinel
    m = tl.where(empty, float("-inf"), m_raw * inv_temp2)
    m_safe = tl.where(empty, 0.0, m)
    d = raw * inv_temp2 - m_safe
    if SAFE:
        # clamp: a -inf logit gives 2**-1000 * -1000 == 0 instead of 0 * -inf = NaN; NaN stays NaN
        d = tl.maximum(d, -1000.0, propagate_nan=tl.PropagateNan.ALL)
    e = tl.exp2(d)
    chunk_s = tl.sum(e, 2)  # [K, LANES]
    lane_s = tl.sum(chunk_s, 0)  # [LANES]
    s_g = tl.sum(lane_s, 0)  # NaN logits make it NaN: the combine kernel flags the row
    t_g = tl.sum(tl.sum(tl.sum(e * d, 0), 1), 0)

    # argmax: the first chunk (memory order) holding the max, then the first position in it
    ca = tl.min(tl.min(tl.where(chunk_max == m_raw, chunk_id, GRANULE), 0), 0)
    ca = tl.where(ca == GRANULE, 0, ca)
    start_a = base + ca * CHUNK
    cols_a = start_a + j1
    raw_a = _load_masked(row_ptr, mask_row_ptr, cols_a, start_a, jbit, V, EVEN, HAS_MASK)
    amax = tl.min(tl.where(raw_a == m_raw, cols_a, _INT32_MAX), 0)

    # sample: inverse CDF in (lane, k, j) order: pick the lane, then k in it (thread-local), then j
    # (helpers are inlined by hand: every device-function call costs the interpreter ~5 ms)
    seed64 = tl.to_tensor(seed).to(tl.int64)
    off64 = tl.to_tensor(offset).to(tl.int64)
    r0, r1, _r2, _r3 = _philox(
        (seed64 & 0xFFFFFFFF).to(tl.uint32),
        ((seed64 >> 32) & 0xFFFFFFFF).to(tl.uint32),
        g.to(tl.uint32),
        row.to(tl.uint32),
        (off64 & 0xFFFFFFFF).to(tl.uint32),
        ((off64 >> 32) & 0xFFFFFFFF).to(tl.uint32),
    )
    u0 = ((r0 >> 9).to(tl.float32) + 0.5) * 1.1920928955078125e-07
    u1 = ((r1 >> 9).to(tl.float32) + 0.5) * 1.1920928955078125e-07
    thr = u0 * s_g
    l1 = tl.arange(0, LANES)
    lane_cs = tl.cumsum(lane_s, 0)
    ls = tl.min(tl.where((lane_cs > thr) & (lane_s > 0.0), l1, LANES), 0)
    ls = tl.where(ls == LANES, ca % LANES, ls)  # float rounding put thr past the total
    thr_lane = thr - tl.sum(tl.where(l1 == ls, lane_cs - lane_s, 0.0), 0)
    k_cs = tl.cumsum(chunk_s, 0)  # [K, LANES], thread-local running sums along k
    below = (k_cs <= thr_lane) & (l2 == ls)
    ks = tl.sum(tl.sum(below.to(tl.int32), 0), 0)  # chunks of lane ls entirely below the threshold
    thr_chunk = thr_lane - tl.max(tl.max(tl.where(below, k_cs, 0.0), 0), 0)
    cs = tl.where(ks < K, ks * LANES + ls, ca)
    start_s = base + cs * CHUNK
    cols_s = start_s + j1
    raw_s = _load_masked(row_ptr, mask_row_ptr, cols_s, start_s, jbit, V, EVEN, HAS_MASK)
    es = tl.exp2(raw_s * inv_temp2 - m_safe)
    inner_cs = tl.cumsum(es, 0)
    sidx = tl.min(tl.where((inner_cs > thr_chunk) & (es > 0.0), cols_s, _INT32_MAX), 0)
    last = tl.max(tl.where(es > 0.0, cols_s, -1), 0)
    sidx = tl.where(sidx == _INT32_MAX, last, sidx)
    sidx = tl.where(sidx < 0, amax, sidx)  # never a token without mass
    gumbel = -tl.log(-tl.log(u1))
    score = tl.where(s_g > 0.0, m + tl.log2(s_g) + gumbel * LOG2E, float("-inf"))

    p = row64 * G + g
    plane64 = tl.to_tensor(plane).to(tl.int64)
    tl.store(fpart_ptr + p, m)
    tl.store(fpart_ptr + plane64 + p, s_g)
    tl.store(fpart_ptr + 2 * plane64 + p, t_g)
    tl.store(fpart_ptr + 3 * plane64 + p, score)
    tl.store(ipart_ptr + p, amax)
    tl.store(ipart_ptr + plane64 + p, sidx)


@triton.jit
def _combine_kernel(
    fpart_ptr,
    ipart_ptr,
    plane,
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
    plane64 = tl.to_tensor(plane).to(tl.int64)
    m = tl.load(fpart_ptr + base + gi, mask=ok, other=float("-inf"))
    s = tl.load(fpart_ptr + plane64 + base + gi, mask=ok, other=0.0)
    t = tl.load(fpart_ptr + 2 * plane64 + base + gi, mask=ok, other=0.0)
    score = tl.load(fpart_ptr + 3 * plane64 + base + gi, mask=ok, other=float("-inf"))

    big_m = tl.max(m, 0)
    alpha = tl.where(m == float("-inf"), 0.0, tl.exp2(m - big_m))
    big_s = tl.sum(alpha * s, 0)  # a NaN in s survives (0 * NaN = NaN) and marks the row bad
    big_t = tl.sum(tl.where(s > 0.0, alpha * (t + s * (m - big_m)), 0.0), 0)
    # The max logit's own term is 2**(rounding residual of a fused multiply-add), not exactly 1: clamp.
    entropy = tl.maximum((tl.log2(big_s) - big_t / big_s) * 0.6931471805599453, 0.0)
    max_prob = tl.minimum(1.0 / big_s, 1.0)

    g_arg = tl.min(tl.where(m == big_m, gi, G_POW2), 0)
    g_arg = tl.where(g_arg < G, g_arg, 0)
    argmax = tl.load(ipart_ptr + base + g_arg).to(tl.int64)
    _best, g_smp = tl.max(score, 0, return_indices=True, return_indices_tie_break_left=True)
    sample = tl.load(ipart_ptr + plane64 + base + g_smp).to(tl.int64)

    s_ok = (big_s >= 0.5) & (big_s < float("inf")) & (big_m < float("inf"))
    if PER_ROW_TEMP:
        temp = tl.load(temp_ptr + row)
        s_ok = s_ok & (temp >= 0.0)
    good = s_ok & (big_t == big_t)
    empty = (big_m == float("-inf")) & (big_s == 0.0)
    # Codes for the host: -1 = no allowed token with a finite logit, -2 = NaN / +inf / bad temperature,
    # -3 = an allowed -inf logit made the entropy term NaN: run again with SAFE=True.
    code = tl.where(empty, -1, tl.where(s_ok, -3, -2)).to(tl.int64)
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
    """Triton's ``tl.philox`` on [N, 4] int64 counters (uint32 values) -> [N, 4] int64 outputs (uint32 values),
    to compare the kernel's random bits with :func:`dg_kernels.philox.philox4x32`."""
    if counters.dim() != 2 or counters.shape[1] != 4 or counters.dtype != torch.int64:
        raise ValueError(f"philox_triton: counters must be [N, 4] int64, got {tuple(counters.shape)}")
    counters = counters.contiguous()
    out = torch.empty_like(counters)
    n = counters.shape[0]
    block = 128
    _philox_probe_kernel[(triton.cdiv(n, block),)](seed, counters, out, n, BLOCK=block)
    return out
