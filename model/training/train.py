"""Train the embedded DiffusionGemma-architecture checkpoint on synthetic function-calling data.

Objective (uniform-noise block diffusion, the one the runtime samples from): the encoder reads the prompt
(plus any earlier target tokens) and builds the KV cache with gradients; the canvas is the next
``canvas_length`` target tokens (``<pad>`` after the end of the target); a fraction ``t ~ U(0, 1)`` of canvas
positions is replaced by uniform random tokens; the decoder predicts the clean canvas and the loss is
cross-entropy over the canvas (padding positions weighted by ``pad_weight``). On a fraction
``self_cond_p`` of the examples a first, detached decoder pass provides ``self_conditioning_logits``
(Chen et al. 2022, "Analog Bits", self-conditioning; DiffusionGemma's ``self_conditioning`` module).

Sources: transformers ``models/diffusion_gemma/modeling_diffusion_gemma.py`` (encoder/decoder split,
read-only cache, self-conditioning inputs); the uniform-noise discrete diffusion of Austin et al. 2021 (D3PM).
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from model import special_tokens as st


@dataclass
class TrainConfig:
    """All knobs of a training run (saved as ``train_config.json`` next to the checkpoints).

    Sizes are in tokens; times in minutes; ``lr`` is AdamW's peak learning rate. ``ar_weight``: weight of the
    autoregressive auxiliary loss through the encoder (see :func:`diffusion_loss`; keep ``max_prompt +
    canvas_length`` under ``sliding_window`` when it is on). ``terse_p``: share of training examples whose tool
    declarations lose their descriptions (shorter, cheaper prompts). ``drill_steps``: the first steps train on
    the copy drill only (:func:`model.training.data.copy_drill`: single-turn call examples with only the called
    tools, terse); ``max_minutes`` times the first 20 steps, so with a drill give ``steps`` instead (drill steps
    are faster). ``copy_weight``: extra loss weight on copied value tokens. ``space_tokens``: spaces as their
    own pre-tokens.

    Copy head (:mod:`model.copy_head`): ``copy_head`` builds ``DiffusionGemmaWithCopyHead`` and trains it with
    :func:`copy_diffusion_loss`; ``noise_draws`` decoder passes (each with its own noise level) share one
    encoder pass; ``prefix_clean_p``: share of (example, draw) pairs whose canvas keeps a clean prefix of random
    length and is mostly noise after it (``t ~ U(0.5, 1)`` there): the state the constraint's prefix commit
    leaves at inference, so the frontier token is learned from its left context; ``bind_weight``, ``key_weight``
    and ``ptr_weight`` weight the binding, parameter and pointer
    auxiliary losses, ``none_weight`` the "none" request tokens inside the binding loss. ``init_from``: a
    checkpoint folder whose weights (and tokenizer) start the run; weights it lacks (the copy head) start fresh.
    ``stop_at``: stop (and save) after this many steps while keeping the learning-rate schedule of ``steps``.
    ``bot_share``: share of the training stream in the example bots' domains (default: the generator's 16%).
    """

    out_dir: str = "runs/agentkit-tiny"
    final_dir: str | None = None
    seed: int = 0
    device: str = "cpu"
    threads: int = 1
    steps: int = 3000
    stop_at: int | None = None
    max_minutes: float | None = None
    batch_size: int = 16
    lr: float = 2e-3
    min_lr_ratio: float = 0.1
    warmup: int = 100
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    maskbench: str = ""
    n_train: int = 60000
    n_heldout: int = 512
    tokenizer_examples: int = 20000
    vocab_size: int = 8192
    hidden_size: int = 256
    intermediate_size: int = 768
    moe_intermediate_size: int = 256
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 64
    canvas_length: int = 64
    max_prompt: int = 512
    space_tokens: bool = False
    copy_weight: float = 0.0
    ar_weight: float = 0.0
    terse_p: float = 0.0
    drill_steps: int = 0
    copy_head: bool = False
    copy_dim: int = 64
    noise_draws: int = 1
    prefix_clean_p: float = 0.0
    bot_share: float | None = None
    bind_weight: float = 1.0
    key_weight: float = 0.5
    ptr_weight: float = 0.5
    none_weight: float = 0.3
    init_from: str = ""
    sliding_window: int = 256
    max_position_embeddings: int = 2048
    self_cond_p: float = 0.5
    pad_weight: float = 0.25
    ckpt_every: int = 250
    eval_every: int = 250
    log_every: int = 10
    bucket_mult: int = 32
    resume: bool = True


# --------------------------------------------------------------------------------------------------------------
# Model config
# --------------------------------------------------------------------------------------------------------------


def build_model_config(cfg: TrainConfig) -> Any:
    """``DiffusionGemmaConfig`` for the embedded checkpoint: :func:`model.config.small_config` sized by ``cfg``."""
    from model.config import small_config

    return small_config(
        cfg.vocab_size,
        cfg.hidden_size,
        cfg.num_layers,
        intermediate_size=cfg.intermediate_size,
        moe_intermediate_size=cfg.moe_intermediate_size,
        num_heads=cfg.num_heads,
        num_kv_heads=cfg.num_kv_heads,
        head_dim=cfg.head_dim,
        canvas_length=cfg.canvas_length,
        max_position_embeddings=cfg.max_position_embeddings,
        sliding_window=cfg.sliding_window,
    )


def build_model(cfg: TrainConfig, tok: Any) -> Any:
    """A fresh model for ``cfg``: ``DiffusionGemmaForBlockDiffusion``, or ``DiffusionGemmaWithCopyHead`` (its
    variant tables filled from ``tok``) with ``cfg.copy_head``; ``cfg.init_from`` weights loaded where names and
    shapes match.

    Raises:
        ValueError: if ``cfg.init_from`` has no ``model.safetensors`` or shares no weight with the model.
    """
    import transformers

    config = build_model_config(cfg)
    model: Any
    if cfg.copy_head:
        from model.copy_head import CopyHeadConfig
        from model.copy_model import DiffusionGemmaWithCopyHead

        system = tok("system", add_special_tokens=False)["input_ids"]
        config.copy_head = CopyHeadConfig(
            dim=cfg.copy_dim,
            free_dim=cfg.copy_dim // 2,
            turn_start_id=st.SPECIAL_IDS[st.TURN_START],
            turn_end_id=st.SPECIAL_IDS[st.TURN_END],
            excluded_role_ids=system[:1],
        ).to_dict()
        model = DiffusionGemmaWithCopyHead(config)
        model.copy_head.set_token_tables(tok)
    else:
        model = transformers.DiffusionGemmaForBlockDiffusion(config)
    if cfg.init_from:
        from safetensors.torch import load_file

        f = Path(cfg.init_from) / "model.safetensors"
        if not f.is_file():
            raise ValueError(f"--init-from {cfg.init_from}: no model.safetensors there")
        own = model.state_dict()
        src = {k: v for k, v in load_file(str(f)).items() if k in own and own[k].shape == v.shape}
        if not src:
            raise ValueError(f"--init-from {cfg.init_from}: no weight matches this model's names and shapes")
        model.load_state_dict(src, strict=False)
        model.tie_weights()
    return model


#: Denoising settings shipped in ``generation_config.json`` (tuned on the held-out split; see docs/TRAINING.md).
GENERATION_DEFAULTS: dict[str, Any] = {
    "max_denoising_steps": 32,
    "entropy_bound": 0.1,
    "t_max": 0.1,
    "t_min": 0.02,
    "stability_threshold": 1,
    "confidence_threshold": 0.005,
}


def generation_config(canvas_length: int, overrides: dict[str, Any] | None = None) -> Any:
    """``DiffusionGemmaGenerationConfig`` with the project's EOS ids ``[<eos>, <turn|>, <|tool_response>]``."""
    from transformers.models.diffusion_gemma.generation_diffusion_gemma import (
        DiffusionGemmaGenerationConfig,
        EntropyBoundSamplerConfig,
    )

    g = {**GENERATION_DEFAULTS, **(overrides or {})}
    return DiffusionGemmaGenerationConfig(
        max_new_tokens=canvas_length * 4,
        max_denoising_steps=int(g["max_denoising_steps"]),
        sampler_config=EntropyBoundSamplerConfig(entropy_bound=float(g["entropy_bound"])),
        t_max=float(g["t_max"]),
        t_min=float(g["t_min"]),
        stability_threshold=int(g["stability_threshold"]),
        confidence_threshold=float(g["confidence_threshold"]),
        eos_token_id=list(st.GENERATION_EOS_IDS),
        pad_token_id=st.PAD_ID,
        bos_token_id=st.BOS_ID,
    )


