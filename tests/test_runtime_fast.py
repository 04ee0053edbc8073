"""The fast sampling path: same acceptance rule and same distribution as the reference, reproducible by seed."""

import pytest
import torch
from transformers.models.diffusion_gemma.generation_diffusion_gemma import (
    EntropyBoundSampler,
    EntropyBoundSamplerConfig,
)

from model.checkpoint.loading import CheckpointError, load_checkpoint
from model.runtime import StepEvent, generate, step
from model.runtime.sampler import Workspace, entropy_and_argmax, entropy_bound_accept, sample_positions
from model.runtime.scheduler import decoder_inputs, denoiser, prefill_batch, start_canvas


def test_entropy_and_argmax_match_categorical():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 7, 50, generator=g) * 3
    logits[0, 0, 5:] = float("-inf")  # masked row
    logits[1, 2, :] = float("-inf")
    logits[1, 2, 9] = 0.0  # forced row: entropy 0
    ent, am = entropy_and_argmax(logits.clone())
    ref = torch.distributions.Categorical(logits=logits).entropy()
    assert torch.allclose(ent, ref, atol=1e-5)
    assert torch.equal(am, logits.argmax(-1))
    assert ent[1, 2].item() == 0.0
    assert not torch.isnan(ent).any()


def test_entropy_workspace_same_bits_and_reused():
    g = torch.Generator().manual_seed(4)
    logits = torch.randn(2, 16, 300, generator=g) * 6
    logits[0, 3, 7:] = float("-inf")
    ws = Workspace(min_elements=1)
    assert Workspace().get(logits) is None  # 9,600 values: fresh tensors (still in cache)
    for _ in range(2):  # the second call writes over the first call's scratch tensors
        ent, am = entropy_and_argmax(logits, ws.get(logits))
        ref_ent, ref_am = entropy_and_argmax(logits)
        assert torch.equal(ent, ref_ent) and torch.equal(am, ref_am)
    first = ws.get(logits)
    assert first is not None and ws.get(logits) is first  # same shape: the same tensors
    other = ws.get(logits[:1])
    assert other is not None and other[0].shape == (1, 16, 300)
    assert Workspace(max_elements=100).get(logits) is None  # too large: nothing held
    assert ws.get(logits.clone().requires_grad_()) is None


@pytest.mark.parametrize("bound", [0.01, 0.1, 1.0, 5.0])
def test_acceptance_matches_reference_sampler(bound):
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(4, 32, 64, generator=g) * torch.linspace(0.1, 8, 32)[None, :, None]
    sampler = EntropyBoundSampler(EntropyBoundSamplerConfig(entropy_bound=bound), 32, 64, 48)
    cur = torch.zeros(4, 32, dtype=torch.long)
    sampler.accept_canvas(cur, cur, logits, 1)
    ent, _ = entropy_and_argmax(logits.clone())
    ours = entropy_bound_accept(ent, bound)
    assert torch.equal(ours, sampler.accepted_token_mask)
    assert ours.sum() >= 4  # the lowest-entropy position of each row is always accepted


def test_sample_positions_follow_softmax():
    """Chi-square goodness of fit of 20,000 draws against softmax (8 categories, 7 dof, p=0.001 -> 24.32)."""
    logits = torch.tensor([2.0, 1.0, 0.5, 0.0, -0.5, -1.0, -2.0, float("-inf")])
    n = 20000
    batch = logits.expand(1, n, 8).clone()
    mask = torch.ones(1, n, dtype=torch.bool)
    gen = torch.Generator().manual_seed(123)
    draws = sample_positions(batch, mask, generator=gen).flatten()
    counts = torch.bincount(draws, minlength=8).double()
    assert counts[7] == 0  # a -inf token is never drawn
    p = torch.softmax(logits, -1).double()[:7]
    expected = p * n
    chi2 = float(((counts[:7] - expected) ** 2 / expected).sum())
    assert chi2 < 24.32, chi2
    untouched = sample_positions(batch[:, :4], torch.zeros(1, 4, dtype=torch.bool))
    assert torch.equal(untouched, torch.full((1, 4), -1))


@pytest.fixture(scope="module")
def ckpt(tiny_checkpoint):
    return load_checkpoint(tiny_checkpoint("fast", 6))


