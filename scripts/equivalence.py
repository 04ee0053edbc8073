"""Fingerprints of what a refactoring must leave unchanged, to compare two checkouts.

    .venv/bin/python scripts/equivalence.py [--skip-maskbench] > after.json
    git worktree add /tmp/before REV && cp scripts/equivalence.py /tmp/before/scripts/
    .venv/bin/python /tmp/before/scripts/equivalence.py > before.json   # imports /tmp/before's own code
    diff before.json after.json

(``../shared`` must sit beside both checkouts, or beside neither: the training data draws Glaive tools from it.)

One JSON object, each value a SHA-1 over its part:

- ``runtime``: generated token ids on tiny checkpoints (with and without a copy head) in fast, kernel (its CPU
  reference) and parity mode, with and without an acceptance window, and the batcher's rows; chat turns of the embedded
  checkpoint with and without the tool-call constraint;
- ``grammars_bfcl``: tool-call grammars (both syntaxes) of the BFCL tool lists shipped in ``model/training``;
- ``grammars_maskbench``: value grammars of every third MaskBench schema (``../shared/data``; absent: skipped);
- ``training_data``: 3,000 generated examples per split (seed 3);
- ``training_losses``: three steps of the diffusion and copy losses on a fixed-seed batch;
- ``training_loop``: the logged figures of 6 steps of ``train()`` on a tiny run, with and without the copy head.

Nothing is written; CPU, one thread, a few minutes.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import hashlib
import json
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _sha(obj: Any) -> str:
    return hashlib.sha1(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def _free_turn(cm: Any, question: str, seed: int) -> str:
    """The raw text (special tokens kept) of an unconstrained turn: what the runtime wrote, unparsed (without the
    constraint the checkpoint may write a malformed tool call, which ``ChatModel.chat`` refuses to parse)."""
    import torch

    from model.runtime import generate

    turn = cm.prepare([{"role": "user", "content": question}], constrained=False)
    ids = torch.tensor([turn.input_ids], dtype=torch.long)
    result = generate(cm.model, ids, turn.settings, seed=seed, prefill=turn.prefill)
    new = [t for t in result.new_tokens[0].tolist() if t != turn.settings.pad_token_id]
    return str(cm.tokenizer.decode(new, skip_special_tokens=False))


def runtime() -> str:
    import torch

    from model.checkpoint.loading import load_checkpoint
    from model.runtime import generate
    from model.runtime.batcher import CanvasBatcher
    from model.testing import make_tiny_checkpoint
    from model.turn.chat import ChatModel

    out: dict[str, Any] = {}
    cm = ChatModel.load(None)
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
                    "required": ["city"],
                },
            },
        }
    ]
    for i, q in enumerate(["What is the weather in Paris?", "Hello, who are you?"]):
        for tc in ("auto", "required"):
            r = cm.chat([{"role": "user", "content": q}], tools=tools, tool_choice=tc, seed=i)
            out[f"chat {i} {tc}"] = [r.text, [(c.name, c.arguments) for c in r.tool_calls]]
        out[f"chat {i} free"] = _free_turn(cm, q, seed=i)
    folder = tempfile.mkdtemp()
    ids = torch.tensor([[2, 5, 9, 11, 13], [0, 2, 7, 8, 9]])
    mask = torch.tensor([[1] * 5, [0, 1, 1, 1, 1]])
    for head in (False, True):
        ck = load_checkpoint(make_tiny_checkpoint(f"{folder}/t{int(head)}", copy_head=head))
        for parity, sampler in ((False, "torch"), (False, "kernel"), (True, "auto")):
            for window in (None, 4):
                s = ck.settings.replace(accept_window=window) if window else ck.settings
                r = generate(ck.model, ids, s, attention_mask=mask, seed=7, parity=parity, sampler=sampler)
                out[f"generate {head} {parity} {sampler} {window}"] = r.sequences.tolist()
        b = CanvasBatcher(ck.model, ck.settings, max_batch=4)
        try:
            handles = [b.submit([2, 5, 9, 11 + k], seed=k) for k in range(3)]
            out[f"batcher {head}"] = [h.future.result(timeout=300).tokens for h in handles]
        finally:
            b.close()
    return _sha(out)


def grammars_bfcl() -> str:
    from grammar.turn import tool_call_grammar
    from schema import SchemaError

    out = []
    for f in sorted((ROOT / "evals" / "bfcl_data").glob("*.json.gz")):
        for line in gzip.open(f, "rt"):
            fns = json.loads(line).get("function") if line.strip() else None
            for syntax in ("gemma", "json") if fns else ():
                try:
                    out.append(tool_call_grammar(fns if isinstance(fns, list) else [fns], syntax=syntax))
                except SchemaError as exc:
                    out.append(f"error: {exc}")
    return _sha(out)


def grammars_maskbench() -> str | None:
    from grammar.turn import value_grammar
    from schema import SchemaError

    path = ROOT.parent / "shared" / "data" / "maskbench" / "dev.jsonl.gz"
    if not path.exists():
        return None
    out = []
    for i, line in enumerate(gzip.open(path, "rt")):
        if i % 3 == 0:
            try:
                out.append(value_grammar(json.loads(line)["schema"]))
            except SchemaError as exc:
                out.append(f"error: {exc}")
            except Exception as exc:
                out.append(f"exception: {type(exc).__name__}")
    return _sha(out)


def training_data() -> str:
    from model.training.data import Generator

    return _sha(
        [
            [e.messages, e.target, e.kind]
            for split in ("train", "heldout")
            for e in Generator(3, split).take(3000)
        ]
    )


#: The tiny model of the training fingerprints (the fields of ``tests/training_helpers.tiny_train_config``).
_TINY = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "moe_intermediate_size": 64,
    "num_layers": 2,
    "num_heads": 2,
    "num_kv_heads": 1,
    "head_dim": 32,
}


def training_losses() -> str:
    import torch

    from model.checkpoint.tokenizer import build_tokenizer
    from model.testing import tiny_corpus
    from model.training.batches import encode_labelled, make_batch, word_token_table
    from model.training.data import Generator, corpus_texts
    from model.training.losses import copy_diffusion_loss, diffusion_loss
    from model.training.settings import TrainConfig, build_model

    examples = Generator(3, "train").take(200)
    tok = build_tokenizer(tiny_corpus() + list(corpus_texts(examples)), vocab_size=512, min_frequency=1)
    out: dict[str, Any] = {}
    for head in (True, False):
        # spelled out rather than tests/training_helpers.tiny_train_config: this script also runs in older checkouts
        cfg = TrainConfig(
            copy_head=head,
            vocab_size=len(tok),
            **_TINY,
            canvas_length=32,
            max_prompt=160,  # unused by the losses; with the canvas inside the sliding window, as ar_weight needs
            copy_dim=16,
            noise_draws=2,
            self_cond_p=0.5,
            ar_weight=0.3,
            prefix_clean_p=0.5,
        )
        torch.manual_seed(0)
        model = build_model(cfg, tok)
        calls = [e for e in examples if e.kind in ("call", "bot_call")][:6]
        enc = encode_labelled(tok, calls, word_token_table(tok))
        batch = make_batch(enc, cfg.canvas_length, 512, random.Random(0), pad_weight=0.25, copy_weight=0.5)
        out[f"batch {head}"] = {k: v.tolist() for k, v in sorted(batch.items())}
        g = torch.Generator().manual_seed(0)
        for step in range(3):
            if head:
                loss, stats = copy_diffusion_loss(model, batch, cfg, generator=g)
            else:
                loss, stats = diffusion_loss(
                    model,
                    batch,
                    vocab_size=cfg.vocab_size,
                    self_cond_p=0.5,
                    pad_weight=0.25,
                    generator=g,
                    ar_weight=0.3,
                )
            out[f"loss {head} {step}"] = [
                round(float(loss.detach()), 6),
                {k: round(float(v), 6) for k, v in stats.items()},
            ]
    return _sha(out)


def training_loop() -> str:
    """``train()`` itself, 6 steps of a tiny run with and without the copy head: every logged figure but the
    timings (loss, its EMA, learning rate, gradient norm, auxiliary statistics, held-out figures)."""
    from model.training.train import TrainConfig, train

    out: dict[str, Any] = {}
    for head in (False, True):
        with tempfile.TemporaryDirectory() as d:
            cfg = TrainConfig(
                out_dir=f"{d}/run",
                vocab_size=600,
                **_TINY,
                canvas_length=16,
                max_prompt=160,
                n_train=120,
                n_heldout=16,
                tokenizer_examples=120,
                batch_size=4,
                steps=6,
                warmup=2,
                ckpt_every=3,
                eval_every=3,
                log_every=1,
                bucket_mult=2,
                lr=3e-3,
                copy_head=head,
                noise_draws=2,
                copy_dim=16,
                threads=1,
            )
            train(cfg)
            timings = {"tok_per_s", "s_per_step", "elapsed_s"}
            out[str(head)] = [
                {k: round(v, 6) for k, v in json.loads(line).items() if k not in timings}
                for line in Path(cfg.out_dir, "log.jsonl").read_text().splitlines()
            ]
    return _sha(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--skip-maskbench", action="store_true", help="leave out the MaskBench grammars (slowest part)"
    )
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    with contextlib.redirect_stdout(sys.stderr):  # train()'s log: stdout holds the JSON alone
        parts = {
            "runtime": runtime(),
            "grammars_bfcl": grammars_bfcl(),
            "grammars_maskbench": None if args.skip_maskbench else grammars_maskbench(),
            "training_data": training_data(),
            "training_losses": training_losses(),
            "training_loop": training_loop(),
        }
    print(json.dumps(parts, indent=1))


if __name__ == "__main__":
    main()
