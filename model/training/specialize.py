"""``agentkit specialize``: LoRA fine-tuning of a checkpoint on one bundle's tools, within a time budget.

Synthetic dialogues for the bundle's declarations (:mod:`model.training.bundle_data`) train LoRA adapters (peft;
:data:`model.checkpoint.loading.LORA_TARGETS`) with the loss the base was trained with, the base frozen; the
schedule (warm-up, cosine) is fitted to ``minutes`` once the first steps are timed, and the prompt prefix every
dialogue shares is encoded once (:class:`PrefixEncoder`). The held-out exact-call accuracy
(the ``evaluate`` it is given: ``evals.heldout.evaluate_examples``) is measured before and after, the adapter reloaded onto the
base as a user would; ``report.json`` in the adapter folder holds the figures.
"""

from __future__ import annotations

import json
import math
import os
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from model.checkpoint import hf_compat as hf
from model.checkpoint.loading import (
    ADAPTER_INFO,
    DEFAULT_CHECKPOINT,
    LORA_TARGETS,
    base_fingerprint,
    load_checkpoint,
    quiet_peft,
)
from model.heads.copy_head import CopyHead
from model.training.batches import batches, device_batch, encode_examples, encode_labelled, word_token_table
from model.training.bundle_data import train_and_heldout
from model.training.losses import batch_loss
from model.training.settings import TrainConfig
from model.turn.chat import ChatModel


@dataclass
class SpecializeConfig:
    """The knobs of one run: ``minutes`` bounds the fine-tuning (the evaluations come on top); ``threads``:
    torch threads (``None``: every core); ``n_train`` dialogues are cycled, ``n_eval`` held-out ones scored."""

    bundle: str
    out: str
    base: str | None = None
    minutes: float = 20.0
    lora_rank: int = 8
    lora_alpha: int | None = None
    seed: int = 0
    threads: int | None = None
    n_train: int = 6000
    n_eval: int = 100
    batch_size: int = 8
    lr: float = 6e-3
    warmup: int = 10
    max_prompt: int = 8192
    device: str = "cpu"
    max_steps: int | None = None


class PrefixEncoder:
    """Encodes prompts that share a ``prefix`` (system prompt and declarations) with the prefix encoded once
    (``model``'s encoder is frozen, so its cache and states are the same for every example).

    :meth:`groups` encodes each group of equal-length rows' suffix on the prefix's cache at the true positions:
    the states of encoding each prompt whole (the tests check it). Unequal rows would need a gap the
    sliding-window layers count (a LoRA trained so called the wrong tools), hence :func:`length_batches`.
    """

    def __init__(self, model: Any, prefix: list[int]) -> None:
        self.model = model
        self.prefix = list(prefix)
        ids = torch.tensor([self.prefix], dtype=torch.long, device=model.device)
        with torch.no_grad():
            out = model.model.encoder(input_ids=ids, attention_mask=torch.ones_like(ids))
        self.layers = [(layer.keys, layer.values) for layer in out.cache.layers]
        self.hidden = out.last_hidden_state  # [1, L0, H]

    def encode(self, ids: Any) -> tuple[Any, Any]:
        """``(cache, last_hidden_state [B, n, H])`` of unpadded prompts ``ids`` [B, n] (``ValueError`` unless each
        starts with the prefix)."""
        m = self.model
        B, n = ids.shape
        L0 = len(self.prefix)
        if n <= L0 or not bool((ids[:, :L0] == torch.tensor(self.prefix, device=ids.device)).all()):
            raise ValueError("a training prompt does not start with the bundle's shared prefix")
        cache = hf.cache_from_layers(
            m,
            [(k.expand(B, -1, -1, -1).clone(), v.expand(B, -1, -1, -1).clone()) for k, v in self.layers],
            L0,
        )
        pos = torch.arange(L0, n, dtype=torch.int32, device=ids.device)[None, :].expand(B, -1)
        attn = torch.ones((B, n), dtype=torch.bool, device=ids.device)
        masks = hf.encoder_mask(m, B, n - L0, attn, cache, pos)
        with torch.no_grad():
            out = m.model.encoder(input_ids=ids[:, L0:], attention_mask=masks, cache=cache, position_ids=pos)
        return out.cache, torch.cat([self.hidden.expand(B, -1, -1), out.last_hidden_state], dim=1)

    def groups(self, plain: dict[str, Any]) -> list[tuple[dict[str, Any], tuple[Any, Any], float]]:
        """A left-padded batch split into rows of equal prompt length, padding dropped: ``[(batch with
        decoder_position_ids, (cache, hidden) from :meth:`encode`, share of the rows)]``."""
        lengths = [int(x) for x in plain["attention_mask"].sum(dim=1).tolist()]
        P, C = plain["input_ids"].shape[1], plain["canvas"].shape[1]
        out = []
        for n in sorted(set(lengths)):
            idx = [i for i, x in enumerate(lengths) if x == n]
            sub = {k: v[idx] for k, v in plain.items()}
            for key in ("input_ids", "attention_mask", "bind"):
                if key in sub:
                    sub[key] = sub[key][:, P - n :]
            if "decl_pos" in sub:
                sub["decl_pos"] = torch.where(sub["decl_valid"], sub["decl_pos"] - (P - n), sub["decl_pos"])
            dev = plain["canvas"].device
            positions = torch.arange(n, n + C, dtype=torch.int32, device=dev)
            sub["decoder_position_ids"] = positions[None, :].expand(len(idx), -1)
            out.append((sub, self.encode(sub["input_ids"]), len(idx) / len(lengths)))
        return out


