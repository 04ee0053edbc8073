"""Train the embedded DiffusionGemma-architecture checkpoint on synthetic function-calling data.

Objective (uniform-noise block diffusion, as the runtime samples): the encoder reads the prompt and earlier
target tokens into the KV cache; a fraction ``t ~ U(0, 1)`` of the next ``canvas_length`` target tokens is
replaced by uniform random tokens and the decoder predicts the clean canvas (:mod:`model.training.losses`;
self-conditioning of Chen et al. 2022; uniform-noise discrete diffusion of Austin et al. 2021, D3PM).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import random
import time
from pathlib import Path
from typing import Any

import torch
import transformers
from transformers import AutoTokenizer

from model.checkpoint.tokenizer import build_tokenizer, chat_template
from model.heads.copy_model import DiffusionGemmaWithCopyHead
from model.heads.vision import write_processor_config
from model.training.batches import (
    Encoded,
    batches,
    device_batch,
    encode_examples,
    encode_labelled,
    word_token_table,
)
from model.training.catalog import DEFAULT_MASKBENCH
from model.training.data import Generator, copy_drill, corpus_texts
from model.training.losses import batch_loss
from model.training.render import strip_descriptions
from model.training.settings import COPY_HEAD_RULES, TrainConfig, build_model, generation_config


def save_checkpoint(model: Any, tok: Any, out: Path, cfg: TrainConfig) -> None:
    """Write an offline-loadable checkpoint folder: weights, configs, tokenizer, image processor config."""
    out.mkdir(parents=True, exist_ok=True)
    model.generation_config = generation_config(cfg.canvas_length)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    write_processor_config(out, model.config)


def _save_state(
    path: Path, optimizer: Any, step: int, total: int, rng: random.Random, gen: Any, extra: dict[str, Any]
) -> None:
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


def _lr_at(step: int, total: int, cfg: TrainConfig) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    frac = min(1.0, (step - cfg.warmup) / max(1, total - cfg.warmup))
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * frac)))


def prepare(cfg: TrainConfig, log: Any = print) -> tuple[Any, list[Encoded], list[Encoded], list[Encoded]]:
    """Generate the data, train (or load) the tokenizer and encode: ``(tokenizer, train, heldout, drill)``."""
    out = Path(cfg.out_dir)
    t0 = time.time()
    mb = Path(cfg.maskbench) if cfg.maskbench else DEFAULT_MASKBENCH
    if not mb.exists():
        log(
            f"[yellow]warning: {mb} not found: training without the Glaive schemas (generated + bot tools only)"
        )
    tok_dir = out / "tokenizer"
    fresh_tok = not cfg.init_from and not (tok_dir / "tokenizer.json").exists()
    # a fresh tokenizer reads the stream's first TOKENIZER_EXAMPLES examples even when fewer are trained on
    drawn = Generator(
        cfg.seed, "train", mb, cfg.bot_share, cfg.decline_share, paired_declines=cfg.paired_declines
    ).take(max(cfg.n_train, cfg.tokenizer_examples if fresh_tok else 0))
    train_ex = drawn[: cfg.n_train]
    if cfg.terse_p > 0:  # a seeded share of the examples gets declarations without descriptions
        pick = random.Random(cfg.seed + 3)
        for e in train_ex:
            if e.tools and pick.random() < cfg.terse_p:
                e.tools = strip_descriptions(e.tools)
    held_ex = Generator(cfg.seed, "heldout", mb).take(cfg.n_heldout)
    if cfg.init_from and not (tok_dir / "tokenizer.json").exists():
        AutoTokenizer.from_pretrained(cfg.init_from).save_pretrained(tok_dir)
    if (tok_dir / "tokenizer.json").exists():
        tok = AutoTokenizer.from_pretrained(tok_dir)

        tok.chat_template = chat_template()
    else:
        tok = build_tokenizer(
            corpus_texts(drawn[: cfg.tokenizer_examples]),
            vocab_size=cfg.vocab_size,
            space_tokens=cfg.space_tokens,
        )
        tok.save_pretrained(tok_dir)
    table = word_token_table(tok) if cfg.copy_head or cfg.copy_weight else None  # copied flags: when weighted

    def encode(examples: list[Any], align: bool = cfg.align_copies) -> list[Encoded]:
        if cfg.copy_head and table is not None:
            return encode_labelled(tok, examples, table, align_copies=align)
        return encode_examples(tok, examples, table)

    train, held = encode(train_ex), encode(held_ex)
    drill: list[Encoded] = []
    if cfg.drill_steps > 0:
        drill = encode([d for d in (copy_drill(e) for e in train_ex) if d is not None], align=False)
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


def _model_and_state(
    cfg: TrainConfig, tok: Any, ckpt: Path, rng: random.Random, gen: Any, console: Any
) -> tuple[Any, dict[str, Any] | None, int, int]:
    """The model to train: resumed from ``ckpt`` (weights, step, schedule and RNG states restored) when
    ``cfg.resume`` and a trainer state is there, else built fresh. Returns ``(model, state, step, total)``."""
    if not (cfg.resume and (ckpt / "trainer_state.pt").exists()):
        return build_model(cfg, tok).to(cfg.device), None, 0, cfg.steps
    cls: Any = DiffusionGemmaWithCopyHead if cfg.copy_head else transformers.DiffusionGemmaForBlockDiffusion
    model = cls.from_pretrained(ckpt, local_files_only=True).to(cfg.device)
    saved = getattr(model.config, "copy_head", None)
    saved_rules = {r: bool(isinstance(saved, dict) and saved.get(r)) for r in COPY_HEAD_RULES}
    asked = {r: cfg.copy_head and bool(getattr(cfg, r)) for r in COPY_HEAD_RULES}
    if (saved is not None) != cfg.copy_head or saved_rules != asked:
        said = ", ".join(f"{r}={v}" for r, v in saved_rules.items())
        asks = ", ".join(f"{r}={getattr(cfg, r)}" for r in COPY_HEAD_RULES)
        raise ValueError(
            f"{ckpt} was saved with copy_head={saved is not None}, {said}; this run asks "
            f"for copy_head={cfg.copy_head}, {asks}: give another --out-dir, or --no-resume to start over"
        )
    state = torch.load(ckpt / "trainer_state.pt", weights_only=False)
    step, total = int(state["step"]), int(state["total_steps"])
    if cfg.max_minutes is None:  # an explicit --steps beyond the saved schedule extends it
        total = max(total, cfg.steps)
    rng.setstate(state["py_rng"])
    torch.set_rng_state(state["torch_rng"])
    gen.set_state(state["noise_rng"])
    console.print(f"resumed from {ckpt} at step {step}/{total}")
    return model, state, step, total


def _optimizer(model: Any, cfg: TrainConfig, state: dict[str, Any] | None) -> Any:
    """AdamW (betas 0.9/0.98), weight decay on matrices only; its state restored when resuming."""
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
    return opt


def _evaluate(
    model: Any, held_data: list[Encoded], cfg: TrainConfig, autocast: Any, step: int, ema: Any, console: Any
) -> dict[str, Any]:
    """Held-out figures of ``step`` on the first 128 held-out examples (printed, and returned for the log): the
    mean loss at t = 0.25, 0.5, 1.0, the one-pass accuracy from pure noise and, with the copy head, the
    copied-token accuracy at t = 0.25."""
    model.eval()
    rng = random.Random(1234)
    data = held_data[:128]
    out: dict[str, list[float]] = {"loss": [], "acc_t1": []}
    with torch.no_grad():
        for s in range(0, len(data), cfg.batch_size):
            items = data[s : s + cfg.batch_size]
            b = device_batch(items, cfg, rng, cfg.device)
            g = torch.Generator(device=cfg.device).manual_seed(s)
            for tv in (0.25, 0.5, 1.0):
                t = torch.full((len(items),), tv, device=cfg.device)
                with autocast():
                    loss, stats = batch_loss(model, b, cfg, g, True, t)
                # the copy head's held-out loss is its mixture NLL, a float32 like the plain loss
                out["loss"].append(float(torch.tensor(stats["mix_nll"]) if cfg.copy_head else loss))
                if tv == 0.25 and cfg.copy_head:
                    out.setdefault("copy_t025", []).append(stats["copy_acc"])
                if tv == 1.0:
                    out["acc_t1"].append(stats["acc_noised"])
    model.train()
    h = {k: sum(v) / max(1, len(v)) for k, v in out.items()}
    rec = {"step": step, "heldout_loss": h["loss"], "heldout_acc_t1": h["acc_t1"]}
    extra = ""
    if "copy_t025" in h:
        rec["heldout_copy_t025"] = h["copy_t025"]
        extra = f" copied-token acc t=0.25 {h['copy_t025']:.3f}"
    console.print(
        f"step {step}: loss(ema) {ema:.3f} held-out loss {h['loss']:.3f} one-pass acc {h['acc_t1']:.3f}{extra}"
    )
    return rec


def _autocast_for(cfg: TrainConfig) -> Any:
    """The step's autocast context factory (bfloat16 on CUDA, none on CPU; ``ValueError`` without CUDA)."""
    torch.set_num_threads(cfg.threads)
    if cfg.device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError("--device cuda requested but torch.cuda.is_available() is False")
    if not cfg.device.startswith("cuda"):
        return contextlib.nullcontext
    torch.backends.cuda.matmul.allow_tf32 = True
    return lambda: torch.autocast("cuda", dtype=torch.bfloat16)


