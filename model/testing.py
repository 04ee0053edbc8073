"""Small random-weight DiffusionGemma checkpoints for tests and benchmarks (written locally, never downloaded).

DiffusionGemma has no dense-only variant: every layer carries the dense MLP plus a router and experts, so the
closest to dense is ``num_experts=1, top_k_experts=1``. A vision tower is always built; a tiny
``gemma4_vision`` sub-config keeps it at ~20k parameters. ``global_head_dim`` and ``layer_types`` are passed
explicitly (the defaults are 512 and "force the last layer to full attention with a warning").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import DiffusionGemmaForBlockDiffusion

from grammar import special_tokens as st
from model.checkpoint.config import small_config
from model.checkpoint.tokenizer import build_tokenizer, wrap_tokenizer
from model.heads.copy_head import CopyHeadConfig
from model.heads.copy_model import DiffusionGemmaWithCopyHead
from model.heads.vision import write_processor_config
from model.training.settings import TrainConfig, generation_config

_CORPUS_SEED = (
    "The weather in Paris is sunny today. get_weather city days units metric imperial forecast. "
    "def find_definition(name): return search(root, pattern) class Agent: tools = [] "
    "What is 12 plus 30? The answer is 42. Hello, how can I help you? London Tokyo Berlin New York "
    '{"name": "search", "arguments": {"query": "x", "limit": 3}} call:response:declaration:description: '
    "parameters:type:object properties required string integer number boolean array items enum "
)
#: The tiny checkpoint's denoising schedule: the real checkpoint's (0.8 -> 0.4 in 48 steps).
_TINY_SCHEDULE = {"max_denoising_steps": 48, "t_max": 0.8, "t_min": 0.4}


def tiny_corpus() -> list[str]:
    """Return a small, deterministic English + code + tool-syntax corpus for training test tokenizers."""
    words = _CORPUS_SEED.split()
    lines = [_CORPUS_SEED]
    for i in range(200):
        lines.append(" ".join(words[(i * 7 + j) % len(words)] for j in range(12)) + f" {i} {i * 3.5}")
    return lines


def tiny_config(vocab_size: int = 512, hidden_size: int = 64, num_layers: int = 2, **kwargs: Any) -> Any:
    """A small random-weight test configuration: :func:`model.checkpoint.config.small_config` with test defaults (vocabulary
    512, hidden 64, 2 layers); ``kwargs`` are its keywords (``canvas_length=``, ``num_heads=``...)."""
    return small_config(vocab_size, hidden_size, num_layers, **kwargs)


def tiny_train_config(**overrides: Any) -> Any:
    """A :class:`model.training.settings.TrainConfig` of a model small enough for CPU tests (hidden 64, 2 layers,
    2 query heads and 1 KV head of 32, MLP 128 plus one expert of 64); ``overrides`` set any field."""
    fields: dict[str, Any] = {
        "hidden_size": 64,
        "intermediate_size": 128,
        "moe_intermediate_size": 64,
        "num_layers": 2,
        "num_heads": 2,
        "num_kv_heads": 1,
        "head_dim": 32,
    }
    return TrainConfig(**{**fields, **overrides})


def make_tiny_checkpoint(
    path: str | Path,
    *,
    canvas_length: int = 16,
    vocab_size: int = 512,
    seed: int = 0,
    hidden_size: int = 64,
    num_layers: int = 2,
    generation: dict[str, Any] | None = None,
    copy_head: bool = False,
) -> Path:
    """Write a random-weight DiffusionGemma checkpoint with its own tokenizer to ``path``.

    Args:
        path: output folder (created).
        canvas_length: tokens per canvas.
        vocab_size: tokenizer and embedding size (>= 300).
        seed: torch seed for the weights.
        hidden_size, num_layers: model size (one expert, routed top-1).
        generation: overrides for ``generation_config.json`` (e.g. ``{"t_max": 0.5}``).
        copy_head: write a ``DiffusionGemmaWithCopyHead`` (:mod:`model.heads.copy_head`; ``copy_head`` in
            ``config.json``) with its variant tables filled from the tokenizer.

    Returns:
        The folder, loadable with ``DiffusionGemmaForBlockDiffusion.from_pretrained(path)``,
        ``AutoTokenizer.from_pretrained(path)`` and ``AutoImageProcessor.from_pretrained(path)`` offline.
    """
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer(tiny_corpus(), vocab_size=vocab_size, min_frequency=1)
    cfg = tiny_config(
        vocab_size=vocab_size, hidden_size=hidden_size, num_layers=num_layers, canvas_length=canvas_length
    )
    torch.manual_seed(seed)
    model: Any
    if copy_head:
        cfg.copy_head = CopyHeadConfig(
            dim=16,
            free_dim=8,
            turn_start_id=st.SPECIAL_IDS[st.TURN_START],
            turn_end_id=st.SPECIAL_IDS[st.TURN_END],
            excluded_role_ids=tok("system", add_special_tokens=False)["input_ids"][:1],
        ).to_dict()
        model = DiffusionGemmaWithCopyHead(cfg).eval()
        model.copy_head.set_token_tables(tok)
    else:
        model = DiffusionGemmaForBlockDiffusion(cfg).eval()
    model.generation_config = generation_config(canvas_length, {**_TINY_SCHEDULE, **(generation or {})})
    model.save_pretrained(out)
    tok.save_pretrained(out)
    write_processor_config(out, cfg)
    return out


def synthetic_tokenizer(vocab_size: int = 262_144) -> Any:
    """A byte-level BPE tokenizer of exactly ``vocab_size`` tokens built from programmatic merges.

    For measuring constraint cost at the real Gemma vocabulary size (262,144) without training a tokenizer
    that large: ids ``0..17`` are the project's special tokens, then the 256 byte tokens, then merges of
    printable characters into 2- and 3-character tokens until the size is reached. Carries the chat template.

    Raises:
        ValueError: if ``vocab_size`` exceeds what the merge scheme can generate (~2.4M).
    """
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
