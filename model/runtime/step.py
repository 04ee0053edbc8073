"""One denoising step over a batch of canvases, the one implementation :func:`model.runtime.generate` and
:class:`model.runtime.batcher.CanvasBatcher` both call.

:func:`denoise_step` reads a :class:`Canvas` and returns a :class:`StepOutcome` (the next canvas and what happened),
after transformers ``DiffusionGemmaGenerationMixin._denoising_step``: the decoder forward (self-conditioned on the
previous step's tempered logits), the constraints, the draw (:class:`StepSampler`), the acceptance (entropy bound,
window, commits and vetoes), re-noise of the rest, and the stop test (argmax stable and confident, or grammar
terminated); finished rows keep their canvas."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

import torch
from transformers.models.diffusion_gemma.modeling_diffusion_gemma import DiffusionGemmaForBlockDiffusion

from model.heads.copy_model import softcap
from model.runtime.constraint_batch import ConstraintBatch
from model.runtime.events import GenerationStats
from model.runtime.sampler import StepDraw, StepSampler, row_windows, stop_test, window_accept
from model.runtime.settings import DenoiseSettings

#: One generator for the batch, one per row (each draws as it would alone), or ``None`` (global RNG, parity).
Generators = torch.Generator | Sequence[torch.Generator] | None


@dataclass(frozen=True)
class Canvas:
    """The tensors of B canvases being denoised (C positions, V vocabulary; one device).

    Attributes:
        tokens: ``[B, C]`` int64 the canvas the next forward reads.
        argmax: ``[B, C]`` int64 the last step's argmax (the readout of a finished canvas).
        history: ``[T, B, C]`` int64 argmax of the last ``T = max(stability_threshold, 1)`` steps (-1: none yet).
        prev_accepted: ``[B, C]`` bool positions the last step accepted.
        finished: ``[B]`` bool rows whose canvas stopped denoising.
        steps_left: per row, steps left in the schedule.
        self_cond: ``[B, C, V]`` the last step's tempered logits, or ``None`` (first step).
        self_cond_mask: ``[B]`` bool rows whose ``self_cond`` is real; ``None``: all."""

    tokens: torch.Tensor
    argmax: torch.Tensor
    history: torch.Tensor
    prev_accepted: torch.Tensor
    finished: torch.Tensor
    steps_left: tuple[int, ...]
    self_cond: torch.Tensor | None = None
    self_cond_mask: torch.Tensor | None = None

    @classmethod
    def start(cls, noise: torch.Tensor, finished: torch.Tensor, settings: DenoiseSettings) -> Canvas:
        """A fresh canvas over uniform ``noise`` ``[B, C]``; ``finished`` ``[B]`` rows take no part."""
        b, c = noise.shape
        t = max(settings.stability_threshold, 1)
        return cls(
            tokens=noise,
            argmax=noise,
            history=torch.full((t, b, c), -1, dtype=torch.long, device=noise.device),
            prev_accepted=torch.zeros((b, c), dtype=torch.bool, device=noise.device),
            finished=finished,
            steps_left=(settings.max_denoising_steps,) * b,
        )

    def select(self, rows: slice) -> Canvas:
        """The canvas of ``rows`` (views)."""
        if rows.start == 0 and rows.stop == self.tokens.shape[0]:
            return self
        per_row = [f.name for f in fields(self) if f.name != "history"]  # history is [T, B, C]
        cut: dict[str, Any] = {f: None if (t := getattr(self, f)) is None else t[rows] for f in per_row}
        return replace(self, history=self.history[:, rows], **cut)

    @classmethod
    def gather(cls, parts: Sequence[tuple[Canvas, int]]) -> Canvas:
        """One canvas of the rows ``(canvas, row index)``, in order; rows without self-conditioning logits get zeros
        and ``self_cond_mask`` False."""
        rows = [c.select(slice(i, i + 1)) for c, i in parts]
        real = [
            r.self_cond is not None and (r.self_cond_mask is None or bool(r.self_cond_mask[0])) for r in rows
        ]
        self_cond = mask = None
        if any(real):
            like = next(r.self_cond for r, ok in zip(rows, real, strict=True) if ok)
            assert like is not None
            cond = [
                r.self_cond if ok and r.self_cond is not None else like.new_zeros(like.shape)
                for r, ok in zip(rows, real, strict=True)
            ]
            self_cond = torch.cat(cond)
            if not all(real):
                mask = torch.tensor(real, device=like.device)
        cat = {
            f: torch.cat([getattr(r, f) for r in rows])
            for f in ("tokens", "argmax", "prev_accepted", "finished")
        }
        return cls(
            **cat,
            history=torch.cat([r.history for r in rows], dim=1),
            steps_left=tuple(n for r in rows for n in r.steps_left),
            self_cond=self_cond,
            self_cond_mask=mask,
        )


@dataclass(frozen=True)
class Denoiser:
    """What one step runs with.

    Attributes:
        model: ``DiffusionGemmaForBlockDiffusion`` (eval mode).
        settings: entropy bound, acceptance window, stop thresholds.
        sampler: the step sampler (:func:`model.runtime.sampler.select_sampler`).
        constraints: the rows' constraints.
        generator: the re-noise draws' generator(s) (:data:`Generators`).
        stats: where the phases' wall time goes.
        vocab: the vocabulary size (the noise's range)."""

    model: Any
    settings: DenoiseSettings
    sampler: StepSampler
    constraints: ConstraintBatch
    generator: Generators
    stats: GenerationStats
    vocab: int

    def noise(self, rows: int, canvas_length: int, device: torch.device) -> torch.Tensor:
        """``[rows, canvas_length]`` int64 uniform tokens from the generator(s)."""
        g, v = self.generator, self.vocab
        if isinstance(g, Sequence):
            return torch.cat([torch.randint(0, v, (1, canvas_length), device=device, generator=r) for r in g])
        return torch.randint(0, v, (rows, canvas_length), device=device, generator=g)


@dataclass(frozen=True)
class StepOutcome:
    """What one :func:`denoise_step` did.

    Attributes:
        canvas: the next :class:`Canvas`.
        accepted: ``[B, C]`` bool positions accepted this step.
        entropy: ``[B, C]`` float32 entropy (nats; 0 for rows finished before the step in fast mode).
        fixed: ``[B, C]`` bool positions a constraint fixed, or ``None``."""

    canvas: Canvas
    accepted: torch.Tensor
    entropy: torch.Tensor
    fixed: torch.Tensor | None

    def canvas_done(self) -> list[bool]:
        """Per row, whether its canvas is done: finished, or its schedule spent."""
        return [
            f or n == 0 for f, n in zip(self.canvas.finished.tolist(), self.canvas.steps_left, strict=True)
        ]


def decoder_logits(model: Any, **inputs: Any) -> torch.Tensor:
    """The decoder's ``[B, C, V]`` logits for ``model(**inputs)``. For transformers' own ``forward`` outside
    autograd, the final soft-cap runs in place on the ``lm_head`` output (same values, two fewer ``[B, C, V]``
    tensors a step)."""
    if type(model).forward is not DiffusionGemmaForBlockDiffusion.forward or torch.is_grad_enabled():
        return model(**inputs).logits
    return softcap(model.lm_head(model.model(**inputs).last_hidden_state), model.final_logit_softcapping)


def denoise_step(
    den: Denoiser,
    canvas: Canvas,
    decoder_inputs: dict[str, Any],
    temperature: float | torch.Tensor,
    *,
    canvas_index: int = 0,
) -> StepOutcome:
    """One denoising step for every row of ``canvas``.

    Args:
        den: the model, settings and collaborators.
        canvas: the rows' current :class:`Canvas` (not modified).
        decoder_inputs: ``cache``, ``decoder_attention_mask``, ``decoder_position_ids`` (``[1, C]`` or ``[B, C]``)
            and optionally ``copy_memory``.
        temperature: one float or ``[B]`` float32.
        canvas_index: the 0-based canvas (the kernel sampler's counter key).

    Raises:
        ValueError: a constraint mask that allows no token."""
    s, cons, stats = den.settings, den.constraints, den.stats
    with stats.phase("decoder"):
        extra = {} if canvas.self_cond_mask is None else {"self_conditioning_mask": canvas.self_cond_mask}
        logits = decoder_logits(
            den.model,
            decoder_input_ids=canvas.tokens,
            self_conditioning_logits=canvas.self_cond,
            **decoder_inputs,
            **extra,
        )
    fixed_mask = fixed_tok = None
    live = (~canvas.finished).tolist() if cons.any else []
    if cons.any:
        with stats.phase("constraint"):
            fixed_mask, fixed_tok = cons.apply(logits, live, temperature)
    with stats.phase("sampling"):
        draw = den.sampler.draw(
            logits, temperature, s.entropy_bound, canvas=canvas_index, step=canvas.steps_left[0]
        )
        window = None if den.sampler.parity else row_windows(s, cons.in_call, logits.shape[1], logits.device)
        if window is not None:
            window_accept(draw, canvas.tokens, window, fixed_mask, canvas.prev_accepted)
    grammar_done = None
    if fixed_mask is not None and fixed_tok is not None:
        with stats.phase("constraint"):
            draw.denoised, draw.accepted, grammar_done = cons.commit(
                live, draw.denoised, draw.accepted, fixed_mask, fixed_tok, draw.processed, s.entropy_bound
            )
    with stats.phase("sampling"):
        return _advance(den, canvas, draw, fixed_mask, grammar_done)


def _advance(
    den: Denoiser,
    canvas: Canvas,
    draw: StepDraw,
    fixed_mask: torch.Tensor | None,
    grammar_done: torch.Tensor | None,
) -> StepOutcome:
    """Re-noise, the stop test and the next canvas (rows finished before the step keep theirs)."""
    s = den.settings
    rows, length = canvas.tokens.shape
    tokens = torch.where(draw.accepted, draw.denoised, den.noise(rows, length, canvas.tokens.device))
    argmax, processed, entropy = draw.argmax, draw.processed, draw.entropy
    finished = canvas.finished
    if bool(finished.any()):
        argmax = torch.where(finished[:, None], canvas.argmax, argmax)
        tokens = torch.where(finished[:, None], canvas.tokens, tokens)
        if canvas.self_cond is not None:
            processed = torch.where(finished[:, None, None], canvas.self_cond, processed)
        if den.sampler.parity:  # the reference's stop test sees every row's entropy again
            entropy = torch.distributions.Categorical(logits=processed).entropy()
        else:
            entropy = torch.where(finished[:, None], torch.zeros_like(entropy), entropy)
    stop, history = stop_test(
        canvas.history, argmax, entropy, fixed_mask, s.stability_threshold, s.confidence_threshold
    )
    finished = finished | stop
    if grammar_done is not None:  # a terminated grammar leaves nothing to denoise: the readout is decided
        finished = finished | grammar_done
    nxt = replace(
        canvas,
        tokens=tokens,
        argmax=argmax,
        history=canvas.history if history is None else history,
        prev_accepted=draw.accepted,
        finished=finished,
        steps_left=tuple(n - 1 for n in canvas.steps_left),
        self_cond=processed.to(den.model.model.decoder.embed_tokens.weight.dtype),
        self_cond_mask=None,
    )
    return StepOutcome(canvas=nxt, accepted=draw.accepted, entropy=entropy, fixed=fixed_mask)
