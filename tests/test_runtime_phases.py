"""Each phase of the denoising loop on its own (model.runtime.scheduler's scheduler and model.runtime.step's one step),
the step samplers, the constraint batch and the transformers adapter; the phases stepped by hand equal generate();
generate and the batcher call the same step function."""

from dataclasses import replace

import pytest
import torch

from model.checkpoint import hf_compat
from model.checkpoint.loading import load_checkpoint
from model.runtime import generate, step
from model.runtime.batcher import CanvasBatcher
from model.runtime.constraint_batch import ConstraintBatch, ConstraintPlan
from model.runtime.sampler import (
    KernelSampler,
    ParitySampler,
    StepDraw,
    TorchSampler,
    entropy_and_argmax,
    select_sampler,
    stop_test,
    window_accept,
)
from model.runtime.scheduler import (
    Cohort,
    Scheduler,
    commit_canvas,
    decoder_inputs,
    denoiser,
    encode,
    prefill_batch,
    result,
    start_canvas,
)

C = 16


def denoise_canvas(den, batch, canvas):
    """Scheduler.step until the canvas is done: the last canvas and the steps taken."""
    cohort, scheduler = Cohort(den, batch, None, canvas), Scheduler(den.model, den.settings)
    while not scheduler.step([cohort]):
        pass
    return cohort.own_canvas(), cohort.steps


def encode_canvas(den, batch):
    """FixedBatch.advance, then encode the committed canvas (what Scheduler.encode does for one cohort)."""
    batch.advance(den.settings.canvas_length)
    encode(den, batch)


@pytest.fixture(scope="module")
def ck(tiny_checkpoint):
    return load_checkpoint(tiny_checkpoint("phases", 4, copy_head=True))


def prompt():
    return torch.tensor([[2, 5, 9, 11, 13], [0, 2, 7, 8, 9]]), torch.tensor([[1] * 5, [0, 1, 1, 1, 1]])


class Fixed:
    """A constraint that fixes the first tokens of each canvas and records what it is told."""

    def __init__(self, tokens, mask=None):
        self.tokens, self.mask, self.budgets, self.commits = tokens, mask, [], 0

    def start_canvas(self, canvas_length, tokens_left):
        self.budgets.append(tokens_left)

    def plan(self):
        return ConstraintPlan(fixed=list(self.tokens), mask=self.mask)

    def commit(self, tokens, accepted, logits=None, entropy_bound=0.0):
        self.commits += 1
        return [len(self.tokens) + 1]  # veto the position after the frontier

    def readout(self, logits):
        return [*self.tokens, *logits.argmax(-1).tolist()[len(self.tokens) :]]


def _setup(ck, settings, **kw):
    ids, am = prompt()
    den = denoiser(ck.model, ids, settings, attention_mask=am, **kw)
    return den, prefill_batch(den, ids, am, {})


