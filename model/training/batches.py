"""Training data as tensors: examples encoded (prompt, target, value labels), batches of similar length,
left-padded prompts and canvases of target tokens."""

from __future__ import annotations

import math
import random
from typing import Any

import torch

from grammar import special_tokens as st
from model.training.labels import Encoded, example_labels
from model.training.render import render_prompt
from model.training.settings import TrainConfig

_CALL_END = st.SPECIAL_IDS[st.TOOL_CALL_END]


def word_token_table(tok: Any) -> list[bool]:
    """``table[id]`` is True when token ``id`` decodes to text with a letter or digit (not a control token)."""
    n = len(tok)
    table = [False] * n
    for i in range(len(st.SPECIAL_TOKENS), n):
        table[i] = any(ch.isalnum() for ch in tok.decode([i]))
    return table


def encode_labelled(
    tok: Any, examples: list[Any], word_table: list[bool], *, align_copies: bool = False
) -> list[Encoded]:
    """Tokenize examples with the copy head's labels (:func:`model.training.labels.example_labels`)."""
    return [example_labels(tok, e, word_table, align_copies=align_copies) for e in examples]


def encode_examples(tok: Any, examples: list[Any], word_table: list[bool] | None = None) -> list[Encoded]:
    """Tokenize examples (prompt and target apart, as at inference), with ``copied`` flags given ``word_table``."""
    prompts = [render_prompt(e.messages, e.tools) for e in examples]
    targets = [e.target for e in examples]
    p_ids = tok(prompts, add_special_tokens=False)["input_ids"]
    t_ids = tok(targets, add_special_tokens=False)["input_ids"]
    out = []
    for p, t in zip(p_ids, t_ids, strict=True):
        copied: list[bool] = []
        if word_table is not None:
            turn_end = st.SPECIAL_IDS[st.TURN_END]
            start = p.index(turn_end) + 1 if turn_end in p else 0
            seen = set(p[start:]) - set(p[:start])  # not in the system turn (names, keys, descriptions)
            copied = [word_table[x] and x in seen for x in t]
        out.append(Encoded(p, t, copied))
    return out


def _label_tensors(
    prompts: list[list[int]],
    decls: list[list[int]],
    binds: list[list[int]],
    keys: list[list[int]],
    ptrs: list[list[bool]],
    P: int,
) -> dict[str, Any]:
    """The binding labels of a batch, left-padded like the prompts: ``decl_pos``/``decl_valid`` [B, K],
    ``bind`` [B, P], ``key`` [B, C], ``ptr`` [B, C]; labels pointing at a declaration the prompt cap cut off are
    dropped."""
    B = len(prompts)
    K = max(1, max(len(d) for d in decls))
    decl_pos = torch.zeros((B, K), dtype=torch.long)
    decl_valid = torch.zeros((B, K), dtype=torch.bool)
    bind = torch.full((B, P), -100, dtype=torch.long)
    key = torch.tensor(keys, dtype=torch.long)
    for i, (p, d, b) in enumerate(zip(prompts, decls, binds, strict=True)):
        shift = P - len(p)
        bind[i, shift:] = torch.tensor(b, dtype=torch.long)
        for j, q in enumerate(d):
            if q >= 0:
                decl_pos[i, j] = q + shift
                decl_valid[i, j] = True
        lost = [j for j, q in enumerate(d) if q < 0]
        if lost:
            lost_t = torch.tensor(lost)
            bind[i][torch.isin(bind[i] - 1, lost_t)] = -100
            key[i][torch.isin(key[i], lost_t)] = -100
    ptr = torch.tensor(ptrs, dtype=torch.bool)
    return {"decl_pos": decl_pos, "decl_valid": decl_valid, "bind": bind, "key": key, "ptr": ptr}


