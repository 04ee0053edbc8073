"""The entropy-bound sampler of one denoising step: tensor operations, the step samplers built on them, and the
adaptive stop test.

:func:`sample_positions` draws a token only at the positions the entropy bound accepts: acceptance depends on
entropies alone, never on the sampled token, so the distribution of accepted canvases is unchanged while the draw
over ``batch x canvas x vocab`` values is skipped. A :class:`StepSampler` turns one step's constrained logits into a
:class:`StepDraw`; :func:`select_sampler` picks one of :class:`ParitySampler` (transformers'
``DiffusionGemmaGenerationMixin._denoising_step`` operation for operation, global RNG: token-identical to
``generate``), :class:`TorchSampler` (a private generator, or one per row) and :class:`KernelSampler`
(:func:`dg_kernels.sampling.fused_sample`, Philox draws).

Entropy-bound acceptance: sort positions by entropy ascending and accept the prefix with ``cumsum(H) - H <= bound``.
Source: Ben-Hamu et al., arXiv:2505.24857; transformers ``EntropyBoundSampler.accept_canvas``."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import torch

from dg_kernels import sampling

if TYPE_CHECKING:
    from model.runtime.settings import DenoiseSettings

#: ``exp(-1e4)`` is 0 in fp32: clamping shifted logits there keeps ``p * log p`` finite for masked (-inf) tokens.
_NEG_CLAMP = -1.0e4


def entropy_and_argmax(
    logits: torch.Tensor, work: tuple[torch.Tensor, torch.Tensor] | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-position entropy (nats) and argmax of ``softmax(logits)``.

    Args:
        logits: ``[..., V]`` float32, tempered and masked (``-inf`` allowed, not a whole row).
        work: two scratch tensors like ``logits`` (overwritten; :class:`Workspace`); ``None``: fresh ones.

    Returns:
        ``(entropy [...] float32, argmax [...] int64)``."""
    m, am = logits.max(dim=-1, keepdim=True)
    z = logits - m if work is None else torch.sub(logits, m, out=work[0])
    z.clamp_(min=_NEG_CLAMP)
    e = z.exp() if work is None else torch.exp(z, out=work[1])
    s = e.sum(dim=-1)
    ez = e.mul_(z).sum(dim=-1)  # e * z, written over e (read once above)
    ent = s.log() - ez / s
    return ent.clamp_(min=0.0), am.squeeze(-1)


