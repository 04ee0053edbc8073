"""One denoising step over a batch of canvases: the one implementation that :func:`model.runtime.generate` (a fixed
batch) and :class:`model.runtime.batcher.CanvasBatcher` (rows joining and leaving) both call.

:func:`denoise_step` reads a :class:`Canvas` (the rows' tensors) and returns a :class:`StepOutcome` (the next
:class:`Canvas` and what happened); it changes nothing of its caller's. The step, after transformers
``DiffusionGemmaGenerationMixin._denoising_step`` and its stop criterion:

1. **forward**: the decoder over the canvas, self-conditioned on the previous step's tempered logits;
2. **constrain**: the rows' constraints fix positions and mask their frontier (:class:`ConstraintBatch`);
3. **draw**: temper (each row's temperature), entropy and argmax, sample (the :class:`StepSampler`);
4. **accept**: the entropy bound, the acceptance window, the constraints' commits and vetoes;
5. **re-noise** what was not accepted, and **stop**: a row finishes when its argmax is stable and confident or its
   grammar terminated; a row already finished keeps its canvas.

Timing goes through one hook, :meth:`GenerationStats.phase`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
from transformers.models.diffusion_gemma.modeling_diffusion_gemma import DiffusionGemmaForBlockDiffusion

from model.runtime.constraint_batch import ConstraintBatch
from model.runtime.events import GenerationStats
from model.runtime.sampler import StepDraw, StepSampler, row_windows, stop_test, window_accept
from model.runtime.settings import DenoiseSettings

#: One generator for the batch's draws, one per row (each row then draws as it would alone), or ``None``
#: (the global RNG, parity mode).
Generators = torch.Generator | Sequence[torch.Generator] | None


@dataclass(frozen=True)
class Canvas:
    """The tensors of B canvases being denoised (C positions, V vocabulary; all on one device).

    Attributes:
        tokens: ``[B, C]`` int64 the canvas the next forward reads.
        argmax: ``[B, C]`` int64 the last step's argmax (the draft; the readout of a finished canvas).
        history: ``[T, B, C]`` int64 argmax of the last ``T = max(stability_threshold, 1)`` steps (-1: none yet).
        prev_accepted: ``[B, C]`` bool positions accepted by the last step (the window's frontier).
        finished: ``[B]`` bool rows whose canvas has stopped denoising.
        steps_left: per row, denoising steps left in the schedule (the temperature schedule's index).
        self_cond: ``[B, C, V]`` the last step's tempered logits, or ``None`` (every row on its first step).
        self_cond_mask: ``[B]`` bool rows whose ``self_cond`` is real (the others get zero self-conditioning, as
            on a first step); ``None``: all of them.
    """

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
        """A fresh canvas over ``noise`` ``[B, C]`` int64 (uniform tokens); ``finished`` ``[B]`` bool rows that
        take no part (they keep this canvas)."""
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
        """The canvas of ``rows`` (views, no copy)."""
        if rows.start == 0 and rows.stop == self.tokens.shape[0]:
            return self
        per_row = (
            "tokens",
            "argmax",
            "prev_accepted",
            "finished",
            "steps_left",
            "self_cond",
            "self_cond_mask",
        )
        cut: dict[str, Any] = {f: None if (t := getattr(self, f)) is None else t[rows] for f in per_row}
        return replace(self, history=self.history[:, rows], **cut)

    @classmethod
    def gather(cls, parts: Sequence[tuple[Canvas, int]]) -> Canvas:
        """One canvas of the rows ``(canvas, row index)`` taken from others, in order (a batch of rows at their
        own steps); rows without self-conditioning logits get zeros and ``self_cond_mask`` False."""
        rows = [(c, slice(i, i + 1)) for c, i in parts]
        real = [
            c.self_cond is not None and (c.self_cond_mask is None or bool(c.self_cond_mask[i]))
            for c, i in parts
        ]
        self_cond = mask = None
        if any(real):
            like = next(c.self_cond for (c, _), r in zip(parts, real, strict=True) if r)
            assert like is not None
            zeros = like.new_zeros((1, *like.shape[1:]))
            self_cond = torch.cat(
                [
                    c.self_cond[s] if r and c.self_cond is not None else zeros
                    for (c, s), r in zip(rows, real, strict=True)
                ]
            )
            if not all(real):
                mask = torch.tensor(real, device=like.device)
        return cls(
            tokens=torch.cat([c.tokens[s] for c, s in rows]),
            argmax=torch.cat([c.argmax[s] for c, s in rows]),
            history=torch.cat([c.history[:, s] for c, s in rows], dim=1),
            prev_accepted=torch.cat([c.prev_accepted[s] for c, s in rows]),
            finished=torch.cat([c.finished[s] for c, s in rows]),
            steps_left=tuple(c.steps_left[i] for c, i in parts),
            self_cond=self_cond,
            self_cond_mask=mask,
        )


@dataclass(frozen=True)
class Denoiser:
    """What one step runs with: the model and settings, and the step's collaborators.

    Attributes:
        model: ``DiffusionGemmaForBlockDiffusion`` (eval mode; with a copy head, ``decoder_inputs`` carry its memory).
        settings: entropy bound, acceptance window, stop thresholds.
        sampler: the step sampler (parity, torch or kernel; see :func:`model.runtime.sampler.select_sampler`).
        constraints: the rows' constraints (all ``None``: unconstrained).
        generator: the re-noise draws' generator(s) (see :data:`Generators`).
        stats: where the phases' wall time goes (:meth:`GenerationStats.phase`).
        vocab: the vocabulary size V (the uniform noise's range).
    """

    model: Any
    settings: DenoiseSettings
    sampler: StepSampler
    constraints: ConstraintBatch
    generator: Generators
    stats: GenerationStats
    vocab: int

    def noise(self, rows: int, canvas_length: int, device: torch.device) -> torch.Tensor:
        """``[rows, canvas_length]`` int64 uniform tokens from the generator(s) (one draw per row with one each)."""
        g, v = self.generator, self.vocab
        if isinstance(g, Sequence):
            return torch.cat([torch.randint(0, v, (1, canvas_length), device=device, generator=r) for r in g])
        return torch.randint(0, v, (rows, canvas_length), device=device, generator=g)


@dataclass(frozen=True)
class StepOutcome:
    """What one :func:`denoise_step` did.

    Attributes:
        canvas: the next :class:`Canvas` (finished rows hold their last one).
        accepted: ``[B, C]`` bool positions accepted this step (after window, commits and vetoes).
        entropy: ``[B, C]`` float32 per-position entropy (nats; 0 for rows finished before the step in fast mode).
        fixed: ``[B, C]`` bool positions a constraint fixed this step, or ``None`` (no constraint in the batch).
    """

    canvas: Canvas
    accepted: torch.Tensor
    entropy: torch.Tensor
    fixed: torch.Tensor | None

    def canvas_done(self) -> list[bool]:
        """Per row, whether its canvas is done: finished, or its step schedule spent."""
        return [
            f or n == 0 for f, n in zip(self.canvas.finished.tolist(), self.canvas.steps_left, strict=True)
        ]


def decoder_logits(model: Any, **inputs: Any) -> torch.Tensor:
    """The decoder's ``[B, C, V]`` logits for ``model(**inputs)`` (decoder keyword inputs).

    For transformers' own ``DiffusionGemmaForBlockDiffusion.forward`` (not overridden, e.g. by a copy head) and
    outside autograd, its final soft-capping (``tanh(logits / cap) * cap`` in float32) runs in place on the
    ``lm_head`` output: the same values, without two more ``[B, C, V]`` tensors each step (on CPU each fresh one
    faults its pages in again). Any other model: ``model(**inputs).logits``.
    """
    if type(model).forward is not DiffusionGemmaForBlockDiffusion.forward or torch.is_grad_enabled():
        return model(**inputs).logits
    logits = model.lm_head(model.model(**inputs).last_hidden_state).to(torch.float32)
    cap = model.final_logit_softcapping
    return logits if cap is None else logits.div_(cap).tanh_().mul_(cap)


def denoise_step(
    den: Denoiser,
    canvas: Canvas,
    decoder_inputs: dict[str, Any],
    temperature: float | torch.Tensor,
    *,
    canvas_index: int = 0,
) -> StepOutcome:
    """One denoising step for every row of ``canvas`` (see the module docstring).

    Args:
        den: the model, settings and collaborators.
        canvas: the rows' current :class:`Canvas` (not modified).
        decoder_inputs: the decoder's other keyword inputs: ``cache``, ``decoder_attention_mask``,
            ``decoder_position_ids`` (``[1, C]`` shared or ``[B, C]`` per row) and optionally ``copy_memory``.
        temperature: this step's temperature, one float or ``[B]`` float32 per row.
        canvas_index: the 0-based canvas (with the schedule step, the kernel sampler's counter key).

    Returns:
        :class:`StepOutcome`.

    Raises:
        ValueError: a constraint mask that allows no token (:meth:`ConstraintBatch.apply`).
    """
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
            fixed_mask, fixed_tok = cons.apply(logits, live)
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
