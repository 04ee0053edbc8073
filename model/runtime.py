"""The block-diffusion generation loop for DiffusionGemma checkpoints, with a constraint hook.

One call: prompt prefill by the encoder (causal, writes the KV cache) -> for each canvas: a uniform-noise
canvas, then denoising steps (decoder forward with self-conditioning on the previous step's logits, linear
temperature, entropy-bound acceptance, re-noise of the rest), adaptive stop (argmax stable and mean entropy
of free positions below the confidence threshold), readout, encoder commit of the finished canvas; canvases
follow each other block-autoregressively until every row has produced an EOS id or the token budget is spent.

The network is transformers' ``DiffusionGemmaForBlockDiffusion`` (encoder, decoder, KV cache, masks); the
loop is ours because the reference ``generate`` gives a logits processor no view of which positions are
accepted and no say in acceptance or readout. Source of the algorithm: transformers
``models/diffusion_gemma/generation_diffusion_gemma.py``.

Checkpoints with a copy head (:mod:`model.copy_head`) also get a :class:`~model.copy_head.CopyMemory` kept beside
the KV cache: built from the encoder's final states at prefill and extended at each committed canvas, and passed
to every decoder forward, whose logits are then the log of the vocabulary/copy mixture. Checkpoints without the
head run exactly as before.

Two sampling modes:

* ``parity=True`` draws random numbers exactly like the reference (``torch.randint`` canvas, full
  ``torch.multinomial`` every step, ``torch.randint`` re-noise, global RNG) and reproduces its tokens.
* the default fast mode computes entropy and argmax in one pass, samples only the positions the entropy
  bound accepts (same distribution: acceptance depends on entropy only), and draws from a private
  ``torch.Generator`` seeded by ``seed``; on CUDA it uses :func:`dg_kernels.sampling.fused_sample` when present.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from model import hf_compat as hf
from model.constraint_batch import CanvasConstraint, ConstraintBatch, ConstraintPlan, TerminatingConstraint
from model.copy_head import CopyHead, CopyMemory
from model.limits import check_prompt_length
from model.prefill import Prefill, image_inputs
from model.sampler import StepDraw, StepSampler, row_windows, select_sampler, stop_test, window_accept
from model.settings import DenoiseSettings

__all__ = [
    "CanvasConstraint",
    "CanvasEvent",
    "CanvasState",
    "ConstraintPlan",
    "EventCallback",
    "GenerationResult",
    "GenerationStats",
    "StepEvent",
    "TerminatingConstraint",
    "generate",
]


@dataclass
class StepEvent:
    """One denoising step (streamed to ``on_event``).

    Attributes:
        canvas_index: 0-based canvas number.
        step: 1-based step number within the canvas.
        argmax: ``[B, C]`` int64 argmax canvas (the draft).
        accepted: ``[B, C]`` bool positions accepted this step.
        entropy: ``[B, C]`` float32 per-position entropy (nats).
        fixed: ``[B, C]`` bool positions fixed by a constraint (committed or forced).
        finished: ``[B]`` bool rows whose canvas has stopped denoising.
    """

    canvas_index: int
    step: int
    argmax: torch.Tensor
    accepted: torch.Tensor
    entropy: torch.Tensor
    fixed: torch.Tensor
    finished: torch.Tensor


@dataclass
class CanvasEvent:
    """A finished canvas (streamed to ``on_event``): ``tokens`` ``[B, C]`` int64, ``steps`` taken."""

    canvas_index: int
    tokens: torch.Tensor
    steps: int
    finished_rows: torch.Tensor


@dataclass
class GenerationStats:
    """Statistics of one :func:`generate` call.

    Attributes:
        canvases: canvases generated.
        steps_per_canvas: denoising steps taken per canvas (batch max).
        decoder_forwards: per row, decoder forwards that row actually needed (as the reference counts).
        new_tokens: per row, generated tokens excluding pad.
        tokens_per_forward: per row, ``new_tokens / decoder_forwards`` (TPF).
        time_prefill_s, time_decoder_s, time_sampling_s, time_constraint_s, time_commit_s, time_total_s:
            wall time per phase in seconds.
    """

    canvases: int = 0
    steps_per_canvas: list[int] = field(default_factory=list)
    decoder_forwards: list[int] = field(default_factory=list)
    new_tokens: list[int] = field(default_factory=list)
    tokens_per_forward: list[float] = field(default_factory=list)
    time_prefill_s: float = 0.0
    time_decoder_s: float = 0.0
    time_sampling_s: float = 0.0
    time_constraint_s: float = 0.0
    time_commit_s: float = 0.0
    time_total_s: float = 0.0

    @property
    def total_steps(self) -> int:
        """Denoising steps over all canvases."""
        return sum(self.steps_per_canvas)

    def as_dict(self) -> dict[str, Any]:
        """JSON-serialisable view."""
        return {
            "canvases": self.canvases,
            "steps_per_canvas": self.steps_per_canvas,
            "decoder_forwards": self.decoder_forwards,
            "new_tokens": self.new_tokens,
            "tokens_per_forward": [round(x, 3) for x in self.tokens_per_forward],
            "time_prefill_s": round(self.time_prefill_s, 4),
            "time_decoder_s": round(self.time_decoder_s, 4),
            "time_sampling_s": round(self.time_sampling_s, 4),
            "time_constraint_s": round(self.time_constraint_s, 4),
            "time_commit_s": round(self.time_commit_s, 4),
            "time_total_s": round(self.time_total_s, 4),
        }


@dataclass
class GenerationResult:
    """Output of :func:`generate`: ``sequences`` ``[B, P + n*C]`` int64 (prompt + canvases, pad after EOS)."""

    sequences: torch.Tensor
    prompt_length: int
    stats: GenerationStats

    @property
    def new_tokens(self) -> torch.Tensor:
        """``[B, n*C]`` int64 generated part of ``sequences``."""
        return self.sequences[:, self.prompt_length :]


EventCallback = Callable[[StepEvent | CanvasEvent], None]


def _check_inputs(
    model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, settings: DenoiseSettings
) -> None:
    """One-line errors for inputs torch would reject deep inside the model (or run past the trained positions).

    Raises:
        ValueError: ids that are not integers or lie outside the vocabulary, an attention mask of another shape.
        model.limits.PromptTooLong: the prompt and the generation budget do not fit ``max_position_embeddings``.
    """
    if input_ids.dtype.is_floating_point or input_ids.dtype == torch.bool:
        raise ValueError(f"input_ids must be integer token ids (int64), got {input_ids.dtype}")
    vocab = int(model.config.get_text_config().vocab_size)
    lo, hi = int(input_ids.min()), int(input_ids.max())
    if lo < 0 or hi >= vocab:
        raise ValueError(
            f"input_ids holds ids outside the vocabulary [0, {vocab}): smallest {lo}, largest {hi}"
        )
    if attention_mask is not None and tuple(attention_mask.shape) != tuple(input_ids.shape):
        raise ValueError(
            f"attention_mask has shape {tuple(attention_mask.shape)}, input_ids {tuple(input_ids.shape)}: "
            "they must match"
        )
    check_prompt_length(int(input_ids.shape[1]), model, settings)


class CanvasState:
    """Everything one :func:`generate` call carries between its phases, and the phases themselves.

    The phases, each callable on its own (tests do): :meth:`prefill` (encode the prompt), :meth:`start_canvas`
    (a uniform-noise canvas), :meth:`denoise_step` (one denoising step: :meth:`forward`, :meth:`constrain`,
    :meth:`draw` (temper, entropy/argmax, sample), :meth:`accept` (window, constraint commit, re-noise),
    :meth:`stop`), :meth:`commit_canvas` (readout, append, EOS) and :meth:`encode_canvas` (the committed
    canvas into the KV cache). :func:`generate` is the driver. The loop follows gpt-fast's split of
    ``prefill`` / ``decode_one_token`` / ``generate``.

    Build one with :meth:`create` (arguments as :func:`generate`).

    Attributes (tensors on the prompt's device; B rows, C = canvas length, V = vocabulary):
        sequences: ``[B, P + n*C]`` int64 prompt and committed canvases.
        canvas, argmax: ``[B, C]`` int64 the current canvas and its argmax draft.
        self_cond: ``[B, C, V]`` the previous step's tempered logits (``None`` on a canvas's first step).
        finished: ``[B]`` bool rows whose canvas stopped denoising; finished_seq: ``[B]`` rows past EOS.
        fixed_mask, fixed_tok: ``[B, C]`` positions fixed by a constraint this step, and their tokens.
        canvas_index: 0-based canvas; step: the schedule's step (steps left, counting down); steps_taken.
    """

    def __init__(
        self,
        model: Any,
        input_ids: torch.Tensor,
        settings: DenoiseSettings,
        attention_mask: torch.Tensor | None,
        constraints: ConstraintBatch,
        sampler: StepSampler,
        generator: torch.Generator | None,
        images: dict[str, torch.Tensor],
        on_event: EventCallback | None,
        prefilled: Prefill | None = None,
    ) -> None:
        self.model = model
        self.settings = settings
        self.constraints = constraints
        self.sampler = sampler
        self.generator = generator
        self.images = images
        self.on_event = on_event
        self.prefilled = prefilled
        self.stats = GenerationStats()
        self.t_start = time.perf_counter()
        self.device = device = input_ids.device
        self.batch, self.prompt_length = batch, prompt_len = input_ids.shape
        self.canvas_length = canvas_len = settings.canvas_length
        self.vocab = int(model.config.get_text_config().vocab_size)
        self.emb_dtype = model.model.decoder.embed_tokens.weight.dtype
        self.eos = torch.tensor(settings.eos_token_ids, device=device)
        self.cache = hf.new_cache(model, batch, prompt_len + settings.max_canvases * canvas_len)
        self.attn = (
            torch.ones((batch, prompt_len), dtype=torch.bool, device=device)
            if attention_mask is None
            else attention_mask.to(device=device).bool()
        )
        self.dec_attn = torch.nn.functional.pad(self.attn, (0, canvas_len), value=True)
        self.cur_len = prompt_len
        self.enc_pos = torch.arange(0, prompt_len, dtype=torch.int32, device=device).unsqueeze(0)
        self.dec_pos = torch.arange(prompt_len, prompt_len + canvas_len, dtype=torch.int32, device=device)[
            None
        ]
        head = getattr(model, "copy_head", None)
        self.head: CopyHead | None = head if isinstance(head, CopyHead) else None
        self.memory: CopyMemory | None = None
        self.sequences = input_ids
        self.finished_seq = torch.zeros(batch, dtype=torch.bool, device=device)
        self.forwards = torch.zeros(batch, dtype=torch.long, device=device)
        self.canvas_index = 0
        # per canvas (set by start_canvas)
        self.canvas = self.argmax = torch.zeros((batch, canvas_len), dtype=torch.long, device=device)
        self.dec_masks: Any = None
        self.self_cond: torch.Tensor | None = None
        self.finished = self.finished_seq.clone()
        self.history: torch.Tensor | None = None
        self.fixed_mask = torch.zeros((batch, canvas_len), dtype=torch.bool, device=device)
        self.fixed_tok = torch.zeros((batch, canvas_len), dtype=torch.long, device=device)
        self.prev_accepted = self.fixed_mask
        self.grammar_done = torch.zeros(batch, dtype=torch.bool, device=device)
        self.step = settings.max_denoising_steps
        self.steps_taken = 0

    @classmethod
    def create(
        cls,
        model: Any,
        input_ids: torch.Tensor,
        settings: DenoiseSettings | None = None,
        *,
        attention_mask: torch.Tensor | None = None,
        constraints: Sequence[CanvasConstraint | None] | None = None,
        seed: int | None = None,
        parity: bool = False,
        on_event: EventCallback | None = None,
        sampler: str = "auto",
        pixel_values: torch.Tensor | None = None,
        image_position_ids: torch.Tensor | None = None,
        mm_token_type_ids: torch.Tensor | None = None,
        compile_step: bool = False,
        prefill: Prefill | None = None,
    ) -> CanvasState:
        """Check the arguments and set up a call (see :func:`generate` for them and the errors raised)."""
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids must be [batch, prompt_len], got shape {tuple(input_ids.shape)}")
        if input_ids.shape[1] == 0:
            raise ValueError("input_ids is empty: the prompt needs at least one token (e.g. <bos>)")
        if seed is not None and not -(2**63) <= int(seed) < 2**63:
            raise ValueError(f"seed must fit in a signed 64-bit integer, got {seed}")
        hf.check_model(model)
        settings = settings or DenoiseSettings.from_model(model)
        _check_inputs(model, input_ids, attention_mask, settings)
        batch = input_ids.shape[0]
        if constraints is not None and len(constraints) != batch:
            raise ValueError(f"constraints has {len(constraints)} entries for a batch of {batch}")
        canvas_len = int(model.config.canvas_length)
        if settings.canvas_length != canvas_len:
            settings = settings.replace(canvas_length=canvas_len)
        device = input_ids.device
        gen: torch.Generator | None = None
        run_seed = 0
        if parity:
            if seed is not None:
                torch.manual_seed(seed)
        else:
            gen = torch.Generator(device=device)
            run_seed = int(seed) if seed is not None else int(torch.randint(0, 2**62, (1,)).item())
            gen.manual_seed(run_seed)
        step_sampler = select_sampler(
            sampler, parity=parity, device=device, generator=gen, seed=run_seed, compiled=compile_step
        )
        images = image_inputs(model, input_ids, pixel_values, image_position_ids, mm_token_type_ids)
        if prefill is not None and (batch != 1 or images):
            raise ValueError("prefill= is for one row without images")
        batch_constraints = ConstraintBatch(constraints if constraints is not None else [None] * batch)
        return cls(
            model,
            input_ids,
            settings,
            attention_mask,
            batch_constraints,
            step_sampler,
            gen,
            images,
            on_event,
            prefill,
        )

    # ---------------------------------------------------------------------------------------------- phases

    def _encode(self, prefill: bool) -> None:
        """The encoder over the prompt (``prefill``) or the last committed canvas; extends the copy memory."""
        t0 = time.perf_counter()
        enc_in, out = hf.encode(
            self.model,
            self.sequences,
            self.attn,
            self.enc_pos,
            self.cache,
            is_prefill=prefill,
            canvas_length=self.canvas_length,
            images=self.images if prefill else None,
        )
        self.cache = out.cache
        if self.head is not None:  # the copy head's keys for the newly encoded positions, beside the cache
            if self.memory is None:
                self.memory = self.head.new_memory(enc_in, out.last_hidden_state, self.attn)
            else:
                self.memory = self.head.extend_memory(self.memory, enc_in, out.last_hidden_state)
        if prefill:
            self.stats.time_prefill_s += time.perf_counter() - t0
        else:
            self.stats.time_commit_s += time.perf_counter() - t0

    def prefill(self) -> None:
        """Encode the prompt (with its images) into the KV cache, or take the :class:`model.prefill.Prefill` given."""
        if self.prefilled is None:
            self._encode(prefill=True)
            return
        self.cache, self.memory = self.prefilled.cache, self.prefilled.memory
        self.stats.time_prefill_s += self.prefilled.seconds

    def start_canvas(self) -> None:
        """A uniform-noise canvas; the constraints of unfinished rows are told the token budget left."""
        b, c = self.batch, self.canvas_length
        self.canvas = torch.randint(0, self.vocab, (b, c), device=self.device, generator=self.generator)
        self.argmax = self.canvas
        self.dec_masks = hf.decoder_mask(self.model, self.canvas, self.cache, self.dec_attn)
        tokens_left = self.settings.max_new_tokens - self.canvas_index * c  # exact for constraints
        t0 = time.perf_counter()
        self.constraints.start_canvas(c, tokens_left, (~self.finished_seq).tolist())
        self.stats.time_constraint_s += time.perf_counter() - t0
        self.self_cond = None
        # Fast mode: rows already done do not hold the canvas back. Parity mode: as the reference, every row
        # takes part in the stop test again.
        self.finished = (
            torch.zeros_like(self.finished_seq) if self.sampler.parity else self.finished_seq.clone()
        )
        self.history = None
        self.fixed_mask = torch.zeros((b, c), dtype=torch.bool, device=self.device)
        self.prev_accepted = torch.zeros((b, c), dtype=torch.bool, device=self.device)
        self.grammar_done = torch.zeros(b, dtype=torch.bool, device=self.device)
        self.step = self.settings.max_denoising_steps
        self.steps_taken = 0

    def forward(self) -> torch.Tensor:
        """The decoder over the canvas (self-conditioned on the last step's logits): ``[B, C, V]`` logits."""
        self.steps_taken += 1
        self.forwards += (~(self.finished | self.finished_seq)).long()
        t0 = time.perf_counter()
        extra = {} if self.memory is None else {"copy_memory": self.memory}
        logits = self.model(
            decoder_input_ids=self.canvas,
            self_conditioning_logits=self.self_cond,
            decoder_attention_mask=self.dec_masks,
            cache=self.cache,
            decoder_position_ids=self.dec_pos,
            **extra,
        ).logits
        self.stats.time_decoder_s += time.perf_counter() - t0
        return logits  # type: ignore[no-any-return]

    def constrain(self, logits: torch.Tensor) -> None:
        """Fixed positions and frontier masks of the active rows' constraints, into ``logits`` in place."""
        if not self.constraints.any:
            return
        t0 = time.perf_counter()
        self.fixed_mask, self.fixed_tok = self.constraints.apply(logits, (~self.finished).tolist())
        self.stats.time_constraint_s += time.perf_counter() - t0

    def draw(self, logits: torch.Tensor) -> StepDraw:
        """Temper (the linear schedule at this step), entropy and argmax, sample: the step sampler's draw."""
        t0 = time.perf_counter()
        s = self.settings
        out = self.sampler.draw(
            logits, s.temperature(self.step), s.entropy_bound, canvas=self.canvas_index, step=self.step
        )
        self.stats.time_sampling_s += time.perf_counter() - t0
        return out

    def accept(self, draw: StepDraw) -> torch.Tensor:
        """Acceptance: the window, the constraints' commits and vetoes; returns the next canvas ``[B, C]``
        (accepted tokens kept, the rest re-noised)."""
        t0 = time.perf_counter()
        s = self.settings
        window = (
            None
            if self.sampler.parity
            else row_windows(s, self.constraints.in_call, self.canvas_length, self.device)
        )
        if window is not None:
            fixed = self.fixed_mask if self.constraints.any else None
            window_accept(draw, self.canvas, window, fixed, self.prev_accepted)
        self.stats.time_sampling_s += time.perf_counter() - t0
        if self.constraints.any:
            t0 = time.perf_counter()
            draw.denoised, draw.accepted, done = self.constraints.commit(
                (~self.finished).tolist(),
                draw.denoised,
                draw.accepted,
                self.fixed_mask,
                self.fixed_tok,
                draw.processed,
                s.entropy_bound,
            )
            self.grammar_done |= done
            self.stats.time_constraint_s += time.perf_counter() - t0
        self.prev_accepted = draw.accepted
        accepted_canvas = torch.where(draw.accepted, draw.denoised, self.canvas)
        b, c = self.batch, self.canvas_length
        noise = torch.randint(0, self.vocab, (b, c), device=self.device, generator=self.generator)
        return torch.where(draw.accepted, accepted_canvas, noise)

    def stop(self, draw: StepDraw, new_canvas: torch.Tensor) -> bool:
        """The adaptive stop: rows whose argmax is stable and confident (or whose grammar terminated) finish;
        rows already finished keep their canvas. Advances to the next step; True when every row finished."""
        t0 = time.perf_counter()
        s = self.settings
        finished = self.finished
        new_argmax, processed, entropy = draw.argmax, draw.processed, draw.entropy
        if bool(finished.any()):
            new_argmax = torch.where(finished[:, None], self.argmax, new_argmax)
            new_canvas = torch.where(finished[:, None], self.canvas, new_canvas)
            if self.self_cond is not None:
                processed = torch.where(finished[:, None, None], self.self_cond, processed)
            if self.sampler.parity:
                entropy = torch.distributions.Categorical(logits=processed).entropy()
            else:
                entropy = torch.where(finished[:, None], torch.zeros_like(entropy), entropy)
        fixed = self.fixed_mask if self.constraints.any else None
        stop, self.history = stop_test(
            self.history, new_argmax, entropy, fixed, s.stability_threshold, s.confidence_threshold
        )
        self.finished = finished | stop
        if self.constraints.any:
            # A row whose grammar has terminated has nothing left to denoise: the readout is fully decided.
            self.finished = self.finished | self.grammar_done
        self.self_cond = processed.to(self.emb_dtype)
        self.canvas, self.argmax = new_canvas, new_argmax
        self.stats.time_sampling_s += time.perf_counter() - t0
        if self.on_event is not None:
            self.on_event(
                StepEvent(
                    canvas_index=self.canvas_index,
                    step=self.steps_taken,
                    argmax=self.argmax.cpu(),
                    accepted=draw.accepted.cpu(),
                    entropy=entropy.float().cpu(),
                    fixed=self.fixed_mask.cpu(),
                    finished=self.finished.cpu(),
                )
            )
        self.step -= 1
        return bool(self.finished.all())

    def denoise_step(self) -> bool:
        """One denoising step (forward, constrain, draw, accept, stop); True when the canvas is done (every row
        finished, or the step schedule is spent)."""
        logits = self.forward()
        self.constrain(logits)
        draw = self.draw(logits)
        new_canvas = self.accept(draw)
        return self.stop(draw, new_canvas) or self.step == 0

    def commit_canvas(self) -> bool:
        """Read the canvas out (argmax, or what each row's constraint decides), append it, finish rows on EOS
        and pad after EOS (as the reference's ``_finalize_canvas``). True when every row has finished."""
        c = self.canvas_length
        self.stats.steps_per_canvas.append(self.steps_taken)
        self.stats.canvases += 1
        readout = self.argmax
        if self.constraints.any:
            t0 = time.perf_counter()
            assert self.self_cond is not None
            readout = self.constraints.readout(self.argmax, self.self_cond, (~self.finished_seq).tolist())
            self.stats.time_constraint_s += time.perf_counter() - t0
        self.sequences = sequences = torch.cat([self.sequences, readout], dim=-1)
        new = sequences[:, -c:]
        is_eos = torch.isin(new, self.eos)
        finished_this = is_eos.any(dim=-1)
        previously = self.finished_seq
        self.finished_seq = previously | finished_this
        if bool(self.finished_seq.any()):
            sequences[previously, -c:] = self.settings.pad_token_id
            if bool(finished_this.any()):
                csum = is_eos.cumsum(dim=-1)
                pad_mask = (csum > 0) & ~((csum == 1) & is_eos)
                new[pad_mask] = self.settings.pad_token_id
        if self.on_event is not None:
            self.on_event(
                CanvasEvent(
                    canvas_index=self.canvas_index,
                    tokens=sequences[:, -c:].cpu(),
                    steps=self.steps_taken,
                    finished_rows=self.finished_seq.cpu(),
                )
            )
        return bool(self.finished_seq.all())

    def encode_canvas(self) -> None:
        """Move to the next canvas: positions and masks advance, and the committed canvas is encoded."""
        c = self.canvas_length
        self.cur_len += c
        self.dec_attn = torch.nn.functional.pad(self.dec_attn, (0, c), value=True)
        self.attn = torch.nn.functional.pad(self.attn, (0, c), value=True)
        self.enc_pos = self.dec_pos
        self.dec_pos = torch.arange(self.cur_len, self.cur_len + c, dtype=torch.int32, device=self.device)[
            None
        ]
        self.canvas_index += 1
        self._encode(prefill=False)

    def result(self) -> GenerationResult:
        """The call's :class:`GenerationResult` (per-row forwards, tokens and TPF filled in)."""
        st = self.stats
        valid = (self.sequences[:, self.prompt_length :] != self.settings.pad_token_id).sum(dim=-1)
        st.decoder_forwards = self.forwards.tolist()
        st.new_tokens = valid.tolist()
        st.tokens_per_forward = [
            v / max(f, 1) for v, f in zip(st.new_tokens, st.decoder_forwards, strict=True)
        ]
        st.time_total_s = time.perf_counter() - self.t_start
        return GenerationResult(sequences=self.sequences, prompt_length=self.prompt_length, stats=st)


@torch.no_grad()
def generate(
    model: Any,
    input_ids: torch.Tensor,
    settings: DenoiseSettings | None = None,
    *,
    attention_mask: torch.Tensor | None = None,
    constraints: Sequence[CanvasConstraint | None] | None = None,
    seed: int | None = None,
    parity: bool = False,
    on_event: EventCallback | None = None,
    sampler: str = "auto",
    pixel_values: torch.Tensor | None = None,
    image_position_ids: torch.Tensor | None = None,
    mm_token_type_ids: torch.Tensor | None = None,
    compile_step: bool = False,
    prefill: Prefill | None = None,
) -> GenerationResult:
    """Generate canvases block-autoregressively with the entropy-bound sampler: the driver over
    :class:`CanvasState`'s phases (prefill, then per canvas: start, denoising steps, commit, encode).

    Args:
        model: ``transformers.DiffusionGemmaForBlockDiffusion`` (eval mode).
        input_ids: ``[B, P]`` int64 prompt ids (left-padded when rows differ in length).
        settings: denoising settings; default :meth:`DenoiseSettings.from_model`.
        attention_mask: ``[B, P]`` (bool or int) for left padding; default all ones.
        constraints: one :class:`CanvasConstraint` or ``None`` per row.
        seed: seeds this call's random draws (fast mode: a private generator; parity mode: the global RNG).
            ``None`` in fast mode draws a seed from the global RNG.
        parity: reproduce transformers' ``generate`` token for token (same RNG discipline; slower).
        on_event: called with a :class:`StepEvent` after each denoising step and a :class:`CanvasEvent`
            after each canvas (tensors on CPU).
        sampler: fast-mode step sampler, ``"auto"``, ``"torch"``, ``"kernel"`` or ``"reference"`` (see
            :func:`model.sampler.select_sampler`). Ignored in parity mode.
        pixel_values: ``[N, max_patches, 3 * patch**2]`` float image patches of every image in the batch, in
            row-major prompt order (see :class:`model.vision.VisionInputs`); the prefill's vision tower writes
            them over the prompt's ``<|image|>`` soft tokens, as in transformers' ``generate``.
        image_position_ids: ``[N, max_patches, 2]`` int64 patch positions (``-1`` = padding), with
            ``pixel_values``.
        mm_token_type_ids: ``[B, P]`` int64, 1 at image soft tokens (for checkpoints whose encoder attends
            bidirectionally within an image); ``None``: derived from ``input_ids`` when ``pixel_values`` is given.
        compile_step: the torch sampler's ``torch.compile`` option (:class:`model.sampler.TorchSampler`; off by
            default: not token-identical to eager, and the first step compiles).
        prefill: the prompt's :class:`model.prefill.Prefill` (one row, no images), not encoded again.

    Returns:
        :class:`GenerationResult` with ``sequences`` ``[B, P + n*C]`` and :class:`GenerationStats`.

    Raises:
        RuntimeError: the installed transformers lacks a helper the loop calls (:func:`model.hf_compat.check_model`).
        model.limits.PromptTooLong: the prompt plus the generation budget exceed ``max_position_embeddings``.
        ValueError: ``input_ids`` not 2-D, empty, not integer or outside the vocabulary, an ``attention_mask`` of
            another shape, an unknown ``sampler``, a seed outside the signed 64-bit range, ``constraints`` of
            the wrong length, a constraint mask that allows no token, or ``pixel_values`` whose soft tokens do
            not match the prompt's ``<|image|>`` tokens (transformers' check).
    """
    state = CanvasState.create(
        model,
        input_ids,
        settings,
        attention_mask=attention_mask,
        constraints=constraints,
        seed=seed,
        parity=parity,
        on_event=on_event,
        sampler=sampler,
        pixel_values=pixel_values,
        image_position_ids=image_position_ids,
        mm_token_type_ids=mm_token_type_ids,
        compile_step=compile_step,
        prefill=prefill,
    )
    state.prefill()
    for _ in range(state.settings.max_canvases):
        state.start_canvas()
        while not state.denoise_step():
            pass
        if state.commit_canvas() or state.canvas_index + 1 == state.settings.max_canvases:
            break
        state.encode_canvas()
    return state.result()