# --------------------------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------------------------


@dataclass
class Encoded:
    """Token ids of one example: ``prompt`` (rendered chat prompt) and ``target`` (model continuation).

    ``decl_pos``, ``bind``, ``key``, ``ptr``: the copy head's binding labels (:mod:`model.training.labels`; empty
    without the copy head).

    ``copied[i]`` is True where ``target[i]`` is a word-like token (letters or digits) that occurs in the prompt
    after the system turn (the request, earlier calls, tool responses) but not in the system turn (tool names,
    keys and descriptions, which the schema constraint forces anyway): a value the model must copy.
    """

    prompt: list[int]
    target: list[int]
    copied: list[bool] = dataclasses.field(default_factory=list)
    decl_pos: list[int] = dataclasses.field(default_factory=list)
    bind: list[int] = dataclasses.field(default_factory=list)
    key: list[int] = dataclasses.field(default_factory=list)
    ptr: list[bool] = dataclasses.field(default_factory=list)


def word_token_table(tok: Any) -> list[bool]:
    """``table[id]`` is True when token ``id`` decodes to text with a letter or digit (not a control token)."""
    n = len(tok)
    table = [False] * n
    for i in range(len(st.SPECIAL_TOKENS), n):
        table[i] = any(ch.isalnum() for ch in tok.decode([i]))
    return table


def encode_labelled(tok: Any, examples: list[Any], word_table: list[bool]) -> list[Encoded]:
    """Tokenize examples with the copy head's binding labels (:func:`model.training.labels.example_labels`)."""
    from model.training.labels import example_labels

    out = []
    for e in examples:
        lab = example_labels(tok, e, word_table)
        out.append(Encoded(lab.prompt, lab.target, [], lab.decl_pos, lab.bind, lab.key, lab.ptr))
    return out


def encode_examples(tok: Any, examples: list[Any], word_table: list[bool] | None = None) -> list[Encoded]:
    """Tokenize examples (prompt and target separately, as at inference). ``tok``: PreTrainedTokenizerFast.

    With ``word_table`` (from :func:`word_token_table`) each example also gets its ``copied`` flags.
    """
    from model.training.data import render_prompt

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


