"""GrammarConstraint during denoising on a random-weight checkpoint: complete, valid, within budget."""

import itertools

import llguidance
import llguidance.hf
import numpy as np
import pytest
import torch

from grammar.completion import shortest_completion
from model.checkpoint.loading import load_checkpoint
from model.constraints.denoise import GrammarConstraint, bitmask_to_bool
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
def ckpt(tiny_checkpoint):
    ck = load_checkpoint(tiny_checkpoint("cons", 8))
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


def _row(vocab, hot):
    """Tempered logits [V] with the given {token id: logit}; 0 elsewhere."""
    r = torch.zeros(vocab)
    for t, v in hot.items():
        r[t] = v
    return r


@pytest.mark.parametrize("extend", [True, False])
def test_frontier_extension_commits_stable_confident_masked_token(ckpt, extend):
    tok = ckpt.tokenizer
    vocab = ckpt.model.config.get_text_config().vocab_size
    c = GrammarConstraint(
        llguidance.LLMatcher(ckpt.llg, llguidance.LLMatcher.grammar_from_lark(GRAMMARS["number"])),
        tok,
        extend=extend,
    )
    c.start_canvas(16, 16)
    plan = c.plan()
    k = len(plan.fixed)
    assert tok.decode(plan.fixed) == "<|tool_call>call:f{n:"  # fast-forward tokens
    seven, close, letter = (tok.convert_tokens_to_ids(x) for x in ("7", "}", "a"))
    logits = torch.zeros(16, vocab)
    logits[k] = _row(vocab, {seven: 30.0})
    # the model prefers an ungrammatical letter; under the grammar's mask "}" is near certain
    logits[k + 1] = _row(vocab, {letter: 30.0, close: 20.0})
    tokens = [0] * 16
    tokens[: k + 2] = [*plan.fixed, seven, letter]
    accepted = [True] * (k + 2) + [False] * (16 - k - 2)
    # first step of the canvas: no previous logits, so no extension: the accepted letter is vetoed
    assert c.commit(tokens, accepted, logits=logits, entropy_bound=0.1) == [k + 1]
    assert c.committed == [*plan.fixed, seven]
    # second step, same (stable) logits: the extension commits "}" and the fast-forward tokens close the call
    veto = c.commit(tokens, accepted, logits=logits.clone(), entropy_bound=0.1)
    if extend:
        assert veto == []
        assert c.done
        assert tok.decode(c.committed) == "<|tool_call>call:f{n:7}<tool_call|><|tool_response>"
    else:
        assert veto == [k + 1] and not c.done and c.committed == [*plan.fixed, seven]


def test_frontier_extension_needs_stability_and_low_entropy(ckpt):
    tok = ckpt.tokenizer
    vocab = ckpt.model.config.get_text_config().vocab_size
    seven, eight = (tok.convert_tokens_to_ids(x) for x in ("7", "8"))

    def fresh():
        c = _constraint(ckpt, GRAMMARS["number"])
        c.start_canvas(16, 16)
        return c, len(c.plan().fixed)

    accepted = [False] * 16  # the sampler accepted nothing past the fast-forward prefix
    # unstable: the masked argmax moves from "8" to "7" between the two steps -> nothing committed
    c, k = fresh()
    a, b = torch.zeros(16, vocab), torch.zeros(16, vocab)
    a[k], b[k] = _row(vocab, {eight: 30.0}), _row(vocab, {seven: 30.0})
    assert c.commit([0] * 16, accepted, logits=a, entropy_bound=0.1) == []
    assert c.commit([0] * 16, accepted, logits=b, entropy_bound=0.1) == []
    assert len(c.committed) == k
    # stable but uncertain: "7" and "8" are tied under the mask -> entropy ~0.69 > 0.1 -> nothing
    c, k = fresh()
    a = torch.zeros(16, vocab)
    a[k] = _row(vocab, {seven: 30.0, eight: 30.0})
    c.commit([0] * 16, accepted, logits=a, entropy_bound=0.1)
    c.commit([0] * 16, accepted, logits=a.clone(), entropy_bound=0.1)
    assert len(c.committed) == k
    # stable and confident -> committed without the sampler's acceptance, then more digits may follow
    c, k = fresh()
    a = torch.zeros(16, vocab)
    a[k] = _row(vocab, {seven: 30.0})
    c.commit([0] * 16, accepted, logits=a, entropy_bound=0.1)
    c.commit([0] * 16, accepted, logits=a.clone(), entropy_bound=0.1)
    assert c.committed[k:] == [seven] and not c.done


