"""Fused sampling for one denoising step: argmax, sample, entropy and max probability in one pass.

:func:`fused_sample` turns ``[R, V]`` logits (a canvas ``[B, C, V]`` flattened) into, per row, the argmax, a
token sampled from ``softmax(logits / temperature)`` restricted to the tokens a bitmask allows, the entropy of
that tempered, masked distribution and its largest probability, by the fused Triton kernel (CUDA) or the
PyTorch reference (any device; the tests' oracle).

Semantics of both kernels:

* ``x = logits / max(temperature, MIN_TEMPERATURE)`` in float32 (in base 2: ``logits * (log2(e) / T)``);
  forbidden tokens and logits <= -1e30 count as ``-inf``. At :data:`MIN_TEMPERATURE` (1e-4) sampling is
  greedy in practice. ``argmax``: the first index of the largest allowed logit.
* ``sample``: an exact draw from ``softmax(x)``, reproducible from ``(seed, offset)``. The vocabulary is cut
  into granules of :data:`GRANULE` tokens; per granule ``g`` one Philox-4x32-10 call (Salmon et al., SC 2011;
  key ``seed``, counter ``(g, row, offset mod 2**32, offset >> 32)``) gives two uniforms: the first picks a
  token inside the granule by inverse CDF (in :func:`_granule_sample`'s order), the second a Gumbel variable,
  and the granule with the largest ``log(sum_{i in g} exp(x_i)) + Gumbel`` wins (the Gumbel-max trick, Gumbel
  1954 / Maddison et al. 2014, over granule masses): two random numbers per 4096 logits. The reference
  evaluates the same bits (:mod:`dg_kernels.philox`), so it returns the kernel's samples except where float32
  rounding differs at a CDF boundary (about one draw in a million). Use a new ``offset`` per draw.
* Rows without an allowed finite logit, with a NaN / ``+inf`` allowed logit, or a NaN / negative per-row
  temperature raise ``ValueError``.

The merge of per-granule ``(max, sum exp)`` pairs is the online softmax of Milakov & Gimelshein (2018),
extended with ``sum p * (x - max)`` for the entropy.
"""

from __future__ import annotations

import functools
import math
import operator
from dataclasses import dataclass
from types import ModuleType

import torch

from dg_kernels.philox import philox4x32, uniform_open01

__all__ = [
    "GRANULE",
    "KERNELS",
    "MIN_TEMPERATURE",
    "SampleOutput",
    "fused_sample",
    "triton_available",
]

MIN_TEMPERATURE = 1e-4
"""Temperatures below this (including 0) are clamped to it."""

GRANULE = 4096
"""Tokens per sampling granule; with :data:`LANES` and :data:`CHUNK` (the granule tile ``[GRANULE / (LANES *
CHUNK), LANES, CHUNK]``) it fixes which sample a seed gives (not the distribution)."""

LANES = 32
CHUNK = 8


@dataclass(frozen=True)
class _Granule:
    """Shape of the sampling granule: ``size = k * lanes * chunk`` tokens, all powers of two."""

    size: int = GRANULE
    lanes: int = LANES
    chunk: int = CHUNK  # <= 32: one bitmask word per chunk

    @property
    def k(self) -> int:
        return self.size // (self.lanes * self.chunk)


_DEFAULT_GRANULE = _Granule()

NUM_WARPS = {torch.float32: 2, torch.bfloat16: 1, torch.float16: 1}
"""Warps per Triton program of the granule kernel by logits dtype (speed only; results do not depend on it)."""


def _default_num_warps(dtype: torch.dtype) -> int:
    return NUM_WARPS.get(dtype, 1)


_LOG2E = 1.4426950408889634
_NEG_SENTINEL = -1e30


@dataclass(frozen=True)
class SampleOutput:
    """Per-row results of one fused sampling call, on the logits' device: ``argmax`` and ``sample`` ([R]
    int64), ``entropy`` (nats) and ``max_prob`` ([R] float32) of the tempered, masked distribution."""

    argmax: torch.Tensor
    sample: torch.Tensor
    entropy: torch.Tensor
    max_prob: torch.Tensor


