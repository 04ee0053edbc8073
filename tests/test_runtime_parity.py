"""Parity of model.runtime.generate (parity mode) with transformers' DiffusionGemmaForBlockDiffusion.generate."""

import dataclasses

import pytest
import torch

from model.checkpoint.loading import load_checkpoint
from model.runtime import generate

PROMPTS = ["Hello weather in Paris", "def foo(): return 1 and more text here", "What is 12?", "x"]


@pytest.fixture(scope="module")
def ckpt(tiny_checkpoint):
    return load_checkpoint(tiny_checkpoint("parity", 10))


def _batch(tok, n):
    enc = tok(PROMPTS[:n], return_tensors="pt", padding=True, padding_side="left")
    return enc.input_ids, enc.attention_mask


@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("max_new_tokens", [16, 48])
@pytest.mark.parametrize("seed", [0, 1])
def test_token_identical_to_reference(ckpt, batch, max_new_tokens, seed):
    ids, am = _batch(ckpt.tokenizer, batch)
    torch.manual_seed(seed)
    ref = ckpt.model.generate(ids, attention_mask=am, max_new_tokens=max_new_tokens)
    ours = generate(
        ckpt.model,
        ids,
        ckpt.settings.replace(max_new_tokens=max_new_tokens),
        attention_mask=am,
        seed=seed,
        parity=True,
    )
    assert ours.sequences.shape == ref.sequences.shape
    assert torch.equal(ours.sequences, ref.sequences)
    assert ours.stats.tokens_per_forward == pytest.approx(ref.tokens_per_forward.tolist(), rel=1e-6)


def test_parity_with_eos_padding_and_early_stop(ckpt):
    """EOS in the middle of a multi-canvas batch (rows finish at different canvases) and adaptive stopping."""
    model = ckpt.model
    ids, am = _batch(ckpt.tokenizer, 4)
    gc = model.generation_config
    old = (gc.eos_token_id, gc.confidence_threshold, gc.stability_threshold)
    try:
        # Random weights give near-uniform logits (entropy ~ log V = 6.24 nats): a threshold just below makes
        # rows stop at different steps.
        gc.confidence_threshold, gc.stability_threshold = 6.2, 0
        torch.manual_seed(0)
        cal = model.generate(ids, attention_mask=am, max_new_tokens=48).sequences
        prompt_len = ids.shape[1]
        eos_tok = int(cal[1, prompt_len + 20])  # a token row 1 produces in its second canvas
        model.generation_config.eos_token_id = [1, eos_tok]
        settings = dataclasses.replace(
            ckpt.settings,
            max_new_tokens=48,
            eos_token_ids=(1, eos_tok),
            confidence_threshold=6.2,
            stability_threshold=0,
        )
        padded, early, uneven = False, False, False
        for seed in range(3):
            torch.manual_seed(seed)
            ref = model.generate(ids, attention_mask=am, max_new_tokens=48)
            ours = generate(model, ids, settings, attention_mask=am, seed=seed, parity=True)
            assert torch.equal(ours.sequences, ref.sequences)
            padded |= bool((ours.new_tokens == 0).any())
            early |= min(ours.stats.steps_per_canvas) < 10
            uneven |= len(set(ours.stats.decoder_forwards)) > 1
        assert padded, "no padding happened: the EOS path was not exercised"
        assert early, "adaptive stopping never triggered"
        assert uneven, "rows should stop at different steps"
    finally:
        gc.eos_token_id, gc.confidence_threshold, gc.stability_threshold = old