def make_batch(
    items: list[Encoded],
    canvas_length: int,
    max_prompt: int,
    rng: random.Random,
    *,
    pad_weight: float = 0.25,
    copy_weight: float = 0.0,
) -> dict[str, Any]:
    """Collate examples into left-padded tensors.

    For a target longer than one canvas a canvas-aligned window is drawn uniformly and the earlier target
    tokens are appended to the prompt. Prompts longer than ``max_prompt`` keep their last ``max_prompt`` tokens.

    Returns:
        dict with ``input_ids`` [B, P] int64, ``attention_mask`` [B, P] int64 (0 on left padding),
        ``canvas`` [B, C] int64 (clean targets, ``<pad>`` after the end), ``is_target`` [B, C] bool,
        ``weight`` [B, C] float32 (loss weight: ``pad_weight`` after the end of the target, ``1 + copy_weight``
        on copied tokens, 1 elsewhere) and, when the items carry binding labels, ``decl_pos`` [B, K] int64,
        ``decl_valid`` [B, K] bool, ``bind`` [B, P] int64 (-100: no label), ``key`` [B, C] int64 (-100: no
        label) and ``ptr`` [B, C] bool (see :mod:`model.training.labels`).
    """
    import torch

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
        weights.append([1.0 + copy_weight * f for f in cp] + [pad_weight] * (C - len(c)))
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
        B = len(items)
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
            # labels that point at a declaration cut off by the prompt cap are dropped
            lost = [j for j, q in enumerate(d) if q < 0]
            if lost:
                lost_t = torch.tensor(lost)
                bind[i][torch.isin(bind[i] - 1, lost_t)] = -100
                key[i][torch.isin(key[i], lost_t)] = -100
        out.update(
            decl_pos=decl_pos,
            decl_valid=decl_valid,
            bind=bind,
            key=key,
            ptr=torch.tensor(ptrs, dtype=torch.bool),
        )
    return out


def device_batch(items: list[Encoded], cfg: TrainConfig, rng: random.Random, device: str) -> dict[str, Any]:
    """:func:`make_batch` with ``cfg``'s canvas, prompt cap and loss weights, tensors moved to ``device``."""
    b = make_batch(
        items, cfg.canvas_length, cfg.max_prompt, rng, pad_weight=cfg.pad_weight, copy_weight=cfg.copy_weight
    )
    return {k: v.to(device) for k, v in b.items()}


def batches(data: list[Encoded], cfg: TrainConfig, rng: random.Random) -> Any:
    """Endless iterator of length-bucketed batches (lists of :class:`Encoded`)."""
    while True:
        order = list(range(len(data)))
        rng.shuffle(order)
        chunk = cfg.batch_size * cfg.bucket_mult
        for s in range(0, len(order) - chunk + 1, chunk):
            idx = sorted(order[s : s + chunk], key=lambda i: len(data[i].prompt) + len(data[i].target))
            groups = [idx[j : j + cfg.batch_size] for j in range(0, chunk, cfg.batch_size)]
            rng.shuffle(groups)
            for g in groups:
                yield [data[i] for i in g]


# --------------------------------------------------------------------------------------------------------------
# Loss
# --------------------------------------------------------------------------------------------------------------


def ar_readout(model: Any, ids: Any, attn: Any, canvas: Any) -> tuple[Any, Any]:
    """The encoder (causal) over the prompt followed by the clean canvas, read out as next-token logits.

    Args:
        model: ``DiffusionGemmaForBlockDiffusion``.
        ids, attn: prompt ``input_ids`` / ``attention_mask`` [B, P] int64 (left-padded).
        canvas: clean canvas tokens [B, C] int64.

    Returns:
        ``(encoder_output, logits)``: the encoder output (its ``cache`` holds P + C positions) and float32
        logits [B, C, V] predicting ``canvas[:, j]`` from position ``P - 1 + j`` through the tied LM head with the
        model's final logit soft-capping.
    """
    import torch

    P, C = ids.shape[1], canvas.shape[1]
    enc = model.model.encoder(
        input_ids=torch.cat([ids, canvas], 1), attention_mask=torch.cat([attn, torch.ones_like(canvas)], 1)
    )
    logits = model.lm_head(enc.last_hidden_state[:, P - 1 : P + C - 1]).float()
    cap = model.final_logit_softcapping
    if cap:
        logits = torch.tanh(logits / cap) * cap
    return enc, logits


