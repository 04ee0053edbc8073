"""Copy probe: how often a checkpoint reproduces the value tokens a tool call must copy from the request.

``python -m evals.probe CKPT [--n 200] [--json]`` scores held-out single-call examples on their target
tokens, all of them and the copied ones (word-like tokens whose stripped text is a request token's and no system
token's): ``ar``, the next-token accuracy of the causal encoder's read-out (what ``--ar-weight`` trains), and
``diffusion_t{0.25,0.5,1.0}``, the accuracy of one decoder pass on a canvas noised at level t (a copy-head
checkpoint is read through its log-mixture). ``--reachability`` measures instead, with the tokenizer only, the
share of copied words no token-by-token copy can produce (:func:`word_reachability`).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from pathlib import Path
from typing import Any

import torch
from transformers import AutoTokenizer

from grammar import special_tokens as st
from model.checkpoint.loading import load_checkpoint
from model.heads.copy_head import has_copy_head
from model.training.batches import encode_examples, make_batch
from model.training.data import Generator
from model.training.labels import CONTROL_SPELLING
from model.training.losses import ar_readout, noised_canvas

#: Seed of the held-out examples the probes read (noise draws use fixed seeds too: results are deterministic).
HELDOUT_SEED = 7


def _copied_positions(part: list[Any], is_target: Any, text: list[str], turn_end: int, C: int) -> Any:
    """``[B, C]`` bool: target tokens that are a word of the request, not of the system turn."""
    copied = torch.zeros_like(is_target)
    for i, e in enumerate(part):
        start = e.prompt.index(turn_end) + 1 if turn_end in e.prompt else 0
        system = {text[x] for x in e.prompt[:start]}
        request = {text[x] for x in e.prompt[start:]} - system
        for j, x in enumerate(e.target[:C]):
            copied[i, j] = any(ch.isalnum() for ch in text[x]) and text[x] in request
    return copied


def _denoised_once(
    model: Any, cache: Any, attn: Any, canvas: Any, is_target: Any, tv: float, V: int, seed: int, extra: Any
) -> tuple[Any, Any]:
    """``(argmax == canvas, noised target positions)`` [B, C] of one pass over a canvas noised at level ``tv``."""
    g = torch.Generator().manual_seed(seed)
    noised, corrupt, _ = noised_canvas(canvas, torch.full(canvas.shape[:1], tv), 0.0, is_target, V, g)
    logits = model(
        cache=cache,
        decoder_input_ids=noised,
        decoder_attention_mask=torch.cat([attn, torch.ones_like(canvas)], 1),
        **extra,
    ).logits
    return logits.argmax(-1) == canvas, corrupt & is_target


def copy_probe(checkpoint: str, n: int = 200, threads: int = 1) -> dict[str, Any]:
    """The probe of the checkpoint folder ``checkpoint`` on ``n`` held-out calls: ``n_examples``,
    ``n_target_tokens``, ``n_copied_tokens`` and, for each of ``ar``, ``diffusion_t0.25``, ``diffusion_t0.5``,
    ``diffusion_t1.0``, ``{"all": acc, "copied": acc}``. ``ValueError`` if ``n < 1``, ``OSError`` if it does not
    load."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")

    torch.set_num_threads(threads)
    loaded = load_checkpoint(checkpoint)
    model, tok = loaded.model, loaded.tokenizer
    C = int(model.config.canvas_length)
    V = int(model.config.text_config.vocab_size)
    exs = [e for e in Generator(HELDOUT_SEED, "heldout").take(20 * n) if e.kind == "call"][:n]
    enc = encode_examples(tok, exs)
    text = [str(tok.decode([i])).strip() for i in range(len(tok))]
    turn_end = tok.convert_tokens_to_ids(st.TURN_END)
    levels = ("ar", "diffusion_t0.25", "diffusion_t0.5", "diffusion_t1.0")
    hits = {k: {"all": [0, 0], "copied": [0, 0]} for k in levels}
    n_target = n_copied = 0

    def add(key: str, ok: Any, sel: Any, copied: Any) -> None:
        for part, mask in (("all", sel), ("copied", sel & copied)):
            hits[key][part][0] += int((ok & mask).sum())
            hits[key][part][1] += int(mask.sum())

    chunk = 25
    for s0 in range(0, len(enc), chunk):
        part = enc[s0 : s0 + chunk]
        b = make_batch(part, C, 4096, random.Random(0))
        ids, attn, canvas, is_target = b["input_ids"], b["attention_mask"], b["canvas"], b["is_target"]
        copied = _copied_positions(part, is_target, text, turn_end, C)
        n_target += int(is_target.sum())
        n_copied += int(copied.sum())
        with torch.no_grad():
            _, ar_logits = ar_readout(model, ids, attn, canvas)
            add("ar", ar_logits.argmax(-1) == canvas, is_target, copied)
            enc_out = model.model.encoder(input_ids=ids, attention_mask=attn)
            cache = enc_out.cache  # read-only for the decoder
            extra: dict[str, Any] = {}
            if has_copy_head(model):
                extra["copy_memory"] = model.copy_head.new_memory(ids, enc_out.last_hidden_state, attn)
            for tv in (0.25, 0.5, 1.0):
                ok, sel = _denoised_once(model, cache, attn, canvas, is_target, tv, V, s0, extra)
                add(f"diffusion_t{tv}", ok, sel, copied)
    out: dict[str, Any] = {
        "checkpoint": checkpoint,
        "n_examples": len(enc),
        "n_target_tokens": n_target,
        "n_copied_tokens": n_copied,
    }
    for k in levels:
        out[k] = {p: h[0] / max(1, h[1]) for p, h in hits[k].items()}
    return out


