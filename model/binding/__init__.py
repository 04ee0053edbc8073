"""Binders: before a tool-call turn, a binder may propose values for the declared parameters, and the turn's
constraint then narrows those parameters to the proposed candidates. The model decides the rest.

A binder is a plug-in (:class:`Binder`): it reads the turn's prefill (the encoder states the runtime computes
anyway, one encoder pass per prompt) and the tool specs, and returns a :class:`Decision` or nothing. It is
chosen per agent, per bundle (``binding:``), per CLI flag (``--binding``) and per server request; the
checkpoint's ``agentkit_decoding.json`` (``"bind_values"``) only gives the agents' default, and ``agentkit
serve`` binds nothing unless started with ``--binding``.

A decision proposes; the model decides:

* a parameter is narrowed to a few candidates: the binding tagger's spans for it (the copy head's per-token
  labels over the declared parameters, :func:`label_request`) and typed candidates from the request, read by
  the parameter's JSON Schema type only (:mod:`model.binding.typed`: numbers within its bounds, the ``enum``
  options the request names, dates for ``format: date``, e-mail addresses, words matching a ``pattern``, the
  lists of numbers the request writes, the tagger's spans read as lists for arrays of strings);
* one value is forced only where the tagger's confidence is above a threshold calibrated on dev splits, per
  kind of parameter (:data:`model.binding.binder.FORCE_CONFIDENCE`; the curves are in docs/TRAINING.md) and no
  other candidate's is as high (:data:`model.binding.binder.FORCE_MARGIN`);
* no tool and no optional parameter is removed, nothing becomes required, and the turn's number of calls is
  what ``tool_choice`` and ``parallel_tool_calls`` say: a request that binds nothing, or that no tool fits,
  leaves the model free, to answer in prose included.

Slot-filling taggers decide binding the same way, from per-token labels (Mesnil et al. 2015, "Using Recurrent
Neural Networks for Slot Filling in Spoken Language Understanding").
"""

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