def make_batch(
    items: list[Encoded],
    canvas_length: int,
    max_prompt: int,
    rng: random.Random,
    *,
    pad_weight: float = 0.25,
    copy_weight: float = 0.0,
    decision_weight: float = 1.0,
) -> dict[str, Any]:
    """Collate examples into left-padded tensors: of a longer target, one canvas-aligned window drawn uniformly,
    the earlier target tokens appended to the prompt; prompts keep their last ``max_prompt`` tokens.

    Returns:
        ``input_ids``, ``attention_mask`` [B, P] int64, ``canvas`` [B, C] int64 (``<pad>`` after the target),
        ``is_target`` [B, C] bool, ``weight`` [B, C] float32 (``pad_weight`` after the target, ``1 +
        copy_weight`` on copied tokens, else 1; times ``decision_weight`` at a turn's first token and after each
        ``<tool_call|>``, where it calls or answers, and calls again or stops) and, with labels, ``decl_pos``
        [B, K] int64, ``decl_valid`` [B, K] bool, ``bind`` [B, P], ``key`` [B, C] int64 (-100: no label) and ``ptr`` [B, C] bool.
    """
    C = canvas_length
    labelled = all(it.bind for it in items)
    prompts, canvases, real, weights = [], [], [], []
    binds, keys, ptrs, decls = [], [], [], []
    for it in items:
        t = it.target
        n_win = max(1, math.ceil(len(t) / C))
        w = rng.randrange(n_win)
        full = len(it.prompt) + w * C
        p = (it.prompt + t[: w * C])[-max_prompt:]
        if labelled:
            cut = max(0, full - max_prompt)
            binds.append((it.bind + [-100] * (w * C))[-max_prompt:])
            decls.append([(q - cut) for q in it.decl_pos])
            kl = it.key[w * C : (w + 1) * C]
            keys.append(kl + [-100] * (C - len(kl)))
            pl = it.ptr[w * C : (w + 1) * C]
            ptrs.append(pl + [False] * (C - len(pl)))
        c = t[w * C : (w + 1) * C]
        real.append(len(c))
        cp = it.copied[w * C : (w + 1) * C] if it.copied else [False] * len(c)
        row = [1.0 + copy_weight * f for f in cp] + [pad_weight] * (C - len(c))
        for i in range(w * C, w * C + len(c)):  # where the turn calls or answers, and goes on or stops
            if i == 0 or t[i - 1] == _CALL_END:
                row[i - w * C] *= decision_weight
        weights.append(row)
        canvases.append(c + [st.PAD_ID] * (C - len(c)))
        prompts.append(p)
    P = max(len(p) for p in prompts)
    input_ids = torch.full((len(items), P), st.PAD_ID, dtype=torch.long)
    attn = torch.zeros((len(items), P), dtype=torch.long)
    for i, p in enumerate(prompts):
        input_ids[i, P - len(p) :] = torch.tensor(p, dtype=torch.long)
        attn[i, P - len(p) :] = 1
    canvas = torch.tensor(canvases, dtype=torch.long)
    is_target = torch.arange(C)[None, :] < torch.tensor(real)[:, None]
    weight = torch.tensor(weights, dtype=torch.float32)
    out = {
        "input_ids": input_ids,
        "attention_mask": attn,
        "canvas": canvas,
        "is_target": is_target,
        "weight": weight,
    }
    if labelled:
        out.update(_label_tensors(prompts, decls, binds, keys, ptrs, P))
    return out


def device_batch(items: list[Encoded], cfg: TrainConfig, rng: random.Random, device: str) -> dict[str, Any]:
    """:func:`make_batch` with ``cfg``'s canvas, prompt cap and loss weights, tensors moved to ``device``."""
    b = make_batch(
        items,
        cfg.canvas_length,
        cfg.max_prompt,
        rng,
        pad_weight=cfg.pad_weight,
        copy_weight=cfg.copy_weight,
        decision_weight=cfg.decision_weight,
    )
    return {k: v.to(device) for k, v in b.items()}


def batches(data: list[Encoded], cfg: TrainConfig, rng: random.Random) -> Any:
    """Endless length-bucketed batches of :class:`Encoded`: each pass shuffles ``data``, sorts buckets of
    ``batch_size x bucket_mult`` by length and yields their batches in random order (``ValueError`` at the first
    ``next`` when ``data`` cannot fill a batch)."""
    if len(data) < cfg.batch_size:
        raise ValueError(
            f"{len(data)} training examples cannot fill one batch of --batch-size {cfg.batch_size}"
        )
    mult = max(1, min(cfg.bucket_mult, len(data) // cfg.batch_size))
    while True:
        order = list(range(len(data)))
        rng.shuffle(order)
        chunk = cfg.batch_size * mult
        for s in range(0, len(order) - chunk + 1, chunk):
            idx = sorted(order[s : s + chunk], key=lambda i: len(data[i].prompt) + len(data[i].target))
            groups = [idx[j : j + cfg.batch_size] for j in range(0, chunk, cfg.batch_size)]
            rng.shuffle(groups)
            for g in groups:
                yield [data[i] for i in g]
