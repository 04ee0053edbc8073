"""Denoising settings: the knobs of DiffusionGemma's sampler, read from a checkpoint's ``generation_config.json``.

Defaults follow the real checkpoint (``google/diffusiongemma-26B-A4B-it``): 48 denoising steps, entropy bound
0.1, temperature falling linearly 0.8 -> 0.4, stability 1, confidence 0.005, EOS ids ``[1, 106, 50]``.
Source of the algorithm: transformers ``models/diffusion_gemma/generation_diffusion_gemma.py``
(``EntropyBoundSampler``, ``LinearTemperatureScheduleLogitsProcessor``, ``StableAndConfidentStoppingCriteria``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class DenoiseSettings:
    """Settings of one generation call.

    Attributes:
        canvas_length: tokens per canvas (block), from the model config.
        max_new_tokens: token budget; rounded up to whole canvases like the reference ``generate``.
        max_denoising_steps: at most this many denoising steps per canvas.
        entropy_bound: the entropy-bound sampler's bound (nats): accept the lowest-entropy positions while
            ``sum(H) - max(H) <= entropy_bound`` (Ben-Hamu et al. 2025, arXiv:2505.24857).
        t_max, t_min: linear temperature schedule, ``t = t_min + (t_max - t_min) * n / N`` at step ``n``
            counting down ``N..1``.
        stability_threshold: the argmax canvas must be unchanged for this many steps to stop early.
        confidence_threshold: mean entropy (nats) of free positions below which a stable canvas stops.
        eos_token_ids: ids that end generation (the real checkpoint: ``<eos>``, ``<turn|>``,
            ``<|tool_response>``).
        pad_token_id: written after EOS.
        accept_window: ``None`` (the reference sampler) or ``W``: a step accepts only positions before
            ``frontier + W``, where the frontier is the end of the row's fixed prefix (constrained rows) or of the
            leading run of positions accepted in the previous step. Decoding then moves left to right in bites
            of at most ``W`` tokens, so each position sees the tokens to its left; a copy head's induction match
            (:mod:`model.heads.copy_head`) needs that to copy multi-token spans in order. Not used in parity mode.
        no_repeat: the tool-call constraint never commits a word right after the same word
            (:class:`model.constraints.denoise.GrammarConstraint`, ``no_repeat``).
        extend_prose: the tool-call constraint's frontier extension also commits prose (text outside a tool
            call); ``False``: prose advances only by positions the sampler accepts, so with ``accept_window``
            1 an answer is written strictly left to right, one position per denoising step, each token
            seeing the decided tokens to its left (:class:`model.constraints.denoise.GrammarConstraint`,
            ``extend_prose``). Tool calls keep the extension.
        repeat_window: with ``no_repeat``, prose also never commits a word of 3 letters or more that is among
            the last ``repeat_window`` committed tokens (:class:`model.constraints.denoise.GrammarConstraint`,
            ``repeat_window``; 1: only the word right before).
        call_accept_window: the accept window (as ``accept_window``) of a constrained row once its turn has
            opened a tool call (a ``<|tool_call>`` committed); ``None``: ``accept_window`` everywhere. Lets a
            checkpoint write prose one position per step (``accept_window`` 1) and calls in bites of several
            tokens, whose values the copy head and the grammar already keep in order.
        bind_values: before a constrained turn with tools, the copy head's binding classifier binds request
            words to declared parameters and the turn's constraint allows exactly those words there
            (:mod:`model.binding`; a checkpoint without a copy head ignores it). Read by
            :meth:`model.turn.chat.ChatModel.prepare`, not by the denoising loop.
        ground_answers: a constrained turn's prose writes a digit only inside a number, date or other
            digit-holding fact of the conversation (the user's messages, the tool calls' arguments, the tool
            responses), copied whole (:func:`grammar.grounding.answer_regex`): a small checkpoint then
            cannot garble the line of ``agentkit/bundle.py:600`` or a temperature. Read by
            :meth:`model.turn.chat.ChatModel.prepare`.
        span_copy: whole-span copying in answers: once a constrained turn's prose has written two pieces of a
            span of a tool response in source order (a path, an identifier, a number, a date), the rest of the span
            is committed in one decision, up to the span's end or where the matching spans part
            (:mod:`model.constraints.span_copy`). Read by :meth:`model.turn.chat.ChatModel.prepare`.
    """

    canvas_length: int = 256
    max_new_tokens: int = 256
    max_denoising_steps: int = 48
    entropy_bound: float = 0.1
    t_max: float = 0.8
    t_min: float = 0.4
    stability_threshold: int = 1
    confidence_threshold: float = 0.005
    eos_token_ids: tuple[int, ...] = field(default=(1, 106, 50))
    pad_token_id: int = 0
    accept_window: int | None = None
    no_repeat: bool = False
    extend_prose: bool = True
    call_accept_window: int | None = None
    repeat_window: int = 1
    bind_values: bool = False
    ground_answers: bool = False
    span_copy: bool = False

    def __post_init__(self) -> None:
        if self.canvas_length <= 0:
            raise ValueError(f"canvas_length must be > 0, got {self.canvas_length}")
        if self.max_new_tokens <= 0:
            raise ValueError(f"max_new_tokens must be > 0, got {self.max_new_tokens}")
        if self.max_denoising_steps <= 0:
            raise ValueError(f"max_denoising_steps must be > 0, got {self.max_denoising_steps}")
        if self.entropy_bound <= 0:
            raise ValueError(f"entropy_bound must be > 0, got {self.entropy_bound}")
        if not (0 <= self.t_min < self.t_max):
            raise ValueError(f"need 0 <= t_min < t_max, got t_min={self.t_min}, t_max={self.t_max}")
        if self.stability_threshold < 0:
            raise ValueError(f"stability_threshold must be >= 0, got {self.stability_threshold}")
        if self.accept_window is not None and self.accept_window < 1:
            raise ValueError(f"accept_window must be >= 1 or None, got {self.accept_window}")
        if self.repeat_window < 1:
            raise ValueError(f"repeat_window must be >= 1, got {self.repeat_window}")
        if self.call_accept_window is not None and self.call_accept_window < 1:
            raise ValueError(f"call_accept_window must be >= 1 or None, got {self.call_accept_window}")

    @property
    def max_canvases(self) -> int:
        """Number of canvases the token budget allows (``ceil(max_new_tokens / canvas_length)``)."""
        return -(-self.max_new_tokens // self.canvas_length)

    def temperature(self, step: int) -> float:
        """Temperature at denoising step ``step`` (counting down ``max_denoising_steps..1``)."""
        return self.t_min + (self.t_max - self.t_min) * (step / self.max_denoising_steps)

    def replace(self, **changes: Any) -> DenoiseSettings:
        """Return a copy with ``changes`` applied (``None`` values are ignored, except ``accept_window`` and
        ``call_accept_window``, where ``None`` switches the window off)."""
        windows = ("accept_window", "call_accept_window")
        return dataclasses.replace(
            self, **{k: v for k, v in changes.items() if v is not None or k in windows}
        )

    def window_for(self, in_call: bool) -> int | None:
        """The accept window of a row: ``call_accept_window`` when set and the row's turn is in a tool call,
        else ``accept_window`` (``None``: no window)."""
        if in_call and self.call_accept_window is not None:
            return self.call_accept_window
        return self.accept_window

    @classmethod
    def from_model(cls, model: Any) -> DenoiseSettings:
        """Read settings from a loaded ``DiffusionGemmaForBlockDiffusion`` (config + generation_config).

        Missing generation-config fields fall back to the real checkpoint's defaults.
        """
        gen = getattr(model, "generation_config", None)

        def g(name: str, default: Any) -> Any:
            value = getattr(gen, name, None) if gen is not None else None
            return default if value is None else value

        sampler = g("sampler_config", None)
        bound = getattr(sampler, "entropy_bound", None) if sampler is not None else None
        if isinstance(sampler, dict):
            bound = sampler.get("entropy_bound")
        eos = g("eos_token_id", None)
        if eos is None:
            eos = getattr(model.config.get_text_config(), "eos_token_id", 1)
        eos_ids = tuple(eos) if isinstance(eos, list | tuple) else (int(eos),)
        pad = g("pad_token_id", None)
        if pad is None:
            pad = getattr(model.config.get_text_config(), "pad_token_id", 0) or 0
        canvas = int(model.config.canvas_length)
        return cls(
            canvas_length=canvas,
            max_new_tokens=int(g("max_new_tokens", canvas)),
            max_denoising_steps=int(g("max_denoising_steps", 48)),
            entropy_bound=float(bound if bound is not None else 0.1),
            t_max=float(g("t_max", 0.8)),
            t_min=float(g("t_min", 0.4)),
            stability_threshold=int(g("stability_threshold", 1)),
            confidence_threshold=float(g("confidence_threshold", 0.005)),
            eos_token_ids=eos_ids,
            pad_token_id=int(pad),
            accept_window=None if g("accept_window", None) is None else int(g("accept_window", None)),
        )
