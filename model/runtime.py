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
  ``torch.Generator`` seeded by ``seed``; on CUDA it uses :func:`kernels.sampling.fused_sample` when present.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import torch

from kernels.sampling import unpack_bitmask
from model.copy_head import CopyHead, CopyMemory
from model.sampler import entropy_and_argmax, entropy_bound_accept, sample_positions
from model.settings import DenoiseSettings


@dataclass
class ConstraintPlan:
    """What a constraint imposes on its row of the canvas for the next denoising step.

    Attributes:
        fixed: tokens for canvas positions ``0..len(fixed)-1``: the committed prefix, then fast-forward
            tokens (forced by the grammar), then, once the grammar has terminated, pad up to the canvas end.
            Fixed positions get entropy 0, are always accepted and do not count in the stop statistics.
        mask: optional allowed-token mask for position ``len(fixed)`` (the frontier): bool ``[V]``, or packed
            int32 ``[ceil(V/32)]`` in llguidance's layout (bit ``j`` of word ``w`` allows token ``32*w+j``).
            It must allow at least one token.
    """

    fixed: list[int]
    mask: torch.Tensor | None = None


@runtime_checkable
class CanvasConstraint(Protocol):
    """Per-row constraint hook of :func:`generate` (one object per batch row; state carries across canvases).

    Call order per canvas: ``start_canvas`` -> per denoising step ``plan`` (before sampling) then ``commit``
    (after entropy-bound acceptance) -> ``readout`` (decides the canvas's final tokens).
    """

    def start_canvas(self, canvas_length: int, tokens_left: int) -> None:
        """A new canvas begins; ``tokens_left`` is the token budget left, this canvas included."""

    def plan(self) -> ConstraintPlan:
        """Fixed tokens and frontier mask for the next step."""

    def commit(
        self,
        tokens: list[int],
        accepted: list[bool],
        logits: torch.Tensor | None = None,
        entropy_bound: float = 0.0,
    ) -> list[int]:
        """See this step's sampled canvas tokens ``[C]``, acceptance ``[C]`` and tempered logits ``[C, V]``
        (with the sampler's entropy bound, nats); return positions to veto (re-noise)."""

    def readout(self, logits: torch.Tensor) -> list[int]:
        """Return the canvas's final ``canvas_length`` tokens given the last logits ``[C, V]`` float32."""

    # Optional: a ``done`` attribute that turns True once the grammar has terminated; the runtime then stops
    # denoising that row's canvas (its readout is fully decided). Optional: a ``committed`` attribute (list of
    # token ids for positions 0..k-1) that the runtime writes into the next step's canvas as accepted tokens.


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


def _fused_kernel() -> Callable[..., Any] | None:
    try:
        from kernels.sampling import fused_sample
    except Exception:  # kernels not built / triton missing
        return None
    return fused_sample  # type: ignore[no-any-return]


def free_mean_entropy(entropy: torch.Tensor, fixed_mask: torch.Tensor | None) -> torch.Tensor:
    """The adaptive stop's statistic: per row, the mean entropy over positions no constraint fixed.

    Args:
        entropy: ``[B, C]`` float32 entropies (nats); fixed_mask: ``[B, C]`` bool, or ``None`` (no constraint).

    Returns:
        ``[B]`` float32 (0 for a row whose positions are all fixed).
    """
    if fixed_mask is None:
        return entropy.mean(dim=-1)
    free = ~fixed_mask
    n_free = free.sum(dim=-1)
    return torch.where(
        n_free > 0, (entropy * free).sum(dim=-1) / n_free.clamp(min=1), torch.zeros_like(n_free)
    )


