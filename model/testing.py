"""Small random-weight DiffusionGemma checkpoints for tests and benchmarks (written locally, never downloaded)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from transformers import DiffusionGemmaForBlockDiffusion

from grammar import special_tokens as st
from model.checkpoint.config import small_config
from model.checkpoint.tokenizer import build_tokenizer
from model.heads.copy_head import CopyHeadConfig
from model.heads.copy_model import DiffusionGemmaWithCopyHead
from model.heads.vision import write_processor_config
from model.training.settings import generation_config

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
    """A small, deterministic English + code + tool-syntax corpus for training test tokenizers."""
    words = _CORPUS_SEED.split()
    lines = [_CORPUS_SEED]
    for i in range(200):
        lines.append(" ".join(words[(i * 7 + j) % len(words)] for j in range(12)) + f" {i} {i * 3.5}")
    return lines


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
        hidden_size, num_layers: model size.
        generation: overrides for ``generation_config.json``.
        copy_head: write a ``DiffusionGemmaWithCopyHead`` with its tables filled from the tokenizer.

    Returns:
        The folder, loadable offline by transformers' ``from_pretrained``."""
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer(tiny_corpus(), vocab_size=vocab_size, min_frequency=1)
    cfg = small_config(vocab_size, hidden_size, num_layers, canvas_length=canvas_length)
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
