"""Bound values: the copy head's binding classifier picks, before a tool-call turn, which words of the user's
request fill which declared parameter, and the turn's constraint then allows exactly those words there.

The copy head (:mod:`model.copy_head`) is trained with dense binding supervision: every token of the last user
message is labelled with the declared parameter whose value it states, or "none", scored against the encoder's
state at that parameter's name in the declaration (:meth:`model.copy_head.CopyHead.binding_logits`; the labels
come from :mod:`model.training.labels`). On held-out requests that classifier gives the right span more often
than the denoising loop copies it (docs/TRAINING.md, "Bound values"), so a turn can use it as a constraint:

1. encode the prompt once and label each token of the last user message (argmax over "none" and the declared
   parameters of every tool);
2. a parameter whose labelled tokens form one contiguous run gets that run's text, widened to whole words
   (:func:`bound_spans`);
3. its schema in the turn's constraint (never in the prompt the model reads) becomes ``enum: [text]`` for a
   string, or ``enum: [number]`` for an integer or number parameter whose text parses as one, when the value
   passes the parameter's own schema (:func:`pin_bound_values`).

The model still chooses the tool, which parameters to write and every value the classifier left unbound.
Slot-filling taggers decide binding the same way, from per-token labels (Mesnil et al. 2015, "Using Recurrent
Neural Networks for Slot Filling in Spoken Language Understanding").
"""

from __future__ import annotations

import bisect
import dataclasses
from typing import Any

import jsonschema
import torch

from model import hf_compat as hf
from model.declarations import declared_keys, last_user_span

#: Schema keywords under which a parameter is never pinned: the constraint already fixes or shapes its value.
_KEEP = frozenset({"enum", "const", "pattern", "format"})


def bound_spans(
    model: Any, tokenizer: Any, input_ids: list[int], tools: list[dict[str, Any]]
) -> dict[tuple[str, str], str]:
    """The request words the binding classifier binds to each declared parameter.

    Args:
        model: a checkpoint with a copy head (``model.copy_model.DiffusionGemmaWithCopyHead``); another model
            gives ``{}``.
        tokenizer: its tokenizer.
        input_ids: the turn's prompt ids (:meth:`model.chat.ChatModel.encode`), ``P`` tokens.
        tools: the OpenAI-style tools rendered in that prompt, in order.

    Returns:
        ``{(tool name, parameter): text}`` for each parameter whose labelled request tokens form one contiguous
        run (widened to whole words, stripped); parameters with no run or several runs are left out, as are
        tools whose declaration the prompt does not hold verbatim. One encoder pass over the ``P`` prompt tokens.
    """
    head = getattr(model, "copy_head", None)
    if head is None or not tools or not input_ids:
        return {}
    pieces = [tokenizer.decode([i]) for i in input_ids]
    ends: list[int] = []
    total = 0
    for p in pieces:
        total += len(p)
        ends.append(total)
    prompt = "".join(pieces)
    keys = declared_keys(prompt, tools)
    user = last_user_span(prompt)
    if not keys or user is None or user[0] >= user[1]:
        return {}

    def token_at(ch: int) -> int:
        return bisect.bisect_right(ends, ch)

    ids = torch.tensor([input_ids], dtype=torch.long, device=model.device)
    with torch.no_grad():
        hidden = hf.encoder_states(model, ids)
        memory = head.new_memory(ids, hidden)
        decl = hidden[:, [token_at(end - 1) for (_, _, _, end) in keys]]
        labels = head.binding_logits(memory.keys[:, : len(input_ids)], decl)[0].argmax(-1).tolist()
    first, last = token_at(user[0]), token_at(user[1] - 1)
    out: dict[tuple[str, str], str] = {}
    for k, (tool, name, _, _) in enumerate(keys):
        toks = [i for i in range(first, last + 1) if labels[i] == k + 1]
        if not toks or toks[-1] - toks[0] + 1 != len(toks):
            continue  # unbound, or several runs: the model decides
        start = max(ends[toks[0] - 1] if toks[0] else 0, user[0])
        end = min(ends[toks[-1]], user[1])
        while start > user[0] and prompt[start - 1].isalnum() and prompt[start].isalnum():
            start -= 1
        while end < user[1] and prompt[end].isalnum() and prompt[end - 1].isalnum():
            end += 1
        text = prompt[start:end].strip()
        if text:
            out[(tool, name)] = text
    return out


def _pinned(schema: dict[str, Any], text: str) -> dict[str, Any] | None:
    """``schema`` allowing only ``text`` (a string, or the number it spells), or ``None`` to leave it free."""
    if _KEEP & schema.keys():
        return None
    kind = schema.get("type")
    value: Any
    if kind == "string":
        value = text
    elif kind in ("integer", "number"):
        try:
            value = int(text) if kind == "integer" else float(text)
        except ValueError:
            return None
    else:
        return None
    bare = {k: v for k, v in schema.items() if k != "x-grounded"}
    try:
        jsonschema.validate(value, bare)
    except (jsonschema.exceptions.ValidationError, jsonschema.exceptions.SchemaError):
        return None
    return {**bare, "enum": [value]}


def pin_bound_values(specs: list[Any], spans: dict[tuple[str, str], str]) -> tuple[list[Any], int]:
    """Copies of the turn's normalised tools with each bound parameter's value fixed to its span.

    Args:
        specs: ``model.constraints.schema.ToolSpec`` list (not modified).
        spans: :func:`bound_spans`' result.

    Returns:
        ``(specs, pinned)``: new ``ToolSpec`` objects where a top-level string parameter bound to ``text`` has
        ``enum: [text]`` (its ``x-grounded`` dropped: the span is of the conversation), an integer or number
        parameter ``enum: [value]`` when ``text`` parses as one; a parameter with ``enum``, ``const``,
        ``pattern`` or ``format``, of another type, or whose own schema refuses the value stays as it was.
        ``pinned`` counts the parameters fixed.
    """
    out, pinned = [], 0
    for spec in specs:
        props = (spec.parameters or {}).get("properties")
        if not isinstance(props, dict):
            out.append(spec)
            continue
        fixed = {}
        for name, schema in props.items():
            text = spans.get((spec.name, name))
            new = _pinned(schema, text) if text is not None and isinstance(schema, dict) else None
            if new is not None:
                fixed[name] = new
        pinned += len(fixed)
        if not fixed:
            out.append(spec)
        else:
            props = {**props, **fixed}
            out.append(dataclasses.replace(spec, parameters={**spec.parameters, "properties": props}))
    return out, pinned
