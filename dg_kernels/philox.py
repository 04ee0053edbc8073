"""Philox-4x32-10 in plain PyTorch, bit-identical to Triton's ``tl.random.philox``.

The fused sampling kernel draws its random numbers with Triton's Philox (Salmon, Moraes, Dror & Shaw,
"Parallel random numbers: as easy as 1, 2, 3", SC 2011). This module evaluates the same function with
int64 tensor arithmetic so the PyTorch reference (``dg_kernels.sampling.fused_sample(kernel="reference")``)
reproduces the kernel's random bits exactly, on any device. It is meant for a few counters per row (one per vocabulary
granule), not one per logit: each call costs ~150 elementwise tensor operations.
"""

from __future__ import annotations

import torch

__all__ = ["PHILOX_ROUNDS", "philox4x32", "uniform_open01"]

PHILOX_ROUNDS = 10
"""Rounds used by Triton's default ``tl.random.philox`` (and by the sampling kernel)."""

_KEY_A = 0x9E3779B9
_KEY_B = 0xBB67AE85
_ROUND_A = 0xD2511F53
_ROUND_B = 0xCD9E8D57
_MASK32 = 0xFFFFFFFF


def _mul_hi_lo(const: int, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """High and low 32-bit words of ``const * x`` for a 32-bit constant and an int64 tensor of uint32 values.

    The 64-bit product overflows int64, so ``x`` is split into 16-bit halves (each partial product < 2**48).
    """
    x_hi = x >> 16
    x_lo = x & 0xFFFF
    p_hi = const * x_hi  # < 2**48
    p_lo = const * x_lo  # < 2**48
    hi = (p_hi + (p_lo >> 16)) >> 16
    lo = (((p_hi & 0xFFFF) << 16) + p_lo) & _MASK32
    return hi, lo


def philox4x32(
    seed: int,
    c0: torch.Tensor,
    c1: torch.Tensor,
    c2: torch.Tensor,
    c3: torch.Tensor,
    n_rounds: int = PHILOX_ROUNDS,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Philox-4x32 block function, identical to ``triton.language.random.philox`` with 32-bit counters.

    Args:
        seed: 64-bit key, ``0 <= seed < 2**63``; Triton splits it into (low word, high word).
        c0, c1, c2, c3: counter words, integer tensors (any shape, broadcastable to each other) holding
            values in ``[0, 2**32)``; int64 is the natural dtype.
        n_rounds: Philox rounds (Triton's default is 10).

    Returns:
        Four int64 tensors of the broadcast shape, each holding uint32 values in ``[0, 2**32)``.

    Raises:
        ValueError: ``seed`` outside ``[0, 2**63)``.
    """
    if not 0 <= seed < 2**63:
        raise ValueError(f"philox4x32: seed must be in [0, 2**63), got {seed}")
    x0, x1, x2, x3 = torch.broadcast_tensors(*(c.to(torch.int64) & _MASK32 for c in (c0, c1, c2, c3)))
    k0 = seed & _MASK32
    k1 = (seed >> 32) & _MASK32
    for _ in range(n_rounds):
        hi_b, lo_b = _mul_hi_lo(_ROUND_B, x2)
        hi_a, lo_a = _mul_hi_lo(_ROUND_A, x0)
        x0, x1, x2, x3 = hi_b ^ x1 ^ k0, lo_b, hi_a ^ x3 ^ k1, lo_a
        k0 = (k0 + _KEY_A) & _MASK32
        k1 = (k1 + _KEY_B) & _MASK32
    return x0, x1, x2, x3


def uniform_open01(bits: torch.Tensor) -> torch.Tensor:
    """Map uint32 words (int64 tensor) to float32 uniforms in the open interval (0, 1).

    ``u = ((bits >> 9) + 0.5) * 2**-23``: 23 random bits, never 0 or 1, every value exact in float32
    (the kernel computes the same expression, so both sides get identical floats).

    Args:
        bits: int64 tensor of values in ``[0, 2**32)``.

    Returns:
        float32 tensor of the same shape with values in ``[2**-24, 1 - 2**-24]``.
    """
    return ((bits >> 9).to(torch.float32) + 0.5) * (2.0**-23)
