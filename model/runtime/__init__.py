"""The denoising runtime: :func:`generate` runs the one scheduler (:mod:`model.runtime.scheduler`) over a fixed
batch (token-identical to transformers' ``generate`` in parity mode); :class:`~model.runtime.batcher.CanvasBatcher`
feeds it from a queue (``agentkit serve``). Every step is :func:`model.runtime.step.denoise_step`."""

from model.runtime.constraint_batch import CanvasConstraint, ConstraintPlan, TerminatingConstraint
from model.runtime.events import CanvasEvent, EventCallback, GenerationResult, GenerationStats, StepEvent
from model.runtime.scheduler import FixedBatch, generate
from model.runtime.step import Canvas, Denoiser, StepOutcome, denoise_step

__all__ = [
    "Canvas",
    "CanvasConstraint",
    "CanvasEvent",
    "ConstraintPlan",
    "Denoiser",
    "EventCallback",
    "FixedBatch",
    "GenerationResult",
    "GenerationStats",
    "StepEvent",
    "StepOutcome",
    "TerminatingConstraint",
    "denoise_step",
    "generate",
]