def test_phases_one_at_a_time(ck):
    settings = ck.settings.replace(max_new_tokens=2 * C)
    con = Fixed([40, 41])
    den, batch = _setup(ck, settings, constraints=[con, None], seed=3)
    vocab = den.vocab
    assert batch.cache.get_seq_length() == 5  # the prompt's positions are in the KV cache
    assert batch.memory is not None and batch.memory.ids.shape == (2, 5)  # the copy head's keys beside it

    canvas = start_canvas(den, batch)
    assert (
        canvas.tokens.shape == (2, C) and int(canvas.tokens.min()) >= 0 and int(canvas.tokens.max()) < vocab
    )
    assert con.budgets == [2 * C] and canvas.steps_left == (4, 4) and canvas.self_cond is None
    before = canvas.tokens.clone()

    # one step with a constraint: its fixed positions are forced (entropy 0) and its veto re-noises a position
    out = step.denoise_step(den, canvas, decoder_inputs(den, batch, canvas), settings.temperature(4))
    assert con.commits == 1
    assert out.fixed is not None and out.fixed[0, :2].all() and not out.fixed[0, 2:].any()
    assert not out.fixed[1].any()
    assert out.entropy.shape == (2, C) and out.entropy[0, :2].abs().max() < 1e-6
    assert out.canvas.argmax[0, :2].tolist() == [40, 41] and out.canvas.tokens[0, :2].tolist() == [40, 41]
    assert out.accepted[0, :2].all() and not out.accepted[0, 3]  # the veto
    nxt = out.canvas
    assert nxt.steps_left == (3, 3) and nxt.self_cond is not None and nxt.self_cond.shape == (2, C, vocab)
    assert torch.equal(nxt.history[-1], nxt.argmax)
    # the step changed nothing of its caller's
    assert canvas.self_cond is None and canvas.steps_left == (4, 4) and torch.equal(canvas.tokens, before)

    last, steps = denoise_canvas(den, batch, nxt)
    assert steps == 3 and last.steps_left == (0, 0) and batch.forwards.tolist() == [3, 3]
    all_done = commit_canvas(den, batch, last, 1 + steps)
    assert batch.sequences.shape == (2, 5 + C) and batch.sequences[0, 5:7].tolist() == [40, 41]
    assert den.stats.steps_per_canvas == [4] and all_done is False

    encode_canvas(den, batch)
    assert batch.canvas_index == 1 and batch.cache.get_seq_length() == 5 + C
    assert batch.dec_pos.tolist() == [list(range(5 + C, 5 + 2 * C))]
    assert batch.memory.ids.shape == (2, 5 + C)


def test_phases_stepped_by_hand_equal_generate(ck):
    ids, am = prompt()
    settings = ck.settings.replace(max_new_tokens=2 * C)
    want = generate(ck.model, ids, settings, attention_mask=am, seed=11)
    den, batch = _setup(ck, settings, seed=11)
    for k in range(2):
        canvas, steps = denoise_canvas(den, batch, start_canvas(den, batch))
        commit_canvas(den, batch, canvas, steps)
        if k == 0:
            encode_canvas(den, batch)
    got = result(den, batch, 0.0)
    assert torch.equal(got.sequences, want.sequences)
    assert got.stats.decoder_forwards == want.stats.decoder_forwards


def test_a_finished_row_keeps_its_canvas_through_a_step(ck):
    den, batch = _setup(ck, ck.settings.replace(max_new_tokens=2 * C), seed=5)
    canvas = start_canvas(den, batch)
    inputs = decoder_inputs(den, batch, canvas)
    first = step.denoise_step(den, canvas, inputs, 1.0).canvas
    held = replace(first, finished=torch.tensor([True, False]))
    out = step.denoise_step(den, held, inputs, 1.0)
    nxt = out.canvas
    assert torch.equal(nxt.tokens[0], held.tokens[0]) and torch.equal(nxt.argmax[0], held.argmax[0])
    assert torch.equal(nxt.self_cond[0], held.self_cond[0])
    assert out.entropy[0].abs().max() == 0 and out.entropy[1].abs().max() > 0  # fast mode: no say in the stop
    assert bool(nxt.finished[0]) and not torch.equal(nxt.tokens[1], held.tokens[1])
    assert nxt.steps_left == (2, 2)


def test_commit_canvas_finishes_rows_on_eos_and_pads_after_it(ck):
    settings = ck.settings.replace(max_new_tokens=2 * C, eos_token_ids=[1], pad_token_id=0)
    den, batch = _setup(ck, settings, seed=0)
    argmax = torch.full((2, C), 7)
    argmax[0, 3] = 1  # row 0 ends at position 3
    canvas = replace(start_canvas(den, batch), argmax=argmax, self_cond=torch.zeros(2, C, den.vocab))
    assert commit_canvas(den, batch, canvas, 1) is False
    assert batch.sequences[0, 5:].tolist() == [7, 7, 7, 1] + [0] * (C - 4)
    assert batch.sequences[1, 5:].tolist() == [7] * C
    assert batch.done.tolist() == [True, False]