def diffusion_loss(
    model: Any,
    batch: dict[str, Any],
    *,
    vocab_size: int,
    self_cond_p: float,
    pad_weight: float,
    generator: Any,
    t: Any = None,
    ar_weight: float = 0.0,
) -> tuple[Any, dict[str, float]]:
    """Uniform-noise diffusion loss of one batch, plus an optional autoregressive auxiliary loss.

    With ``ar_weight > 0`` the encoder (causal) reads the prompt followed by the clean canvas [B, P + C]; its
    hidden states at positions ``P - 1 .. P + C - 2`` predict the canvas tokens through the tied LM head
    (next-token cross-entropy, same per-position weights) and the loss is ``diffusion + ar_weight * ar``.
    The canvas part of the KV cache is hidden from the decoder by ``decoder_attention_mask`` and the decoder's
    positions are ``P .. P + C - 1``, so the decoder sees exactly what it sees without the auxiliary loss as long
    as ``P + C`` fits the sliding window. Encoder and decoder share their weights (DiffusionGemma ties them),
    so this trains the same layers to find and copy a span from the prompt, the way the real checkpoint starts
    from an autoregressive Gemma (DiffusionGemma model card; "Dream 7B", Ye et al. 2025, AR initialisation).

    Args:
        model: ``DiffusionGemmaForBlockDiffusion``.
        batch: from :func:`make_batch` (tensors already on the model's device); its ``weight`` [B, C], when
            present, weights the cross-entropy per position (else ``pad_weight`` after the end, 1 elsewhere).
        vocab_size: noise tokens are drawn uniformly from ``[0, vocab_size)``.
        self_cond_p: probability per example of a detached self-conditioning pass.
        pad_weight: loss weight of canvas positions after the end of the target (without ``weight``).
        generator: ``torch.Generator`` on the batch's device (noise draws).
        t: optional [B] float tensor of noise levels (default ``U(0, 1)``).
        ar_weight: weight of the autoregressive auxiliary loss (0: off, one encoder pass over the prompt only).

    Returns:
        ``(loss, stats)``: scalar loss tensor (weighted mean cross-entropy, nats) and floats
        ``acc_noised`` (argmax accuracy on corrupted target positions), ``t_mean`` and, with the auxiliary
        loss, ``ar_loss`` (nats) and ``ar_acc`` (next-token accuracy on target positions).
    """
    import torch
    import torch.nn.functional as F

    ids, attn, canvas, is_target = (
        batch["input_ids"],
        batch["attention_mask"],
        batch["canvas"],
        batch["is_target"],
    )
    B, C = canvas.shape
    dev = canvas.device
    if t is None:
        t = torch.rand(B, device=dev, generator=generator)
    corrupt = torch.rand(B, C, device=dev, generator=generator) < t[:, None]
    noise = torch.randint(0, vocab_size, (B, C), device=dev, generator=generator)
    noised = torch.where(corrupt, noise, canvas)
    ones = torch.ones(B, C, dtype=attn.dtype, device=dev)
    w = batch.get("weight")
    if w is None:
        w = torch.where(is_target, torch.ones(B, C, device=dev), torch.full((B, C), pad_weight, device=dev))
    stats: dict[str, float] = {}
    ar_loss = None
    dec_pos = None
    if ar_weight > 0:
        P = ids.shape[1]
        enc, ar_logits = ar_readout(model, ids, attn, canvas)
        dec_mask = torch.cat([attn, torch.zeros_like(ones), ones], dim=1)
        dec_pos = torch.arange(P, P + C, device=dev)[None, :]
        ar_ce = F.cross_entropy(
            ar_logits.reshape(-1, ar_logits.shape[-1]), canvas.reshape(-1), reduction="none"
        )
        ar_loss = (ar_ce.view(B, C) * w).sum() / w.sum()
        with torch.no_grad():
            hit = (ar_logits.argmax(-1) == canvas) & is_target
            stats["ar_loss"] = float(ar_loss)
            stats["ar_acc"] = float(hit.sum().float() / is_target.sum().clamp(min=1))
    else:
        dec_mask = torch.cat([attn, ones], dim=1)
        enc = model.model.encoder(input_ids=ids, attention_mask=attn)
    cache = enc.cache

    def decode(sc_logits: Any = None, sc_mask: Any = None) -> Any:
        out = model(
            cache=cache,
            decoder_input_ids=noised,
            decoder_attention_mask=dec_mask,
            decoder_position_ids=dec_pos,
            self_conditioning_logits=sc_logits,
            self_conditioning_mask=sc_mask,
        )
        return out.logits

    sc_mask = torch.rand(B, device=dev, generator=generator) < self_cond_p
    if bool(sc_mask.any()):
        with torch.no_grad():
            first = decode().detach()
        logits = decode(first, sc_mask)
    else:
        logits = decode()
    ce = F.cross_entropy(
        logits.float().reshape(-1, logits.shape[-1]), canvas.reshape(-1), reduction="none"
    ).view(B, C)
    loss = (ce * w).sum() / w.sum()
    with torch.no_grad():
        sel = corrupt & is_target
        acc = ((logits.argmax(-1) == canvas) & sel).sum().float() / sel.sum().clamp(min=1)
    if ar_loss is not None:
        loss = loss + ar_weight * ar_loss
    return loss, {"acc_noised": float(acc), "t_mean": float(t.mean()), **stats}