@pytest.mark.parametrize("no_repeat", [True, False])
def test_no_repeat_rule_never_commits_a_word_twice_in_a_row(ckpt, no_repeat):
    tok = ckpt.tokenizer
    vocab = ckpt.model.config.get_text_config().vocab_size
    grammar = 'start: "say:" /[a-z ]+/ "."'
    m = llguidance.LLMatcher(ckpt.llg, llguidance.LLMatcher.grammar_from_lark(grammar))
    c = GrammarConstraint(m, tok, no_repeat=no_repeat)
    c.start_canvas(16, 16)
    plan = c.plan()
    k = len(plan.fixed)
    w = next(i for p, i in sorted(tok.get_vocab().items()) if p.isalpha() and p.islower() and len(p) >= 3)
    tokens = [0] * 16
    tokens[:k] = plan.fixed
    tokens[k] = tokens[k + 1] = w  # two parallel positions copied the same word
    accepted = [True] * (k + 2) + [False] * (16 - k - 2)
    c.commit(tokens, accepted)
    n_words = sum(1 for t in c.committed if t == w)
    assert n_words == (1 if no_repeat else 2)
    mask = c.plan().mask
    assert mask is not None and bool(mask[w]) is (not no_repeat)  # the frontier mask leaves the repeat out
    logits = torch.zeros(16, vocab)
    logits[:, w] = 30.0  # readout: the argmax everywhere is the same word
    out = c.readout(logits)
    doubled = any(a == b == w for a, b in itertools.pairwise(out))
    assert doubled is (not no_repeat)


def test_no_repeat_rule_looks_through_a_lone_space_token(ckpt):
    """With a space-isolating tokenizer a word and its repeat have a space token between them (``is Ġ is``): the
    rule bans the repeat after the space as it does right after the word, and a second space after the space (such
    a tokenizer writes a run of spaces as one token)."""
    tok = ckpt.tokenizer
    grammar = 'start: "say:" /[a-z ]+/ "."'
    vocab = tok.get_vocab()
    space = vocab["\u0120"]
    w = next(i for p, i in sorted(vocab.items()) if p.isalpha() and p.islower() and len(p) >= 3)
    for no_repeat in (True, False):
        m = llguidance.LLMatcher(ckpt.llg, llguidance.LLMatcher.grammar_from_lark(grammar))
        c = GrammarConstraint(m, tok, no_repeat=no_repeat)
        c.start_canvas(16, 16)
        fixed = c.plan().fixed
        k = len(fixed)
        c.commit(fixed + [w, space] + [0] * (14 - k), [True] * (k + 2) + [False] * (14 - k))
        assert c.committed[-2:] == [w, space]
        mask = c.plan().mask
        assert mask is not None and bool(mask[w]) is (not no_repeat)
        assert bool(mask[space]) is (not no_repeat)