@dataclass(frozen=True)
class _Prepared:
    logits: torch.Tensor  # [R, V], last dim contiguous
    rows: int
    vocab: int
    inv_temp2_scalar: float | None  # float32 log2(e) / max(T, MIN_TEMPERATURE) for a scalar temperature
    temp: torch.Tensor | None  # [R] float32 raw per-row temperatures (device of logits)
    bitmask: torch.Tensor | None  # [R, ceil(V / 32)] int32
    seed: int
    offset: int


def _prepare(
    fn: str,
    logits: torch.Tensor,
    temperature: float | torch.Tensor,
    bitmask: torch.Tensor | None,
    seed: int,
    offset: int,
) -> _Prepared:
    if not isinstance(logits, torch.Tensor):
        raise TypeError(f"{fn}: logits must be a torch.Tensor, got {type(logits).__name__}")
    if logits.dim() != 2:
        raise ValueError(
            f"{fn}: logits must be 2-D [rows, vocab] (flatten [batch, canvas, vocab] first), "
            f"got shape {tuple(logits.shape)}"
        )
    if logits.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise ValueError(f"{fn}: logits dtype must be float32, bfloat16 or float16, got {logits.dtype}")
    rows, vocab = logits.shape
    if vocab == 0:
        raise ValueError(f"{fn}: logits have an empty vocabulary dimension (shape {tuple(logits.shape)})")
    if logits.stride(-1) != 1:
        logits = logits.contiguous()

    inv_scalar: float | None = None
    temp: torch.Tensor | None = None
    if isinstance(temperature, torch.Tensor):
        if temperature.shape != (rows,):
            raise ValueError(
                f"{fn}: per-row temperature must have shape [{rows}] (one per logits row), "
                f"got {tuple(temperature.shape)}"
            )
        if not temperature.dtype.is_floating_point:
            raise ValueError(f"{fn}: temperature tensor must be floating point, got {temperature.dtype}")
        temp = temperature.to(device=logits.device, dtype=torch.float32)
    else:
        try:
            t = float(temperature)
        except (TypeError, ValueError):
            raise TypeError(
                f"{fn}: temperature must be a float or a [rows] tensor, got {type(temperature).__name__}"
            ) from None
        if math.isnan(t) or t < 0:
            raise ValueError(f"{fn}: temperature must be >= 0 (clamped to {MIN_TEMPERATURE}), got {t}")
        t32 = torch.tensor(max(t, MIN_TEMPERATURE), dtype=torch.float32)
        inv_scalar = float(torch.tensor(_LOG2E, dtype=torch.float32) / t32)  # IEEE fp32, as the kernel

    if bitmask is not None:
        words = (vocab + 31) // 32
        if not isinstance(bitmask, torch.Tensor) or bitmask.dtype != torch.int32:
            got = bitmask.dtype if isinstance(bitmask, torch.Tensor) else type(bitmask).__name__
            raise ValueError(f"{fn}: bitmask must be an int32 tensor (llguidance's packed layout), got {got}")
        if tuple(bitmask.shape) != (rows, words):
            raise ValueError(
                f"{fn}: bitmask must have shape [{rows}, {words}] = [rows, ceil(vocab / 32)], got "
                f"{tuple(bitmask.shape)} (llguidance's compute_bitmask returns a few extra words: slice them off)"
            )
        if bitmask.device != logits.device:
            raise ValueError(f"{fn}: bitmask is on {bitmask.device} but logits are on {logits.device}")
        if bitmask.stride(-1) != 1:
            bitmask = bitmask.contiguous()

    for name, value in (("seed", seed), ("offset", offset)):
        if isinstance(value, bool):
            raise TypeError(f"{fn}: {name} must be an int, got bool")
        try:
            v = operator.index(value)
        except TypeError:
            raise TypeError(f"{fn}: {name} must be an int, got {type(value).__name__}") from None
        if not 0 <= v < 2**63:
            raise ValueError(f"{fn}: {name} must be in [0, 2**63), got {v}")
    return _Prepared(
        logits, rows, vocab, inv_scalar, temp, bitmask, operator.index(seed), operator.index(offset)
    )


