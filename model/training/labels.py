"""Dense labels for the copy head's binding supervision (see :mod:`model.copy_head`).

For one training example this module finds, by character offsets in the rendered prompt and target:

* ``decl_pos``: the prompt position of the last token of each declared parameter's name
  (``properties:{city:{...`` -> the token ``city``), in declaration order; the encoder's state there stands for
  the parameter;
* ``bind``: for every prompt token, ``-100`` (no label) outside the last user message, else ``0`` ("none") or
  ``1 + k`` when the token is part of the words that state parameter ``k``'s value (from
  :attr:`model.training.data.Example.bindings`);
* ``key``: for every target token, ``k`` when it lies inside the value of parameter ``k`` in a call
  (string delimiters excluded), else ``-100``;
* ``ptr``: for every target token, True where the pointer should be trained to find it in the prompt (call
  values, and word-like tokens of prose answers).

Slot-filling taggers learn binding from exactly this kind of per-token labelling (e.g. Mesnil et al. 2015,
"Using Recurrent Neural Networks for Slot Filling in Spoken Language Understanding").
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from model import special_tokens as st
from model.training.data import Example
from model.training.render import (
    declaration_head,
    format_value,
    render_declaration,
    render_prompt,
    render_schema,
)

IGNORE = -100


@dataclass
class ExampleLabels:
    """Token ids and binding labels of one example (lists of equal length to ``prompt``/``target``)."""

    prompt: list[int]
    target: list[int]
    decl_pos: list[int] = field(default_factory=list)
    bind: list[int] = field(default_factory=list)
    key: list[int] = field(default_factory=list)
    ptr: list[bool] = field(default_factory=list)


def _property_offsets(params: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """Character spans of the top-level property names inside ``render_schema(params)``."""
    props = params.get("properties")
    if not isinstance(props, dict) or not props:
        return {}
    before = []  # the parts render_schema writes before "properties:{"
    if params.get("description"):
        before.append(f"description:{st.STRING_DELIM}{params['description']}{st.STRING_DELIM}")
    if "enum" in params:
        before.append("enum:" + format_value(params["enum"]))
    if isinstance(params.get("items"), dict):
        before.append("items:" + render_schema(params["items"]))
    off = 1 + sum(len(b) + 1 for b in before) + len("properties:{")
    out = {}
    for k in sorted(props):
        out[k] = (off, off + len(k))
        off += len(k) + 1 + len(render_schema(props[k])) + 1
    return out


def declared_keys(prompt: str, tools: list[dict[str, Any]]) -> list[tuple[str, str, int, int]]:
    """``[(tool, parameter, start, end)]``: character spans of every declared top-level parameter name in
    ``prompt`` (rendered by :func:`model.training.data.render_prompt`), in declaration order."""
    out: list[tuple[str, str, int, int]] = []
    pos = 0
    for t in tools:
        f = t.get("function", t)
        decl = render_declaration(t)
        at = prompt.find(decl, pos)
        if at < 0:
            continue
        pos = at + len(decl)
        params = f.get("parameters") or {"type": "object"}
        base = at + len(declaration_head(t))
        for k, (s, e) in _property_offsets(params).items():
            out.append((f["name"], k, base + s, base + e))
    return out


def _last_user_span(prompt: str) -> tuple[int, int] | None:
    opener = f"{st.TURN_START}user\n"
    at = prompt.rfind(opener)
    if at < 0:
        return None
    start = at + len(opener)
    end = prompt.find(st.TURN_END, start)
    return start, (end if end >= 0 else len(prompt))


def _mentions(text: str, spoken: str) -> list[tuple[int, int]]:
    """Spans of ``spoken`` in ``text`` at word boundaries (case-insensitive fallback)."""
    if not spoken:
        return []
    pat = r"(?<![A-Za-z0-9])" + re.escape(spoken) + r"(?![A-Za-z0-9])"
    spans = [(m.start(), m.end()) for m in re.finditer(pat, text)]
    if not spans:
        spans = [(m.start(), m.end()) for m in re.finditer(pat, text, flags=re.IGNORECASE)]
    return spans


def call_value_spans(calls: list[tuple[str, dict[str, Any]]]) -> tuple[str, list[tuple[str, str, int, int]]]:
    """The call part of a target and the character spans of its argument values.

    Returns:
        ``(text, [(tool, parameter, start, end)])`` where ``text`` is ``"".join(format_call(...))`` and each
        span covers one top-level argument's value (a string's text without its ``<|"|>`` delimiters).
    """
    q = st.STRING_DELIM
    text, spans = "", []
    for name, args in calls:
        text += f"{st.TOOL_CALL_START}call:{name}{{"
        for i, (k, v) in enumerate(args.items()):
            if i:
                text += ","
            text += f"{k}:"
            fv = format_value(v)
            s, e = len(text), len(text) + len(fv)
            if isinstance(v, str):
                s, e = s + len(q), e - len(q)
            spans.append((name, k, s, e))
            text += fv
        text += "}" + st.TOOL_CALL_END
    return text, spans


def _overlap(offsets: list[tuple[int, int]], s: int, e: int) -> list[int]:
    return [i for i, (a, b) in enumerate(offsets) if a < e and b > s and b > a]


def example_labels(tok: Any, ex: Example, word_table: list[bool] | None = None) -> ExampleLabels:
    """Token ids and binding labels of ``ex`` (prompt and target tokenized separately, as at inference).

    Args:
        tok: the checkpoint's ``PreTrainedTokenizerFast`` (must return offset mappings).
        ex: a generated :class:`~model.training.data.Example`.
        word_table: ``table[id]`` True for word-like tokens (letters or digits); marks the pointer targets of
            prose answers. ``None``: prose answers get no pointer labels.

    Returns:
        :class:`ExampleLabels`.
    """
    prompt = render_prompt(ex.messages, ex.tools)
    pe = tok(prompt, add_special_tokens=False, return_offsets_mapping=True)
    te = tok(ex.target, add_special_tokens=False, return_offsets_mapping=True)
    p_ids, p_off = list(pe["input_ids"]), [tuple(o) for o in pe["offset_mapping"]]
    t_ids, t_off = list(te["input_ids"]), [tuple(o) for o in te["offset_mapping"]]
    keys = declared_keys(prompt, ex.tools)
    index = {(tool, k): j for j, (tool, k, _, _) in enumerate(keys)}
    decl_pos = []
    for _, _, s, e in keys:
        toks = _overlap(p_off, s, e)
        decl_pos.append(toks[-1] if toks else 0)
    bind = [IGNORE] * len(p_ids)
    req = _last_user_span(prompt)
    if req is not None and ex.calls:
        for i in _overlap(p_off, *req):
            bind[i] = 0
        text = prompt[req[0] : req[1]]
        for tool, k, spoken in ex.bindings:
            j = index.get((tool, k))
            if j is None:
                continue
            for s, e in _mentions(text, spoken):
                for i in _overlap(p_off, req[0] + s, req[0] + e):
                    bind[i] = 1 + j
    key = [IGNORE] * len(t_ids)
    ptr = [False] * len(t_ids)
    if ex.calls:
        text, spans = call_value_spans(ex.calls)
        if ex.target.startswith(text):
            for tool, k, s, e in spans:
                j = index.get((tool, k))
                for i in _overlap(t_off, s, e):
                    ptr[i] = True
                    if j is not None:
                        key[i] = j
    elif word_table is not None:
        ptr = [word_table[x] for x in t_ids]
    return ExampleLabels(p_ids, t_ids, decl_pos, bind, key, ptr)