_WORD = re.compile(r"[A-Za-z0-9_./:-]{3,}")


def word_reachability(tokenizer: Any, prompt: str, target: str, *, spaced: bool) -> tuple[int, int]:
    """``(n_words, n_unreachable)``: the words of ``target`` (runs of letters, digits and ``_./:-``, 3 characters
    or more, outside control-token spellings) that occur whole in ``prompt``, and how many of them the copy head
    cannot copy token by token: BPE splits a word by its context (``a gent k it`` after a quote, ``Ġagent k it``
    after a space), and a word is reachable when every token of its tokenization in the target (with a leading
    space when ``spaced``) has its stripped text among the prompt tokens' stripped texts.
    """

    def pieces(text: str) -> list[str]:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        return [str(tokenizer.decode([i])).strip() for i in ids]

    source = set(pieces(prompt))
    plain = CONTROL_SPELLING.sub(" ", prompt)
    n = bad = 0
    for m in _WORD.findall(CONTROL_SPELLING.sub(" ", target)):
        w = m.strip("./:-")  # a sentence's final period is not part of the word
        if len(w) < 3 or not re.search(rf"(?<![A-Za-z0-9_]){re.escape(w)}(?![A-Za-z0-9_])", plain):
            continue  # not a word of the prompt: "tool" inside "tools" or "<|tool>" is not copied
        n += 1
        bad += not all(t in source for t in pieces((" " if spaced else "") + w) if t)
    return n, bad


def copy_reachability(checkpoint: str, n: int = 300) -> dict[str, Any]:
    """:func:`word_reachability` over ``n`` held-out calls (unspaced) and ``n`` answers (spaced), with the
    tokenizer of ``checkpoint`` (``OSError`` if it does not load): ``{"calls": {...}, "answers": {...}}``, each
    with ``n_examples``, ``n_words``, ``unreachable_words`` and ``examples_with_unreachable`` (fractions)."""
    tok = AutoTokenizer.from_pretrained(checkpoint, local_files_only=True)
    pool = Generator(HELDOUT_SEED, "heldout").take(20 * n)
    out: dict[str, Any] = {}
    for group, kinds, spaced in (
        ("calls", ("call",), False),
        ("answers", ("answer_after_tool", "bot_answer"), True),
    ):
        exs = [e for e in pool if e.kind in kinds][:n]
        words = bad = with_bad = 0
        for e, enc in zip(exs, encode_examples(tok, exs), strict=True):
            w, b = word_reachability(tok, str(tok.decode(enc.prompt)), e.target, spaced=spaced)
            words, bad, with_bad = words + w, bad + b, with_bad + (b > 0)
        out[group] = {
            "n_examples": len(exs),
            "n_words": words,
            "unreachable_words": bad / max(1, words),
            "examples_with_unreachable": with_bad / max(1, len(exs)),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; prints a table (or one JSON object with ``--json``); returns the exit code."""
    ap = argparse.ArgumentParser(prog="python -m evals.probe", description=__doc__.split("\n\n")[0])
    ap.add_argument("checkpoint")
    ap.add_argument("--n", type=int, default=200, help="held-out single-call examples")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    ap.add_argument(
        "--reachability",
        action="store_true",
        help="instead: the share of copied words no token-by-token copy can produce (tokenizer only)",
    )
    a = ap.parse_args(argv)
    if a.n < 1:
        print(f"error: --n must be >= 1 (got {a.n})", file=sys.stderr)
        return 2
    if not (Path(a.checkpoint) / "config.json").is_file():
        print(
            f"error: no checkpoint at {a.checkpoint} (a folder with config.json is expected)", file=sys.stderr
        )
        return 2
    what = "the tokenizer of" if a.reachability else "checkpoint"
    try:
        r = (
            copy_reachability(a.checkpoint, n=a.n)
            if a.reachability
            else copy_probe(a.checkpoint, n=a.n, threads=a.threads)
        )
    except OSError as e:
        print(f"error: cannot load {what} {a.checkpoint}: {e}", file=sys.stderr)
        return 2
    if a.json:
        print(json.dumps(r))
        return 0
    if a.reachability:
        for group, g in r.items():
            print(
                f"{group}: {g['n_examples']} examples, {g['n_words']} words copied from the prompt; "
                f"unreachable token by token {g['unreachable_words']:.3f} of words, "
                f"{g['examples_with_unreachable']:.3f} of examples"
            )
        return 0
    print(
        f"{r['checkpoint']}: {r['n_examples']} calls, {r['n_target_tokens']} target tokens, "
        f"{r['n_copied_tokens']} copied value tokens"
    )
    for k in ("ar", "diffusion_t0.25", "diffusion_t0.5", "diffusion_t1.0"):
        print(f"  {k:16s} all {r[k]['all']:.3f}  copied {r[k]['copied']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