def copy_diffusion_loss(
    model: Any,
    batch: dict[str, Any],
    cfg: TrainConfig,
    *,
    generator: Any,
    t: Any = None,
    draws: int | None = None,
    self_cond_p: float | None = None,
    with_stats: bool = True,
    encoded: tuple[Any, Any] | None = None,
) -> tuple[Any, dict[str, float]]:
    """Loss of a ``DiffusionGemmaWithCopyHead`` on one batch (see :mod:`model.copy_head`).

    One encoder pass over the prompt builds the KV cache and the copy memory; then ``draws`` decoder passes,
    each with its own noise level ``t ~ U(0, 1)`` and uniform-noise canvas (with probability ``self_cond_p``
    per draw, a detached self-conditioning pass for the whole batch whose logits are the full log-mixture, as at
    inference).
    Per draw: the mixture's negative log-likelihood of the clean canvas (weighted as in
    :func:`diffusion_loss`), plus ``ptr_weight x`` the pointer's NLL at ``ptr`` positions whose token occurs
    among the copyable sources, plus ``key_weight x`` a cross-entropy of each value position's query against
    the declared parameters' states. Once per batch: ``bind_weight x`` the binding cross-entropy of every
    request token's key over ``["none", parameter_1..K]`` (``none_weight`` on "none" tokens).

    Args:
        model: ``model.copy_model.DiffusionGemmaWithCopyHead``.
        batch: from :func:`make_batch` with binding labels, on the model's device.
        cfg: the run's :class:`TrainConfig` (weights, vocabulary, pad weight).
        generator: ``torch.Generator`` on the batch's device.
        t: optional [B] float noise levels (then every draw uses them).
        draws: decoder passes per encoder pass (default ``cfg.noise_draws``).
        self_cond_p: default ``cfg.self_cond_p``.
        with_stats: compute the accuracy statistics (one more full-vocabulary mixture per draw).
        encoded: ``(cache, last_hidden_state [B, P, H])`` of the prompt, already encoded (a frozen encoder over
            a shared prefix, :mod:`model.training.specialize`); the batch then also carries
            ``decoder_position_ids`` [B, C] (each row's canvas positions). ``None``: the encoder runs here.

    Returns:
        ``(loss, stats)``: scalar loss (nats) and floats ``acc_noised``, ``copy_acc`` (argmax accuracy on
        corrupted ``ptr`` positions), ``mix_nll``, ``ptr_nll``, ``key_acc``, ``bind_loss``, ``bind_acc``
        (accuracy on bound request tokens), ``gate`` (mean copy weight at ``ptr`` positions), ``t_mean``.
    """
    import torch
    import torch.nn.functional as F

    head = model.copy_head
    ids, attn, canvas, is_target = (
        batch["input_ids"],
        batch["attention_mask"],
        batch["canvas"],
        batch["is_target"],
    )
    B, C = canvas.shape
    dev = canvas.device
    draws = draws or cfg.noise_draws
    sc_p = cfg.self_cond_p if self_cond_p is None else self_cond_p
    V = cfg.vocab_size
    if encoded is None:
        enc = model.model.encoder(input_ids=ids, attention_mask=attn)
        cache, E = enc.cache, enc.last_hidden_state
    else:
        cache, E = encoded
    dec_pos = batch.get("decoder_position_ids")
    mem = head.new_memory(ids, E, attn)
    H = E.shape[-1]
    decl = E.gather(1, batch["decl_pos"][..., None].expand(-1, -1, H))  # [B, K, H]
    valid = batch["decl_valid"]
    bind_logits = head.binding_logits(mem.keys, decl)  # [B, P, 1 + K]
    bind_logits[..., 1:] = bind_logits[..., 1:].masked_fill(~valid[:, None, :], float("-inf"))
    bl = batch["bind"]
    has_b = bl >= 0
    stats: dict[str, float] = {}
    loss = torch.zeros((), device=dev)
    if bool(has_b.any()):
        ce_b = F.cross_entropy(bind_logits[has_b], bl[has_b], reduction="none")
        wb = torch.where(bl[has_b] == 0, cfg.none_weight, 1.0)
        bind_loss = (ce_b * wb).sum() / wb.sum()
        loss = loss + cfg.bind_weight * bind_loss
        with torch.no_grad():
            pos = has_b & (bl > 0)
            stats["bind_loss"] = float(bind_loss)
            stats["bind_acc"] = float(
                (bind_logits.argmax(-1)[pos] == bl[pos]).float().mean() if bool(pos.any()) else 0.0
            )
    z = head.decl_proj(decl).float()  # [B, K, dim]
    w = batch["weight"]
    ones = torch.ones(B, C, dtype=attn.dtype, device=dev)
    dec_mask = torch.cat([attn, ones], dim=1)
    kl, pl = batch["key"], batch["ptr"]
    copyable_tgt = (
        (head.base_ids[mem.ids][:, None, :] == head.base_ids[canvas][:, :, None]) & mem.mask[:, None, :]
    ).any(-1)
    ptr_sel = pl & is_target & copyable_tgt
    acc_hits = acc_n = copy_hits = copy_n = 0.0
    sums = {"mix_nll": 0.0, "ptr_nll": 0.0, "key_acc": 0.0, "gate": 0.0, "t_mean": 0.0}
    for _ in range(draws):
        tt = t if t is not None else torch.rand(B, device=dev, generator=generator)
        corrupt = torch.rand(B, C, device=dev, generator=generator) < tt[:, None]
        if t is None and cfg.prefix_clean_p > 0:
            # the state prefix commit leaves at inference: a clean prefix (committed), then mostly noise
            pick = torch.rand(B, device=dev, generator=generator) < cfg.prefix_clean_p
            n_real = is_target.sum(dim=1).clamp(min=1)
            k = (torch.rand(B, device=dev, generator=generator) * (n_real + 1).float()).long()
            right = torch.arange(C, device=dev)[None, :] >= k[:, None]
            t_right = 0.5 + 0.5 * torch.rand(B, device=dev, generator=generator)
            pref = right & (torch.rand(B, C, device=dev, generator=generator) < t_right[:, None])
            corrupt = torch.where(pick[:, None], pref, corrupt)
            tt = torch.where(pick, t_right, tt)
        noise = torch.randint(0, V, (B, C), device=dev, generator=generator)
        noised = torch.where(corrupt, noise, canvas)
        use_sc = float(torch.rand(1, device=dev, generator=generator)) < sc_p
        sc_logits = None
        if use_sc:
            with torch.no_grad():
                sc_logits = model(
                    cache=cache,
                    decoder_input_ids=noised,
                    decoder_attention_mask=dec_mask,
                    decoder_position_ids=dec_pos,
                    copy_memory=mem,
                ).logits.detach()
        out = model.model(
            cache=cache,
            decoder_input_ids=noised,
            decoder_attention_mask=dec_mask,
            decoder_position_ids=dec_pos,
            self_conditioning_logits=sc_logits,
        )
        h = out.last_hidden_state
        vocab_logits = model.lm_head(h).float()
        cap = model.final_logit_softcapping
        if cap:
            vocab_logits = torch.tanh(vocab_logits / cap) * cap
        ptr = head.pointer(h, noised, mem)
        log_mix, log_ptr = head.target_logprob(vocab_logits, ptr, mem, canvas)
        mix_nll = -(log_mix * w).sum() / w.sum()
        loss = loss + mix_nll / draws
        sums["mix_nll"] += float(mix_nll.detach()) / draws
        if bool(ptr_sel.any()):
            ptr_nll = -log_ptr[ptr_sel].mean()
            loss = loss + cfg.ptr_weight * ptr_nll / draws
            sums["ptr_nll"] += float(ptr_nll.detach()) / draws
        has_k = kl >= 0
        if bool(has_k.any()):
            qb = ptr["query"][..., : head.cfg.dim].float()
            kl_logits = torch.einsum("bcd,bkd->bck", qb, z) / math.sqrt(head.cfg.dim)
            kl_logits = kl_logits.masked_fill(~valid[:, None, :], float("-inf"))
            key_loss = F.cross_entropy(kl_logits[has_k], kl[has_k])
            loss = loss + cfg.key_weight * key_loss / draws
            with torch.no_grad():
                sums["key_acc"] += float((kl_logits.argmax(-1)[has_k] == kl[has_k]).float().mean()) / draws
        if not with_stats:
            continue
        with torch.no_grad():
            full = head.mixture_logits(vocab_logits, ptr, mem)
            hit = full.argmax(-1) == canvas
            sel = corrupt & is_target
            acc_hits += float((hit & sel).sum())
            acc_n += float(sel.sum())
            csel = sel & ptr_sel
            copy_hits += float((hit & csel).sum())
            copy_n += float(csel.sum())
            if bool(ptr_sel.any()):
                sums["gate"] += float(ptr["log_copy_gate"][ptr_sel].exp().mean()) / draws
            sums["t_mean"] += float(tt.mean()) / draws
    stats.update(sums)
    stats["acc_noised"] = acc_hits / max(1.0, acc_n)
    stats["copy_acc"] = copy_hits / max(1.0, copy_n)
    return loss, stats


