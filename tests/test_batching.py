"""The continuous canvas batcher (model/batching.py): rows join at canvas boundaries, keep their own seed and
constraint, leave as they finish, and each row's tokens are those it gets alone from ``generate``."""

from __future__ import annotations

import threading
import time

import pytest
import torch
from fake_constraints import ModeConstraint

from model.checkpoint.loading import load_checkpoint
from model.runtime import ConstraintPlan, generate
from model.runtime.batcher import BatcherClosed, CanvasBatcher, RequestCancelled
from model.turn.prefill import prefill_prompt


@pytest.fixture(scope="module", params=[False, True], ids=["plain", "copy_head"])
def ck(request, tmp_path_factory):
    from model.testing import make_tiny_checkpoint

    torch.set_num_threads(1)
    path = make_tiny_checkpoint(
        tmp_path_factory.mktemp("ck"), canvas_length=16, seed=3, copy_head=request.param
    )
    ck = load_checkpoint(path)
    # no EOS in a random model's output: every row runs its whole budget (3 canvases)
    ck.settings = ck.settings.replace(eos_token_ids=(ck.settings.pad_token_id + 7,), max_new_tokens=48)
    return ck


def _prompt(n: int, seed: int) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return [2, *torch.randint(20, 500, (n - 1,), generator=g).tolist()]


def _solo(ck, ids: list[int], seed: int, settings=None, constraint=None) -> list[int]:
    out = generate(
        ck.model,
        torch.tensor([ids]),
        settings or ck.settings,
        seed=seed,
        constraints=None if constraint is None else [constraint],
    )
    return [t for t in out.new_tokens[0].tolist() if t != ck.settings.pad_token_id]


def test_a_row_alone_draws_exactly_like_generate(ck):
    b = CanvasBatcher(ck.model, ck.settings, max_batch=4)
    try:
        ids = _prompt(12, 0)
        got = b.submit(ids, seed=11).future.result(timeout=60)
    finally:
        b.close()
    assert got.tokens == _solo(ck, ids, 11)
    assert len(got.tokens) == 48 and got.finish_reason == "length"
    assert got.stats.canvases == 3 and got.prompt_tokens == 12


def test_rows_that_join_later_with_other_lengths_match_their_solo_runs(ck):
    # lengths on both sides of the sliding window (128): packed caches are left-padded per layer
    lengths = [5, 40, 150, 300, 9]
    prompts = [_prompt(n, i) for i, n in enumerate(lengths)]
    want = [_solo(ck, p, 100 + i) for i, p in enumerate(prompts)]
    b = CanvasBatcher(ck.model, ck.settings, max_batch=3)
    try:
        handles = []
        for i, p in enumerate(prompts):
            handles.append(b.submit(p, seed=100 + i))
            time.sleep(0.02 * i)  # arrive while others are mid-run
        got = [h.future.result(timeout=120).tokens for h in handles]
        assert b.max_rows_seen == 3  # rows really shared canvases (and no more than max_batch)
    finally:
        b.close()
    for i in range(len(prompts)):
        assert got[i] == want[i], f"row {i} (prompt of {lengths[i]} tokens) differs from its solo run"


def test_per_row_settings_temperature_and_budget(ck):
    cold = ck.settings.replace(t_max=0.2, t_min=0.05, max_new_tokens=16)
    ids_a, ids_b = _prompt(20, 5), _prompt(33, 6)
    want_a = _solo(ck, ids_a, 1, cold)
    want_b = _solo(ck, ids_b, 2)
    b = CanvasBatcher(ck.model, ck.settings, max_batch=4)
    try:
        ha = b.submit(ids_a, cold, seed=1)
        hb = b.submit(ids_b, seed=2)
        a, bb = ha.future.result(timeout=60), hb.future.result(timeout=60)
    finally:
        b.close()
    assert (a.tokens, len(a.tokens)) == (want_a, 16)
    assert (bb.tokens, len(bb.tokens)) == (want_b, 48)


class _Forced:
    """A constraint that fixes the first tokens of every canvas (and records the budget it was told)."""

    def __init__(self, tokens: list[int]) -> None:
        self.tokens = tokens
        self.budgets: list[int] = []

    def start_canvas(self, canvas_length: int, tokens_left: int) -> None:
        self.budgets.append(tokens_left)

    def plan(self) -> ConstraintPlan:
        return ConstraintPlan(fixed=list(self.tokens))

    def commit(self, tokens, accepted, **kw):
        return []

    def readout(self, logits):
        return [*self.tokens, *logits.argmax(-1).tolist()[len(self.tokens) :]]


class _Broken(_Forced):
    def plan(self) -> ConstraintPlan:
        raise RuntimeError("grammar exploded")


