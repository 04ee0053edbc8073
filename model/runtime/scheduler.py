"""The one scheduler of the denoising runtime: :class:`Scheduler` takes rows from admission (prefill) through
denoising steps and canvas ends (readout, commit, encode) to leaving; :func:`generate` runs it over a fixed batch.

Rows admitted together are a :class:`Cohort` (a :class:`~model.runtime.step.Denoiser` and a :class:`FixedBatch`) and
start and end canvases in lockstep. One cohort steps over its own left-padded cache with shared positions, as
transformers' ``generate`` does (parity needs it); several cohorts are packed per step by :meth:`FixedBatch.pack`,
each row keeping its own positions (the server's :class:`model.runtime.batcher.CanvasBatcher`).

The loop is ours because the reference ``generate`` (transformers
``models/diffusion_gemma/generation_diffusion_gemma.py``) gives a logits processor no say in acceptance or readout.
Admitting and retiring rows between steps is Orca's iteration-level scheduling (Yu et al., OSDI 2022).
``parity=True`` draws random numbers exactly as the reference (global RNG) and reproduces its tokens; the default
fast mode samples only the accepted positions (same distribution) from a private generator seeded by ``seed``."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, TypedDict, Unpack

import torch

from model.checkpoint import hf_compat as hf
from model.heads.copy_head import CopyHead, CopyMemory
from model.runtime import step
from model.runtime.constraint_batch import CanvasConstraint, ConstraintBatch
from model.runtime.events import CanvasEvent, EventCallback, GenerationResult, GenerationStats, StepEvent
from model.runtime.sampler import TorchSampler, select_sampler
from model.runtime.settings import DenoiseSettings
from model.runtime.step import Canvas, Denoiser
from model.turn.limits import check_prompt_length
from model.turn.prefill import Prefill, image_inputs


@dataclass
class FixedBatch:
    """The per-row tensors of a :class:`Cohort` (B rows, P prompt tokens, C the canvas length).

    Attributes:
        sequences: ``[B, P + n*C]`` int64 prompt and committed canvases.
        prompt_length: P.
        done: ``[B]`` bool rows past EOS.
        forwards: ``[B]`` int64 decoder forwards each row needed.
        cache: the transformers KV cache.
        attn: ``[B, P + n*C]`` bool encoded positions (False: left padding).
        enc_pos: ``[1, L]`` int32 positions of the next encoder pass; dec_pos: ``[1, C]`` the canvas's (``[B, C]`` in
            a batch from :meth:`pack`).
        memory: the copy head's :class:`~model.heads.copy_head.CopyMemory`, or ``None``.
        canvas_index: 0-based canvas being generated."""

    sequences: torch.Tensor
    prompt_length: int
    done: torch.Tensor
    forwards: torch.Tensor
    cache: Any
    attn: torch.Tensor
    enc_pos: torch.Tensor
    dec_pos: torch.Tensor
    memory: CopyMemory | None = None
    canvas_index: int = 0

    @classmethod
    def new(
        cls,
        model: Any,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None,
        settings: DenoiseSettings,
    ) -> FixedBatch:
        """An empty batch for the prompt ``input_ids`` ``[B, P]`` (cache sized for the whole budget)."""
        device = input_ids.device
        batch, p = input_ids.shape
        c = settings.canvas_length
        return cls(
            sequences=input_ids,
            prompt_length=p,
            done=torch.zeros(batch, dtype=torch.bool, device=device),
            forwards=torch.zeros(batch, dtype=torch.long, device=device),
            cache=hf.new_cache(model, batch, p + settings.max_canvases * c),
            attn=torch.ones((batch, p), dtype=torch.bool, device=device)
            if attention_mask is None
            else attention_mask.to(device=device).bool(),
            enc_pos=torch.arange(0, p, dtype=torch.int32, device=device).unsqueeze(0),
            dec_pos=torch.arange(p, p + c, dtype=torch.int32, device=device)[None],
        )

    @classmethod
    def pack(cls, model: Any, batches: Sequence[FixedBatch]) -> FixedBatch:
        """One batch over the rows of ``batches`` for a decoder or encoder pass: caches, masks and copy memories
        left-padded to the longest, every row keeping its own positions; ``sequences`` holds the last canvas only.
        One batch is returned as it is."""
        if len(batches) == 1:
            return batches[0]
        length = max(b.attn.shape[1] for b in batches)
        layers = [
            tuple(_left_padded([getattr(layer, kv) for layer in stack], 0.0, -2) for kv in ("keys", "values"))
            for stack in zip(*(b.cache.layers for b in batches), strict=True)
        ]
        pos = torch.cat([b.dec_pos.expand(b.done.shape[0], -1) for b in batches])
        memory = None
        if batches[0].memory is not None:
            mems: list[CopyMemory] = [b.memory for b in batches]  # type: ignore[misc]
            padded = [_left_padded([getattr(m, f) for m in mems], v) for f, v in _MEMORY_PADS]
            tail, inside = (
                torch.cat([m.tail for m in mems]),
                torch.cat([m.in_excluded.reshape(-1) for m in mems]),
            )
            memory = CopyMemory(*padded, tail=tail, in_excluded=inside)  # type: ignore[misc]
        return cls(
            sequences=_left_padded([b.sequences[:, -pos.shape[1] :] for b in batches], 0),
            prompt_length=0,
            done=torch.cat([b.done for b in batches]),
            forwards=torch.cat([b.forwards for b in batches]),
            cache=hf.cache_from_layers(model, layers, length),  # type: ignore[arg-type]
            attn=_left_padded([b.attn for b in batches], False),
            enc_pos=pos,
            dec_pos=pos,
            memory=memory,
            canvas_index=max(b.canvas_index for b in batches),
        )

    def unpack(self, model: Any, batches: Sequence[FixedBatch]) -> None:
        """Give each of ``batches`` (those :meth:`pack` made this of) its rows of the cache and copy memory."""
        if len(batches) == 1 and batches[0] is self:
            return
        start = 0
        for b in batches:
            rows, n = slice(start, start + b.done.shape[0]), b.attn.shape[1]
            start = rows.stop
            b.cache = hf.cache_from_layers(
                model,
                [
                    (k[rows, :, -min(n, k.shape[-2]) :].clone(), v[rows, :, -min(n, v.shape[-2]) :].clone())
                    for k, v in ((layer.keys, layer.values) for layer in self.cache.layers)
                ],
                n,
            )
            if (m := self.memory) is not None:
                per_position = (getattr(m, f)[rows, -n:] for f, _ in _MEMORY_PADS)
                b.memory = CopyMemory(*per_position, tail=m.tail[rows], in_excluded=m.in_excluded[rows])  # type: ignore[misc]

    def advance(self, canvas_length: int) -> None:
        """Move to the next canvas: the committed canvas's positions become the encoder's."""
        length = self.sequences.shape[1]
        self.attn = torch.nn.functional.pad(self.attn, (0, canvas_length), value=True)
        self.enc_pos = self.dec_pos
        self.dec_pos = torch.arange(
            length, length + canvas_length, dtype=torch.int32, device=self.attn.device
        )[None]
        self.canvas_index += 1


#: The copy memory's per-position fields and their pad values.
_MEMORY_PADS = (("ids", 0), ("keys", 0.0), ("mask", False), ("prev_base", -1))


def _left_padded(ts: Sequence[torch.Tensor], value: float, dim: int = 1) -> torch.Tensor:
    """``ts`` left-padded with ``value`` along ``dim`` to the longest, concatenated along dim 0."""
    n = max(t.shape[dim] for t in ts)
    pads = [t.new_full((*t.shape[:dim], n - t.shape[dim], *t.shape[dim + 1 :]), value) for t in ts]
    return torch.cat([torch.cat([p, t], dim) for p, t in zip(pads, ts, strict=True)])


class RunOptions(TypedDict, total=False):
    """The options of one generation call (:func:`generate`, :func:`denoiser`); all optional.

    Keys:
        attention_mask: ``[B, P]`` (bool or int) for left padding; default all ones.
        constraints: one :class:`CanvasConstraint` or ``None`` per row.
        seed: seeds the call's draws (fast mode: a private generator, ``None`` draws one from the global RNG; parity
            mode: the global RNG).
        parity: reproduce transformers' ``generate`` token for token (slower); default ``False``.
        sampler: fast mode's ``"auto"`` (default), ``"torch"``, ``"kernel"`` or ``"reference"``
            (:func:`model.runtime.sampler.select_sampler`).
        compile_step: ``torch.compile`` the torch sampler (off by default: not token-identical to eager)."""

    attention_mask: torch.Tensor | None
    constraints: Sequence[CanvasConstraint | None] | None
    seed: int | None
    parity: bool
    sampler: str
    compile_step: bool


def _check_inputs(
    model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, settings: DenoiseSettings
) -> None:
    """One-line errors for inputs torch would reject deep inside the model (ValueError, PromptTooLong)."""
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


def denoiser(
    model: Any,
    input_ids: torch.Tensor,
    settings: DenoiseSettings | None = None,
    **options: Unpack[RunOptions],
) -> Denoiser:
    """Check :func:`generate`'s arguments (it lists the errors) and build the step's
    :class:`~model.runtime.step.Denoiser`."""
    if unknown := sorted(set(options) - set(RunOptions.__annotations__)):
        raise TypeError(
            f"unknown generation option(s) {unknown}; the options are {list(RunOptions.__annotations__)}"
        )
    constraints, seed, parity = options.get("constraints"), options.get("seed"), options.get("parity", False)
    attention_mask = options.get("attention_mask")
    if not isinstance(input_ids, torch.Tensor):  # a list of ids or a prompt string: torch's error is no help
        raise TypeError(
            f"input_ids must be a [batch, prompt_len] int64 torch.Tensor of token ids, got "
            f"{type(input_ids).__name__} (torch.tensor([ids]) makes one row)"
        )
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
    settings = settings.replace(canvas_length=int(model.config.canvas_length))
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
    return Denoiser(
        model=model,
        settings=settings,
        sampler=select_sampler(
            options.get("sampler", "auto"),
            parity=parity,
            device=device,
            generator=gen,
            seed=run_seed,
            compiled=options.get("compile_step", False),
        ),
        constraints=ConstraintBatch(constraints if constraints is not None else [None] * batch),
        generator=gen,
        stats=GenerationStats(),
        vocab=int(model.config.get_text_config().vocab_size),
    )


def encode(den: Denoiser, batch: FixedBatch, images: dict[str, torch.Tensor] | None = None) -> None:
    """The encoder over the prompt (with its ``images``) or the last committed canvas, into ``batch``'s KV cache;
    the copy head's memory is built or extended beside it."""
    prefill = batch.canvas_index == 0
    with den.stats.phase("prefill" if prefill else "commit"):
        model = den.model
        enc_in, out = hf.encode(
            model,
            batch.sequences,
            batch.attn,
            batch.enc_pos,
            batch.cache,
            is_prefill=prefill,
            canvas_length=den.settings.canvas_length,
            images=images if prefill else None,
        )
        batch.cache = out.cache
        head = getattr(model, "copy_head", None)
        if isinstance(head, CopyHead):  # the copy head's keys for the newly encoded positions
            if batch.memory is None:
                batch.memory = head.new_memory(enc_in, out.last_hidden_state, batch.attn)
            else:
                batch.memory = head.extend_memory(batch.memory, enc_in, out.last_hidden_state)


