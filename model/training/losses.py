"""Training losses: the uniform-noise block-diffusion loss (with self-conditioning), the copy head's mixture
loss with binding supervision, and the autoregressive read-out of a canvas.

Sources: transformers ``models/diffusion_gemma/modeling_diffusion_gemma.py``; Austin et al. 2021 (D3PM); See
et al. 2017 (pointer-generator) for the copy mixture.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch
import torch.nn.functional as F

from model.heads.copy_model import softcap
from model.training.settings import TrainConfig


def ar_readout(model: Any, ids: Any, attn: Any, canvas: Any) -> tuple[Any, Any]:
    """The causal encoder over prompt ``ids``/``attn`` [B, P] (left-padded) + clean ``canvas`` [B, C]:
    ``(encoder output, its cache holding P + C positions; soft-capped float32 logits [B, C, V] predicting
    canvas[:, j] from position P - 1 + j through the tied LM head)``."""
    P, C = ids.shape[1], canvas.shape[1]
    enc = model.model.encoder(
        input_ids=torch.cat([ids, canvas], 1), attention_mask=torch.cat([attn, torch.ones_like(canvas)], 1)
    )
    return enc, softcap(
        model.lm_head(enc.last_hidden_state[:, P - 1 : P + C - 1]), model.final_logit_softcapping
    )


def _encode(
    model: Any,
    ids: Any,
    attn: Any,
    canvas: Any,
    w: Any,
    is_target: Any,
    with_ar: bool,
    stats: dict[str, float],
) -> tuple[Any, Any, Any, Any]:
    """``(encoder output, ar_loss or None, decoder mask, decoder positions or None)`` of :func:`diffusion_loss`'s
    encoder pass (with the AR loss, the canvas is encoded too and masked from the decoder)."""
    B, C = canvas.shape
    ones = torch.ones(B, C, dtype=attn.dtype, device=canvas.device)
    if not with_ar:
        return (
            model.model.encoder(input_ids=ids, attention_mask=attn),
            None,
            torch.cat([attn, ones], dim=1),
            None,
        )
    P = ids.shape[1]
    enc, ar_logits = ar_readout(model, ids, attn, canvas)
    dec_mask = torch.cat([attn, torch.zeros_like(ones), ones], dim=1)
    dec_pos = torch.arange(P, P + C, device=canvas.device)[None, :]
    ar_ce = F.cross_entropy(ar_logits.reshape(-1, ar_logits.shape[-1]), canvas.reshape(-1), reduction="none")
    ar_loss = (ar_ce.view(B, C) * w).sum() / w.sum()
    with torch.no_grad():
        hit = (ar_logits.argmax(-1) == canvas) & is_target
        stats["ar_loss"] = float(ar_loss)
        stats["ar_acc"] = float(hit.sum().float() / is_target.sum().clamp(min=1))
    return enc, ar_loss, dec_mask, dec_pos


def _self_conditioned(model: Any, cache: Any, noised: Any, dec_mask: Any, dec_pos: Any, sc_mask: Any) -> Any:
    """Decoder logits ``[B, C, V]``; rows in ``sc_mask`` are self-conditioned on a first, detached pass."""

    def decode(sc_logits: Any = None, mask: Any = None) -> Any:
        return model(
            cache=cache,
            decoder_input_ids=noised,
            decoder_attention_mask=dec_mask,
            decoder_position_ids=dec_pos,
            self_conditioning_logits=sc_logits,
            self_conditioning_mask=mask,
        ).logits

    if not bool(sc_mask.any()):
        return decode()
    with torch.no_grad():
        first = decode().detach()
    return decode(first, sc_mask)


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
    """Uniform-noise diffusion loss of one batch (:func:`make_batch`, on the model's device), plus
    ``ar_weight x`` an autoregressive auxiliary loss.

    The batch's ``weight`` [B, C], when present, weights the cross-entropy per position (else ``pad_weight``
    after the end of the target). Noise tokens are uniform in ``[0, vocab_size)`` at levels ``t`` [B] (default
    ``U(0, 1)``, drawn with ``generator``); ``self_cond_p``: probability per example of a detached
    self-conditioning pass. With ``ar_weight > 0`` the causal encoder also reads the clean canvas and predicts it
    token by token through the tied LM head (:func:`ar_readout`); the decoder's mask hides that part of the
    cache and its positions stay ``P .. P + C - 1``, so it sees what it sees without the auxiliary loss while
    ``P + C`` fits the sliding window. Encoder and decoder share their weights, so this trains the layers to
    copy from the prompt, as an autoregressive initialisation would ("Dream 7B", Ye et al. 2025).

    Returns:
        ``(loss, stats)``: scalar loss (weighted mean cross-entropy, nats) and floats ``acc_noised`` (argmax
        accuracy on corrupted target positions), ``t_mean`` and, with the AR loss, ``ar_loss``, ``ar_acc``.
    """
    ids, attn, canvas, is_target = (batch[k] for k in ("input_ids", "attention_mask", "canvas", "is_target"))
    B, C = canvas.shape
    dev = canvas.device
    noised, corrupt, t = noised_canvas(canvas, t, 0.0, is_target, vocab_size, generator)
    w = batch.get("weight")
    if w is None:
        w = torch.where(is_target, torch.ones(B, C, device=dev), torch.full((B, C), pad_weight, device=dev))
    stats: dict[str, float] = {}
    enc, ar_loss, dec_mask, dec_pos = _encode(model, ids, attn, canvas, w, is_target, ar_weight > 0, stats)
    sc_mask = torch.rand(B, device=dev, generator=generator) < self_cond_p
    logits = _self_conditioned(model, enc.cache, noised, dec_mask, dec_pos, sc_mask)
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


def _binding_loss(
    head: Any, mem: Any, E: Any, batch: dict[str, Any], cfg: TrainConfig, stats: dict[str, float]
) -> tuple[Any, Any, Any]:
    """``(declaration states [B, K, H], their validity [B, K], bind_weight x the dense binding loss)``; writes
    ``bind_loss``/``bind_acc`` into ``stats``."""
    H = E.shape[-1]
    decl = E.gather(1, batch["decl_pos"][..., None].expand(-1, -1, H))  # [B, K, H]
    valid = batch["decl_valid"]
    bind_logits = head.binding_logits(mem.keys, decl)  # [B, P, 1 + K]
    bind_logits[..., 1:] = bind_logits[..., 1:].masked_fill(~valid[:, None, :], float("-inf"))
    bl = batch["bind"]
    has_b = bl >= 0
    loss = torch.zeros((), device=E.device)
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
    return decl, valid, loss


def noised_canvas(
    canvas: Any, t: Any, prefix_clean_p: float, is_target: Any, vocab_size: int, generator: Any
) -> tuple[Any, Any, Any]:
    """``(noised canvas [B, C] int64, its noised positions [B, C] bool, noise levels [B] float32)``: tokens
    uniform in ``[0, vocab_size)`` at levels ``t`` [B] (default ``U(0, 1)`` per row, drawn with ``generator``) or,
    with probability ``prefix_clean_p``, where a prefix commit leaves them at inference (a clean prefix, then
    mostly noise; only when ``t`` is drawn). ``is_target`` [B, C] bool marks the target tokens."""
    B, C = canvas.shape
    dev = canvas.device
    tt = t if t is not None else torch.rand(B, device=dev, generator=generator)
    corrupt = torch.rand(B, C, device=dev, generator=generator) < tt[:, None]
    if t is None and prefix_clean_p > 0:
        pick = torch.rand(B, device=dev, generator=generator) < prefix_clean_p
        n_real = is_target.sum(dim=1).clamp(min=1)
        k = (torch.rand(B, device=dev, generator=generator) * (n_real + 1).float()).long()
        right = torch.arange(C, device=dev)[None, :] >= k[:, None]
        t_right = 0.5 + 0.5 * torch.rand(B, device=dev, generator=generator)
        pref = right & (torch.rand(B, C, device=dev, generator=generator) < t_right[:, None])
        corrupt = torch.where(pick[:, None], pref, corrupt)
        tt = torch.where(pick, t_right, tt)
    noise = torch.randint(0, vocab_size, (B, C), device=dev, generator=generator)
    return torch.where(corrupt, noise, canvas), corrupt, tt


def _copy_decode(
    model: Any, cache: Any, noised: Any, dec_mask: Any, dec_pos: Any, mem: Any, use_sc: bool
) -> tuple[Any, Any]:
    """``(hidden states [B, C, H], soft-capped logits [B, C, V])`` of one decoder pass (self-conditioned on a
    detached first pass when ``use_sc``)."""
    kw = {
        "cache": cache,
        "decoder_input_ids": noised,
        "decoder_attention_mask": dec_mask,
        "decoder_position_ids": dec_pos,
    }
    sc_logits = None
    if use_sc:
        with torch.no_grad():
            sc_logits = model(**kw, copy_memory=mem).logits.detach()
    h = model.model(**kw, self_conditioning_logits=sc_logits).last_hidden_state
    return h, softcap(model.lm_head(h), model.final_logit_softcapping)


def _key_loss(query: Any, z: Any, valid: Any, kl: Any) -> tuple[Any, float] | None:
    """``(cross-entropy of each labelled value query against the declared parameters' states, accuracy)``, or
    ``None`` without labels."""
    has_k = kl >= 0
    if not bool(has_k.any()):
        return None
    kl_logits = torch.einsum("bcd,bkd->bck", query.float(), z) / math.sqrt(z.shape[-1])
    kl_logits = kl_logits.masked_fill(~valid[:, None, :], float("-inf"))
    key_loss = F.cross_entropy(kl_logits[has_k], kl[has_k])
    with torch.no_grad():
        acc = float((kl_logits.argmax(-1)[has_k] == kl[has_k]).float().mean())
    return key_loss, acc


def _draw_hits(
    head: Any, vocab_logits: Any, ptr: Any, mem: Any, canvas: Any, sel: Any, ptr_sel: Any
) -> tuple[float, float, float, float]:
    """The mixture argmax's ``(hits on noised target positions, their count, hits on copied ones, count)``."""
    with torch.no_grad():
        hit = head.mixture_logits(vocab_logits, ptr, mem).argmax(-1) == canvas
        csel = sel & ptr_sel
        return float((hit & sel).sum()), float(sel.sum()), float((hit & csel).sum()), float(csel.sum())


def _copy_targets(head: Any, mem: Any, canvas: Any, ptr: Any, is_target: Any) -> Any:
    """``[B, C]`` bool: labelled copy positions whose token (up to a leading space) is in the copy memory."""
    copyable = (
        (head.base_ids[mem.ids][:, None, :] == head.base_ids[canvas][:, :, None]) & mem.mask[:, None, :]
    ).any(-1)
    return ptr & is_target & copyable


@dataclasses.dataclass
class _DrawInputs:
    """What the noise draws of :func:`copy_diffusion_loss` share: the encoded prompt, the canvas and its labels,
    the decoder's mask and positions, the parameters' states ``z`` [B, K, dim], fixed noise levels ``t``."""

    cache: Any
    mem: Any
    canvas: Any
    is_target: Any
    w: Any
    dec_mask: Any
    dec_pos: Any
    z: Any
    valid: Any
    key: Any
    ptr_sel: Any
    t: Any


def _copy_draw(
    model: Any,
    d: _DrawInputs,
    cfg: TrainConfig,
    generator: Any,
    sc_p: float,
    loss: Any,
    sums: dict[str, float],
    draws: int,
    with_stats: bool,
) -> tuple[Any, tuple[float, float, float, float] | None]:
    """One noise draw: ``loss`` plus ``1 / draws`` of the mixture, pointer and parameter losses (figures added to
    ``sums``), and :func:`_draw_hits`' counts when ``with_stats``."""
    head = model.copy_head
    noised, corrupt, tt = noised_canvas(
        d.canvas, d.t, cfg.prefix_clean_p, d.is_target, cfg.vocab_size, generator
    )
    use_sc = float(torch.rand(1, device=d.canvas.device, generator=generator)) < sc_p
    h, vocab_logits = _copy_decode(model, d.cache, noised, d.dec_mask, d.dec_pos, d.mem, use_sc)
    ptr = head.pointer(h, noised, d.mem)
    log_mix, log_ptr = head.target_logprob(vocab_logits, ptr, d.mem, d.canvas)
    mix_nll = -(log_mix * d.w).sum() / d.w.sum()
    loss = loss + mix_nll / draws
    sums["mix_nll"] += float(mix_nll.detach()) / draws
    any_ptr = bool(d.ptr_sel.any())
    if any_ptr:
        ptr_nll = -log_ptr[d.ptr_sel].mean()
        loss = loss + cfg.ptr_weight * ptr_nll / draws
        sums["ptr_nll"] += float(ptr_nll.detach()) / draws
    key = _key_loss(ptr["query"][..., : head.cfg.dim], d.z, d.valid, d.key)
    if key is not None:
        loss = loss + cfg.key_weight * key[0] / draws
        sums["key_acc"] += key[1] / draws
    if not with_stats:
        return loss, None
    hits = _draw_hits(head, vocab_logits, ptr, d.mem, d.canvas, corrupt & d.is_target, d.ptr_sel)
    if any_ptr:
        sums["gate"] += float(ptr["log_copy_gate"][d.ptr_sel].exp().mean().detach()) / draws
    sums["t_mean"] += float(tt.mean()) / draws
    return loss, hits


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
    """Loss of a ``DiffusionGemmaWithCopyHead`` (:mod:`model.heads.copy_head`) on one labelled batch.

    One encoder pass builds the KV cache and the copy memory, then ``draws`` (default ``cfg.noise_draws``)
    decoder passes, each with its own noise (levels ``t`` [B] when given) and, with probability ``self_cond_p``
    (default ``cfg.self_cond_p``), a detached self-conditioning pass on the log-mixture. Per draw: the mixture's
    NLL of the clean canvas (weighted as in :func:`diffusion_loss`), ``ptr_weight x`` the pointer's NLL at
    copyable ``ptr`` positions and ``key_weight x`` the value queries' cross-entropy against the declared
    parameters. Once per batch: ``bind_weight x`` the binding cross-entropy of the request tokens over
    ``["none", parameter_1..K]`` (``none_weight`` on "none"). ``with_stats``: the accuracy figures (one more
    mixture per draw). ``encoded``: ``(cache, last_hidden_state [B, P, H])`` of a prompt already encoded (the
    batch then carries ``decoder_position_ids`` [B, C]; :mod:`model.training.specialize`).

    Returns:
        ``(loss, stats)``: scalar loss (nats) and floats ``acc_noised``, ``copy_acc`` (on corrupted ``ptr``
        positions), ``mix_nll``, ``ptr_nll``, ``key_acc``, ``bind_loss``, ``bind_acc``, ``gate`` (mean copy
        weight at ``ptr`` positions), ``t_mean``.
    """
    head = model.copy_head
    ids, attn, canvas, is_target = (batch[k] for k in ("input_ids", "attention_mask", "canvas", "is_target"))
    B, C = canvas.shape
    dev = canvas.device
    draws = draws or cfg.noise_draws
    sc_p = cfg.self_cond_p if self_cond_p is None else self_cond_p
    if encoded is None:
        enc = model.model.encoder(input_ids=ids, attention_mask=attn)
        encoded = (enc.cache, enc.last_hidden_state)
    cache, E = encoded
    dec_pos = batch.get("decoder_position_ids")
    mem = head.new_memory(ids, E, attn)
    stats: dict[str, float] = {}
    decl, valid, loss = _binding_loss(head, mem, E, batch, cfg, stats)
    z = head.decl_proj(decl).float()  # [B, K, dim]
    dec_mask = torch.cat([attn, torch.ones(B, C, dtype=attn.dtype, device=dev)], dim=1)
    ptr_sel = _copy_targets(head, mem, canvas, batch["ptr"], is_target)
    fixed = _DrawInputs(
        cache, mem, canvas, is_target, batch["weight"], dec_mask, dec_pos, z, valid, batch["key"], ptr_sel, t
    )
    acc_hits = acc_n = copy_hits = copy_n = 0.0
    sums = {"mix_nll": 0.0, "ptr_nll": 0.0, "key_acc": 0.0, "gate": 0.0, "t_mean": 0.0}
    for _ in range(draws):
        loss, hits = _copy_draw(model, fixed, cfg, generator, sc_p, loss, sums, draws, with_stats)
        if hits is not None:
            acc_hits, acc_n, copy_hits, copy_n = (
                a + b for a, b in zip((acc_hits, acc_n, copy_hits, copy_n), hits, strict=True)
            )
    stats.update(sums)
    stats["acc_noised"] = acc_hits / max(1.0, acc_n)
    stats["copy_acc"] = copy_hits / max(1.0, copy_n)
    return loss, stats


def batch_loss(
    model: Any,
    batch: dict[str, Any],
    cfg: TrainConfig,
    gen: Any,
    with_stats: bool,
    t: Any = None,
    encoded: tuple[Any, Any] | None = None,
) -> tuple[Any, dict[str, float]]:
    """The loss of one batch for ``cfg``: :func:`copy_diffusion_loss` with the copy head (``encoded``: its prompt
    already encoded), else :func:`diffusion_loss`; at fixed noise levels ``t`` (held-out) with one draw and
    neither self-conditioning nor the AR loss."""
    sc_p = cfg.self_cond_p if t is None else 0.0
    if cfg.copy_head:
        draws = None if t is None else 1
        return copy_diffusion_loss(
            model,
            batch,
            cfg,
            generator=gen,
            t=t,
            draws=draws,
            self_cond_p=sc_p,
            with_stats=with_stats,
            encoded=encoded,
        )
    return diffusion_loss(
        model,
        batch,
        vocab_size=cfg.vocab_size,
        self_cond_p=sc_p,
        pad_weight=cfg.pad_weight,
        generator=gen,
        t=t,
        ar_weight=cfg.ar_weight if t is None else 0.0,
    )