# --------------------------------------------------------------------------------------------------------------
# Checkpointing
# --------------------------------------------------------------------------------------------------------------


def save_checkpoint(
    model: Any, tok: Any, out: Path, cfg: TrainConfig, gen_overrides: dict[str, Any] | None = None
) -> None:
    """Write an offline-loadable checkpoint folder: safetensors + config + generation_config + tokenizer +
    the image processor config (``processor_config.json``)."""
    from model.vision import write_processor_config

    out.mkdir(parents=True, exist_ok=True)
    model.generation_config = generation_config(cfg.canvas_length, gen_overrides)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    write_processor_config(out, model.config)


def _save_state(
    path: Path, optimizer: Any, step: int, total: int, rng: random.Random, gen: Any, extra: dict[str, Any]
) -> None:
    import torch

    path.mkdir(parents=True, exist_ok=True)
    torch.save(
        {
            "optimizer": optimizer.state_dict(),
            "step": step,
            "total_steps": total,
            "py_rng": rng.getstate(),
            "torch_rng": torch.get_rng_state(),
            "noise_rng": gen.get_state(),
            "extra": extra,
        },
        path / "trainer_state.pt",
    )


# --------------------------------------------------------------------------------------------------------------
# Evaluation helpers
# --------------------------------------------------------------------------------------------------------------


def heldout_loss(
    model: Any, data: list[Encoded], cfg: TrainConfig, device: str, autocast: Any
) -> dict[str, float]:
    """Mean loss on the held-out split at fixed noise levels (t = 0.25, 0.5, 1.0) and one-pass accuracy from
    pure noise (fraction of target tokens the first decoder pass gets right; ``acc_t1``)."""
    import torch

    model.eval()
    rng = random.Random(1234)
    out: dict[str, list[float]] = {"loss": [], "acc_t1": []}
    with torch.no_grad():
        for s in range(0, len(data), cfg.batch_size):
            items = data[s : s + cfg.batch_size]
            b = device_batch(items, cfg, rng, device)
            g = torch.Generator(device=device).manual_seed(s)
            for tv in (0.25, 0.5, 1.0):
                t = torch.full((len(items),), tv, device=device)
                with autocast():
                    if cfg.copy_head:
                        loss, stats = copy_diffusion_loss(
                            model, b, cfg, generator=g, t=t, draws=1, self_cond_p=0.0
                        )
                        loss = torch.tensor(stats["mix_nll"])
                    else:
                        loss, stats = diffusion_loss(
                            model,
                            b,
                            vocab_size=cfg.vocab_size,
                            self_cond_p=0.0,
                            pad_weight=cfg.pad_weight,
                            generator=g,
                            t=t,
                        )
                out["loss"].append(float(loss))
                if tv == 0.25 and cfg.copy_head:
                    out.setdefault("copy_t025", []).append(stats["copy_acc"])
                if tv == 1.0:
                    out["acc_t1"].append(stats["acc_noised"])
    model.train()
    return {k: sum(v) / max(1, len(v)) for k, v in out.items()}


# --------------------------------------------------------------------------------------------------------------
# Main loop
# --------------------------------------------------------------------------------------------------------------


def _lr_at(step: int, total: int, cfg: TrainConfig) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    frac = min(1.0, (step - cfg.warmup) / max(1, total - cfg.warmup))
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * frac)))