def length_batches(data: list[Any], batch_size: int, rng: random.Random) -> Any:
    """Endless batches of encoded examples, each pass cut from shuffled buckets of one prompt length, the
    leftovers (sorted by length) batched last, all in shuffled order."""
    buckets: dict[int, list[int]] = {}
    for i, d in enumerate(data):
        buckets.setdefault(len(d.prompt), []).append(i)
    while True:
        chunks: list[list[int]] = []
        rest: list[int] = []
        for n in sorted(buckets):
            idx = list(buckets[n])
            rng.shuffle(idx)
            full = len(idx) - len(idx) % batch_size
            chunks += [idx[j : j + batch_size] for j in range(0, full, batch_size)]
            rest += idx[full:]
        chunks += [rest[j : j + batch_size] for j in range(0, len(rest), batch_size)]
        rng.shuffle(chunks)
        for c in chunks:
            yield [data[i] for i in c]


def shared_prefix(prompts: list[list[int]]) -> list[int]:
    """The longest token prefix every prompt starts with."""
    first, n = prompts[0], min(len(p) for p in prompts)
    return first[: next((i for i in range(n) if any(p[i] != first[i] for p in prompts)), n)]


def _scores(r: dict[str, Any]) -> dict[str, Any]:
    """The figures of an evaluation for the report (its per-example raw outputs left out)."""
    return {k: v for k, v in r.items() if k != "results"}


def _folder_bytes(folder: Path, pattern: str) -> int:
    return sum(p.stat().st_size for p in folder.glob(pattern))


def _lr(step: int, total: int, cfg: SpecializeConfig) -> float:
    """Linear warm-up (at most a tenth of the run), then cosine from ``cfg.lr`` to a tenth of it at ``total``."""
    warmup = max(1, min(cfg.warmup, total // 10))
    if step < warmup:
        return cfg.lr * (step + 1) / warmup
    frac = min(1.0, step / max(1, total - warmup))
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))


def _train_adapter(
    inner: Any, data: list[Any], tcfg: Any, cfg: SpecializeConfig, trainable: list[Any], log: Any
) -> tuple[int, float]:
    """The LoRA training loop within ``cfg.minutes`` (or ``cfg.max_steps``): ``(steps, seconds)``."""
    opt = torch.optim.AdamW(trainable, lr=cfg.lr, betas=(0.9, 0.98), weight_decay=0.0)
    rng = random.Random(cfg.seed + 1)
    gen = torch.Generator(device=cfg.device).manual_seed(cfg.seed + 2)
    prefix = None
    stream = batches(data, tcfg, rng)
    if isinstance(getattr(inner, "copy_head", None), CopyHead):  # the shared prefix is encoded once
        assert not any(p.requires_grad for p in inner.model.encoder.parameters())
        prefix = PrefixEncoder(inner, shared_prefix([d.prompt for d in data]))
        stream = length_batches(data, cfg.batch_size, rng)
        log(f"shared prompt prefix: {len(prefix.prefix)} tokens, encoded once")
    inner.train()
    budget_s = cfg.minutes * 60.0
    total = cfg.max_steps or 10**9
    step, ema = 0, 0.0
    t_start = time.perf_counter()
    while step < total:
        lr = _lr(step, total, cfg)
        for g in opt.param_groups:
            g["lr"] = lr
        batch = device_batch(next(stream), tcfg, rng, cfg.device)
        if prefix is not None:
            loss = torch.zeros((), device=cfg.device)
            for sub, encoded, share in prefix.groups(batch):
                loss = loss + share * batch_loss(inner, sub, tcfg, gen, False, encoded=encoded)[0]
        else:
            loss = batch_loss(inner, batch, tcfg, gen, False)[0]
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        opt.step()
        step += 1
        ema = float(loss.item()) if step == 1 else 0.9 * ema + 0.1 * float(loss.item())
        elapsed = time.perf_counter() - t_start
        if step == 5 and cfg.max_steps is None:  # fit the cosine schedule to the budget
            per = elapsed / step
            total = max(step + 1, int((budget_s - min(30.0, 0.05 * budget_s)) / per))
            log(
                f"{per:.2f} s/step on {torch.get_num_threads()} thread(s) -> {total} steps in {cfg.minutes:g} min"
            )
        if step % 25 == 0 or step == total:
            log(f"step {step}/{total}: loss {ema:.3f}, lr {lr:.2e}, {elapsed / 60:.1f} min")
        if elapsed >= budget_s:
            log(f"time budget reached at step {step}")
            break
    inner.eval()
    return step, time.perf_counter() - t_start


