"""Constraints for runtime tests: hooks that fix and mask nothing, so a test sees the sampler's own acceptance."""

from __future__ import annotations

import torch

from model.runtime.constraint_batch import ConstraintPlan


class ModeConstraint:
    """Fixes no position and masks no token; reports ``in_call`` as given (a
    :class:`model.runtime.constraint_batch.CallAwareConstraint`), so the runtime applies the call or the prose window."""

    def __init__(self, in_call: bool) -> None:
        self.in_call = in_call

    def start_canvas(self, canvas_length: int, tokens_left: int) -> None:
        """Nothing to set up."""

    def plan(self) -> ConstraintPlan:
        """No fixed tokens, no frontier mask."""
        return ConstraintPlan(fixed=[])

    def commit(self, tokens, accepted, logits=None, entropy_bound=0.0) -> list[int]:
        """Vetoes nothing."""
        return []

    def readout(self, logits: torch.Tensor) -> list[int]:
        """The argmax canvas."""
        return logits.argmax(-1).tolist()