def constrain_logits(
    logits: torch.Tensor, cons: Sequence[CanvasConstraint | None], active: Sequence[bool]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Apply each active row's :class:`ConstraintPlan` to one denoising step's logits, in place.

    Fixed positions get ``-inf`` everywhere but ``0`` at their token (entropy 0); the frontier position is
    masked with the plan's allowed-token mask (bool ``[V]`` or llguidance's packed int32 bitmask).

    Args:
        logits: ``[B, C, V]`` float decoder logits (modified in place).
        cons: one constraint or ``None`` per row.
        active: per row, whether its constraint is consulted (rows that finished are not).

    Returns:
        ``(fixed_mask, fixed_tok)``: ``[B, C]`` bool and ``[B, C]`` int64.

    Raises:
        ValueError: a constraint's frontier mask allows no token (names the row and position).
    """
    batch, canvas_len, vocab = logits.shape
    device = logits.device
    fixed_mask = torch.zeros((batch, canvas_len), dtype=torch.bool, device=device)
    fixed_tok = torch.zeros((batch, canvas_len), dtype=torch.long, device=device)
    for r, c in enumerate(cons):
        if c is None or not active[r]:
            continue
        plan = c.plan()
        k = min(len(plan.fixed), canvas_len)
        if k:
            fixed_mask[r, :k] = True
            fixed_tok[r, :k] = torch.tensor(plan.fixed[:k], dtype=torch.long, device=device)
        if plan.mask is not None and k < canvas_len:
            if plan.mask.dtype == torch.bool:
                allowed = plan.mask[:vocab].to(device)
            else:
                allowed = unpack_bitmask(plan.mask.to(device).reshape(-1), vocab)
            if allowed.numel() < vocab:  # tokenizer smaller than the embedding: the rest is never allowed
                allowed = torch.nn.functional.pad(allowed, (0, vocab - allowed.numel()), value=False)
            if not bool(allowed.any()):
                raise ValueError(f"row {r}: constraint mask at canvas position {k} allows no token")
            logits[r, k].masked_fill_(~allowed, float("-inf"))
    if bool(fixed_mask.any()):
        # In place, one write pass per fixed row: -inf everywhere, 0 at the fixed token (entropy 0).
        flat = logits.view(-1, vocab)
        idx = fixed_mask.view(-1).nonzero().squeeze(1)
        flat.index_fill_(0, idx, float("-inf"))
        flat[idx, fixed_tok.view(-1)[idx]] = 0.0
    return fixed_mask, fixed_tok


def commit_constraints(
    cons: Sequence[CanvasConstraint | None],
    active: Sequence[bool],
    denoised: torch.Tensor,
    accepted: torch.Tensor,
    fixed_mask: torch.Tensor,
    fixed_tok: torch.Tensor,
    processed: torch.Tensor,
    settings: DenoiseSettings,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Hand one denoising step's accepted tokens to each active row's constraint (its ``commit``).

    Args:
        cons, active: as :func:`constrain_logits`.
        denoised: ``[B, C]`` int64 sampled tokens; accepted: ``[B, C]`` bool (entropy bound and window).
        fixed_mask, fixed_tok: from :func:`constrain_logits`.
        processed: ``[B, C, V]`` tempered, constrained logits of the step.
        settings: for the entropy bound.

    Returns:
        ``(denoised, accepted, grammar_done)``: the step's tokens with each constraint's committed prefix
        written in, acceptance with vetoed positions re-noised, and ``[B]`` bool rows whose grammar terminated.
    """
    device = denoised.device
    denoised = torch.where(fixed_mask, fixed_tok, denoised)
    accepted = accepted | fixed_mask
    done = torch.zeros(denoised.shape[0], dtype=torch.bool, device=device)
    tok_rows = denoised.tolist()
    acc_rows = accepted.tolist()
    canvas_len = denoised.shape[1]
    for r, c in enumerate(cons):
        if c is None or not active[r]:
            continue
        veto = c.commit(tok_rows[r], acc_rows[r], logits=processed[r], entropy_bound=settings.entropy_bound)
        prefix = getattr(c, "committed", None)
        if prefix:  # committed tokens go into the next step's canvas (the extension may differ)
            k = min(len(prefix), canvas_len)
            denoised[r, :k] = torch.tensor(prefix[:k], dtype=torch.long, device=device)
            accepted[r, :k] = True
        if veto:
            accepted[r, torch.tensor(veto, dtype=torch.long, device=device)] = False
        if getattr(c, "done", False):
            done[r] = True
    return denoised, accepted, done


