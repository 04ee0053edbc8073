"""GrammarConstraint during denoising on a random-weight checkpoint: complete, valid, within budget."""

import llguidance
import llguidance.hf
import numpy as np
import pytest
import torch

from model.constraints.denoise import GrammarConstraint, bitmask_to_bool
from model.constraints.grammar import shortest_completion
from model.loading import load_checkpoint
from model.runtime import StepEvent, generate

GRAMMARS = {
    # one unbounded string and an unbounded integer
    "string": r"""start: <|tool_call> "call:get_weather{city:" <|"|> STR <|"|> ",days:" INT "}" <tool_call|> <|tool_response>
STR: /[^<]*/
INT: /[0-9]+/
""",
    # an unbounded number (the prototype finished 0/50 of these inside a 64-token canvas)
    "number": r"""start: <|tool_call> "call:f{n:" NUM "}" <tool_call|> <|tool_response>
NUM: /-?[0-9]+(\.[0-9]+)?/
""",
    # an unbounded array of strings
    "array": r"""start: <|tool_call> "call:f{l:[" (item ("," item)*)? "]}" <tool_call|> <|tool_response>
item: <|"|> STR <|"|>
STR: /[^<]*/
""",
}


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    from model.testing import make_tiny_checkpoint

    torch.set_num_threads(1)
    path = make_tiny_checkpoint(
        tmp_path_factory.mktemp("cons"), canvas_length=16, generation={"max_denoising_steps": 8}
    )
    ck = load_checkpoint(path)
    ck.llg = llguidance.hf.from_tokenizer(ck.tokenizer)
    return ck


def _constraint(ck, grammar):
    m = llguidance.LLMatcher(ck.llg, llguidance.LLMatcher.grammar_from_lark(grammar))
    assert not m.is_error(), m.get_error()
    return GrammarConstraint(m, ck.tokenizer)


def _check_valid(ck, grammar, ids):
    m = llguidance.LLMatcher(ck.llg, llguidance.LLMatcher.grammar_from_lark(grammar))
    toks = [t for t in ids if t != 0]
    assert m.try_consume_tokens(toks) == len(toks)
    return m


@pytest.mark.parametrize("name", sorted(GRAMMARS))
@pytest.mark.parametrize("budget", [32, 48])
def test_calls_complete_and_valid_within_budget(ckpt, name, budget):
    grammar = GRAMMARS[name]
    for seed in range(6):
        c = _constraint(ckpt, grammar)
        need = c.min_completion_tokens()
        assert need < budget
        ids = ckpt.tokenizer("Weather in Paris?", return_tensors="pt").input_ids
        settings = ckpt.settings.replace(max_new_tokens=budget, t_max=1.2, t_min=0.6)
        out = generate(ckpt.model, ids, settings, constraints=[c], seed=seed)
        new = out.new_tokens[0].tolist()
        m = _check_valid(ckpt, grammar, new)
        assert m.is_stopped(), f"seed {seed}: call not finished: {ckpt.tokenizer.decode(new)!r}"
        assert c.done
        assert len([t for t in new if t != 0]) <= budget


def test_multi_canvas_readout_is_valid_prefix_each_canvas(ckpt):
    grammar = GRAMMARS["string"]
    c = _constraint(ckpt, grammar)
    canvases = []
    ids = ckpt.tokenizer("A long city name please", return_tensors="pt").input_ids
    settings = ckpt.settings.replace(max_new_tokens=64, t_max=1.5, t_min=1.0)
    events = []
    out = generate(
        ckpt.model,
        ids,
        settings,
        constraints=[c],
        seed=3,
        on_event=lambda e: (
            canvases.append(e.tokens[0].tolist()) if not isinstance(e, StepEvent) else events.append(e)
        ),
    )
    prefix: list[int] = []
    for canvas in canvases:
        prefix += [t for t in canvas if t != 0]
        _check_valid(ckpt, grammar, prefix)  # every canvas boundary is a valid prefix
    assert c.done and out.stats.canvases >= 1
    # fixed positions (committed / forced) are reported to the stream
    assert any(bool(e.fixed.any()) for e in events)


def test_constraint_masks_never_produce_nan_and_mask_respected(ckpt):
    c = _constraint(ckpt, GRAMMARS["number"])
    c.start_canvas(16, 64)
    plan = c.plan()
    assert plan.mask is not None and plan.mask.dtype == torch.bool and bool(plan.mask.any())
    # the forced prefix `<|tool_call>call:f{n:` is fixed without sampling
    assert ckpt.tokenizer.decode(plan.fixed, skip_special_tokens=False) == "<|tool_call>call:f{n:"
    allowed_text = {ckpt.tokenizer.decode([i]) for i in torch.nonzero(plan.mask).flatten().tolist()}
    assert all(t[0] in "-0123456789" for t in allowed_text)


def test_shortest_completion_closes_open_structures(ckpt):
    m = llguidance.LLMatcher(ckpt.llg, llguidance.LLMatcher.grammar_from_lark(GRAMMARS["array"]))
    start = ckpt.tokenizer('<|tool_call>call:f{l:[<|"|>abc', add_special_tokens=False).input_ids
    assert m.try_consume_tokens(start) == len(start)
    comp = shortest_completion(m, ckpt.tokenizer, 50)
    text = ckpt.tokenizer.decode(comp, skip_special_tokens=False)
    assert text == '<|"|>]}<tool_call|><|tool_response>'
    assert m.try_consume_tokens(comp) == len(comp) and m.is_stopped()


def test_bitmask_unpacking_layout():
    words = np.array([0b101, -(2**31)], dtype=np.int32).tobytes() + b"\x00\x00\x00\x00"
    allowed = bitmask_to_bool(words, 64)
    assert allowed.nonzero()[0].tolist() == [0, 2, 63]
