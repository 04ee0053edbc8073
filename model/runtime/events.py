"""What the denoising loop reports: per-step and per-canvas events, a call's statistics (with the one timing
hook, :meth:`GenerationStats.phase`) and its result."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import torch


@dataclass
class StepEvent:
    """One denoising step (streamed to ``on_event``).

    Attributes:
        canvas_index: 0-based canvas number.
        step: 1-based step number within the canvas.
        argmax: ``[B, C]`` int64 argmax canvas (the draft).
        accepted: ``[B, C]`` bool positions accepted this step.
        entropy: ``[B, C]`` float32 per-position entropy (nats).
        fixed: ``[B, C]`` bool positions fixed by a constraint.
        finished: ``[B]`` bool rows whose canvas has stopped denoising."""

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


EventCallback = Callable[[StepEvent | CanvasEvent], None]


@dataclass
class GenerationStats:
    """Statistics of one :func:`model.runtime.generate` call (or one batcher request).

    Attributes:
        canvases: canvases generated.
        steps_per_canvas: denoising steps taken per canvas.
        decoder_forwards: per row, decoder forwards that row needed (as the reference counts).
        new_tokens: per row, generated tokens excluding pad.
        tokens_per_forward: per row, ``new_tokens / decoder_forwards`` (TPF).
        time_prefill_s ... time_total_s: wall seconds per phase (:meth:`phase` adds to them)."""

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

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time the ``with`` body into ``time_<name>_s`` (``name``: prefill, decoder, sampling, constraint or commit)."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            attr = f"time_{name}_s"
            setattr(self, attr, getattr(self, attr) + time.perf_counter() - t0)

    def add_times(self, other: GenerationStats, share: float = 1.0) -> None:
        """Add ``share`` of ``other``'s phase times to this one's."""
        for f in fields(self):
            if f.name.startswith("time_"):
                setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name) * share)

    @property
    def total_steps(self) -> int:
        """Denoising steps over all canvases."""
        return sum(self.steps_per_canvas)

    def as_dict(self) -> dict[str, Any]:
        """JSON-serialisable view."""
        out = asdict(self)
        out["tokens_per_forward"] = [round(x, 3) for x in self.tokens_per_forward]
        return {k: round(v, 4) if k.startswith("time_") else v for k, v in out.items()}


@dataclass
class GenerationResult:
    """Output of :func:`model.runtime.generate`: ``sequences`` ``[B, P + n*C]`` int64 (prompt + canvases, pad
    after EOS)."""

    sequences: torch.Tensor
    prompt_length: int
    stats: GenerationStats

    @property
    def new_tokens(self) -> torch.Tensor:
        """``[B, n*C]`` int64 generated part of ``sequences``."""
        return self.sequences[:, self.prompt_length :]