def test_generate_and_the_batcher_call_the_one_step_and_agree(ck, monkeypatch):
    calls = []
    one_step = step.denoise_step

    def counted(den, canvas, *args, **kwargs):
        calls.append(canvas.tokens.shape[0])
        return one_step(den, canvas, *args, **kwargs)

    monkeypatch.setattr(step, "denoise_step", counted)
    settings = ck.settings.replace(max_new_tokens=2 * C)
    ids = [2, 5, 9, 11, 13]
    want = generate(ck.model, torch.tensor([ids]), settings, seed=21)
    assert len(calls) == want.stats.total_steps > 0
    calls.clear()
    b = CanvasBatcher(ck.model, settings, max_batch=2)
    try:
        got = b.submit(ids, seed=21).future.result(timeout=60)
    finally:
        b.close()
    assert len(calls) == got.stats.total_steps > 0
    assert got.tokens == [t for t in want.new_tokens[0].tolist() if t != settings.pad_token_id]


def test_samplers_draw_consistently():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 8, 40, generator=g) * 3
    torch.manual_seed(4)
    p = ParitySampler().draw(logits.clone(), 0.5, 0.1, canvas=0, step=3)
    ref = torch.distributions.Categorical(logits=logits / 0.5).entropy()
    assert torch.allclose(p.entropy, ref) and torch.equal(p.argmax, (logits / 0.5).argmax(-1))
    t = TorchSampler(torch.Generator().manual_seed(1)).draw(logits.clone(), 0.5, 0.1, canvas=0, step=3)
    ent, am = entropy_and_argmax(logits / 0.5)
    assert torch.allclose(t.entropy, ent, atol=1e-5) and torch.equal(t.argmax, am)
    assert torch.equal(t.accepted, p.accepted)  # acceptance depends on entropy only
    assert (t.denoised[t.accepted] >= 0).all() and (t.denoised[~t.accepted] == -1).all()
    # per-row generators: each row draws as it would alone
    gens = [torch.Generator().manual_seed(5), torch.Generator().manual_seed(6)]
    rows = TorchSampler(gens).draw(logits.clone(), torch.tensor([0.5, 0.5]), 0.1, canvas=0, step=3)
    alone = TorchSampler(torch.Generator().manual_seed(6)).draw(
        logits[1:].clone(), 0.5, 0.1, canvas=0, step=3
    )
    assert torch.equal(rows.denoised[1:], alone.denoised)
    k1 = KernelSampler(9).draw(logits.clone(), 0.5, 0.1, canvas=1, step=2)
    k2 = KernelSampler(9, reference=True).draw(logits.clone(), 0.5, 0.1, canvas=1, step=2)
    assert torch.equal(k1.denoised, k2.denoised) and torch.equal(k1.argmax, am)  # CPU: the same reference


def test_select_sampler_is_the_one_dispatch():
    cpu = torch.device("cpu")
    pick = {
        name: type(select_sampler(name, parity=False, device=cpu, generator=None, seed=1)).__name__
        for name in ("auto", "torch", "kernel", "reference")
    }
    assert pick == {
        "auto": "TorchSampler",
        "torch": "TorchSampler",
        "kernel": "KernelSampler",
        "reference": "KernelSampler",
    }
    assert isinstance(
        select_sampler("kernel", parity=True, device=cpu, generator=None, seed=1), ParitySampler
    )
    with pytest.raises(ValueError, match="sampler must be one of 'auto', 'torch', 'kernel', 'reference'"):
        select_sampler("fast", parity=False, device=cpu, generator=None, seed=1)


