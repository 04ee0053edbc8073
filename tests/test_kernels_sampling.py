"""dg_kernels.sampling: the PyTorch reference against torch.distributions, and the Triton kernel (run on CPU by
Triton's interpreter, TRITON_INTERPRET=1) against the reference. Shapes stay small: the interpreter runs one
Python call per Triton op (~5 ms per program)."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys

import pytest
import torch

from dg_kernels import sampling as S
from dg_kernels.philox import philox4x32, uniform_open01

torch.set_num_threads(1)
HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA and "triton" not in sys.modules:
    # Compiled Triton cannot run without a GPU; its interpreter can. TRITON_INTERPRET is read when
    # @triton.jit decorates (triton's own library functions at `import triton`), so it must be set before
    # anything imports triton. Nothing else in this process could use compiled Triton anyway.
    os.environ["TRITON_INTERPRET"] = "1"
NEG_INF = float("-inf")


# ----------------------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------------------


def pack_bitmask(allowed: torch.Tensor) -> torch.Tensor:
    """[R, V] bool -> [R, ceil(V/32)] int32 in llguidance's layout (bit j of word w = token 32w + j)."""
    rows, vocab = allowed.shape
    words = (vocab + 31) // 32
    padded = torch.zeros(rows, words * 32, dtype=torch.int64)
    padded[:, :vocab] = allowed.long()
    weights = 1 << torch.arange(32, dtype=torch.int64)
    packed = (padded.view(rows, words, 32) * weights).sum(-1)
    packed = torch.where(packed >= 2**31, packed - 2**32, packed)  # two's complement into int32
    return packed.to(torch.int32)


def chi2_pvalue(samples: torch.Tensor, probs: torch.Tensor) -> float:
    """Pearson chi-square goodness of fit of integer samples to probs; bins with expected < 5 are pooled."""
    n = samples.numel()
    counts = torch.bincount(samples, minlength=probs.numel()).double()
    assert counts.numel() == probs.numel(), "a sample fell outside the vocabulary"
    expected = probs.double() * n
    big = expected >= 5
    obs = torch.cat([counts[big], counts[~big].sum().view(1)])
    exp = torch.cat([expected[big], expected[~big].sum().view(1)])
    if exp[-1] < 5:  # pooled tail still too small: fold it into the last real bin
        obs = torch.cat([obs[:-2], (obs[-2] + obs[-1]).view(1)])
        exp = torch.cat([exp[:-2], (exp[-2] + exp[-1]).view(1)])
    stat = ((obs - exp) ** 2 / exp).sum()
    df = obs.numel() - 1
    return float(torch.special.gammaincc(torch.tensor(df / 2.0, dtype=torch.float64), stat / 2.0))


def tempered_probs(logits: torch.Tensor, temperature: float, allowed: torch.Tensor | None = None):
    x = logits.float() / temperature
    if allowed is not None:
        x = x.masked_fill(~allowed, NEG_INF)
    return torch.softmax(x, -1)


# ----------------------------------------------------------------------------------------------------------
# Philox
# ----------------------------------------------------------------------------------------------------------


