"""Denoising settings: the knobs of DiffusionGemma's sampler, read from a checkpoint's ``generation_config.json``.
Defaults follow ``google/diffusiongemma-26B-A4B-it``; source: transformers
``models/diffusion_gemma/generation_diffusion_gemma.py``."""

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
        entropy_bound: accept the lowest-entropy positions while ``sum(H) - max(H) <= entropy_bound`` (nats;
            Ben-Hamu et al. 2025, arXiv:2505.24857).
        t_max, t_min: linear temperature schedule, ``t = t_min + (t_max - t_min) * n / N`` at step ``n`` counting
            down ``N..1``.
        stability_threshold: steps the argmax canvas must be unchanged to stop early.
        confidence_threshold: mean entropy (nats) of free positions below which a stable canvas stops.
        eos_token_ids: ids that end generation.
        pad_token_id: written after EOS.
        accept_window: ``None`` or ``W``: a step accepts only positions before ``frontier + W`` (the end of the fixed
            prefix, or of the run accepted in the previous step), so decoding moves left to right in bites, as a copy
            head's induction match needs. Not used in parity mode.
        no_repeat: the constraint never commits a word right after the same word (``GrammarConstraint``).
        extend_prose: the constraint's frontier extension also commits prose; ``False``: prose advances only by
            accepted positions (with ``accept_window`` 1, strictly left to right).
        repeat_window: with ``no_repeat``, prose never commits a word of 3+ letters among the last
            ``repeat_window`` tokens.
        call_accept_window: the accept window once a row's turn has opened a tool call; ``None``:
            ``accept_window`` everywhere.
        bind_values: bind request words to declared parameters with the copy head before a turn with tools
            (:mod:`model.binding`; read by :meth:`model.turn.chat.ChatModel.prepare`).
        ground_answers: prose writes a digit only inside a fact of the conversation, copied whole
            (:func:`grammar.grounding.answer_regex`; read by ``ChatModel.prepare``).
        span_copy: whole-span copying in answers (:mod:`model.constraints.span_copy`; read by
            ``ChatModel.prepare``)."""

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
        for k in ("canvas_length", "max_new_tokens", "max_denoising_steps", "entropy_bound"):
            if getattr(self, k) <= 0:
                raise ValueError(f"{k} must be > 0, got {getattr(self, k)}")
        if not (0 <= self.t_min < self.t_max):
            raise ValueError(f"need 0 <= t_min < t_max, got t_min={self.t_min}, t_max={self.t_max}")
        if self.stability_threshold < 0:
            raise ValueError(f"stability_threshold must be >= 0, got {self.stability_threshold}")
        if self.repeat_window < 1:
            raise ValueError(f"repeat_window must be >= 1, got {self.repeat_window}")
        for k in ("accept_window", "call_accept_window"):
            if (w := getattr(self, k)) is not None and w < 1:
                raise ValueError(f"{k} must be >= 1 or None, got {w}")

    @property
    def max_canvases(self) -> int:
        """Canvases the token budget allows (``ceil(max_new_tokens / canvas_length)``)."""
        return -(-self.max_new_tokens // self.canvas_length)

    def temperature(self, step: int) -> float:
        """Temperature at denoising step ``step`` (counting down ``max_denoising_steps..1``)."""
        return self.t_min + (self.t_max - self.t_min) * (step / self.max_denoising_steps)

    def replace(self, **changes: Any) -> DenoiseSettings:
        """A copy with ``changes`` applied (``None`` values ignored, except for the two windows, where ``None``
        switches the window off)."""
        windows = ("accept_window", "call_accept_window")
        return dataclasses.replace(
            self, **{k: v for k, v in changes.items() if v is not None or k in windows}
        )

    def window_for(self, in_call: bool) -> int | None:
        """The accept window of a row: ``call_accept_window`` when set and the row is in a tool call, else
        ``accept_window``."""
        if in_call and self.call_accept_window is not None:
            return self.call_accept_window
        return self.accept_window

    @classmethod
    def from_model(cls, model: Any) -> DenoiseSettings:
        """Settings from a loaded ``DiffusionGemmaForBlockDiffusion`` (config and generation config; missing fields
        take the defaults)."""
        gen = getattr(model, "generation_config", None)

        def g(name: str, default: Any) -> Any:
            value = getattr(gen, name, None) if gen is not None else None
            return default if value is None else value

        sampler, text = g("sampler_config", None), model.config.get_text_config()
        bound = (
            sampler.get("entropy_bound")
            if isinstance(sampler, dict)
            else getattr(sampler, "entropy_bound", None)
        )
        eos = g("eos_token_id", getattr(text, "eos_token_id", 1))
        eos_ids = tuple(eos) if isinstance(eos, list | tuple) else (int(eos),)
        pad = g("pad_token_id", getattr(text, "pad_token_id", 0) or 0)
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