def test_window_and_stop_test():
    canvas = torch.full((2, 6), 9)
    draw = StepDraw(
        torch.zeros(2, 6, 4),
        torch.zeros(2, 6, dtype=torch.long),
        torch.zeros(2, 6),
        torch.arange(12).view(2, 6),
        torch.ones(2, 6, dtype=torch.bool),
    )
    prev = torch.tensor([[1, 1, 0, 0, 0, 0], [0] * 6], dtype=torch.bool)
    window_accept(draw, canvas, 2, None, prev)
    assert draw.accepted.tolist() == [[True] * 4 + [False] * 2, [True] * 2 + [False] * 4]
    assert draw.denoised.tolist() == [[0, 1, 2, 3, 9, 9], [6, 7, 9, 9, 9, 9]]
    argmax = torch.tensor([[1, 2], [3, 4]])
    low, high = torch.full((2, 2), 0.001), torch.full((2, 2), 1.0)
    stop, hist = stop_test(None, argmax, low, None, 2, 0.005)
    assert stop.tolist() == [False, False]  # not yet stable for 2 steps
    stop, hist = stop_test(hist, argmax, low, None, 2, 0.005)
    stop, hist = stop_test(hist, argmax, low, None, 2, 0.005)
    assert stop.tolist() == [True, True]
    stop, _ = stop_test(hist, argmax, high, None, 2, 0.005)
    assert stop.tolist() == [False, False]  # stable but not confident
    fixed = torch.tensor([[True, True], [False, False]])
    stop, _ = stop_test(hist, argmax, high, fixed, 2, 0.005)
    assert stop.tolist() == [True, False]  # fixed positions do not count


def test_constraint_batch_unpacks_every_frontier_at_once():
    vocab = 70
    words = (vocab + 31) // 32

    def packed(allowed):
        bits = torch.zeros(words * 32, dtype=torch.bool)
        bits[allowed] = True
        return (bits.view(words, 32).long() << torch.arange(32)).sum(-1).to(torch.int32)

    rows = [
        Fixed([], packed([3, 40, 69])),
        None,
        Fixed([5], packed([33])),
        Fixed([], torch.arange(vocab) == 7),
    ]
    logits = torch.zeros(4, 3, vocab)
    fixed_mask, fixed_tok = ConstraintBatch(rows).apply(logits, [True] * 4)
    finite = lambda r, k: torch.isfinite(logits[r, k]).nonzero().flatten().tolist()  # noqa: E731
    assert (
        finite(0, 0) == [3, 40, 69] and finite(2, 1) == [33] and finite(3, 0) == [7] and finite(2, 0) == [5]
    )
    assert finite(1, 0) == list(range(vocab)) and fixed_mask.tolist()[2] == [True, False, False]
    assert fixed_tok[2, 0] == 5
    with pytest.raises(ValueError, match="row 1: constraint mask at canvas position 0 allows no token"):
        ConstraintBatch([None, Fixed([], packed([]))]).apply(torch.zeros(2, 3, vocab), [True, True])


def test_a_vote_moves_the_forbidden_mass_onto_its_tokens():
    """ConstraintPlan.vote: the vote tokens weigh what they and the forbidden tokens weighed; the other allowed
    tokens keep their probability (a JSON answer's openers take the prose beside a call)."""
    vocab = 8
    logits = torch.randn(1, 2, vocab, generator=torch.Generator().manual_seed(0))
    before = logits[0, 0].softmax(-1)
    allowed, vote = torch.zeros(vocab, dtype=torch.bool), torch.zeros(vocab - 2, dtype=torch.bool)
    allowed[[1, 2, 5]] = True
    vote[[2, 5]] = (
        True  # token 1 is the call; 0, 3, 4, 6, 7 are forbidden prose; a tokenizer 2 short of the model
    )

    class Voting(Fixed):
        def plan(self):
            return ConstraintPlan(fixed=[], mask=allowed, vote=vote)

    ConstraintBatch([Voting([])]).apply(logits, [True])
    after = logits[0, 0].softmax(-1)
    assert torch.isfinite(logits[0, 0]).nonzero().flatten().tolist() == [1, 2, 5]
    assert after[1].item() == pytest.approx(before[1].item(), rel=1e-5)
    assert after[[2, 5]].sum().item() == pytest.approx(1 - before[1].item(), rel=1e-5)
    assert (after[2] / after[5]).item() == pytest.approx((before[2] / before[5]).item(), rel=1e-5)
    assert torch.isfinite(logits[0, 1]).all()  # only the frontier
    for t in (
        0.4,
        torch.tensor([0.6]),
    ):  # at the sampler's temperature: the tempered masses, as the draw sees them
        raw = torch.randn(1, 1, vocab, generator=torch.Generator().manual_seed(1))
        tempered = (raw[0, 0] / t).softmax(-1)
        ConstraintBatch([Voting([])]).apply(raw, [True], t)
        drawn = (raw[0, 0] / t).softmax(-1)
        assert drawn[1].item() == pytest.approx(tempered[1].item(), rel=1e-5)
        assert drawn[[2, 5]].sum().item() == pytest.approx(1 - tempered[1].item(), rel=1e-5)


