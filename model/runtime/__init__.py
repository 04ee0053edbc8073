"""The denoising runtime: one step (:mod:`model.runtime.step`) and one scheduler (:mod:`model.runtime.scheduler`).

* :func:`generate`: the scheduler over a fixed batch from prefill to the last canvas, with one left-padded KV cache
  and shared positions (token-identical to transformers' ``generate`` in parity mode);
* :class:`~model.runtime.batcher.CanvasBatcher` (:mod:`model.runtime.batcher`): the same scheduler fed from a
  queue, rows joining and leaving between steps, each with its own cache, positions, temperature schedule and
  generator (``agentkit serve``).

Every denoising step is :func:`model.runtime.step.denoise_step`; events and statistics are in
:mod:`model.runtime.events`.
"""

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