def _save_adapter(peft_model: Any, out: Path, base_src: str, cfg: Any, names: list[str]) -> None:
    """Write the LoRA weights and ``agentkit_adapter.json`` (the base's path and fingerprint, the tools)."""
    out.mkdir(parents=True, exist_ok=True)
    peft_model.save_pretrained(str(out))
    info = {
        "base": base_src,
        "base_fingerprint": base_fingerprint(base_src),
        "bundle": str(cfg.bundle),
        "tools": names,
        "lora_rank": cfg.lora_rank,
    }
    (out / ADAPTER_INFO).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")


def _report(
    cfg: Any,
    base_src: str,
    out: Path,
    before: dict[str, Any],
    after: dict[str, Any],
    train_s: float,
    steps: int,
    threads: int,
    n_train: int,
    n_trainable: int,
) -> dict[str, Any]:
    """``report.json`` (written to ``out``): accuracy before and after, time, sizes, the settings."""
    adapter_bytes = _folder_bytes(out, "adapter_model.safetensors")
    base_bytes = _folder_bytes(Path(base_src), "*.safetensors")
    report = {
        "bundle": str(cfg.bundle),
        "base": base_src,
        "adapter": str(out),
        "exact_call_accuracy_before": before["call_accuracy"],
        "exact_call_accuracy_after": after["call_accuracy"],
        "gain_points": 100.0 * (after["call_accuracy"] - before["call_accuracy"]),
        "held_out_call_dialogues": after["n_calls"],
        "before": before,
        "after": after,
        "train_minutes": train_s / 60.0,
        "steps": steps,
        "threads": threads,
        "cores": os.cpu_count(),
        "train_dialogues": n_train,
        "trainable_parameters": n_trainable,
        "adapter_bytes": adapter_bytes,
        "base_bytes": base_bytes,
        "adapter_share_of_base": adapter_bytes / max(1, base_bytes),
        "config": asdict(cfg),
    }
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return report


def _checked_out(cfg: SpecializeConfig) -> Path:
    """The adapter folder ``cfg.out``, after checking the options (see :func:`specialize` for the errors)."""
    if cfg.minutes <= 0:
        raise ValueError(f"--minutes must be > 0, got {cfg.minutes}")
    if cfg.lora_rank < 1:
        raise ValueError(f"--lora-rank must be >= 1, got {cfg.lora_rank}")
    out = Path(cfg.out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"{out}: --out is a file; give a folder for the adapter")
    if out.exists() and any(out.iterdir()) and not (out / ADAPTER_INFO).exists():
        raise ValueError(
            f"{out}: the output folder exists and is not an adapter folder; choose another --out"
        )
    try:  # now, not when the adapter is saved after the whole fine-tuning
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"{out}: cannot create the --out folder ({exc.strerror or exc})") from None
    return out


def _train_config(cfg: SpecializeConfig, model: Any, out: Path) -> Any:
    """The fine-tuning's :class:`TrainConfig`: the base's canvas, vocabulary and head, 2 draws, 70% clean prefix."""
    return TrainConfig(
        out_dir=str(out),
        seed=cfg.seed,
        batch_size=cfg.batch_size,
        canvas_length=int(model.config.canvas_length),
        max_prompt=cfg.max_prompt,
        vocab_size=int(model.config.get_text_config().vocab_size),
        copy_head=getattr(model.config, "copy_head", None) is not None,
        noise_draws=2,
        prefix_clean_p=0.7,
        bucket_mult=8,
    )