def prefill_batch(
    den: Denoiser,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    images: dict[str, torch.Tensor],
    prefilled: Prefill | None = None,
) -> FixedBatch:
    """Admit the rows: a :class:`FixedBatch` for ``input_ids`` ``[B, P]`` with the prompt encoded, or the
    ``prefilled`` :class:`model.turn.prefill.Prefill` taken over.

    Raises:
        ValueError: ``prefilled`` for more than one row, with images, or over another number of positions."""
    if prefilled is not None:
        if input_ids.shape[0] != 1 or images:
            raise ValueError("prefill= is for one row without images")
        prefilled.check_covers(int(input_ids.shape[1]))
    batch = FixedBatch.new(den.model, input_ids, attention_mask, den.settings)
    if prefilled is None:
        encode(den, batch, images)
    else:
        batch.cache, batch.memory = prefilled.cache, prefilled.memory
        den.stats.time_prefill_s += prefilled.seconds
    return batch


def start_canvas(den: Denoiser, batch: FixedBatch) -> Canvas:
    """A uniform-noise :class:`Canvas`; the live rows' constraints are told the token budget left. Rows past EOS
    start finished in fast mode; in parity mode, as the reference, every row takes part again."""
    s, c = den.settings, den.settings.canvas_length
    noise = den.noise(batch.sequences.shape[0], c, batch.sequences.device)
    with den.stats.phase("constraint"):
        tokens_left = s.max_new_tokens - batch.canvas_index * c  # exact for constraints
        den.constraints.start_canvas(c, tokens_left, (~batch.done).tolist())
    finished = torch.zeros_like(batch.done) if den.sampler.parity else batch.done.clone()
    return Canvas.start(noise, finished, s)