def _row_list(mask: torch.Tensor, limit: int = 8) -> str:
    idx = torch.nonzero(mask).flatten().tolist()
    more = f" and {len(idx) - limit} more" if len(idx) > limit else ""
    return f"{idx[:limit]}{more}"


def unpack_bitmask(bitmask: torch.Tensor, vocab: int) -> torch.Tensor:
    """Unpack llguidance bitmasks: bit ``j`` of word ``w`` allows token ``32 * w + j``.

    Args:
        bitmask: ``[..., W]`` int32 packed words (``W >= ceil(vocab / 32)``), any device.
        vocab: tokens to keep.

    Returns:
        ``[..., vocab]`` bool on the same device: True where the token is allowed.
    """
    shifts = torch.arange(32, device=bitmask.device, dtype=torch.int32)
    bits = (bitmask.to(torch.int32).unsqueeze(-1) >> shifts) & 1
    return bits.reshape(*bitmask.shape[:-1], -1)[..., :vocab].bool()


def _masked_and_tempered2(p: _Prepared) -> tuple[torch.Tensor, torch.Tensor]:
    """float32 [R, V] masked logits (-inf where the bitmask forbids the token) and the base-2 tempered
    logits ``masked * (log2(e) / T)`` (the kernel's values)."""
    raw = p.logits.float()
    forbidden = raw <= _NEG_SENTINEL  # the kernel reads forbidden tokens as -1e30: lower logits count as -inf
    if p.bitmask is not None:
        forbidden |= ~unpack_bitmask(p.bitmask, p.vocab)
    raw = raw.masked_fill(forbidden, float("-inf"))
    if p.temp is not None:
        log2e = torch.tensor(_LOG2E, dtype=torch.float32, device=p.logits.device)
        t = torch.where(p.temp > MIN_TEMPERATURE, p.temp, torch.full_like(p.temp, MIN_TEMPERATURE))
        inv2 = (log2e / t)[:, None]
    else:
        assert p.inv_temp2_scalar is not None
        inv2 = torch.tensor(p.inv_temp2_scalar, dtype=torch.float32, device=p.logits.device)
    return raw, raw * inv2


def _raise_bad_rows(fn: str, bad: torch.Tensor, empty: torch.Tensor) -> None:
    """ValueError naming the ``bad`` rows (NaN / +inf / bad temperature) and the ``empty`` ones, if any."""
    parts = []
    if bool(bad.any()):
        parts.append(
            f"rows {_row_list(bad)} have a NaN or +inf allowed logit, or a NaN / negative temperature"
        )
    if bool(empty.any()):
        parts.append(
            f"rows {_row_list(empty)} have no allowed token with a finite logit "
            "(the bitmask forbids every token, or every allowed logit is -inf)"
        )
    if parts:
        raise ValueError(f"{fn}: " + "; ".join(parts))


def _check_rows(fn: str, x: torch.Tensor, temp: torch.Tensor | None) -> None:
    """Raise ValueError for rows without a finite allowed logit, with NaN / +inf, or a bad temperature."""
    top = x.amax(-1)  # amax propagates NaN
    bad = torch.isnan(top) | torch.isposinf(top)
    if temp is not None:
        bad |= ~(temp >= 0)
    _raise_bad_rows(fn, bad, top == float("-inf"))


