"""Binders: before a tool-call turn, a binder may propose values for the declared parameters, and the turn's
constraint narrows those parameters to the proposed candidates; the model decides the rest.

A binder (:class:`Binder`) reads the turn's prefill and the tool specs and returns a :class:`Decision` or nothing.
It is chosen per agent, bundle (``binding:``), CLI flag (``--binding``) or server request; the checkpoint's
``"bind_values"`` only gives the agents' default. A parameter is narrowed to the binding tagger's spans for it
(:func:`label_request`) and typed candidates read by its JSON Schema type (:mod:`model.binding.typed`); one value is
forced only above a confidence threshold calibrated per kind (:data:`model.binding.binder.FORCE_CONFIDENCE`,
docs/TRAINING.md). No tool or optional parameter is removed and nothing becomes required. Slot-filling taggers
decide binding the same way (Mesnil et al. 2015)."""

from model.binding.binder import CopyHeadBinder, pick, resolve_binder, scored_candidates
from model.binding.decision import Binder, BindingInputs, Decision
from model.binding.labelling import label_request

__all__ = [
    "Binder",
    "BindingInputs",
    "CopyHeadBinder",
    "Decision",
    "label_request",
    "pick",
    "resolve_binder",
    "scored_candidates",
]
