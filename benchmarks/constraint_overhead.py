"""Constrained vs unconstrained generation of tool calls: wall time, forwards, TPF, constraint time per step.

Part 1 (the embedded default checkpoint, or a random tiny one if it is missing): the same prompts and seeds,
generated with the tool-call grammar applied during denoising and without it (tools still declared in the
prompt). Part 2 (the real Gemma vocabulary size, 262,144 tokens, synthetic byte-level BPE, random weights,
canvas 256): constraint time per denoising step against the decoder forward time per step.

Targets (issue #4): constrained wall time <= 1.1x unconstrained; more tokens per forward when constrained;
constraint work per step <= 5% of a decoder forward at canvas 256.

    python benchmarks/constraint_overhead.py [--quick] [--json] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks._common import emit, target
from grammar import special_tokens as st
from model.checkpoint.loading import DEFAULT_CHECKPOINT
from model.checkpoint.tokenizer import wrap_tokenizer
from model.turn.chat import ChatModel

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_current_weather",
            "description": "Current weather for a place.",
            "parameters": {
                "type": "object",
                "properties": {
                    "place": {"type": "string", "description": "City name"},
                    "units": {"type": "string", "enum": ["metric", "imperial"]},
                },
                "required": ["place"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_forecast",
            "description": "Daily forecast for a place.",
            "parameters": {
                "type": "object",
                "properties": {
                    "place": {"type": "string"},
                    "days": {"type": "integer", "minimum": 1, "maximum": 16},
                },
                "required": ["place", "days"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "find_definition",
            "description": "Find where a function or class is defined.",
            "parameters": {
                "type": "object",
                "properties": {"name": {"type": "string"}},
                "required": ["name"],
            },
        },
    },
]
PROMPTS = [
    "What's the weather in Lisbon right now?",
    "Give me a 5 day forecast for Osaka.",
    "Where is the function load_bundle defined?",
    "Is it raining in Berlin? Use imperial units.",
    "Forecast for Nairobi for the next 3 days please.",
    "Find the definition of the class Agent.",
]


def run_pair(chat: ChatModel, prompt: str, seed: int, max_new_tokens: int) -> dict[str, Any]:
    msgs = [{"role": "user", "content": prompt}]
    out: dict[str, Any] = {}
    for mode in ("unconstrained", "constrained"):
        if mode == "constrained":
            r = chat.chat(msgs, tools=TOOLS, tool_choice="auto", seed=seed, max_new_tokens=max_new_tokens)
        else:
            r = _unconstrained(chat, msgs, seed, max_new_tokens)
        s = r.stats
        out[mode] = {
            "wall_s": r.latency_s,
            "forwards": s.decoder_forwards[0],
            "tpf": s.tokens_per_forward[0],
            "steps": s.total_steps,
            "constraint_s_per_step": s.time_constraint_s / max(s.total_steps, 1),
            "decoder_s_per_step": s.time_decoder_s / max(s.total_steps, 1),
            "calls": len(r.tool_calls),
        }
    return out


def _unconstrained(chat: ChatModel, msgs: list[dict[str, Any]], seed: int, max_new_tokens: int) -> Any:
    """Unconstrained generation, timed once; output that does not parse counts as zero calls."""
    import time

    from grammar.parse import ToolCallParseError, parse_tool_calls
    from model.checkpoint.tokenizer import decode_marked
    from model.runtime import generate
    from model.turn.chat import ChatOutput

    t0 = time.perf_counter()
    ids = torch.tensor([chat.encode(msgs, TOOLS)], dtype=torch.long)
    res = generate(chat.model, ids, chat.settings.replace(max_new_tokens=max_new_tokens), seed=seed)
    new = [t for t in res.new_tokens[0].tolist() if t != chat.settings.pad_token_id]
    raw = chat.tokenizer.decode(new, skip_special_tokens=False)
    try:
        calls = parse_tool_calls(decode_marked(chat.tokenizer, new)).calls
    except ToolCallParseError:
        calls = []
    return ChatOutput(
        text="",
        thinking=None,
        tool_calls=list(calls),
        raw=raw,
        stats=res.stats,
        latency_s=time.perf_counter() - t0,
    )


def synthetic_tokenizer(vocab_size: int = 262_144) -> Any:
    """A byte-level BPE tokenizer of exactly ``vocab_size`` tokens from programmatic merges (the special tokens, the
    256 bytes, then 2- and 3-character merges), for measuring constraint cost at Gemma's vocabulary size. ValueError
    beyond what the scheme generates (~2.4M)."""
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    byte_chars = sorted(alphabet)
    vocab: dict[str, int] = {tok: i for i, tok in enumerate(st.SPECIAL_TOKENS)}
    for ch in byte_chars:
        vocab[ch] = len(vocab)
    merges: list[tuple[str, str]] = []
    base = [c for c in "etaoinshrdlcumwfgypbvkjxqzETAOINSHRDLCUMWFGYPBVKJXQZ0123456789_:{},.\"'Ġ-()[]/=<>"]
    base = [c for c in base if c in vocab]
    level2: list[str] = []

    def add_merges(lefts: list[str], out: list[str] | None) -> None:
        for a in lefts:
            for b in base:
                if len(vocab) >= vocab_size:
                    return
                if a + b not in vocab:
                    vocab[a + b] = len(vocab)
                    merges.append((a, b))
                    if out is not None:
                        out.append(a + b)

    add_merges(base, level2)
    add_merges(level2, None)
    if len(vocab) < vocab_size:
        raise ValueError(f"synthetic scheme reaches only {len(vocab)} tokens < {vocab_size}")
    bpe = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    bpe.decoder = decoders.ByteLevel()
    bpe.add_special_tokens(list(st.SPECIAL_TOKENS))
    return wrap_tokenizer(bpe)


def part_large_vocab(quick: bool) -> dict[str, Any]:
    """Constraint vs decoder time per step at vocab 262,144 and canvas 256 (random weights)."""
    from transformers import DiffusionGemmaForBlockDiffusion
    from transformers.models.diffusion_gemma.generation_diffusion_gemma import (
        DiffusionGemmaGenerationConfig,
        EntropyBoundSamplerConfig,
    )

    from model.checkpoint.config import small_config

    path = Path(tempfile.mkdtemp(prefix="bench_cons_")) / "v262k"
    torch.manual_seed(0)
    model = DiffusionGemmaForBlockDiffusion(small_config(262144, 64, 2, canvas_length=256)).eval()
    model.generation_config = DiffusionGemmaGenerationConfig(
        max_new_tokens=256,
        max_denoising_steps=4 if quick else 8,
        sampler_config=EntropyBoundSamplerConfig(entropy_bound=0.1),
        t_max=0.8,
        t_min=0.4,
        stability_threshold=1,
        confidence_threshold=0.005,
        eos_token_id=[1, 5, 10],
        pad_token_id=0,
    )
    model.save_pretrained(path)
    synthetic_tokenizer(262144).save_pretrained(path)
    chat = ChatModel.load(str(path))
    rows = []
    for seed in range(1 if quick else 2):
        r = chat.chat(
            [{"role": "user", "content": PROMPTS[seed]}], tools=TOOLS, tool_choice="required", seed=seed
        )
        s = r.stats
        rows.append((s.time_constraint_s / s.total_steps, s.time_decoder_s / s.total_steps))
    c = statistics.mean(x for x, _ in rows)
    d = statistics.mean(y for _, y in rows)
    return {
        "vocab": 262144,
        "canvas": 256,
        "constraint_ms_per_step": round(1000 * c, 3),
        "decoder_ms_per_step": round(1000 * d, 3),
        "ratio": round(c / d, 4),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--model", default=None, help="checkpoint (default: the embedded default, else a random tiny one)"
    )
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    src = args.model
    if src is None and not DEFAULT_CHECKPOINT.exists():
        from model.testing import make_tiny_checkpoint

        src = str(
            make_tiny_checkpoint(
                Path(tempfile.mkdtemp()) / "tiny",
                canvas_length=64,
                vocab_size=4096,
                hidden_size=192,
                num_layers=3,
                generation={"max_new_tokens": 128},
            )
        )
    chat = ChatModel.load(src)
    run_pair(
        chat, PROMPTS[0], 99, 128
    )  # warm-up: builds the llguidance tokenizer and caches (one-time costs)
    prompts = PROMPTS[:3] if args.quick else PROMPTS
    seeds = [0] if args.quick else [0, 1]
    rows = []
    for p in prompts:
        for seed in seeds:
            rows.append(run_pair(chat, p, seed, 128))
    agg = {}
    for mode in ("unconstrained", "constrained"):
        agg[mode] = {k: statistics.mean(r[mode][k] for r in rows) for k in rows[0][mode]}
    wall_ratio = agg["constrained"]["wall_s"] / agg["unconstrained"]["wall_s"]
    large = part_large_vocab(args.quick)
    small_ratio = agg["constrained"]["constraint_s_per_step"] / max(
        agg["constrained"]["decoder_s_per_step"], 1e-9
    )
    report = {
        "benchmark": "constraint_overhead",
        "checkpoint": src or str(DEFAULT_CHECKPOINT),
        "n_pairs": len(rows),
        "mean": {m: {k: round(v, 5) for k, v in d.items()} for m, d in agg.items()},
        "constrained_over_unconstrained_wall": round(wall_ratio, 3),
        "constraint_over_decoder_per_step_small_vocab": round(small_ratio, 4),
        "large_vocab": large,
        "targets": [
            target("constrained_wall_over_unconstrained", round(wall_ratio, 3), 1.1, False),
            target(
                "tpf_constrained_minus_unconstrained",
                round(agg["constrained"]["tpf"] - agg["unconstrained"]["tpf"], 3),
                0.0,
                True,
            ),
            target("constraint_over_decoder_forward_canvas256_vocab262k", large["ratio"], 0.05, False),
        ],
    }
    if not args.json:
        for mode, d in report["mean"].items():
            print(f"{mode:14s}: " + ", ".join(f"{k}={v}" for k, v in d.items()))
        print(f"wall ratio constrained/unconstrained: {wall_ratio:.3f}")
        print(f"vocab 262,144, canvas 256: {large}")
    emit(report, args.json)


if __name__ == "__main__":
    main()