def _granule_sample(x2: torch.Tensor, seed: int, offset: int, gr: _Granule) -> torch.Tensor:
    """[R, V] float32 base-2 tempered, masked, checked logits -> [R] int64 samples (the kernel's method).

    The vocabulary is cut into granules of ``gr.size`` tokens; granule ``g`` is viewed as a
    ``[k, lanes, chunk]`` tile (token ``g * size + (k_i * lanes + l) * chunk + j``). In granule ``g``:
    ``m`` = max, ``e = 2**max(x2 - m, -1000)``, ``s = sum e``; the token is the first, in ``(l, k_i, j)``
    order, whose running sum of ``e`` exceeds ``u0 * s`` (inverse CDF; a binary search here). The granule
    is the one maximising ``m + log2(s) + log2(e) * Gumbel(u1)`` (Gumbel-max over granule masses).
    ``(u0, u1)`` are Philox-4x32-10 words 0 and 1 for key ``seed``, counter
    ``(g, row, offset mod 2**32, offset >> 32)``.
    """
    rows, vocab = x2.shape
    size = gr.size
    n_gran = (vocab + size - 1) // size
    if n_gran * size != vocab:
        x2 = torch.nn.functional.pad(x2, (0, n_gran * size - vocab), value=float("-inf"))
    # (k, l, j) memory order -> (l, k, j) sampling order
    xg = x2.view(rows, n_gran, gr.k, gr.lanes, gr.chunk).transpose(2, 3).reshape(rows, n_gran, size)
    m = xg.amax(-1, keepdim=True)
    m_safe = torch.where(m == float("-inf"), 0.0, m)  # an all -inf granule gives e = 0, not NaN
    e = torch.exp2((xg - m_safe).clamp_min(-1000.0))
    s = e.sum(-1, keepdim=True)
    cs = e.cumsum(-1)

    g_idx = torch.arange(n_gran, device=x2.device, dtype=torch.int64)[None, :]
    r_idx = torch.arange(rows, device=x2.device, dtype=torch.int64)[:, None]
    off_lo = torch.tensor(offset & 0xFFFFFFFF, device=x2.device, dtype=torch.int64)
    off_hi = torch.tensor(offset >> 32, device=x2.device, dtype=torch.int64)
    r0, r1, _, _ = philox4x32(seed, g_idx, r_idx, off_lo, off_hi)
    u0, u1 = uniform_open01(r0), uniform_open01(r1)

    pos = torch.searchsorted(cs, u0.unsqueeze(-1) * s, right=True)  # first position with cs > u0 * s
    # float rounding can put u0 * s past the total: take the last position with e > 0
    last = torch.searchsorted(cs, cs[..., -1:].contiguous(), right=False)
    pos = torch.where(pos >= size, last, pos).squeeze(-1)
    lane, kk, j = pos // (gr.k * gr.chunk), (pos // gr.chunk) % gr.k, pos % gr.chunk
    inner = (kk * gr.lanes + lane) * gr.chunk + j
    gumbel = -torch.log(-torch.log(u1))
    s = s.squeeze(-1)
    score = torch.where(s > 0, m.squeeze(-1) + torch.log2(s) + gumbel * _LOG2E, float("-inf"))
    best = score.argmax(-1, keepdim=True)
    return best.squeeze(-1) * size + inner.gather(-1, best).squeeze(-1)