def decoder_inputs(den: Denoiser, batch: FixedBatch, canvas: Canvas) -> dict[str, Any]:
    """The decoder's inputs besides the canvas: cache, mask, positions, copy memory."""
    dec_attn = torch.nn.functional.pad(batch.attn, (0, den.settings.canvas_length), value=True)
    out = {
        "decoder_attention_mask": hf.decoder_mask(den.model, canvas.tokens, batch.cache, dec_attn),
        "cache": batch.cache,
        "decoder_position_ids": batch.dec_pos,
    }
    if batch.memory is not None:
        out["copy_memory"] = batch.memory
    return out


def commit_canvas(
    den: Denoiser, batch: FixedBatch, canvas: Canvas, steps: int, on_event: EventCallback | None = None
) -> bool:
    """Read the canvas out (argmax, or each row's constraint's readout), append it, finish rows on EOS and pad after
    EOS (as the reference's ``_finalize_canvas``). True when every row is past EOS."""
    s, c, stats = den.settings, den.settings.canvas_length, den.stats
    stats.steps_per_canvas.append(steps)
    stats.canvases += 1
    readout = canvas.argmax
    if den.constraints.any:
        assert canvas.self_cond is not None
        with stats.phase("constraint"):
            readout = den.constraints.readout(canvas.argmax, canvas.self_cond, (~batch.done).tolist())
    batch.sequences = sequences = torch.cat([batch.sequences, readout], dim=-1)
    new = sequences[:, -c:]
    is_eos = torch.isin(new, torch.tensor(s.eos_token_ids, device=new.device))
    finished_this = is_eos.any(dim=-1)
    previously = batch.done
    batch.done = previously | finished_this
    if bool(batch.done.any()):
        sequences[previously, -c:] = s.pad_token_id
        if bool(finished_this.any()):
            csum = is_eos.cumsum(dim=-1)
            new[(csum > 0) & ~((csum == 1) & is_eos)] = s.pad_token_id
    if on_event is not None:
        on_event(
            CanvasEvent(
                canvas_index=batch.canvas_index,
                tokens=sequences[:, -c:].cpu(),
                steps=steps,
                finished_rows=batch.done.cpu(),
            )
        )
    return bool(batch.done.all())


