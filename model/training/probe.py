"""Copy probe: how often a checkpoint reproduces the value tokens a tool call must copy from the request.

``python -m model.training.probe CKPT [--n 40] [--json]`` draws single-call examples from the held-out
synthetic split and measures, on the tokens of the target call that are *copied* values (tokens with a letter
or digit whose text, leading space stripped, is the text of a token of the request but of no token of the
system turn, so ``ĠBerlin`` in the request and ``Berlin`` in the call count as a copy):

- ``ar``: next-token accuracy of the encoder read-out (causal, teacher-forced over prompt + target) through the
  tied LM head: the autoregressive route that ``--ar-weight`` trains;
- ``diffusion_t{0.25,0.5,1.0}``: accuracy of one decoder pass on the corrupted positions of a canvas in which a
  fraction t of positions is replaced by uniform random tokens (the training objective's view; t = 1 is pure
  noise, the first denoising step).

Each figure is reported for all target tokens and for copied tokens alone. A model that has learned to copy has
copied-token accuracy close to its all-token accuracy; the checkpoints of docs/TRAINING.md sit near 0.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import Any


def copy_probe(checkpoint: str, n: int = 40, seed: int = 7, threads: int = 1) -> dict[str, Any]:
    """Run the probe on ``checkpoint`` (a local folder).

    Args:
        checkpoint: folder with a DiffusionGemma checkpoint and its tokenizer.
        n: number of held-out single-call examples (one canvas each; targets cut at ``canvas_length`` tokens).
        seed: held-out generator seed; noise draws use fixed seeds, so the result is deterministic.
        threads: ``torch.set_num_threads``.

    Returns:
        dict with ``n_examples``, ``n_target_tokens``, ``n_copied_tokens`` and, for each of ``ar``,
        ``diffusion_t0.25``, ``diffusion_t0.5``, ``diffusion_t1.0``, a dict ``{"all": acc, "copied": acc}``
        (fractions in [0, 1]).

    Raises:
        ValueError: if ``n < 1``.
        OSError: if the checkpoint folder cannot be loaded.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    import torch
    from transformers import AutoTokenizer, DiffusionGemmaForBlockDiffusion

    from model import special_tokens as st
    from model.training.data import Generator
    from model.training.train import ar_readout, encode_examples, make_batch

    torch.set_num_threads(threads)
    model = DiffusionGemmaForBlockDiffusion.from_pretrained(checkpoint, local_files_only=True).eval()
    tok = AutoTokenizer.from_pretrained(checkpoint)
    C = int(model.config.canvas_length)
    V = int(model.config.text_config.vocab_size)
    exs = [e for e in Generator(seed, "heldout").take(20 * n) if e.kind == "call"][:n]
    enc = encode_examples(tok, exs)
    b = make_batch(enc, C, 4096, random.Random(0))
    ids, attn, canvas, is_target = b["input_ids"], b["attention_mask"], b["canvas"], b["is_target"]
    copied = torch.zeros_like(is_target)
    text = [str(tok.decode([i])).strip() for i in range(len(tok))]
    turn_end = tok.convert_tokens_to_ids(st.TURN_END)
    for i, e in enumerate(enc):
        start = e.prompt.index(turn_end) + 1 if turn_end in e.prompt else 0
        system = {text[x] for x in e.prompt[:start]}
        request = {text[x] for x in e.prompt[start:]} - system
        for j, x in enumerate(e.target[:C]):
            copied[i, j] = any(ch.isalnum() for ch in text[x]) and text[x] in request
    B = ids.shape[0]
    ones = torch.ones_like(canvas)

    def acc(ok: Any, sel: Any) -> float:
        return float((ok & sel).sum()) / max(1, int(sel.sum()))

    out: dict[str, Any] = {
        "checkpoint": checkpoint,
        "n_examples": B,
        "n_target_tokens": int(is_target.sum()),
        "n_copied_tokens": int(copied.sum()),
    }
    with torch.no_grad():
        _, ar_logits = ar_readout(model, ids, attn, canvas)
        ok = ar_logits.argmax(-1) == canvas
        out["ar"] = {"all": acc(ok, is_target), "copied": acc(ok, copied)}
        cache = model.model.encoder(input_ids=ids, attention_mask=attn).cache  # read-only for the decoder
        for tv in (0.25, 0.5, 1.0):
            g = torch.Generator().manual_seed(0)
            corrupt = torch.rand(B, C, generator=g) < tv
            noised = torch.where(corrupt, torch.randint(0, V, (B, C), generator=g), canvas)
            logits = model(
                cache=cache, decoder_input_ids=noised, decoder_attention_mask=torch.cat([attn, ones], 1)
            ).logits
            ok = logits.argmax(-1) == canvas
            out[f"diffusion_t{tv}"] = {
                "all": acc(ok, corrupt & is_target),
                "copied": acc(ok, corrupt & copied),
            }
    return out


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; prints a table (or one JSON object with ``--json``); returns the exit code."""
    ap = argparse.ArgumentParser(prog="python -m model.training.probe", description=__doc__.split("\n\n")[0])
    ap.add_argument("checkpoint")
    ap.add_argument("--n", type=int, default=40, help="held-out single-call examples")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    if a.n < 1:
        print(f"error: --n must be >= 1 (got {a.n})", file=sys.stderr)
        return 2
    if not (Path(a.checkpoint) / "config.json").is_file():
        print(
            f"error: no checkpoint at {a.checkpoint} (a folder with config.json is expected)", file=sys.stderr
        )
        return 2
    try:
        r = copy_probe(a.checkpoint, n=a.n, threads=a.threads)
    except OSError as e:
        print(f"error: cannot load checkpoint {a.checkpoint}: {e}", file=sys.stderr)
        return 2
    if a.json:
        print(json.dumps(r))
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