def test_philox_known_answers():
    # Random123 kat_vectors for philox4x32-10 (counter, key -> output).
    cases = [
        ((0, 0, 0, 0), 0, (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
        (
            (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
            0x299F31D0 << 32 | 0xA4093822,
            (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
        ),
    ]
    for ctr, key, want in cases:
        got = philox4x32(key, *(torch.tensor([c]) for c in ctr))
        assert [int(g) for g in got] == list(want)


def test_uniform_open01_range_and_exactness():
    bits = torch.tensor([0, 1, 511, 512, 2**32 - 1, 2**31])
    u = uniform_open01(bits)
    assert u.dtype == torch.float32
    assert float(u[0]) == 2.0**-24 and float(u[4]) == 1 - 2.0**-24
    assert float(u[2]) == float(u[0]) and float(u[3]) == 1.5 * 2.0**-23
    assert bool(((u > 0) & (u < 1)).all())


# ----------------------------------------------------------------------------------------------------------
# Reference against torch.distributions
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_reference_matches_torch(dtype):
    g = torch.Generator().manual_seed(1)
    logits = (torch.randn(12, 500, generator=g) * 4).to(dtype)
    temps = torch.rand(12, generator=g) + 0.3
    for temperature in (0.7, temps):
        out = S.fused_sample(logits, temperature, seed=3, kernel="reference")
        t = temperature if isinstance(temperature, float) else temperature[:, None]
        x = logits.float() / t
        ent = torch.distributions.Categorical(logits=x).entropy()
        torch.testing.assert_close(out.entropy, ent, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(out.max_prob, torch.softmax(x, -1).amax(-1), rtol=1e-5, atol=1e-6)
        assert torch.equal(out.argmax, x.argmax(-1))
        assert out.argmax.dtype == out.sample.dtype == torch.int64
        assert out.entropy.dtype == out.max_prob.dtype == torch.float32
        assert bool(((out.sample >= 0) & (out.sample < 500)).all())


def test_reference_bitmask_and_forced_rows():
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(6, 100, generator=g) * 3
    allowed = torch.rand(6, 100, generator=g) < 0.3
    allowed[0] = False
    allowed[0, 97] = True  # row forced to one token (in the last, partial word)
    allowed[1] = False
    allowed[1, 5] = True
    logits[1, 5] = -50.0  # the only allowed token has a very low logit
    out = S.fused_sample(logits, 1.3, bitmask=pack_bitmask(allowed), seed=9, kernel="reference")
    x = (logits / 1.3).masked_fill(~allowed, NEG_INF)
    torch.testing.assert_close(out.entropy, torch.distributions.Categorical(logits=x).entropy())
    assert torch.equal(out.argmax, x.argmax(-1))
    assert out.argmax[:2].tolist() == [97, 5] and out.sample[:2].tolist() == [97, 5]
    assert out.entropy[:2].tolist() == [0.0, 0.0] and out.max_prob[:2].tolist() == [1.0, 1.0]
    assert bool(allowed[torch.arange(6), out.sample].all())


def test_reference_neg_inf_and_tiny_temperature():
    logits = torch.tensor([[NEG_INF, 2.0, 1.999, NEG_INF, 0.0], [NEG_INF, NEG_INF, NEG_INF, 7.0, NEG_INF]])
    for t in (0.0, 1e-9, 1e-4):
        out = S.fused_sample(logits, t, seed=1, kernel="reference")
        assert out.argmax.tolist() == [1, 3] and out.sample.tolist() == [1, 3]
        assert not bool(out.entropy.isnan().any())
        # at T = 1e-4 the 0.001 gap is 10 nats: p(token 2) = e^-10
        assert abs(float(out.max_prob[0]) - 1 / (1 + torch.e**-10)) < 1e-6
    ent = S.fused_sample(logits, 1.0, kernel="reference").entropy
    want = torch.distributions.Categorical(logits=logits).entropy()
    torch.testing.assert_close(ent, want)


def test_reference_reproducible_and_offset_changes_draws():
    logits = torch.zeros(64, 50)  # uniform: every draw is random
    a = S.fused_sample(logits, 1.0, seed=5, offset=0, kernel="reference").sample
    assert torch.equal(a, S.fused_sample(logits, 1.0, seed=5, offset=0, kernel="reference").sample)
    b = S.fused_sample(logits, 1.0, seed=5, offset=1, kernel="reference").sample
    c = S.fused_sample(logits, 1.0, seed=6, offset=0, kernel="reference").sample
    assert (a != b).sum() > 40 and (a != c).sum() > 40
    assert (a[:32] != a[32:]).sum() > 20  # rows draw independently


@pytest.mark.parametrize("granule", [S._Granule(16, 2, 2), S._DEFAULT_GRANULE])
def test_reference_sample_distribution_chi_square(granule):
    # V = 40 with 16-token granules: 3 granules; V = 9000 with the real ones: 3 granules, the last partial.
    small = granule.size == 16
    vocab = 40 if small else 9000
    g = torch.Generator().manual_seed(4)
    base = torch.randn(vocab, generator=g) * 2
    allowed = torch.rand(vocab, generator=g) < 0.8
    rows = 20000 if small else 1500
    logits = base.expand(rows, vocab)
    mask = pack_bitmask(allowed.expand(rows, vocab))
    out = S._sample_reference(S._prepare("test", logits, 0.8, mask, 11, 3), granule)
    probs = tempered_probs(base, 0.8, allowed)
    assert bool(allowed[out.sample].all())
    assert chi2_pvalue(out.sample, probs) > 1e-3
    # the test has power: the same samples are rejected against the untempered distribution
    assert chi2_pvalue(out.sample, tempered_probs(base, 1.0, allowed)) < 1e-6


def test_reference_errors():
    logits = torch.randn(3, 40)
    allowed = torch.ones(3, 40, dtype=torch.bool)
    allowed[1] = False
    with pytest.raises(ValueError, match=r"rows \[1\] have no allowed token"):
        S.fused_sample(logits, 1.0, bitmask=pack_bitmask(allowed), kernel="reference")
    bad = logits.clone()
    bad[2] = NEG_INF
    with pytest.raises(ValueError, match=r"rows \[2\] have no allowed token"):
        S.fused_sample(bad, 1.0, kernel="reference")
    bad[0, 3] = float("nan")
    with pytest.raises(ValueError, match=r"rows \[0\] have a NaN or \+inf"):
        S.fused_sample(bad, 1.0, kernel="reference")
    with pytest.raises(ValueError, match=r"rows \[1\] have a NaN or \+inf.*temperature"):
        S.fused_sample(logits, torch.tensor([1.0, -1.0, 1.0]), kernel="reference")
    with pytest.raises(ValueError, match="temperature must be >= 0"):
        S.fused_sample(logits, -0.5, kernel="reference")
    with pytest.raises(ValueError, match=r"shape \[3\]"):
        S.fused_sample(logits, torch.ones(4), kernel="reference")
    with pytest.raises(ValueError, match=r"bitmask must have shape \[3, 2\].*slice"):
        S.fused_sample(logits, 1.0, bitmask=torch.zeros(3, 3, dtype=torch.int32), kernel="reference")
    with pytest.raises(ValueError, match="int32"):
        S.fused_sample(logits, 1.0, bitmask=torch.zeros(3, 2, dtype=torch.int64), kernel="reference")
    with pytest.raises(ValueError, match="2-D"):
        S.fused_sample(logits.view(1, 3, 40), 1.0, kernel="reference")
    with pytest.raises(ValueError, match="dtype"):
        S.fused_sample(logits.long(), 1.0, kernel="reference")
    with pytest.raises(ValueError, match="seed"):
        S.fused_sample(logits, 1.0, seed=-1, kernel="reference")
    with pytest.raises(TypeError, match="offset"):
        S.fused_sample(logits, 1.0, offset=1.5, kernel="reference")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="kernel must be one of auto, triton, reference, got 'fast'"):
        S.fused_sample(logits, 1.0, kernel="fast")


def test_fused_sample_on_cpu_is_reference():
    logits = torch.randn(5, 77)
    a = S.fused_sample(logits, 0.9, seed=2, offset=7)
    b = S.fused_sample(logits, 0.9, seed=2, offset=7, kernel="reference")
    for field in ("argmax", "sample", "entropy", "max_prob"):
        assert torch.equal(getattr(a, field), getattr(b, field))
    empty = S.fused_sample(torch.randn(0, 10), 1.0)
    assert empty.sample.shape == (0,) and empty.entropy.shape == (0,)


# ----------------------------------------------------------------------------------------------------------
# Triton kernel: compiled on CUDA, else under the interpreter on CPU; always compared with the CPU reference
# ----------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def device():
    """Where the Triton tests run: CUDA (compiled) when present, else CPU under Triton's interpreter."""
    if importlib.util.find_spec("triton") is None:
        pytest.skip("triton is not installed")
    mod = S._triton_module()
    if HAS_CUDA:
        yield "cuda"
        return
    if not S._interpreted(mod):
        pytest.skip("triton was imported before this module without TRITON_INTERPRET=1; run this file alone")
    yield "cpu"


# The interpreter's numpy warns on the -inf - -inf, 0 * -inf and log(0) lanes the kernel discards with tl.where.
interp_warnings = pytest.mark.filterwarnings(
    "ignore:invalid value encountered:RuntimeWarning", "ignore:divide by zero encountered:RuntimeWarning"
)


def on(device, value):
    return value.to(device) if isinstance(value, torch.Tensor) else value


def kernel(device, logits, temperature, *, bitmask=None, seed=0, offset=0, **kw) -> S.SampleOutput:
    """Run the Triton path on `device` and bring the outputs back to the CPU."""
    p = S._prepare("test", on(device, logits), on(device, temperature), on(device, bitmask), seed, offset)
    out = S._sample_triton(p, **kw)
    return S.SampleOutput(*(getattr(out, f).cpu() for f in ("argmax", "sample", "entropy", "max_prob")))


def assert_same(kern: S.SampleOutput, ref: S.SampleOutput):
    assert torch.equal(kern.argmax, ref.argmax)
    assert torch.equal(kern.sample, ref.sample)
    torch.testing.assert_close(kern.entropy, ref.entropy, rtol=1e-5, atol=2e-6)
    torch.testing.assert_close(kern.max_prob, ref.max_prob, rtol=1e-5, atol=1e-6)


def test_triton_philox_bits_match_torch(device):
    g = torch.Generator().manual_seed(0)
    counters = torch.randint(0, 2**32, (50, 4), generator=g, dtype=torch.int64)
    counters[0] = torch.tensor([0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344])
    seed = 0x299F31D0 << 32 | 0xA4093822
    got = S._triton_module().philox_triton(seed, counters.to(device)).cpu()
    want = torch.stack(philox4x32(seed, *counters.unbind(1)), 1)
    assert torch.equal(got, want)
    assert got[0].tolist() == [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1]


@interp_warnings
@pytest.mark.parametrize(
    ("dtype", "granule", "vocab"),
    [
        (torch.float32, S._DEFAULT_GRANULE, 300),
        (torch.bfloat16, S._DEFAULT_GRANULE, 300),
        (torch.float32, S._Granule(64, 4, 4), 300),
        (torch.bfloat16, S._Granule(32, 2, 8), 97),
    ],
)
def test_triton_matches_reference(device, dtype, granule, vocab):
    g = torch.Generator().manual_seed(granule.size + vocab)
    rows = 6
    logits = (torch.randn(rows, vocab, generator=g) * 3).to(dtype)
    logits[2, ::3] = NEG_INF  # -inf logits
    logits[3, 1] = 40.0  # a dominant token (near one-hot)
    allowed = torch.rand(rows, vocab, generator=g) < 0.5
    allowed[4] = False
    allowed[4, vocab - 1] = True  # masked down to one token, in the last partial granule / word
    temps = torch.tensor([0.5, 1.0, 2.0, 0.0, 1e-6, 0.9])  # 0 and 1e-6 are clamped to 1e-4
    configs = [
        dict(temperature=0.8, bitmask=None),
        dict(temperature=temps, bitmask=pack_bitmask(allowed)),
        dict(temperature=0.0, bitmask=pack_bitmask(allowed)),
    ]
    for i, cfg in enumerate(configs):
        kw = dict(seed=100 + i, offset=2**33 + i, granule=granule)
        kern = kernel(device, logits, cfg["temperature"], bitmask=cfg["bitmask"], **kw)
        p = S._prepare("test", logits, cfg["temperature"], cfg["bitmask"], kw["seed"], kw["offset"])
        ref = S._sample_reference(p, granule)
        assert_same(kern, ref)
        if cfg["bitmask"] is not None:
            assert kern.sample[4] == vocab - 1 and kern.argmax[4] == vocab - 1
            assert float(kern.entropy[4]) == 0.0 and float(kern.max_prob[4]) == 1.0
            assert bool(allowed[torch.arange(rows), kern.sample].all())


@interp_warnings
def test_triton_layout_knobs_do_not_change_results(device):
    g = torch.Generator().manual_seed(7)
    base = torch.randn(3, 600, generator=g)
    transposed = base.t().contiguous().t()  # column-major: copied to contiguous rows
    wide = torch.randn(3, 700, generator=g)
    wide[:, :600] = base
    gran = S._Granule(64, 4, 4)
    ref = S._sample_reference(S._prepare("test", base, 1.1, None, 4, 1), gran)
    for x, warps in ((transposed, 1), ("sliced", 2), ("sliced", 4)):
        if isinstance(x, str):
            x = on(device, wide)[:, :600]  # row stride 700
        kern = kernel(device, x, 1.1, seed=4, offset=1, granule=gran, num_warps=warps)
        assert_same(kern, ref)


@interp_warnings
def test_triton_sample_distribution_chi_square(device):
    # One granule of 16 tokens as a [k=4, lanes=2, chunk=2] tile: the lane / k / chunk levels of the kernel's
    # inverse CDF are all exercised; the Gumbel choice between granules is covered by the exact agreement
    # with the reference (multi-granule cases above) and the reference's own chi-square test.
    g = torch.Generator().manual_seed(5)
    vocab, rows = 12, 150
    base = torch.randn(vocab, generator=g)
    allowed = torch.ones(vocab, dtype=torch.bool)
    allowed[3] = False
    mask = pack_bitmask(allowed.expand(rows, vocab))
    kw = dict(bitmask=mask, seed=21, offset=0, granule=S._Granule(16, 2, 2))
    kern = kernel(device, base.expand(rows, vocab), 0.7, **kw)
    assert bool(allowed[kern.sample].all())
    probs = tempered_probs(base, 0.7, allowed)
    assert chi2_pvalue(kern.sample, probs) > 1e-3
    assert chi2_pvalue(kern.sample, tempered_probs(base, 2.0, allowed)) < 1e-3  # the test has power


@interp_warnings
def test_triton_errors(device):
    logits = torch.randn(4, 70)
    allowed = torch.ones(4, 70, dtype=torch.bool)
    allowed[2] = False
    with pytest.raises(ValueError, match=r"rows \[2\] have no allowed token"):
        kernel(device, logits, 1.0, bitmask=pack_bitmask(allowed))
    bad = logits.clone()
    bad[1, 60] = float("nan")
    bad[3, 0] = float("inf")
    bad[0] = NEG_INF
    with pytest.raises(ValueError, match=r"rows \[1, 3\] have a NaN or \+inf.*rows \[0\] have no allowed"):
        kernel(device, bad, 1.0)
    with pytest.raises(ValueError, match=r"rows \[2\] have a NaN or \+inf.*temperature"):
        kernel(device, logits, torch.tensor([1.0, 0.5, float("nan"), 2.0]))
    nan_masked = logits.clone()
    nan_masked[2, 5] = float("nan")  # NaN on a forbidden token is ignored
    allowed_all_but = torch.ones(4, 70, dtype=torch.bool)
    allowed_all_but[2, 5] = False
    out = kernel(device, nan_masked, 1.0, bitmask=pack_bitmask(allowed_all_but))
    ref = S.fused_sample(nan_masked, 1.0, bitmask=pack_bitmask(allowed_all_but), kernel="reference")
    assert_same(out, ref)


@interp_warnings
def test_triton_neg_inf_retry_and_sentinel(device):
    # Forbidden tokens read as -1e30 (finite) so the fast kernel needs no clamp; an *allowed* -inf logit makes
    # its entropy term 0 * -inf = NaN, which the combine reports as -3 and the Triton path reruns clamped.
    g = torch.Generator().manual_seed(9)
    logits = torch.randn(3, 80, generator=g)
    logits[1, 7] = NEG_INF  # allowed -inf
    logits[2, 11] = -1e31  # below the sentinel: counts as -inf, and needs no retry
    allowed = torch.ones(3, 80, dtype=torch.bool)
    allowed[0, ::2] = False  # forbidden tokens need no retry either
    mask = pack_bitmask(allowed)
    p = S._prepare("test", on(device, logits), 0.9, on(device, mask), 3, 0)
    fast = S._launch_triton(p)[0].cpu()
    assert fast.tolist()[0] >= 0 and fast.tolist()[1] == -3 and fast.tolist()[2] >= 0
    safe = S._launch_triton(p, safe=True)[0].cpu()
    assert bool((safe >= 0).all())
    ref = S.fused_sample(logits, 0.9, bitmask=mask, seed=3, kernel="reference")
    out = S.fused_sample(on(device, logits), 0.9, bitmask=on(device, mask), seed=3, kernel="triton")
    assert_same(S.SampleOutput(*(x.cpu() for x in (out.argmax, out.sample, out.entropy, out.max_prob))), ref)
    # the reference treats -1e31 as -inf too: a row of only such logits has no allowed finite logit
    low = torch.full((1, 80), -1e31)
    with pytest.raises(ValueError, match="no allowed token"):
        S.fused_sample(low, 1.0, kernel="reference")
    with pytest.raises(ValueError, match="no allowed token"):
        kernel(device, low, 1.0)