def prepare(cfg: TrainConfig, log: Any = print) -> tuple[Any, list[Encoded], list[Encoded], list[Encoded]]:
    """Generate the synthetic data, train (or load) the tokenizer and encode both splits.

    Returns:
        ``(tokenizer, train_encoded, heldout_encoded, drill_encoded)`` (the last empty without ``drill_steps``).
    """
    from transformers import AutoTokenizer

    from model.tokenizer import build_tokenizer
    from model.training.data import (
        DEFAULT_MASKBENCH,
        Generator,
        copy_drill,
        corpus_texts,
        strip_descriptions,
    )

    out = Path(cfg.out_dir)
    t0 = time.time()
    mb = Path(cfg.maskbench) if cfg.maskbench else DEFAULT_MASKBENCH
    if not mb.exists():
        log(
            f"[yellow]warning: {mb} not found: training without the Glaive schemas (generated + bot tools only)"
        )
    train_ex = Generator(cfg.seed, "train", mb, bot_share=cfg.bot_share).take(cfg.n_train)
    if cfg.terse_p > 0:  # a seeded share of the examples gets declarations without descriptions
        pick = random.Random(cfg.seed + 3)
        for e in train_ex:
            if e.tools and pick.random() < cfg.terse_p:
                e.tools = strip_descriptions(e.tools)
    held_ex = Generator(cfg.seed, "heldout", mb).take(cfg.n_heldout)
    tok_dir = out / "tokenizer"
    if cfg.init_from and not (tok_dir / "tokenizer.json").exists():
        AutoTokenizer.from_pretrained(cfg.init_from).save_pretrained(tok_dir)
    if (tok_dir / "tokenizer.json").exists():
        tok = AutoTokenizer.from_pretrained(tok_dir)
        from model.tokenizer import chat_template

        tok.chat_template = chat_template()
    else:
        tok = build_tokenizer(
            corpus_texts(train_ex[: cfg.tokenizer_examples]),
            vocab_size=cfg.vocab_size,
            space_tokens=cfg.space_tokens,
        )
        tok.save_pretrained(tok_dir)
    if cfg.copy_head:
        words = word_token_table(tok)
        train = encode_labelled(tok, train_ex, words)
        held = encode_labelled(tok, held_ex, words)
    else:
        table = word_token_table(tok) if cfg.copy_weight else None  # copied flags only matter when weighted
        train = encode_examples(tok, train_ex, table)
        held = encode_examples(tok, held_ex, table)
    drill: list[Encoded] = []
    if cfg.drill_steps > 0:
        short = [d for d in (copy_drill(e) for e in train_ex) if d is not None]
        drill = (
            encode_labelled(tok, short, word_token_table(tok))
            if cfg.copy_head
            else encode_examples(tok, short, word_token_table(tok) if cfg.copy_weight else None)
        )
        log(
            f"copy drill: {len(drill)} examples, prompt tokens p50 {sorted(len(e.prompt) for e in drill)[len(drill) // 2]}"
        )
    plen = sorted(len(e.prompt) for e in train)
    tlen = sorted(len(e.target) for e in train)
    log(
        f"data: {len(train)} train / {len(held)} held-out examples in {time.time() - t0:.1f}s; vocab {len(tok)}; "
        f"prompt tokens p50 {plen[len(plen) // 2]} p95 {plen[int(len(plen) * 0.95)]}; "
        f"target tokens p50 {tlen[len(tlen) // 2]} p95 {tlen[int(len(tlen) * 0.95)]}"
    )
    return tok, train, held, drill