def result(den: Denoiser, batch: FixedBatch, started: float) -> GenerationResult:
    """The call's :class:`GenerationResult` (``started``: ``time.perf_counter()`` at the call's start)."""
    st = den.stats
    valid = (batch.sequences[:, batch.prompt_length :] != den.settings.pad_token_id).sum(dim=-1)
    st.decoder_forwards = batch.forwards.tolist()
    st.new_tokens = valid.tolist()
    st.tokens_per_forward = [v / max(f, 1) for v, f in zip(st.new_tokens, st.decoder_forwards, strict=True)]
    st.time_total_s = time.perf_counter() - started
    return GenerationResult(sequences=batch.sequences, prompt_length=batch.prompt_length, stats=st)


@torch.no_grad()
def generate(
    model: Any,
    input_ids: torch.Tensor,
    settings: DenoiseSettings | None = None,
    *,
    on_event: EventCallback | None = None,
    pixel_values: torch.Tensor | None = None,
    image_position_ids: torch.Tensor | None = None,
    mm_token_type_ids: torch.Tensor | None = None,
    prefill: Prefill | None = None,
    **options: Unpack[RunOptions],
) -> GenerationResult:
    """Generate canvases block-autoregressively with the entropy-bound sampler: one :class:`Cohort` run by the
    :class:`Scheduler` to completion.

    Args:
        model: ``transformers.DiffusionGemmaForBlockDiffusion`` (eval mode).
        input_ids: ``[B, P]`` int64 prompt ids (left-padded when rows differ in length).
        settings: denoising settings; default :meth:`DenoiseSettings.from_model`.
        on_event: called with a :class:`StepEvent` per step and a :class:`CanvasEvent` per canvas (CPU tensors).
        pixel_values: ``[N, max_patches, 3 * patch**2]`` float patches of every image, in prompt order
            (:class:`model.heads.vision.VisionInputs`), written over the ``<|image|>`` soft tokens at prefill.
        image_position_ids: ``[N, max_patches, 2]`` int64 patch positions (``-1`` = padding).
        mm_token_type_ids: ``[B, P]`` int64, 1 at image soft tokens; ``None``: derived from ``input_ids``.
        prefill: the prompt's :class:`model.turn.prefill.Prefill` (one row, no images), not encoded again.
        options: :class:`RunOptions`.

    Returns:
        :class:`GenerationResult` with ``sequences`` ``[B, P + n*C]`` and :class:`GenerationStats`.

    Raises:
        RuntimeError: the installed transformers lacks a helper the loop calls.
        model.turn.limits.PromptTooLong: prompt plus budget exceed ``max_position_embeddings``.
        ValueError: ``input_ids`` not 2-D, empty, not integer or outside the vocabulary; a mismatched
            ``attention_mask``; an unknown ``sampler``; a seed outside int64; ``constraints`` of the wrong length; a
            constraint mask that allows no token; image soft tokens that do not match the prompt.
        TypeError: an option :class:`RunOptions` lacks; ``model`` not a torch module (e.g. the
            ``LoadedCheckpoint`` rather than its ``.model``); ``input_ids`` not a tensor (a list, a string)."""
    started = time.perf_counter()
    den = denoiser(model, input_ids, settings, **options)
    images = image_inputs(model, input_ids, pixel_values, image_position_ids, mm_token_type_ids)
    batch = prefill_batch(den, input_ids, options.get("attention_mask"), images, prefill)
    Scheduler(model, den.settings).run(Cohort(den, batch, on_event))
    return result(den, batch, started)