class Workspace:
    """Two scratch tensors for :func:`entropy_and_argmax`, kept across steps while the logits' shape, dtype and
    device stay the same: a fresh ``[B, C, V]`` block each step is handed back to the kernel by glibc and faulted in
    again (batch 16, canvas 64, vocabulary 4,096, 1 thread: 154 -> 129 ms per step with it). Logits outside
    ``[min_elements, max_elements]`` get fresh tensors."""

    def __init__(self, min_elements: int = 1 << 20, max_elements: int = 1 << 24) -> None:
        self.min_elements, self.max_elements = min_elements, max_elements
        self._buffers: tuple[torch.Tensor, torch.Tensor] | None = None

    def get(self, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Two tensors shaped like ``like``, or ``None`` outside the size range or when it requires grad."""
        if not self.min_elements <= like.numel() <= self.max_elements or like.requires_grad:
            self._buffers = None
            return None
        b = self._buffers
        if b is None or b[0].shape != like.shape or b[0].dtype != like.dtype or b[0].device != like.device:
            b = self._buffers = (torch.empty_like(like), torch.empty_like(like))
        return b


def entropy_bound_accept(entropy: torch.Tensor, bound: float) -> torch.Tensor:
    """``[B, C]`` bool positions accepted this step, from ``entropy`` ``[B, C]`` float32 and the ``bound`` (nats)."""
    sorted_h, idx = torch.sort(entropy, dim=-1, descending=False)
    sel = torch.cumsum(sorted_h, dim=-1) - sorted_h <= bound
    return torch.zeros_like(sel).scatter(-1, idx, sel)


def sample_positions(
    logits: torch.Tensor, mask: torch.Tensor, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Sample tokens from ``softmax(logits)`` at the positions where ``mask`` is True, by inverse transform sampling
    (one uniform per position looked up in the cumulative softmax): the distribution of ``torch.multinomial``, far
    cheaper (1.57 against 13.8 ms for 64 positions at vocabulary 8,192 on one core;
    ``benchmarks/sampling_kernel.py``), with other draws for the same generator state.

    Args:
        logits: ``[B, C, V]`` float32 tempered logits.
        mask: ``[B, C]`` bool positions to sample.
        generator: optional ``torch.Generator`` on ``logits.device``.

    Returns:
        ``[B, C]`` int64, samples at ``mask`` and ``-1`` elsewhere; a ``-inf`` logit is never drawn."""
    out = torch.full(mask.shape, -1, dtype=torch.long, device=logits.device)
    if bool(mask.any()):
        probs = torch.softmax(logits[mask], dim=-1)
        cdf = probs.cumsum(dim=-1)
        u = torch.rand((cdf.shape[0], 1), generator=generator, device=cdf.device, dtype=cdf.dtype)
        total = cdf[:, -1:]
        # the first entry whose mass exceeds the target (a zero-probability entry never does); the target
        # stays below the total so that rounding cannot run past the last entry with mass
        goal = torch.minimum(u * total, torch.nextafter(total, torch.zeros_like(total)))
        out[mask] = torch.searchsorted(cdf, goal, right=True).squeeze(-1)
    return out


@dataclass
class StepDraw:
    """One denoising step's draw.

    Attributes:
        processed: ``[B, C, V]`` tempered, constrained logits (the next step's self-conditioning input).
        argmax: ``[B, C]`` int64 argmax of ``processed``.
        entropy: ``[B, C]`` float32 per-position entropy (nats).
        denoised: ``[B, C]`` int64 sampled tokens (meaningful where ``accepted``).
        accepted: ``[B, C]`` bool positions the entropy bound accepts."""

    processed: torch.Tensor
    argmax: torch.Tensor
    entropy: torch.Tensor
    denoised: torch.Tensor
    accepted: torch.Tensor


class StepSampler(Protocol):
    """Turns one step's constrained logits into a :class:`StepDraw`; ``parity``: it reproduces transformers' draws."""

    parity: bool

    def draw(
        self, logits: torch.Tensor, temperature: float | torch.Tensor, bound: float, *, canvas: int, step: int
    ) -> StepDraw:
        """Temper ``logits`` ``[B, C, V]`` (in place for the fast samplers) and draw.

        Args:
            logits: ``[B, C, V]`` float constrained decoder logits.
            temperature: one temperature, or ``[B]`` per row.
            bound: the entropy bound (nats).
            canvas, step: 0-based canvas index and steps left; together they key counter-based draws."""
        ...


def _temper(logits: torch.Tensor, temperature: float | torch.Tensor) -> torch.Tensor:
    if isinstance(temperature, torch.Tensor):
        return logits.div_(temperature.to(logits.dtype)[:, None, None])
    return logits.div_(temperature)


class ParitySampler:
    """transformers' sampling step, draw for draw (global RNG)."""

    parity = True

    def draw(
        self, logits: torch.Tensor, temperature: float | torch.Tensor, bound: float, *, canvas: int, step: int
    ) -> StepDraw:
        """See :meth:`StepSampler.draw` (``logits`` is not modified)."""
        batch, canvas_len, vocab = logits.shape
        processed = logits / temperature
        probs = torch.softmax(processed, dim=-1, dtype=torch.float32)
        denoised = torch.multinomial(probs.view(-1, vocab), num_samples=1).view(batch, canvas_len)
        argmax = torch.argmax(processed, dim=-1)
        entropy = torch.distributions.Categorical(logits=processed).entropy()
        return StepDraw(processed, argmax, entropy, denoised, entropy_bound_accept(entropy, bound))


def _tensor_part(
    logits: torch.Tensor, temperature: torch.Tensor, bound: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Temper, entropy and argmax, acceptance: the step's sync-free part (compilable)."""
    processed = logits / temperature
    entropy, argmax = entropy_and_argmax(processed)
    return processed, entropy, argmax, entropy_bound_accept(entropy, bound)


@functools.cache
def _compiled_tensor_part() -> Any:
    return torch.compile(_tensor_part, dynamic=None)


class TorchSampler:
    """Entropy and argmax in one pass, a sample only where the bound accepts.

    Args:
        generator: one ``torch.Generator`` for the batch, or one per row (each row draws as it would alone).
        compiled: ``torch.compile`` the tempering, entropy and acceptance (0.55x eager at batch 16, canvas 256,
            vocabulary 8,192; ``benchmarks/step_compile.py``); entropies differ by about 1e-6 nats, so draws are not
            token-identical to eager."""

    parity = False

    def __init__(
        self, generator: torch.Generator | Sequence[torch.Generator | None] | None, *, compiled: bool = False
    ) -> None:
        self.generator = generator
        self.compiled = compiled
        self.workspace = Workspace()

    def draw(
        self, logits: torch.Tensor, temperature: float | torch.Tensor, bound: float, *, canvas: int, step: int
    ) -> StepDraw:
        """See :meth:`StepSampler.draw`."""
        if self.compiled:
            t = torch.as_tensor(temperature, dtype=logits.dtype, device=logits.device)
            t = t[:, None, None] if t.dim() == 1 else t
            processed, entropy, argmax, accepted = _compiled_tensor_part()(logits, t, bound)
        else:
            processed = _temper(logits, temperature)
            entropy, argmax = entropy_and_argmax(processed, self.workspace.get(processed))
            accepted = entropy_bound_accept(entropy, bound)
        if isinstance(self.generator, Sequence):
            denoised = torch.cat(
                [
                    sample_positions(processed[b : b + 1], accepted[b : b + 1], generator=g)
                    for b, g in enumerate(self.generator)
                ]
            )
        else:
            denoised = sample_positions(processed, accepted, generator=self.generator)
        return StepDraw(processed, argmax, entropy, denoised, accepted)


class KernelSampler:
    """:func:`dg_kernels.sampling.fused_sample` (or, with ``reference=True``, its PyTorch reference); Philox draws
    keyed by ``(seed, canvas * 4096 + step)``. Raises ImportError when the kernels cannot be imported."""

    parity = False

    def __init__(self, seed: int, *, reference: bool = False) -> None:
        self.kernel = "reference" if reference else "auto"
        self.seed = int(seed) & 0x7FFFFFFF

    def draw(
        self, logits: torch.Tensor, temperature: float | torch.Tensor, bound: float, *, canvas: int, step: int
    ) -> StepDraw:
        """See :meth:`StepSampler.draw`."""
        batch, canvas_len, vocab = logits.shape
        processed = _temper(logits, temperature)
        out = sampling.fused_sample(
            processed.view(-1, vocab), 1.0, seed=self.seed, offset=canvas * 4096 + step, kernel=self.kernel
        )
        entropy = out.entropy.view(batch, canvas_len)
        return StepDraw(
            processed,
            out.argmax.view(batch, canvas_len),
            entropy,
            out.sample.view(batch, canvas_len),
            entropy_bound_accept(entropy, bound),
        )


#: Names :func:`select_sampler` accepts.
SAMPLERS = ("auto", "torch", "kernel", "reference")


def select_sampler(
    name: str,
    *,
    parity: bool,
    device: torch.device,
    generator: torch.Generator | None,
    seed: int,
    compiled: bool = False,
) -> StepSampler:
    """The one dispatch over the step samplers.

    Args:
        name: ``"auto"`` (the kernel on CUDA, torch elsewhere), ``"torch"``, ``"kernel"`` or ``"reference"`` (the
            kernel's PyTorch reference everywhere). Ignored when ``parity``.
        parity: reproduce transformers' draws (:class:`ParitySampler`).
        device: the logits' device; generator: the torch path's generator; seed: the kernel's Philox key.
        compiled: see :class:`TorchSampler`.

    Raises:
        ValueError: an unknown name, or ``"kernel"``/``"reference"`` when the kernels cannot be imported."""
    if name not in SAMPLERS:
        raise ValueError(f"sampler must be one of {', '.join(map(repr, SAMPLERS))}, got {name!r}")
    if parity:
        return ParitySampler()
    if name == "torch" or (name == "auto" and device.type != "cuda"):
        return TorchSampler(generator, compiled=compiled)
    try:
        return KernelSampler(seed, reference=name == "reference")
    except Exception as exc:  # kernels not built / triton missing
        if name == "auto":
            return TorchSampler(generator, compiled=compiled)
        raise ValueError(
            f"sampler={name!r} requested but dg_kernels.sampling cannot be imported: {exc}"
        ) from exc


def window_accept(
    draw: StepDraw,
    canvas: torch.Tensor,
    window: int | torch.Tensor,
    fixed_mask: torch.Tensor | None,
    prev_accepted: torch.Tensor,
) -> None:
    """Accept nothing past the frontier + ``window`` (in place on ``draw``): the frontier is the end of the
    constraint's fixed prefix (``fixed_mask`` ``[B, C]``) when a row has one, else the leading run accepted in the
    previous step. ``window`` is an int or an int64 ``[B]``; positions no longer accepted keep the ``canvas`` token.
    """
    if fixed_mask is not None and bool(fixed_mask.any()):
        lead = fixed_mask.long().cumprod(dim=1).sum(dim=1)
    else:
        lead = prev_accepted.long().cumprod(dim=1).sum(dim=1)
    pos = torch.arange(canvas.shape[1], device=canvas.device)[None, :]
    draw.accepted = draw.accepted & (pos < (lead + window)[:, None])
    draw.denoised = torch.where(draw.accepted, draw.denoised, canvas)


def row_windows(
    settings: DenoiseSettings,
    in_call: Callable[[], Sequence[bool]],
    canvas_length: int,
    device: torch.device | str = "cpu",
) -> torch.Tensor | int | None:
    """The accept window of each row (:meth:`DenoiseSettings.window_for`): one int when all agree, an int64 ``[B]``
    when they differ (``canvas_length`` for none), ``None`` when no row has one. ``in_call`` (whether each row's
    turn opened a call) is called only when ``settings.call_accept_window`` is set."""
    if settings.call_accept_window is None:
        return settings.accept_window
    wins = [settings.window_for(c) for c in in_call()]
    if all(w is None for w in wins):
        return None
    if len(set(wins)) == 1:
        return wins[0]
    return torch.tensor([canvas_length if w is None else w for w in wins], dtype=torch.long, device=device)


def free_mean_entropy(entropy: torch.Tensor, fixed_mask: torch.Tensor | None) -> torch.Tensor:
    """``[B]`` float32 mean entropy over positions no constraint fixed (0 when all are fixed)."""
    if fixed_mask is None:
        return entropy.mean(dim=-1)
    free = ~fixed_mask
    n_free = free.sum(dim=-1)
    return torch.where(
        n_free > 0, (entropy * free).sum(dim=-1) / n_free.clamp(min=1), torch.zeros_like(n_free)
    )


def stop_test(
    history: torch.Tensor | None,
    argmax: torch.Tensor,
    entropy: torch.Tensor,
    fixed_mask: torch.Tensor | None,
    stability_threshold: int,
    confidence_threshold: float,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The adaptive stop (transformers ``DiffusionGemmaGenerationMixin``): argmax stable for ``stability_threshold``
    steps and mean free entropy below ``confidence_threshold`` nats.

    Args:
        history: ``[T, B, C]`` int64 argmax of the last ``T`` steps (``None``: first step).
        argmax, entropy: ``[B, C]`` this step's; fixed_mask: see :func:`free_mean_entropy`.

    Returns:
        ``(stop [B] bool, history)`` with this step's argmax rolled in."""
    batch, canvas_len = argmax.shape
    if stability_threshold == 0:
        stable = torch.ones(batch, dtype=torch.bool, device=argmax.device)
    else:
        if history is None:
            history = torch.full(
                (stability_threshold, batch, canvas_len), -1, dtype=torch.long, device=argmax.device
            )
        stable = (history == argmax[None]).all(dim=-1).all(dim=0)
        history = torch.roll(history, shifts=-1, dims=0)
        history[-1] = argmax
    return stable & (free_mean_entropy(entropy, fixed_mask) < confidence_threshold), history