def test_decoder_logits_same_values_as_the_model(ckpt):
    """The in-place soft-capping gives transformers' forward's logits bit for bit; with autograd on, the model
    itself runs (same values)."""
    ids = ckpt.tokenizer(["Hello there", "What is the weather"], return_tensors="pt", padding=True).input_ids
    den = denoiser(ckpt.model, ids, ckpt.settings, seed=0)
    batch = prefill_batch(den, ids, None, {})
    canvas = start_canvas(den, batch)
    inputs = {
        "decoder_input_ids": canvas.tokens,
        "self_conditioning_logits": torch.randn(2, canvas.tokens.shape[1], den.vocab) * 5,
        **decoder_inputs(den, batch, canvas),
    }
    with torch.no_grad():
        ours = step.decoder_logits(ckpt.model, **inputs)
        ref = ckpt.model(**inputs).logits
    assert ours.dtype == torch.float32 and torch.equal(ours, ref)
    assert ours.abs().max() <= ckpt.model.final_logit_softcapping
    assert torch.equal(step.decoder_logits(ckpt.model, **inputs).detach(), ref)


def test_fast_mode_reproducible_and_streams(ckpt):
    ids = ckpt.tokenizer(["Hello there", "What is the weather"], return_tensors="pt", padding=True).input_ids
    settings = ckpt.settings.replace(max_new_tokens=32)
    events = []
    a = generate(ckpt.model, ids, settings, seed=7, on_event=events.append)
    b = generate(ckpt.model, ids, settings, seed=7)
    c = generate(ckpt.model, ids, settings, seed=8)
    assert torch.equal(a.sequences, b.sequences)
    assert not torch.equal(a.sequences, c.sequences)
    assert a.sequences.shape == (2, ids.shape[1] + 32)
    steps = [e for e in events if isinstance(e, StepEvent)]
    assert len(steps) == a.stats.total_steps == 12
    assert steps[0].argmax.shape == (2, 16) and steps[0].accepted.dtype == torch.bool
    st = a.stats
    assert st.canvases == 2 and sum(st.steps_per_canvas) == 12
    # a row is denoised in the canvases up to the one where it ends: its forwards are those canvases' steps
    in_canvases = [-(-n // 16) for n in st.new_tokens]
    assert max(in_canvases) == 2 and all(1 <= k <= 2 for k in in_canvases)
    assert st.decoder_forwards == [sum(st.steps_per_canvas[:k]) for k in in_canvases]
    assert st.tokens_per_forward == pytest.approx(
        [n / f for n, f in zip(st.new_tokens, st.decoder_forwards, strict=True)]
    )


def test_kernel_sampling_path_end_to_end(ckpt):
    """The path the runtime takes on CUDA (dg_kernels.sampling.fused_sample), here through its CPU reference."""
    ids = ckpt.tokenizer(["Hello there", "Weather"], return_tensors="pt", padding=True).input_ids
    settings = ckpt.settings.replace(max_new_tokens=32)
    a = generate(ckpt.model, ids, settings, seed=5, sampler="kernel")
    b = generate(ckpt.model, ids, settings, seed=5, sampler="kernel")
    c = generate(ckpt.model, ids, settings, seed=6, sampler="kernel")
    assert torch.equal(a.sequences, b.sequences) and not torch.equal(a.sequences, c.sequences)
    assert a.sequences.shape == (2, ids.shape[1] + 32) and a.stats.canvases == 2
    with pytest.raises(ValueError, match="sampler must be"):
        generate(ckpt.model, ids, settings, sampler="bogus")


def test_missing_and_bad_checkpoints(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "nope")
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "config.json").write_text(
        '{"model_type": "llama", "architectures": ["LlamaForCausalLM"]}'
    )
    with pytest.raises(CheckpointError, match="not a DiffusionGemma"):
        load_checkpoint(tmp_path / "cfg")


def test_truncated_safetensors(ckpt, tmp_path):
    import shutil

    src = __import__("pathlib").Path(ckpt.source)
    dst = tmp_path / "trunc"
    shutil.copytree(src, dst)
    w = dst / "model.safetensors"
    data = w.read_bytes()
    w.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"model\.safetensors: truncated"):
        load_checkpoint(dst)