def _with_lora(model: Any, cfg: SpecializeConfig) -> tuple[Any, list[Any]]:
    """``(peft_model, trainable parameters)``: LoRA of ``cfg.lora_rank`` (alpha default twice the rank)."""
    from peft import LoraConfig, get_peft_model

    alpha = cfg.lora_alpha if cfg.lora_alpha is not None else 2 * cfg.lora_rank
    lora = LoraConfig(
        r=cfg.lora_rank, lora_alpha=alpha, lora_dropout=0.0, target_modules=LORA_TARGETS, bias="none"
    )
    with quiet_peft():
        peft_model = get_peft_model(model, lora)
    return peft_model, [p for p in peft_model.parameters() if p.requires_grad]


def specialize(
    cfg: SpecializeConfig,
    declarations: list[dict[str, Any]],
    system_prompt: str | None = None,
    log: Any = print,
    *,
    evaluate: Callable[[Any, list[Any], Any], dict[str, Any]],
) -> dict[str, Any]:
    """Run one specialisation on the bundle's ``declarations`` (``agent.declarations()``) and ``system_prompt``;
    returns the report (also ``OUT/report.json``). ``log`` gets one progress line at a time; ``evaluate(chat_model,
    held_out_examples, log)`` scores the base and the adapter (``evals.heldout.evaluate_examples``: the library
    imports no evaluator).

    Raises:
        model.checkpoint.loading.CheckpointError: the base does not load.
        ValueError: a bundle tool with object parameters (not generated), ``minutes`` <= 0, a rank < 1, or an
            output folder that holds something other than an earlier adapter.
    """
    out = _checked_out(cfg)
    threads = cfg.threads or os.cpu_count() or 1
    torch.set_num_threads(threads)
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)

    ck = load_checkpoint(str(DEFAULT_CHECKPOINT if cfg.base is None else cfg.base), device=cfg.device)
    train_ex, held_ex = train_and_heldout(declarations, system_prompt, cfg.n_train, cfg.n_eval, cfg.seed)
    names = [d["function"]["name"] for d in declarations]
    log(
        f"data: {len(train_ex)} training dialogues, {len(held_ex)} held-out ones for tools {', '.join(names)}"
    )
    base_src = ck.source
    log(f"base: {base_src}; held-out evaluation of the base ({len(held_ex)} dialogues)...")
    before = _scores(evaluate(ChatModel(ck), held_ex, log))
    unmeasured = (
        f"exact-call accuracy not measured: none of the {len(held_ex)} held-out dialogues asks for a call"
    )
    if len(held_ex) < cfg.n_eval:  # a held-out request must differ from every training one
        unmeasured += f" ({cfg.n_eval} asked for: the others' requests are all training ones)"
    log(
        f"base: exact-call accuracy {before['call_accuracy']:.3f} ({before['n_calls']} call dialogues)"
        if before["n_calls"]
        else f"base: {unmeasured}"
    )

    model, tok = ck.model, ck.tokenizer
    tcfg = _train_config(cfg, model, out)
    data = (
        encode_labelled(tok, train_ex, word_token_table(tok))
        if tcfg.copy_head
        else encode_examples(tok, train_ex)
    )
    peft_model, trainable = _with_lora(model, cfg)
    n_trainable = sum(p.numel() for p in trainable)
    log(f"LoRA rank {cfg.lora_rank}: {n_trainable / 1e3:.0f}k trainable parameters")
    steps, train_s = _train_adapter(peft_model.base_model.model, data, tcfg, cfg, trainable, log)

    _save_adapter(peft_model, out, base_src, cfg, names)
    log(f"adapter saved to {out}; loading it onto the base as a user would and evaluating...")
    after = _scores(
        evaluate(ChatModel(load_checkpoint(base_src, device=cfg.device, adapter=out)), held_ex, log)
    )
    report = _report(cfg, base_src, out, before, after, train_s, steps, threads, len(train_ex), n_trainable)
    adapter_bytes = report["adapter_bytes"]
    scored = (
        f"exact-call accuracy {before['call_accuracy']:.3f} -> {after['call_accuracy']:.3f} "
        f"({report['gain_points']:+.1f} points) on {after['n_calls']} held-out call dialogues"
    )
    log(
        f"{scored if after['n_calls'] else unmeasured}; "
        f"{train_s / 60:.1f} min of fine-tuning on {threads} thread(s), {steps} steps; adapter "
        f"{adapter_bytes / 1e6:.2f} MB = {100 * report['adapter_share_of_base']:.1f}% of the base"
    )
    return report