@pytest.mark.parametrize("window", [1, 3])
def test_repeat_window_keeps_prose_from_looping_back_on_a_word_but_not_numbers_or_calls(ckpt, window):
    """repeat_window=3: in prose a word of 3+ letters among the last 3 committed tokens is not committed again
    (``defined is defined``); a number may repeat (``52.52``), and inside a tool call only the word right
    before is banned."""
    tok = ckpt.tokenizer
    grammar = r"""start: TEXT "!" | <|tool_call> "call:f{s:" TEXT "}" <tool_call|>
TEXT: /[a-z0-9. ]+/
"""
    vocab = tok.get_vocab()
    w1, w2 = [i for p, i in sorted(vocab.items()) if p.isalpha() and p.islower() and len(p) >= 3][:2]
    num = next(i for p, i in sorted(vocab.items()) if p.isdigit())
    dot = vocab["."]

    def fresh(prefix: list[int]):
        m = llguidance.LLMatcher(ckpt.llg, llguidance.LLMatcher.grammar_from_lark(grammar))
        c = GrammarConstraint(m, tok, no_repeat=True, repeat_window=window)
        c.start_canvas(16, 16)
        k = len(c.plan().fixed)
        c.commit(
            c.plan().fixed + prefix + [0] * (16 - k - len(prefix)),
            [True] * (k + len(prefix)) + [False] * (16 - k - len(prefix)),
        )
        return c

    def allowed_next(c, t: int) -> bool:
        mask = c.plan().mask
        assert mask is not None
        return bool(mask[t])

    c = fresh([w1, w2])  # prose: "w1 w2", then w1 again
    assert tok.convert_ids_to_tokens(c.committed) == tok.convert_ids_to_tokens([w1, w2])
    assert allowed_next(c, w1) is (window == 1)
    before = len(c.committed)
    c.commit(c.committed + [w1] + [0] * (15 - before), [True] * (before + 1) + [False] * (15 - before))
    assert len(c.committed) == before + (window == 1)  # the commit walk stops before the banned word
    c = fresh([num, dot])  # "52." then 52 again: numbers are left alone
    assert allowed_next(c, num)
    start = tok.convert_tokens_to_ids("<|tool_call>")
    c = fresh([start])  # a call: "call:f{s:" fast-forwarded, then "w1 w2" inside the value, then w1 again
    c.commit(
        c.committed + [w1, w2] + [0] * (14 - len(c.committed)),
        [True] * (len(c.committed) + 2) + [False] * (14 - len(c.committed)),
    )
    assert c.in_call and c.committed[-2:] == [w1, w2]
    assert allowed_next(c, w1) and not allowed_next(c, w2)
    with pytest.raises(ValueError, match="repeat_window must be >= 1"):
        GrammarConstraint(c.matcher, tok, repeat_window=0)


@pytest.mark.parametrize("extend_prose", [True, False])
def test_extend_prose_off_stops_the_extension_in_prose_but_not_in_calls(ckpt, extend_prose):
    """extend_prose=False: prose (a turn with tokens and no <|tool_call> yet) advances only by accepted
    positions; a stable confident masked argmax past them waits. Inside a call the extension still commits."""
    tok = ckpt.tokenizer
    vocab = ckpt.model.config.get_text_config().vocab_size
    grammar = r"""start: TEXT | <|tool_call> "call:f{n:" NUM "}" <tool_call|>
TEXT: /[a-z ]+\./
NUM: /[0-9]+/
"""
    words = [i for p, i in sorted(tok.get_vocab().items()) if p.isalpha() and p.islower() and len(p) >= 3][:2]

    def fresh():
        m = llguidance.LLMatcher(ckpt.llg, llguidance.LLMatcher.grammar_from_lark(grammar))
        c = GrammarConstraint(m, tok, extend_prose=extend_prose)
        c.start_canvas(16, 16)
        assert c.plan().fixed == []
        return c

    # prose: the first word accepted at position 0; position 1 stable and confident but not accepted
    c = fresh()
    logits = torch.zeros(16, vocab)
    logits[0] = _row(vocab, {words[0]: 30.0})
    logits[1] = _row(vocab, {words[1]: 30.0})
    tokens = [words[0]] + [0] * 15
    accepted = [True] + [False] * 15
    c.commit(tokens, accepted, logits=logits, entropy_bound=0.1)
    c.commit(tokens[:1] + [0] * 15, [False] * 16, logits=logits.clone(), entropy_bound=0.1)
    assert c.committed == ([words[0], words[1]] if extend_prose else [words[0]])
    assert c.in_call is False  # prose: the runtime gives this row the (prose) accept window

    # a call: "<|tool_call>" accepted, then fast-forward; the digit comes from the extension either way
    c = fresh()
    start, seven = (tok.convert_tokens_to_ids(x) for x in ("<|tool_call>", "7"))
    c.commit([start] + [0] * 15, [True] + [False] * 15)
    k = len(c.committed)
    assert tok.decode(c.committed) == "<|tool_call>call:f{n:"
    assert c.in_call is True  # a call opened: the runtime gives this row the call window
    logits = torch.zeros(16, vocab)
    logits[k] = _row(vocab, {seven: 30.0})
    c.commit(c.committed + [0] * (16 - k), [False] * 16, logits=logits, entropy_bound=0.1)
    c.commit(c.committed + [0] * (16 - k), [False] * 16, logits=logits.clone(), entropy_bound=0.1)
    assert c.committed[k:] == [seven]