def _progress(console: Any) -> Any:
    """The training progress bar (rich): step, loss EMA, tokens/s, elapsed and remaining time."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    return Progress(
        TextColumn("[bold]train"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TextColumn("loss {task.fields[loss]:.3f}"),
        TextColumn("{task.fields[tps]:.0f} tok/s"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=False,
    )


def _optimizer_step(
    model: Any,
    opt: Any,
    batch: dict[str, Any],
    cfg: TrainConfig,
    gen: Any,
    lr: float,
    autocast: Any,
    stats: bool,
) -> tuple[float, dict[str, float], float]:
    """One optimizer step at ``lr``: ``(loss, its figures when stats, gradient norm before clipping)``."""
    for g in opt.param_groups:
        g["lr"] = lr
    with autocast():
        loss, figures = batch_loss(model, batch, cfg, gen, stats)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
    opt.step()
    if cfg.device.startswith("cuda"):
        torch.cuda.synchronize()
    return loss.item(), figures, float(gnorm)


@dataclasses.dataclass
class _Meter:
    """The loss EMA (0.95) and the tokens and seconds since the last log record."""

    t_start: float
    ema: float | None = None
    tokens: int = 0
    seconds: float = 0.0

    def add(self, loss: float, tokens: int, seconds: float) -> None:
        self.ema = loss if self.ema is None else 0.95 * self.ema + 0.05 * loss
        self.tokens += tokens
        self.seconds += seconds

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / max(self.seconds, 1e-9)

    def record(
        self, step: int, loss: float, lr: float, gnorm: float, stats: dict[str, float], every: int
    ) -> dict[str, Any]:
        """One ``log.jsonl`` record; starts a new window."""
        rec = {
            "step": step,
            "loss": loss,
            "loss_ema": self.ema,
            "lr": lr,
            "grad_norm": gnorm,
            "tok_per_s": self.tokens_per_s,
            "s_per_step": self.seconds / every,
            "elapsed_s": time.time() - self.t_start,
            **stats,
        }
        self.tokens, self.seconds = 0, 0.0
        return rec


def _fitted_total(cfg: TrainConfig, step: int, total: int, t_start: float) -> int:
    """The step count that fits ``cfg.max_minutes`` (a minute kept for saving), from the time of ``step`` steps."""
    per_step = (time.time() - t_start) / step
    budget = (cfg.max_minutes or 0.0) * 60 - (time.time() - t_start) - 60
    return min(total, step + max(1, int(budget / per_step)))


def train(cfg: TrainConfig, *, optimizer_state: dict[str, Any] | None = None) -> Path:
    """Run (or resume) training; returns the folder of the final checkpoint.

    ``optimizer_state`` (an AdamW ``state_dict``, e.g. the previous stage's) starts the optimizer of a run that
    does not resume. Writes ``cfg.out_dir/{tokenizer,checkpoint,final}``, ``train_config.json`` and ``log.jsonl``
    (one JSON object per logged step). Stops at ``cfg.steps`` or ``cfg.stop_at``; with ``cfg.max_minutes`` the
    schedule is fitted to the budget once the step time is known.

    Raises:
        ValueError: ``--device cuda`` without CUDA, or a run to resume saved with other copy-head options.
    """
    from rich.console import Console

    console = Console()
    autocast = _autocast_for(cfg)
    device = cfg.device
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "train_config.json").write_text(json.dumps(dataclasses.asdict(cfg), indent=2))
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    tok, train_data, held_data, drill_data = prepare(cfg, log=console.print)

    ckpt = out / "checkpoint"
    rng = random.Random(cfg.seed + 1)
    gen = torch.Generator(device=device).manual_seed(cfg.seed + 2)
    model, state, step, total = _model_and_state(cfg, tok, ckpt, rng, gen, console)
    model.train()
    n_params = sum(p.numel() for p in model.parameters())
    console.print(f"model: {n_params / 1e6:.2f}M parameters (tied embeddings counted once), device {device}")
    opt = _optimizer(model, cfg, state)
    if state is None and optimizer_state is not None:
        opt.load_state_dict(optimizer_state)
        console.print("optimizer moments taken from the previous stage")
    stream = batches(train_data, cfg, rng)  # a resumed run continues from the restored RNG state
    drill_stream = batches(drill_data or train_data, cfg, rng)
    log_f = (out / "log.jsonl").open("a")
    meter = _Meter(time.time())
    schedule_fixed = cfg.max_minutes is None or state is not None
    with _progress(console) as prog:
        task = prog.add_task("train", total=total, completed=step, loss=float("nan"), tps=0.0)
        while step < total and (cfg.stop_at is None or step < cfg.stop_at):
            t0 = time.time()
            batch = device_batch(next(drill_stream if step < cfg.drill_steps else stream), cfg, rng, device)
            lr = _lr_at(step, total, cfg)
            lv, stats, gnorm = _optimizer_step(
                model, opt, batch, cfg, gen, lr, autocast, (step + 1) % cfg.log_every == 0
            )
            step += 1
            meter.add(lv, int(batch["attention_mask"].sum()) + batch["canvas"].numel(), time.time() - t0)
            if not schedule_fixed and step == 20:
                total, schedule_fixed = _fitted_total(cfg, step, total, meter.t_start), True
                prog.update(task, total=total)
                console.print(
                    f"{(time.time() - meter.t_start) / 20:.2f} s/step -> {total} steps fit in {cfg.max_minutes} min"
                )
            prog.update(task, completed=step, loss=meter.ema, tps=meter.tokens_per_s)
            rec = (
                meter.record(step, lv, lr, gnorm, stats, cfg.log_every)
                if step % cfg.log_every == 0 or step == total
                else {}
            )
            if step % cfg.eval_every == 0 or step == total:
                rec.update(_evaluate(model, held_data, cfg, autocast, step, meter.ema, console))
            if rec:
                log_f.write(json.dumps(rec) + "\n")
                log_f.flush()
            if step % cfg.ckpt_every == 0 or step == total or step == cfg.stop_at:
                save_checkpoint(model, tok, ckpt, cfg)
                _save_state(ckpt, opt, step, total, rng, gen, {"loss_ema": meter.ema})
    log_f.close()
    final = Path(cfg.final_dir) if cfg.final_dir else out / "final"
    model.eval()
    save_checkpoint(model.to("cpu").float(), tok, final, cfg)
    console.print(f"final checkpoint: {final} ({time.time() - meter.t_start:.0f}s this session)")
    return final