def _entropy_max_prob(x2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[R, V] checked base-2 tempered logits -> ([R] entropy in nats, [R] max probability) of their softmax."""
    logp = torch.log_softmax(x2 * math.log(2.0), dim=-1)
    # p * log p is 0 * -inf = NaN exactly where p = 0 (masked / -inf tokens): nansum drops those terms;
    # genuine NaNs were rejected by _check_rows.
    entropy = -(logp.exp() * logp).nansum(-1)
    return entropy, logp.amax(-1).exp()


def _sample_reference(p: _Prepared, granule: _Granule = _DEFAULT_GRANULE) -> SampleOutput:
    """The PyTorch reference on checked inputs (several passes over the logits)."""
    dev = p.logits.device
    if p.rows == 0:
        empty_i = torch.empty(0, dtype=torch.int64, device=dev)
        empty_f = torch.empty(0, dtype=torch.float32, device=dev)
        return SampleOutput(empty_i, empty_i.clone(), empty_f, empty_f.clone())
    raw, x2 = _masked_and_tempered2(p)
    _check_rows("fused_sample", x2, p.temp)
    entropy, max_prob = _entropy_max_prob(x2)
    return SampleOutput(
        argmax=raw.argmax(-1),
        sample=_granule_sample(x2, p.seed, p.offset, granule),
        entropy=entropy,
        max_prob=max_prob,
    )


@functools.cache
def _triton_import() -> ModuleType | Exception:
    """The kernels module, or why it does not import (triton missing or broken)."""
    try:
        from dg_kernels import _triton_sampling
    except Exception as exc:
        return exc
    return _triton_sampling


def _triton_module() -> ModuleType:
    mod = _triton_import()
    if isinstance(mod, Exception):
        raise ImportError(
            f"the Triton sampling kernel needs triton (pip install 'agentkit[gpu]'): {mod!r}"
        ) from mod
    return mod


def triton_available() -> bool:
    """True when the Triton kernels import (triton installed; a GPU may still be missing)."""
    return not isinstance(_triton_import(), Exception)


def _interpreted(mod: ModuleType) -> bool:
    return type(mod._granule_kernel).__name__ == "InterpretedFunction"


def _launch_triton(
    p: _Prepared,
    *,
    granule: _Granule = _DEFAULT_GRANULE,
    num_warps: int | None = None,
    safe: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Launch both kernels; no host sync. Invalid rows get argmax = sample = -1 (no allowed finite logit),
    -2 (NaN / +inf / bad temperature) or -3 (an allowed -inf logit: launch again with ``safe=True``)."""
    mod = _triton_module()
    dev = p.logits.device
    rows, vocab = p.rows, p.vocab
    n_gran = (vocab + granule.size - 1) // granule.size
    per_row = p.temp is not None
    fparts = torch.empty((4, rows, n_gran), dtype=torch.float32, device=dev)
    iparts = torch.empty((2, rows, n_gran), dtype=torch.int32, device=dev)
    argmax = torch.empty(rows, dtype=torch.int64, device=dev)
    sample = torch.empty(rows, dtype=torch.int64, device=dev)
    entropy = torch.empty(rows, dtype=torch.float32, device=dev)
    max_prob = torch.empty(rows, dtype=torch.float32, device=dev)
    if rows == 0:
        return argmax, sample, entropy, max_prob
    temp_arg = p.temp if p.temp is not None else entropy  # placeholder pointer, never read
    mask_arg = p.bitmask if p.bitmask is not None else iparts  # placeholder pointer, never read
    mod._granule_kernel[(rows * n_gran,)](
        p.logits,
        p.logits.stride(0),
        mask_arg,
        p.bitmask.stride(0) if p.bitmask is not None else 0,
        temp_arg,
        p.inv_temp2_scalar if p.inv_temp2_scalar is not None else 1.0,
        vocab,
        n_gran,
        p.seed,
        p.offset,
        fparts,
        iparts,
        rows * n_gran,
        GRANULE=granule.size,
        LANES=granule.lanes,
        CHUNK=granule.chunk,
        EVEN=vocab % granule.size == 0,
        HAS_MASK=p.bitmask is not None,
        PER_ROW_TEMP=per_row,
        MIN_TEMP=MIN_TEMPERATURE,
        SAFE=safe,
        num_warps=num_warps or _default_num_warps(p.logits.dtype),
        enable_fp_fusion=True,
    )
    g_pow2 = max(16, 1 << (n_gran - 1).bit_length())
    mod._combine_kernel[(rows,)](
        fparts,
        iparts,
        rows * n_gran,
        temp_arg,
        n_gran,
        argmax,
        sample,
        entropy,
        max_prob,
        G_POW2=g_pow2,
        PER_ROW_TEMP=per_row,
        num_warps=1 if g_pow2 <= 256 else 4,
    )
    return argmax, sample, entropy, max_prob


def _sample_triton(
    p: _Prepared, *, granule: _Granule = _DEFAULT_GRANULE, num_warps: int | None = None
) -> SampleOutput:
    """The Triton kernels on checked inputs."""
    mod = _triton_module()
    if not p.logits.is_cuda and not _interpreted(mod):
        raise ValueError(
            f"fused_sample: logits are on {p.logits.device}; the Triton kernel needs CUDA tensors "
            "(or TRITON_INTERPRET=1 set before triton is imported); use kernel='auto' or 'reference'"
        )
    argmax, sample, entropy, max_prob = _launch_triton(p, granule=granule, num_warps=num_warps)
    low = int(argmax.min()) if p.rows > 0 else 0  # one device->host sync
    if low < 0 and bool((argmax == -3).any()):  # allowed -inf logits: the clamped variant handles them
        argmax, sample, entropy, max_prob = _launch_triton(p, granule=granule, num_warps=num_warps, safe=True)
        low = int(argmax.min())
    if low < 0:
        _raise_bad_rows("fused_sample", argmax == -2, argmax == -1)
    return SampleOutput(argmax=argmax, sample=sample, entropy=entropy, max_prob=max_prob)


#: Names :func:`fused_sample` accepts for ``kernel``.
KERNELS = ("auto", "triton", "reference")


def fused_sample(
    logits: torch.Tensor,
    temperature: float | torch.Tensor,
    *,
    bitmask: torch.Tensor | None = None,
    seed: int = 0,
    offset: int = 0,
    kernel: str = "auto",
) -> SampleOutput:
    """Sample a denoising step: argmax, sample, entropy and max probability of the [R, V] logits.

    ``kernel="triton"``: the fused Triton kernels (``dg_kernels/_triton_sampling.py``), which read the logits
    once, with one device-to-host sync to check for invalid rows (so no CUDA graph capture); rows with an
    allowed ``-inf`` logit get a second, clamped launch. ``kernel="reference"``: the PyTorch reference (any
    device). The two agree: argmax exactly, entropy and max_prob to float32 rounding, samples except at rare
    rounding ties. ``kernel="auto"``: Triton for CUDA logits when triton imports, else the reference.

    Args:
        logits: [R, V] float32, bfloat16 or float16 (flatten [batch, canvas, vocab] to [batch * canvas,
            vocab]); any device, any row stride.
        temperature: a float >= 0, or a [R] floating tensor of per-row temperatures; values below
            :data:`MIN_TEMPERATURE` are clamped to it.
        bitmask: optional [R, ceil(V / 32)] int32 in llguidance's packed layout: bit ``j`` of word ``w``
            allows token ``32 * w + j``; bits past ``V`` are ignored. Same device as ``logits``.
        seed: Philox key, ``0 <= seed < 2**63``.
        offset: Philox counter offset, ``0 <= offset < 2**63``; use a different one per draw (e.g. the step).
        kernel: one of :data:`KERNELS`.

    Returns:
        :class:`SampleOutput` on the logits' device.

    Raises:
        ValueError: wrong shapes / dtypes / devices, a negative or NaN scalar temperature, seed or offset out
            of range, an invalid row (see the module docstring), an unknown ``kernel``; ``"triton"`` on CPU
            tensors unless ``TRITON_INTERPRET=1`` was set before triton was imported.
        TypeError: logits not a tensor, temperature neither float nor tensor, non-int seed / offset.
        ImportError: ``kernel="triton"`` without triton installed.
    """
    if kernel not in KERNELS:
        raise ValueError(f"fused_sample: kernel must be one of {', '.join(KERNELS)}, got {kernel!r}")
    p = _prepare("fused_sample", logits, temperature, bitmask, seed, offset)
    if kernel == "triton" or (kernel == "auto" and p.logits.is_cuda and triton_available()):
        return _sample_triton(p)
    return _sample_reference(p)
