"""The entropy-bound sampler of one denoising step: its three tensor operations.

* :func:`entropy_and_argmax`: one max pass (value and argmax together) and one fused exp/sum pass for the
  entropy of ``softmax(logits)`` at every canvas position.
* :func:`entropy_bound_accept`: which positions the entropy bound accepts this step.
* :func:`sample_positions`: a token drawn *only at the accepted positions*. The acceptance rule depends on
  entropies alone, never on the sampled token, so sampling the accepted positions only gives the same
  distribution of accepted canvases while skipping a multinomial over ``batch x canvas x vocab`` values.

The parity path of :func:`model.runtime.generate` does not use these: it repeats transformers'
``DiffusionGemmaGenerationMixin._denoising_step`` operation for operation (``softmax`` -> ``torch.multinomial``
over every position -> ``argmax`` -> ``Categorical(logits).entropy()``), random draws in the same order.

Entropy-bound acceptance: sort positions by entropy ascending and accept the prefix with
``cumsum(H) - H <= bound`` (``H`` sorted, so ``H`` is the running maximum). Source: Ben-Hamu et al., "Accelerated
Sampling from Masked Diffusion Models via Entropy Bounded Unmasking", arXiv:2505.24857; transformers
``EntropyBoundSampler.accept_canvas``.
"""

from __future__ import annotations

import torch

#: ``exp(-1e4)`` is 0 in fp32: clamping shifted logits there keeps ``p * log p`` finite for masked (-inf) tokens.
_NEG_CLAMP = -1.0e4


def entropy_and_argmax(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-position entropy (nats) and argmax of ``softmax(logits)``.

    Args:
        logits: ``[..., V]`` float32 (already tempered and masked; ``-inf`` allowed, but not a whole row).

    Returns:
        ``(entropy [...] float32, argmax [...] int64)``.
    """
    m, am = logits.max(dim=-1, keepdim=True)
    z = (logits - m).clamp_(min=_NEG_CLAMP)
    e = z.exp()
    s = e.sum(dim=-1)
    ez = (e * z).sum(dim=-1)
    ent = s.log() - ez / s
    return ent.clamp_(min=0.0), am.squeeze(-1)


def entropy_bound_accept(entropy: torch.Tensor, bound: float) -> torch.Tensor:
    """Entropy-bound acceptance mask.

    Args:
        entropy: ``[B, C]`` float32 per-position entropies (nats).
        bound: the entropy bound (nats).

    Returns:
        ``[B, C]`` bool: True where the position is accepted this step.
    """
    sorted_h, idx = torch.sort(entropy, dim=-1, descending=False)
    sel = torch.cumsum(sorted_h, dim=-1) - sorted_h <= bound
    return torch.zeros_like(sel).scatter(-1, idx, sel)


def sample_positions(
    logits: torch.Tensor, mask: torch.Tensor, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Sample tokens from ``softmax(logits)`` at the positions where ``mask`` is True.

    Args:
        logits: ``[B, C, V]`` float32 tempered logits.
        mask: ``[B, C]`` bool positions to sample.
        generator: optional ``torch.Generator`` (on ``logits.device``) for reproducible draws.

    Returns:
        ``[B, C]`` int64 with samples at ``mask`` and ``-1`` elsewhere.
    """
    out = torch.full(mask.shape, -1, dtype=torch.long, device=logits.device)
    if bool(mask.any()):
        rows = logits[mask]
        probs = torch.softmax(rows, dim=-1)
        out[mask] = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
    return out
