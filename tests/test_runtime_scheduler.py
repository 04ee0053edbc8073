"""The one scheduler (model.runtime.scheduler.Scheduler): generate and the serve batcher both go through it, and
cohorts that join, leave and sit at different canvases while stepping together each get the tokens they get alone."""

import pytest
import torch

from model.checkpoint.loading import load_checkpoint
from model.runtime import generate, scheduler
from model.runtime.batcher import CanvasBatcher
from model.runtime.scheduler import Cohort, FixedBatch, Scheduler, denoiser, prefill_batch

C = 16


@pytest.fixture(scope="module")
def ck(tiny_checkpoint):
    return load_checkpoint(tiny_checkpoint("sched", 4, seed=5, copy_head=True))


def _prompt(n: int, seed: int) -> list[int]:
    return [2, *torch.randint(20, 500, (n - 1,), generator=torch.Generator().manual_seed(seed)).tolist()]


def _cohort(ck, ids: list[int], seed: int, budget: int) -> Cohort:
    t = torch.tensor([ids])
    den = denoiser(ck.model, t, ck.settings.replace(max_new_tokens=budget), seed=seed, sampler="torch")
    return Cohort(den, prefill_batch(den, t, None, {}))


def test_generate_and_the_batcher_go_through_the_one_scheduler(ck, monkeypatch):
    seen: list[tuple[int, int]] = []  # (scheduler id, cohorts in the step)
    one_step = Scheduler.step

    def counted(self, cohorts):
        seen.append((id(self), len(cohorts)))
        return one_step(self, cohorts)

    monkeypatch.setattr(Scheduler, "step", counted)
    settings = ck.settings.replace(max_new_tokens=2 * C)
    want = generate(ck.model, torch.tensor([_prompt(9, 1)]), settings, seed=3)
    assert len(seen) == want.stats.total_steps == 8 and {n for _, n in seen} == {1}
    seen.clear()
    b = CanvasBatcher(ck.model, settings, max_batch=2)
    try:
        assert isinstance(b.scheduler, Scheduler)
        hs = [b.submit(_prompt(9, 1), seed=3), b.submit(_prompt(12, 2), seed=4)]
        got = [h.future.result(timeout=60) for h in hs]
    finally:
        b.close()
    assert {i for i, _ in seen} == {id(b.scheduler)} and max(n for _, n in seen) == 2  # rows stepped together
    assert got[0].tokens == [t for t in want.new_tokens[0].tolist() if t != settings.pad_token_id]


def test_cohorts_joining_leaving_and_at_other_canvases_match_their_runs_alone(ck):
    # a: 3 canvases from step 0; b: 1 canvas, joins at step 2 and leaves mid-batch; c: joins at step 5, when a is
    # on its second canvas (the cohorts then sit at different canvas counts in one step).
    plan = {
        "a": (_prompt(7, 0), 10, 3 * C, 0),
        "b": (_prompt(30, 1), 11, C, 2),
        "c": (_prompt(3, 2), 12, 2 * C, 5),
    }
    alone = {}
    for name, (ids, seed, budget, _) in plan.items():
        cohort = _cohort(ck, ids, seed, budget)
        Scheduler(ck.model, ck.settings).run(cohort)
        alone[name] = cohort.batch.sequences
        want = generate(ck.model, torch.tensor([ids]), ck.settings.replace(max_new_tokens=budget), seed=seed)
        assert torch.equal(alone[name], want.sequences)  # run alone, the scheduler is generate
    sched, active, done, canvases_seen = Scheduler(ck.model, ck.settings), {}, {}, []
    for t in range(40):
        for name, (ids, seed, budget, at) in plan.items():
            if t == at:
                active[name] = _cohort(ck, ids, seed, budget)
        if not active:
            break
        canvases_seen.append(sorted(c.batch.canvas_index for c in active.values()))
        ended = sched.step(list(active.values()))
        going_on = []
        for name, c in list(active.items()):
            if c in ended:
                if sched.commit(c):
                    done[name] = active.pop(name).batch.sequences
                else:
                    going_on.append(c)
        if going_on:
            sched.encode(going_on)
    assert set(done) == set(plan)
    assert [0, 1] in canvases_seen and [0, 0, 1] in canvases_seen  # b left while a and c went on
    for name in plan:
        assert torch.equal(done[name], alone[name]), name


def test_pack_left_pads_and_unpack_gives_each_row_its_cache_back(ck):
    a, b = _cohort(ck, _prompt(5, 3), 1, 2 * C), _cohort(ck, _prompt(9, 4), 2, 2 * C)
    packed = FixedBatch.pack(ck.model, [a.batch, b.batch])
    assert packed.attn.tolist() == [[False] * 4 + [True] * 5, [True] * 9]
    assert packed.dec_pos.tolist() == [list(range(5, 5 + C)), list(range(9, 9 + C))]
    assert packed.memory is not None and packed.memory.ids[0, :4].tolist() == [0] * 4
    keys = a.batch.cache.layers[0].keys.clone()
    assert torch.equal(packed.cache.layers[0].keys[:1, :, 4:], keys)
    packed.unpack(ck.model, [a.batch, b.batch])
    assert torch.equal(a.batch.cache.layers[0].keys, keys) and a.batch.memory.ids.shape == (1, 5)
    assert FixedBatch.pack(ck.model, [a.batch]) is a.batch  # one batch: its own cache and positions


def test_a_fixed_batch_with_one_generator_steps_only_alone(ck):
    ids = torch.tensor([_prompt(6, 5), _prompt(6, 6)])
    den = denoiser(ck.model, ids, ck.settings, seed=0)
    two = Cohort(den, prefill_batch(den, ids, None, {}))
    with pytest.raises(ValueError, match="only as one row each with its own generator"):
        Scheduler(ck.model, ck.settings).step([two, _cohort(ck, _prompt(4, 7), 1, C)])
    assert scheduler.Scheduler is Scheduler