def test_each_row_keeps_its_own_constraint_and_a_failing_one_fails_only_its_row(ck):
    b = CanvasBatcher(ck.model, ck.settings, max_batch=4)
    try:
        c1, c2 = _Forced([40, 41, 42]), _Forced([50])
        h1 = b.submit(_prompt(10, 1), constraint=c1, seed=1)
        h2 = b.submit(_prompt(14, 2), constraint=c2, seed=2)
        h3 = b.submit(_prompt(12, 3), seed=3)
        r1, r2, r3 = (h.future.result(timeout=60) for h in (h1, h2, h3))
        assert [r1.tokens[i * 16 : i * 16 + 3] for i in range(3)] == [[40, 41, 42]] * 3
        assert [r2.tokens[i * 16] for i in range(3)] == [50] * 3
        assert c1.budgets == [48, 32, 16]
        assert r3.tokens == _solo(ck, _prompt(12, 3), 3)
        # a constraint that raises: its request fails, the batch goes on (every row gets an answer)
        bad = b.submit(_prompt(10, 4), constraint=_Broken([1]), seed=4)
        good = b.submit(_prompt(10, 5), seed=5)
        with pytest.raises(RuntimeError, match="grammar exploded"):
            bad.future.result(timeout=60)
        assert len(good.future.result(timeout=60).tokens) == 48
    finally:
        b.close()


def test_rows_in_a_call_and_in_prose_get_their_own_accept_window_as_in_generate(ck):
    s = ck.settings.replace(accept_window=1, call_accept_window=4, t_max=0.05, t_min=0.01)
    ids = _prompt(12, 7)
    call, prose = _solo(ck, ids, 7, s, ModeConstraint(True)), _solo(ck, ids, 7, s, ModeConstraint(False))
    assert call != prose  # the window changed what the row wrote
    b = CanvasBatcher(ck.model, s, max_batch=4)
    try:
        h1 = b.submit(ids, constraint=ModeConstraint(True), seed=7)
        h2 = b.submit(ids, constraint=ModeConstraint(False), seed=7)
        assert [h.future.result(timeout=60).tokens for h in (h1, h2)] == [call, prose]
    finally:
        b.close()


def test_cancel_frees_the_row_and_close_refuses_new_requests(ck):
    b = CanvasBatcher(ck.model, ck.settings.replace(max_new_tokens=16 * 40), max_batch=2)
    seen = threading.Event()
    long = b.submit(_prompt(10, 1), seed=1, on_canvas=lambda toks: seen.set())
    assert seen.wait(60)
    long.cancel()
    with pytest.raises(RequestCancelled):
        long.future.result(timeout=30)
    assert b.load == 0
    short = b.submit(_prompt(10, 2), ck.settings, seed=2)
    assert len(short.future.result(timeout=60).tokens) == 48
    b.close()
    with pytest.raises(BatcherClosed):
        b.submit(_prompt(10, 3))


def test_on_canvas_streams_each_committed_canvas_in_order(ck):
    b = CanvasBatcher(ck.model, ck.settings, max_batch=2)
    parts: list[list[int]] = []
    try:
        out = b.submit(_prompt(10, 1), seed=9, on_canvas=parts.append).future.result(timeout=60)
    finally:
        b.close()
    assert [len(p) for p in parts] == [16, 16, 16]
    assert [t for p in parts for t in p] == out.tokens


def test_bad_arguments_are_refused(ck):
    with pytest.raises(ValueError, match="max_batch"):
        CanvasBatcher(ck.model, ck.settings, max_batch=0)
    b = CanvasBatcher(ck.model, ck.settings)
    try:
        with pytest.raises(ValueError, match="empty"):
            b.submit([])
        with pytest.raises(ValueError, match="64-bit"):
            b.submit([2, 3], seed=2**64)
        ready = prefill_prompt(ck.model, torch.tensor([[2, 3, 4]]))
        with pytest.raises(
            ValueError, match=r"prefill= covers a prompt of 3 tokens .* input_ids has 4 tokens"
        ):
            b.submit([2, 3, 4, 5], prefill=ready)
    finally:
        b.close()


def test_a_ready_prefill_is_taken_over_at_admission_not_encoded_again(ck):
    ids, other = _prompt(12, 4), _prompt(9, 5)
    widths: list[int] = []  # the encoder's input width per call: a prompt's length or a canvas (16)
    hook = ck.model.model.encoder.register_forward_pre_hook(
        lambda _m, _a, kw: widths.append(int(kw["input_ids"].shape[1])), with_kwargs=True
    )
    b = CanvasBatcher(ck.model, ck.settings, max_batch=4)
    try:
        ready = prefill_prompt(ck.model, torch.tensor([ids]))  # as a binder's turn does before submitting
        first = b.submit(ids, seed=11, prefill=ready)
        second = b.submit(other, seed=12)  # beside it, prefilled by the batcher
        got, got_other = first.future.result(timeout=60), second.future.result(timeout=60)
    finally:
        b.close()
        hook.remove()
    assert sorted(w for w in widths if w != 16) == [9, 12]  # each prompt encoded once
    assert 2 <= widths.count(16) <= 4  # 2 committed canvases each before the last, encoded alone or together
    assert got.tokens == _solo(ck, ids, 11) and got_other.tokens == _solo(ck, other, 12)