@dataclass(eq=False)
class Cohort:
    """Rows admitted together (one :func:`generate` call, one served request), in canvas lockstep.

    Attributes:
        den: their :class:`~model.runtime.step.Denoiser`.
        batch: their :class:`FixedBatch`.
        on_event: called with a :class:`StepEvent` per step and a :class:`CanvasEvent` per canvas, or ``None``.
        canvas: the last step's :class:`~model.runtime.step.Canvas` (the cohort's rows are ``index`` to
            ``index + B``); ``None``: the next step starts a fresh canvas.
        steps: denoising steps taken in the current canvas."""

    den: Denoiser
    batch: FixedBatch
    on_event: EventCallback | None = None
    canvas: Canvas | None = None
    index: int = 0
    steps: int = 0

    @property
    def rows(self) -> slice:
        """The cohort's rows in ``canvas``."""
        return slice(self.index, self.index + int(self.batch.done.shape[0]))

    def own_canvas(self) -> Canvas:
        """The cohort's rows of ``canvas`` as a canvas of their own."""
        assert self.canvas is not None
        return self.canvas.select(self.rows)


class Scheduler:
    """Takes cohorts through denoising steps, canvas ends and encoding: :meth:`run` for one cohort to completion;
    :meth:`step`, :meth:`commit` and :meth:`encode` for a caller that admits and retires cohorts between steps.

    Args:
        model: ``DiffusionGemmaForBlockDiffusion`` (eval mode).
        settings: what cohorts stepping together share (entropy bound, windows, stop test); each cohort's own
            settings give its temperature schedule and token budget."""

    def __init__(self, model: Any, settings: DenoiseSettings) -> None:
        self.model, self.settings = model, settings
        # (cohorts key, their denoiser, decoder inputs): once per canvas and set of cohorts
        self._plan: tuple[tuple[Any, ...], Denoiser, dict[str, Any]] | None = None
        self._last: tuple[tuple[Any, ...], Canvas] | None = None  # (key, the last step's next canvas)

    def run(self, cohort: Cohort) -> None:
        """Step, commit and encode ``cohort`` until it leaves."""
        while True:
            if self.step([cohort]):
                if self.commit(cohort):
                    return
                self.encode([cohort])

    def _canvas(self, cohorts: list[Cohort], key: tuple[Any, ...]) -> Canvas:
        """The cohorts' canvases as one (the last step's, uncopied, when the cohorts are the same)."""
        for c in cohorts:
            if c.canvas is None:
                c.canvas, c.index, c.steps = start_canvas(c.den, c.batch), 0, 0
        last = self._last
        if last is not None and last[0] == key and all(c.canvas is last[1] for c in cohorts):
            return last[1]
        if len(cohorts) == 1:
            return cohorts[0].own_canvas()
        return Canvas.gather([(c.canvas, i) for c in cohorts for i in range(c.rows.start, c.rows.stop)])  # type: ignore[misc]

    def _joint(self, cohorts: list[Cohort]) -> Denoiser:
        """One denoiser over several cohorts' rows (a generator per row)."""
        gens = []
        for c in cohorts:
            g = c.den.generator
            if not isinstance(g, torch.Generator) or c.batch.done.shape[0] != 1:
                raise ValueError("cohorts step together only as one row each with its own generator")
            gens.append(g)
        rows = [r for c in cohorts for r in c.den.constraints.rows]
        parts = (TorchSampler(gens), ConstraintBatch(rows), gens, GenerationStats(), cohorts[0].den.vocab)
        return Denoiser(self.model, self.settings, *parts)

    @torch.no_grad()
    def step(self, cohorts: list[Cohort]) -> list[Cohort]:
        """One :func:`~model.runtime.step.denoise_step` for every row of ``cohorts`` (each at its own step and
        temperature; a cohort without a canvas starts one); returns the cohorts whose canvas is done, to
        :meth:`commit`."""
        key = tuple((c, c.batch.canvas_index) for c in cohorts)
        canvas = self._canvas(cohorts, key)
        if self._plan is None or self._plan[0] != key:
            den = cohorts[0].den if len(cohorts) == 1 else self._joint(cohorts)
            batch = FixedBatch.pack(self.model, [c.batch for c in cohorts])
            self._plan = (key, den, decoder_inputs(den, batch, canvas))
        _, den, inputs = self._plan
        start = 0
        for c in cohorts:  # their rows' places in this step's canvas
            c.index, start = start, start + c.batch.done.shape[0]
            c.batch.forwards += (~(canvas.finished[c.rows] | c.batch.done)).long()
            c.steps += 1
        temperature: float | torch.Tensor = den.settings.temperature(canvas.steps_left[0])
        if len(cohorts) > 1:  # the step's times (shared out below), a temperature per row
            den = replace(den, stats=GenerationStats())
            temps = [c.den.settings.temperature(n) for c in cohorts for n in canvas.steps_left[c.rows]]
            temperature = torch.tensor(temps, device=canvas.tokens.device)
        # through the module: the one step function (a test patches it there)
        out = step.denoise_step(den, canvas, inputs, temperature, canvas_index=cohorts[0].batch.canvas_index)
        self._last, ended, done = (key, out.canvas), [], out.canvas_done()
        for c in cohorts:
            c.canvas, rows = out.canvas, c.rows
            if len(cohorts) > 1:
                c.den.stats.add_times(den.stats, (rows.stop - rows.start) / start)
            if c.on_event is not None:
                fixed = out.fixed if out.fixed is not None else torch.zeros_like(out.accepted)
                per_row = (out.canvas.argmax, out.accepted, out.entropy.float(), fixed, out.canvas.finished)
                c.on_event(StepEvent(c.batch.canvas_index, c.steps, *(t[rows].cpu() for t in per_row)))
            if all(done[rows]):
                ended.append(c)
        return ended

    def commit(self, cohort: Cohort) -> bool:
        """End ``cohort``'s canvas; True when it leaves (every row past EOS or the budget spent)."""
        canvas, cohort.canvas = cohort.own_canvas(), None
        done = commit_canvas(cohort.den, cohort.batch, canvas, cohort.steps, cohort.on_event)
        return done or cohort.batch.canvas_index + 1 >= cohort.den.settings.max_canvases

    @torch.no_grad()
    def encode(self, cohorts: list[Cohort]) -> None:
        """Encode each cohort's committed canvas (one encoder pass for all; its time shared)."""
        batches = [c.batch for c in cohorts]
        packed = FixedBatch.pack(self.model, batches)
        for b in batches if packed is batches[0] else [*batches, packed]:
            b.advance(self.settings.canvas_length)
        den = cohorts[0].den if len(cohorts) == 1 else replace(cohorts[0].den, stats=GenerationStats())
        encode(den, packed)
        packed.unpack(self.model, batches)
        if len(cohorts) > 1:
            for c in cohorts:
                c.den.stats.add_times(den.stats, 1.0 / len(cohorts))