def constrained_readout(
    argmax: torch.Tensor,
    last_logits: torch.Tensor,
    cons: Sequence[CanvasConstraint | None],
    active: Sequence[bool],
) -> torch.Tensor:
    """A finished canvas's tokens: the argmax, or for constrained rows what their constraint reads out.

    Args:
        argmax: ``[B, C]`` int64; last_logits: ``[B, C, V]`` the last step's processed logits.
        cons, active: as :func:`constrain_logits`.

    Returns:
        ``[B, C]`` int64.

    Raises:
        ValueError: a readout whose length is not the canvas length.
    """
    canvas_len = argmax.shape[1]
    readout = argmax.clone()
    for r, c in enumerate(cons):
        if c is None or not active[r]:
            continue
        toks = c.readout(last_logits[r].float())
        if len(toks) != canvas_len:
            raise ValueError(f"row {r}: constraint readout has {len(toks)} tokens, canvas is {canvas_len}")
        readout[r] = torch.tensor(toks, dtype=torch.long, device=argmax.device)
    return readout


def image_inputs(
    model: Any,
    input_ids: torch.Tensor,
    pixel_values: torch.Tensor | None,
    image_position_ids: torch.Tensor | None,
    mm_token_type_ids: torch.Tensor | None,
) -> dict[str, torch.Tensor]:
    """The prefill's image keyword arguments for ``_prepare_encoder_inputs`` and the encoder (empty: no images).

    Args:
        model: the checkpoint (its ``config.image_token_id`` marks soft tokens).
        input_ids: ``[B, P]`` expanded prompt ids.
        pixel_values, image_position_ids, mm_token_type_ids: see :func:`generate`.

    Returns:
        ``{"pixel_values", "image_position_ids", "mm_token_type_ids"}`` on ``input_ids``' device (pixels in the
        encoder's dtype).

    Raises:
        ValueError: ``image_position_ids`` missing with ``pixel_values``.
    """
    if pixel_values is None:
        return {}
    if image_position_ids is None:
        raise ValueError("pixel_values needs image_position_ids (from the image processor)")
    if mm_token_type_ids is None:
        image_id = int(getattr(model.config, "image_token_id", -1))
        mm_token_type_ids = (input_ids == image_id).long()
    device = input_ids.device
    return {
        "pixel_values": pixel_values.to(device=device, dtype=model.model.encoder.dtype),
        "image_position_ids": image_position_ids.to(device),
        "mm_token_type_ids": mm_token_type_ids.to(device),
    }


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
) -> GenerationResult:
    """Generate canvases block-autoregressively with the entropy-bound sampler.

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
        sampler: fast-mode sampling path: ``"auto"`` (the fused kernel of :mod:`kernels.sampling` on CUDA,
            the torch path elsewhere), ``"kernel"`` (always :func:`kernels.sampling.fused_sample`, whose
            reference runs on CPU) or ``"torch"``. Ignored in parity mode.
        pixel_values: ``[N, max_patches, 3 * patch**2]`` float image patches of every image in the batch, in
            row-major prompt order (see :class:`model.vision.VisionInputs`); the prefill's vision tower writes
            them over the prompt's ``<|image|>`` soft tokens, as in transformers' ``generate``.
        image_position_ids: ``[N, max_patches, 2]`` int64 patch positions (``-1`` = padding), with
            ``pixel_values``.
        mm_token_type_ids: ``[B, P]`` int64, 1 at image soft tokens (for checkpoints whose encoder attends
            bidirectionally within an image); ``None``: derived from ``input_ids`` when ``pixel_values`` is given.

    Returns:
        :class:`GenerationResult` with ``sequences`` ``[B, P + n*C]`` and :class:`GenerationStats`.

    Raises:
        ValueError: ``input_ids`` not 2-D or empty, a seed outside the signed 64-bit range, ``constraints`` of
            the wrong length, a constraint mask that allows no token, or ``pixel_values`` whose soft tokens do
            not match the prompt's ``<|image|>`` tokens (transformers' check).
    """
    if input_ids.dim() != 2:
        raise ValueError(f"input_ids must be [batch, prompt_len], got shape {tuple(input_ids.shape)}")
    if input_ids.shape[1] == 0:
        raise ValueError("input_ids is empty: the prompt needs at least one token (e.g. <bos>)")
    if seed is not None and not -(2**63) <= int(seed) < 2**63:
        raise ValueError(f"seed must fit in a signed 64-bit integer, got {seed}")
    settings = settings or DenoiseSettings.from_model(model)
    device = input_ids.device
    batch, prompt_len = input_ids.shape
    if constraints is not None and len(constraints) != batch:
        raise ValueError(f"constraints has {len(constraints)} entries for a batch of {batch}")
    cons: list[CanvasConstraint | None] = list(constraints) if constraints is not None else [None] * batch
    any_constraint = any(c is not None for c in cons)
    canvas_len = int(model.config.canvas_length)
    if settings.canvas_length != canvas_len:
        settings = settings.replace(canvas_length=canvas_len)
    vocab = int(model.config.get_text_config().vocab_size)
    n_steps = settings.max_denoising_steps
    stats = GenerationStats()
    t_start = time.perf_counter()

    gen: torch.Generator | None = None
    run_seed = 0
    if parity:
        if seed is not None:
            torch.manual_seed(seed)
    else:
        gen = torch.Generator(device=device)
        run_seed = int(seed) if seed is not None else int(torch.randint(0, 2**62, (1,)).item())
        gen.manual_seed(run_seed)
    if sampler not in ("auto", "kernel", "torch"):
        raise ValueError(f"sampler must be 'auto', 'kernel' or 'torch', got {sampler!r}")
    use_kernel = not parity and (sampler == "kernel" or (sampler == "auto" and device.type == "cuda"))
    fused = _fused_kernel() if use_kernel else None
    if sampler == "kernel" and fused is None and not parity:
        raise ValueError("sampler='kernel' requested but kernels.sampling cannot be imported")

    max_canvases = settings.max_canvases
    cache = model._prepare_cache_for_generation(
        generation_config=model.generation_config,
        batch_size=batch,
        max_length=prompt_len + max_canvases * canvas_len,
    )
    eos = torch.tensor(settings.eos_token_ids, device=device)
    if attention_mask is None:
        attn = torch.ones((batch, prompt_len), dtype=torch.bool, device=device)
    else:
        attn = attention_mask.to(device=device).bool()
    dec_attn = torch.nn.functional.pad(attn, (0, canvas_len), value=True)
    cur_len = prompt_len
    enc_pos = torch.arange(0, prompt_len, dtype=torch.int32, device=device).unsqueeze(0)
    dec_pos = torch.arange(cur_len, cur_len + canvas_len, dtype=torch.int32, device=device).unsqueeze(0)
    emb_dtype = model.model.decoder.embed_tokens.weight.dtype

    head = getattr(model, "copy_head", None)
    if not isinstance(head, CopyHead):
        head = None
    memory: CopyMemory | None = None

    sequences = input_ids
    finished_seq = torch.zeros(batch, dtype=torch.bool, device=device)
    forwards = torch.zeros(batch, dtype=torch.long, device=device)

    images = image_inputs(model, input_ids, pixel_values, image_position_ids, mm_token_type_ids)

    for canvas_index in range(max_canvases):
        # 1.a encoder: prefill (with the images), then the previous canvas.
        t0 = time.perf_counter()
        prefill_images = images if canvas_index == 0 else {}
        enc_in, enc_masks = model._prepare_encoder_inputs(
            input_ids=sequences,
            attention_mask=attn,
            encoder_position_ids=enc_pos,
            cache=cache,
            is_prefill=canvas_index == 0,
            canvas_length=canvas_len,
            batch_size=batch,
            **prefill_images,
        )
        enc_out = model.model.encoder(
            input_ids=enc_in, attention_mask=enc_masks, cache=cache, position_ids=enc_pos, **prefill_images
        )
        cache = enc_out.cache
        if head is not None:  # the copy head's keys for the newly encoded positions, beside the cache
            if memory is None:
                memory = head.new_memory(enc_in, enc_out.last_hidden_state, attn)
            else:
                memory = head.extend_memory(memory, enc_in, enc_out.last_hidden_state)
        dt = time.perf_counter() - t0
        if canvas_index == 0:
            stats.time_prefill_s += dt
        else:
            stats.time_commit_s += dt

        # 1.b a uniform-noise canvas.
        canvas = torch.randint(0, vocab, (batch, canvas_len), device=device, generator=gen)
        dec_masks = model.model.decoder.create_diffusion_decoder_attention_mask(
            config=model.config,
            inputs_embeds=canvas.unsqueeze(-1),
            cache=cache,
            decoder_attention_mask=dec_attn,
        )
        tokens_left = (
            settings.max_new_tokens - canvas_index * canvas_len
        )  # the budget is exact for constraints
        t0 = time.perf_counter()
        for r, c in enumerate(cons):
            if c is not None and not bool(finished_seq[r]):
                c.start_canvas(canvas_len, tokens_left)
        stats.time_constraint_s += time.perf_counter() - t0

        self_cond: torch.Tensor | None = None
        argmax = canvas
        # Fast mode: rows already done do not hold the canvas back. Parity mode: as the reference, every row
        # takes part in the stop test again.
        finished = torch.zeros_like(finished_seq) if parity else finished_seq.clone()
        history: torch.Tensor | None = None
        fixed_mask = torch.zeros((batch, canvas_len), dtype=torch.bool, device=device)
        prev_accepted = torch.zeros((batch, canvas_len), dtype=torch.bool, device=device)
        grammar_done = torch.zeros(batch, dtype=torch.bool, device=device)
        steps_taken = 0
        for cur_step in range(n_steps, 0, -1):
            steps_taken += 1
            forwards += (~(finished | finished_seq)).long()
            t0 = time.perf_counter()
            extra = {} if memory is None else {"copy_memory": memory}
            logits = model(
                decoder_input_ids=canvas,
                self_conditioning_logits=self_cond,
                decoder_attention_mask=dec_masks,
                cache=cache,
                decoder_position_ids=dec_pos,
                **extra,
            ).logits
            stats.time_decoder_s += time.perf_counter() - t0

            # Constraint: fixed positions and the frontier mask (a logits processor that knows positions).
            if any_constraint:
                t0 = time.perf_counter()
                fixed_mask, fixed_tok = constrain_logits(logits, cons, (~finished).tolist())
                stats.time_constraint_s += time.perf_counter() - t0

            t0 = time.perf_counter()
            temperature = settings.temperature(cur_step)
            if parity:
                processed = logits / temperature
                probs = torch.softmax(processed, dim=-1, dtype=torch.float32)
                denoised = torch.multinomial(probs.view(-1, vocab), num_samples=1).view(batch, canvas_len)
                new_argmax = torch.argmax(processed, dim=-1)
                entropy = torch.distributions.Categorical(logits=processed).entropy()
                accepted = entropy_bound_accept(entropy, settings.entropy_bound)
            elif fused is not None:
                processed = logits.div_(temperature)
                out = fused(
                    processed.view(-1, vocab),
                    1.0,
                    seed=run_seed & 0x7FFFFFFF,
                    offset=canvas_index * 4096 + cur_step,
                )
                new_argmax = out.argmax.view(batch, canvas_len)
                entropy = out.entropy.view(batch, canvas_len)
                denoised = out.sample.view(batch, canvas_len)
                accepted = entropy_bound_accept(entropy, settings.entropy_bound)
            else:
                processed = logits.div_(temperature)
                entropy, new_argmax = entropy_and_argmax(processed)
                accepted = entropy_bound_accept(entropy, settings.entropy_bound)
                denoised = sample_positions(processed, accepted, generator=gen)
            if settings.accept_window is not None and not parity:
                # left to right in bites: nothing past the frontier + W (fixed prefix, else the leading run of
                # positions accepted in the previous step)
                if any_constraint and bool(fixed_mask.any()):
                    lead = fixed_mask.long().cumprod(dim=1).sum(dim=1)
                else:
                    lead = prev_accepted.long().cumprod(dim=1).sum(dim=1)
                pos = torch.arange(canvas_len, device=device)[None, :]
                accepted = accepted & (pos < (lead + settings.accept_window)[:, None])
                denoised = torch.where(accepted, denoised, canvas)
            stats.time_sampling_s += time.perf_counter() - t0

            if any_constraint:
                t0 = time.perf_counter()
                denoised, accepted, done_rows = commit_constraints(
                    cons, (~finished).tolist(), denoised, accepted, fixed_mask, fixed_tok, processed, settings
                )
                grammar_done |= done_rows
                stats.time_constraint_s += time.perf_counter() - t0

            t0 = time.perf_counter()
            prev_accepted = accepted
            accepted_canvas = torch.where(accepted, denoised, canvas)
            noise = torch.randint(0, vocab, (batch, canvas_len), device=device, generator=gen)
            new_canvas = torch.where(accepted, accepted_canvas, noise)

            # Adaptive stop: argmax stable for `stability_threshold` steps and confident over free positions.
            if bool(finished.any()):
                new_argmax = torch.where(finished[:, None], argmax, new_argmax)
                new_canvas = torch.where(finished[:, None], canvas, new_canvas)
                if self_cond is not None:
                    processed = torch.where(finished[:, None, None], self_cond, processed)
                if parity:
                    entropy = torch.distributions.Categorical(logits=processed).entropy()
                else:
                    entropy = torch.where(finished[:, None], torch.zeros_like(entropy), entropy)
            if settings.stability_threshold == 0:
                stable = torch.ones(batch, dtype=torch.bool, device=device)
            else:
                if history is None:
                    history = torch.full(
                        (settings.stability_threshold, batch, canvas_len), -1, dtype=torch.long, device=device
                    )
                stable = (history == new_argmax[None]).all(dim=-1).all(dim=0)
                history = torch.roll(history, shifts=-1, dims=0)
                history[-1] = new_argmax
            mean_h = free_mean_entropy(entropy, fixed_mask if any_constraint else None)
            finished = finished | (stable & (mean_h < settings.confidence_threshold))
            if any_constraint:
                # A row whose grammar has terminated has nothing left to denoise: the readout is fully decided.
                finished = finished | grammar_done
            self_cond = processed.to(emb_dtype)
            canvas, argmax = new_canvas, new_argmax
            stats.time_sampling_s += time.perf_counter() - t0

            if on_event is not None:
                on_event(
                    StepEvent(
                        canvas_index=canvas_index,
                        step=steps_taken,
                        argmax=argmax.cpu(),
                        accepted=accepted.cpu(),
                        entropy=entropy.float().cpu(),
                        fixed=fixed_mask.cpu(),
                        finished=finished.cpu(),
                    )
                )
            if bool(finished.all()):
                break
        stats.steps_per_canvas.append(steps_taken)
        stats.canvases += 1

        # 1.d readout: the argmax canvas, or what the row's constraint decides.
        readout = argmax
        if any_constraint:
            t0 = time.perf_counter()
            assert self_cond is not None
            readout = constrained_readout(argmax, self_cond, cons, (~finished_seq).tolist())
            stats.time_constraint_s += time.perf_counter() - t0

        # 1.e append, finish rows on EOS, pad after EOS (as the reference's _finalize_canvas).
        sequences = torch.cat([sequences, readout], dim=-1)
        new = sequences[:, -canvas_len:]
        is_eos = torch.isin(new, eos)
        finished_this = is_eos.any(dim=-1)
        previously = finished_seq
        finished_seq = previously | finished_this
        if bool(finished_seq.any()):
            sequences[previously, -canvas_len:] = settings.pad_token_id
            if bool(finished_this.any()):
                csum = is_eos.cumsum(dim=-1)
                pad_mask = (csum > 0) & ~((csum == 1) & is_eos)
                new[pad_mask] = settings.pad_token_id
        if on_event is not None:
            on_event(
                CanvasEvent(
                    canvas_index=canvas_index,
                    tokens=sequences[:, -canvas_len:].cpu(),
                    steps=steps_taken,
                    finished_rows=finished_seq.cpu(),
                )
            )
        if bool(finished_seq.all()):
            break
        # 1.f next canvas positions and masks.
        cur_len += canvas_len
        dec_attn = torch.nn.functional.pad(dec_attn, (0, canvas_len), value=True)
        attn = torch.nn.functional.pad(attn, (0, canvas_len), value=True)
        enc_pos = dec_pos
        dec_pos = torch.arange(cur_len, cur_len + canvas_len, dtype=torch.int32, device=device).unsqueeze(0)

    new_tokens = sequences[:, prompt_len:]
    valid = (new_tokens != settings.pad_token_id).sum(dim=-1)
    stats.decoder_forwards = forwards.tolist()
    stats.new_tokens = valid.tolist()
    stats.tokens_per_forward = [
        v / max(f, 1) for v, f in zip(stats.new_tokens, stats.decoder_forwards, strict=True)
    ]
    stats.time_total_s = time.perf_counter() - t_start
    return GenerationResult(sequences=sequences, prompt_length=prompt_len, stats=stats)