def train(cfg: TrainConfig) -> Path:
    """Run (or resume) training; returns the folder of the final checkpoint.

    Writes ``cfg.out_dir/{tokenizer,checkpoint,final}``, ``train_config.json`` and ``log.jsonl`` (one JSON object
    per logged step: step, loss, lr, tokens/s, held-out figures). Stops at ``cfg.steps`` or when
    ``cfg.max_minutes`` have passed (the cosine schedule is shortened to fit once the step time is known).

    Raises:
        ValueError: on an unusable device string, or ``ar_weight > 0`` with ``max_prompt + canvas_length`` not
            below ``sliding_window``.
    """
    import contextlib

    import torch
    import transformers
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    DiffusionGemmaForBlockDiffusion: Any = transformers.DiffusionGemmaForBlockDiffusion
    console = Console()
    if cfg.ar_weight > 0 and cfg.max_prompt + cfg.canvas_length >= cfg.sliding_window:
        raise ValueError(
            f"--ar-weight needs --max-prompt + the canvas ({cfg.max_prompt} + {cfg.canvas_length}) below "
            f"--sliding-window ({cfg.sliding_window}): the decoder's sliding layers would lose prompt tokens"
        )
    torch.set_num_threads(cfg.threads)
    device = cfg.device
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError("--device cuda requested but torch.cuda.is_available() is False")
    use_bf16 = device.startswith("cuda")
    if use_bf16:
        torch.backends.cuda.matmul.allow_tf32 = True

    def autocast() -> Any:
        return torch.autocast("cuda", dtype=torch.bfloat16) if use_bf16 else contextlib.nullcontext()

    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "train_config.json").write_text(json.dumps(dataclasses.asdict(cfg), indent=2))
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    tok, train_data, held_data, drill_data = prepare(cfg, log=console.print)

    ckpt = out / "checkpoint"
    step, total = 0, cfg.steps
    rng = random.Random(cfg.seed + 1)
    gen = torch.Generator(device=device).manual_seed(cfg.seed + 2)
    if cfg.resume and (ckpt / "trainer_state.pt").exists():
        cls: Any = DiffusionGemmaForBlockDiffusion
        if cfg.copy_head:
            from model.copy_model import DiffusionGemmaWithCopyHead

            cls = DiffusionGemmaWithCopyHead
        model = cls.from_pretrained(ckpt, local_files_only=True).to(device)
        state = torch.load(ckpt / "trainer_state.pt", weights_only=False)
        step, total = int(state["step"]), int(state["total_steps"])
        if cfg.max_minutes is None:  # an explicit --steps beyond the saved schedule extends it
            total = max(total, cfg.steps)
        rng.setstate(state["py_rng"])
        torch.set_rng_state(state["torch_rng"])
        gen.set_state(state["noise_rng"])
        console.print(f"resumed from {ckpt} at step {step}/{total}")
    else:
        state = None
        model = build_model(cfg, tok).to(device)
    model.train()
    n_params = sum(p.numel() for p in model.parameters())
    console.print(f"model: {n_params / 1e6:.2f}M parameters (tied embeddings counted once), device {device}")
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg.lr,
        betas=(0.9, 0.98),
        eps=1e-8,
    )
    if state is not None:
        opt.load_state_dict(state["optimizer"])
    stream = batches(train_data, cfg, rng)  # a resumed run continues from the restored RNG state
    drill_stream = batches(drill_data or train_data, cfg, rng)
    log_f = (out / "log.jsonl").open("a")
    t_start = time.time()
    ema: float | None = None
    toks_window, time_window = 0, 0.0
    schedule_fixed = cfg.max_minutes is None or state is not None
    cols = (
        TextColumn("[bold]train"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TextColumn("loss {task.fields[loss]:.3f}"),
        TextColumn("{task.fields[tps]:.0f} tok/s"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*cols, console=console, transient=False) as prog:
        task = prog.add_task("train", total=total, completed=step, loss=float("nan"), tps=0.0)
        while step < total and (cfg.stop_at is None or step < cfg.stop_at):
            t0 = time.time()
            items = next(drill_stream if step < cfg.drill_steps else stream)
            batch = device_batch(items, cfg, rng, device)
            lr = _lr_at(step, total, cfg)
            for g in opt.param_groups:
                g["lr"] = lr
            with autocast():
                if cfg.copy_head:
                    loss, stats = copy_diffusion_loss(
                        model, batch, cfg, generator=gen, with_stats=(step + 1) % cfg.log_every == 0
                    )
                else:
                    loss, stats = diffusion_loss(
                        model,
                        batch,
                        vocab_size=cfg.vocab_size,
                        self_cond_p=cfg.self_cond_p,
                        pad_weight=cfg.pad_weight,
                        generator=gen,
                        ar_weight=cfg.ar_weight,
                    )
            opt.zero_grad(set_to_none=True)
            loss.backward()
            gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            opt.step()
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            dt = time.time() - t0
            step += 1
            ntok = int(batch["attention_mask"].sum()) + batch["canvas"].numel()
            toks_window += ntok
            time_window += dt
            lv = loss.item()
            ema = lv if ema is None else 0.95 * ema + 0.05 * lv
            if not schedule_fixed and step == 20 and cfg.max_minutes is not None:
                per_step = (time.time() - t_start) / 20
                budget = cfg.max_minutes * 60 - (time.time() - t_start) - 60  # keep a minute for saving
                total = min(total, step + max(1, int(budget / per_step)))
                schedule_fixed = True
                prog.update(task, total=total)
                console.print(f"{per_step:.2f} s/step -> {total} steps fit in {cfg.max_minutes} min")
            prog.update(task, completed=step, loss=ema, tps=toks_window / max(time_window, 1e-9))
            rec: dict[str, Any] = {}
            if step % cfg.log_every == 0 or step == total:
                rec = {
                    "step": step,
                    "loss": lv,
                    "loss_ema": ema,
                    "lr": lr,
                    "grad_norm": float(gnorm),
                    "tok_per_s": toks_window / max(time_window, 1e-9),
                    "s_per_step": time_window / cfg.log_every,
                    "elapsed_s": time.time() - t_start,
                    **stats,
                }
                toks_window, time_window = 0, 0.0
            if step % cfg.eval_every == 0 or step == total:
                h = heldout_loss(model, held_data[:128], cfg, device, autocast)
                rec.update({"step": step, "heldout_loss": h["loss"], "heldout_acc_t1": h["acc_t1"]})
                extra = ""
                if "copy_t025" in h:
                    rec["heldout_copy_t025"] = h["copy_t025"]
                    extra = f" copied-token acc t=0.25 {h['copy_t025']:.3f}"
                console.print(
                    f"step {step}: loss(ema) {ema:.3f} held-out loss {h['loss']:.3f} one-pass acc {h['acc_t1']:.3f}{extra}"
                )
            if rec:
                log_f.write(json.dumps(rec) + "\n")
                log_f.flush()
            if step % cfg.ckpt_every == 0 or step == total or step == cfg.stop_at:
                save_checkpoint(model, tok, ckpt, cfg)
                _save_state(ckpt, opt, step, total, rng, gen, {"loss_ema": ema})
    log_f.close()
    final = Path(cfg.final_dir) if cfg.final_dir else out / "final"
    model.eval()
    save_checkpoint(model.to("cpu").float(), tok, final, cfg)
    console.print(f"final checkpoint: {final} ({time.time() - t_start:.0f}s this session)")
    return final