def test_the_transformers_adapter_names_a_missing_helper(ck):
    hf_compat.check_model(ck.model)

    class Old(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self._prepare_cache_for_generation = ck.model._prepare_cache_for_generation
            self.model = ck.model.model

    with pytest.raises(
        RuntimeError, match=r"Old\._prepare_encoder_inputs is missing: transformers \S+ is not"
    ):
        hf_compat.check_model(Old())
    # the object load_checkpoint returns, passed where its model belongs
    with pytest.raises(TypeError, match=r"got LoadedCheckpoint; pass its \.model$"):
        generate(ck, torch.ones(1, 3, dtype=torch.long))


def test_the_compiled_step_agrees_with_eager():
    # torch.compile (inductor) of the step's tensor part: same argmax and acceptance, entropies within 1e-5.
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(3, 8, 64, generator=g) * 3
    eager = TorchSampler(torch.Generator().manual_seed(0)).draw(logits.clone(), 0.7, 0.1, canvas=0, step=1)
    comp = TorchSampler(torch.Generator().manual_seed(0), compiled=True).draw(
        logits.clone(), 0.7, 0.1, canvas=0, step=1
    )
    assert torch.equal(comp.argmax, eager.argmax) and torch.equal(comp.accepted, eager.accepted)
    assert torch.allclose(comp.entropy, eager.entropy, atol=1e-5)
    assert torch.equal(comp.denoised, eager.denoised)  # same acceptance, same generator: same draws


def test_bad_inputs_get_one_line_errors(ck):
    from model.turn.limits import PromptTooLong

    ids, am = prompt()
    with pytest.raises(ValueError, match=r"input_ids must be integer token ids \(int64\), got torch.float32"):
        generate(ck.model, ids.float(), seed=0)
    for not_a_tensor, kind in (([[5, 6, 7]], "list"), ("hello", "str")):  # was AttributeError: ... 'dim'
        with pytest.raises(TypeError, match=rf"int64 torch.Tensor of token ids, got {kind} \(torch.tensor"):
            generate(ck.model, not_a_tensor, seed=0)
    vocab = int(ck.model.config.get_text_config().vocab_size)
    with pytest.raises(ValueError, match=rf"outside the vocabulary \[0, {vocab}\): smallest -3, largest 10"):
        generate(ck.model, ids - 3, seed=0)
    with pytest.raises(ValueError, match=r"attention_mask has shape \(2, 4\), input_ids \(2, 5\)"):
        generate(ck.model, ids, attention_mask=am[:, :4], seed=0)
    with pytest.raises(TypeError, match=r"unknown generation option\(s\) \['temperature'\]"):
        generate(ck.model, ids, seed=0, temperature=0.5)
    limit = int(ck.model.config.get_text_config().max_position_embeddings)
    with pytest.raises(PromptTooLong):
        generate(ck.model, torch.full((1, limit), 5), seed=0)


def test_a_prompt_shorter_than_the_copy_heads_lookahead_generates(ck):
    # A 1-token prompt gave the copy memory one key too many at the first committed canvas (a shape error).
    assert ck.model.copy_head.cfg.lookahead >= 2
    settings = ck.settings.replace(max_new_tokens=2 * C)
    out = generate(ck.model, torch.tensor([[5]]), settings, seed=0)
    assert out.sequences.shape == (1, 1 + 2 * C) and out.stats.canvases == 2
