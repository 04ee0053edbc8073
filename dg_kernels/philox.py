"""Philox-4x32-10 (Salmon, Moraes, Dror & Shaw, "Parallel random numbers: as easy as 1, 2, 3", SC 2011) in
int64 PyTorch arithmetic, bit-identical to Triton's ``tl.random.philox``, so the sampling reference reproduces
the kernel's random bits on any device. Meant for a few counters per row (~150 tensor operations a call).
"""

from __future__ import annotations

import torch

__all__ = ["PHILOX_ROUNDS", "philox4x32", "uniform_open01"]

PHILOX_ROUNDS = 10  # Triton's default, and the sampling kernel's

_KEY_A = 0x9E3779B9
_KEY_B = 0xBB67AE85
_ROUND_A = 0xD2511F53
_ROUND_B = 0xCD9E8D57
_MASK32 = 0xFFFFFFFF


def _mul_hi_lo(const: int, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """High and low 32-bit words of ``const * x`` (uint32 values in int64), from 16-bit halves of ``x`` (the
    full product would overflow int64)."""
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
        seed: 64-bit key, ``0 <= seed < 2**63`` (split into low and high words, as Triton does).
        c0, c1, c2, c3: counter words, broadcastable integer tensors of values in ``[0, 2**32)``.

    Returns:
        Four int64 tensors of the broadcast shape, of values in ``[0, 2**32)``.

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
    """float32 uniforms in ``[2**-24, 1 - 2**-24]`` of uint32 words (int64): ``((bits >> 9) + 0.5) * 2**-23``,
    exact in float32, as the kernel computes them."""
    return ((bits >> 9).to(torch.float32) + 0.5) * (2.0**-23)
