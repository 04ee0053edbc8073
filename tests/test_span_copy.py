"""Whole-span copying in answers (``span_copy``, :mod:`model.constraints.span_copy`): once the prose has written two
pieces of a tool-response span in source order, the rest of the span is committed in one decision; inside a
fact-like span the frontier may only continue a span or end the word."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import torch

from grammar.llg import new_matcher
from grammar.turn import tool_call_grammar
from model.checkpoint.loading import CheckpointError, load_checkpoint
from model.constraints.denoise import GrammarConstraint
from model.constraints.span_copy import SpanCopier, tool_spans
from model.turn.chat import ChatModel, tool_texts

torch.set_num_threads(1)

RESPONSE = [
    "agentkit/bundle.py:532",
    "agentkit/bundle.py",
    "532",
    "def load_bundle(path: str) -> Bundle",
    "agentkit/backends/__init__.py:19",
    "2026-11-29",
    "2026-11-30",
    "6.0",
]


@pytest.fixture(scope="module")
def tok():
    from transformers import AutoTokenizer

    from model.checkpoint.loading import DEFAULT_CHECKPOINT

    return AutoTokenizer.from_pretrained(str(DEFAULT_CHECKPOINT))


def ids(tok, text):
    return tok(text, add_special_tokens=False)["input_ids"]


def test_spans_are_runs_of_span_characters_without_trailing_punctuation():
    assert tool_spans(["see agentkit/bundle.py:532.", "-4.0 km/h", "a (b)"]) == {
        "see",
        "agentkit/bundle.py:532",
        "-4.0",
        "km/h",
    }


def test_a_started_span_is_continued_to_where_the_spans_part_never_inside_a_word(tok):
    sc = SpanCopier(tool_spans(RESPONSE), tok)
    committed = ids(tok, "It is at a")
    # "a" + "gent": two pieces of agentkit/... in source order; the spans part after "agentkit/" (bundle, backends)
    assert tok.decode(sc.propose(committed, ids(tok, "gent")[0])) == "gentkit/"
    # then "back" picks one: the rest of that span, whole, up to its end
    run = sc.propose(ids(tok, "It is at agentkit/"), ids(tok, "back")[0])
    assert tok.decode(run) == "backends/__init__.py:19"
    # a span that ends inside a longer one (the path in its location) goes on to the longer one
    assert tok.decode(sc.propose(ids(tok, "at agentkit/bun"), ids(tok, "dle")[0])) == "dle.py:532"
    assert tok.decode(sc.propose(ids(tok, "at agentkit/bundle."), ids(tok, "py")[0])) == "py:532"
    # a single span: the whole rest of it
    only = SpanCopier(["agentkit/bundle.py:532"], tok)
    assert tok.decode(only.propose(committed, ids(tok, "gent")[0])) == "gentkit/bundle.py:532"


def test_no_copy_without_two_agreeing_pieces(tok):
    sc = SpanCopier(tool_spans(RESPONSE), tok)
    assert sc.propose(ids(tok, "It is at"), ids(tok, " agent")[0]) == []  # a word's first piece
    assert sc.propose(ids(tok, "It is at a"), ids(tok, "bout")[0]) == []  # "about" starts no span
    assert sc.propose(ids(tok, "at agentkit/bundle.py:532"), ids(tok, ".")[0]) == []  # the span is whole


def test_inside_a_fact_the_frontier_continues_a_span_or_ends_the_word(tok):
    sc = SpanCopier(tool_spans(RESPONSE), tok)
    vocab = len(tok)
    mask = sc.allowed(ids(tok, "On 2026-"), vocab)
    assert mask is not None
    assert mask[ids(tok, "11")[0]] and mask[ids(tok, " ")[0]] and mask[ids(tok, ",")[0]]
    assert not mask[ids(tok, "-")[0]] and not mask[ids(tok, "12")[0]]  # 2026--, 2026-12 are no spans here
    whole = sc.allowed(ids(tok, "from 6.0"), vocab)  # a whole span: punctuation may follow, no more digits
    assert whole is not None and whole[ids(tok, ".")[0]] and not whole[ids(tok, "0")[0]]
    closed = sc.allowed(ids(tok, "On 2026-11-30-"), vocab)  # punctuation after a whole span ends the word
    assert closed is not None and not closed[ids(tok, "30")[0]] and closed[ids(tok, " ")[0]]
    assert sc.allowed(ids(tok, "at 7.5"), vocab) is None  # already off every span: nothing to keep to


def test_a_plain_word_becomes_a_fact_only_at_a_span_start(tok):
    sc = SpanCopier(tool_spans(RESPONSE), tok)
    vocab = len(tok)
    plain = sc.allowed(ids(tok, "It is at tools"), vocab)
    assert plain is not None
    assert not plain[ids(tok, "/")[0]]  # tools/ starts no span
    assert plain[ids(tok, ".")[0]] and plain[ids(tok, " ")[0]] and plain[ids(tok, "s")[0]]  # prose stays free
    at = sc.allowed(ids(tok, "It is at"), vocab)
    assert at is not None and not at[ids(tok, "532")[0]]  # at532
    agent = sc.allowed(ids(tok, "It is at agent"), vocab)
    assert agent is not None and agent[ids(tok, "kit")[0]]  # no mark yet: free
    dot = sc.allowed(ids(tok, "It is toolsatching."), vocab)  # punctuation after a plain word ends it
    assert dot is not None and not dot[ids(tok, "py")[0]] and dot[ids(tok, " ")[0]]
    load = sc.allowed(ids(tok, "def load"), vocab)
    assert load is not None and load[ids(tok, "_")[0]]  # load_bundle is a span


def test_a_copied_word_ends_at_its_span_end(tok):
    """A plain span written in two or more pieces (a copy started) is held like a fact: ``BundleSpec`` may end
    or take punctuation, never go on to ``BundleSpecpe`` (the model's pointer, still behind the copy, repeats
    the span's last pieces there)."""
    sc = SpanCopier(tool_spans(["class BundleSpec", "agentkit/bundle_load.py:152"]), tok)
    vocab = len(tok)
    whole = sc.allowed(ids(tok, "It is BundleSpec"), vocab)
    assert whole is not None
    assert not whole[ids(tok, "pe")[0]] and not whole[ids(tok, "c")[0]] and not whole[ids(tok, "le")[0]]
    assert whole[ids(tok, " at")[0]] and whole[ids(tok, ".")[0]] and whole[ids(tok, ",")[0]]
    started = sc.allowed(ids(tok, "It is Bund"), vocab)  # two pieces of the span: only its next piece
    assert started is not None and started[ids(tok, "le")[0]] and not started[ids(tok, "pe")[0]]
    assert sc.allowed(ids(tok, "It is at tools"), vocab)[ids(tok, "s")[0]]  # a one-piece word stays free


def test_a_fact_span_glued_to_the_word_before_restarts_after_a_space(tok):
    """The first token of a span as the tool response tokenizes it (after a quote) has no leading space, so the
    model glues it to the word before (``at`` + ``gra``); its next agreeing piece (``mm``) replaces the glued
    piece by a space and the span, copied whole."""
    sc = SpanCopier(tool_spans([*RESPONSE, "grammar/turn.py:199", "heavy showers"]), tok)
    glued = ids(tok, "It is at") + ids(tok, "gra")
    assert tok.decode(sc.restart(glued, ids(tok, "mm")[0])) == " grammar/turn.py:199"
    assert sc.restart(glued, ids(tok, "ow")[0]) == []  # "graow" starts no span
    assert sc.restart(ids(tok, "It is at") + ids(tok, "sh"), ids(tok, "o")[0]) == []  # showers: no fact
    assert sc.restart(ids(tok, "at load_") + ids(tok, "gra"), ids(tok, "mm")[0]) == []  # glued to a fact
    assert sc.restart(ids(tok, "It is gra"), ids(tok, "mm")[0]) == []  # not glued: propose's case
    # the pointer skipped the first letters of the span's first word (schema: s + che + ma): they are put back
    skipped = SpanCopier(["schema/ir.py:278", "schema/ir.py"], tok)
    assert tok.decode(skipped.restart(ids(tok, "is defined") + ids(tok, "che"), ids(tok, "ma")[0])) == (
        " schema/ir.py:278"
    )
    both = SpanCopier(["schema/ir.py:278", "xchema/y.py:1"], tok)  # the spans disagree on the skipped letters
    assert both.restart(ids(tok, "is defined") + ids(tok, "che"), ids(tok, "ma")[0]) == []
    inner = SpanCopier(["tools/code_search/repo.py:43"], tok)  # only letters of the first word may be skipped
    assert inner.restart(ids(tok, "is at") + ids(tok, "search"), ids(tok, "/")[0]) == []


def test_the_constraint_restarts_a_glued_span_inside_its_canvas_only(tok):
    grammar = tool_call_grammar([], "auto")
    prefix = ids(tok, "It is at") + ids(tok, "gra")
    canvas_len = 32

    def step(span_copy, new_canvas=False):
        c = GrammarConstraint(new_matcher(tok, grammar), tok, span_copy=span_copy, extend_prose=False)
        c.start_canvas(canvas_len, 256)
        c._consume(prefix)
        if new_canvas:  # the glued piece lies in an earlier canvas: it cannot be rolled back
            c.start_canvas(canvas_len, 256 - len(prefix))
        at = len(c.canvas)
        tokens = [0] * canvas_len
        tokens[at] = ids(tok, "mm")[0]
        accepted = [False] * canvas_len
        accepted[at] = True
        c.commit(tokens, accepted, torch.zeros(canvas_len, len(tok)), 0.1)
        return tok.decode(c.all_tokens)

    sc = SpanCopier(["grammar/turn.py:199", "agentkit/bundle.py:532"], tok)
    assert step(sc) == "It is at grammar/turn.py:199"
    assert step(sc, new_canvas=True) == "It is atgramm"
    assert step(None) == "It is atgramm"


def test_the_frontier_lets_in_the_piece_that_restarts_a_glued_span(tok):
    """``at`` + ``model`` (a path's first token glued to the word before): ``/`` brings a fact mark to the plain
    word ``atmodel``, which starts no span, but with ``model`` it starts ``model/turn/chat.py:107``, so the
    frontier lets it in (the restart then commits `` model/...``); nowhere else, and not when the glued piece lies
    in an earlier canvas (``restart=False``)."""
    sc = SpanCopier(tool_spans(["model/turn/chat.py:107", "model/turn/chat.py", "ChatModel"]), tok)
    vocab, slash = len(tok), ids(tok, "/")[0]
    glued = ids(tok, "It is at") + ids(tok, "model")
    mask = sc.allowed(glued, vocab)
    assert mask is not None and mask[slash]
    assert not mask[ids(tok, "107")[0]]  # atmodel107 restarts nothing
    assert not sc.allowed(glued, vocab, restart=False)[slash]
    assert not sc.allowed(ids(tok, "It is at") + ids(tok, "turn"), vocab)[slash]  # no span starts turn/
    assert not sc.allowed(ids(tok, "It is at tools"), vocab)[slash]
    assert tok.decode(sc.restart(glued, slash)) == " model/turn/chat.py:107"


def test_the_readout_restarts_a_glued_span(tok):
    """The readout takes the restart piece the frontier lets in, and restarts the span as the commit does."""
    grammar = tool_call_grammar([], "auto")
    prefix = ids(tok, "It is at") + ids(tok, "model")
    canvas_len = 32
    c = GrammarConstraint(
        new_matcher(tok, grammar),
        tok,
        span_copy=SpanCopier(["model/turn/chat.py:107"], tok),
        extend_prose=False,
    )
    c.start_canvas(canvas_len, 256)
    c._consume(prefix)
    logits = torch.zeros(canvas_len, len(tok))
    logits[len(prefix), ids(tok, "/")[0]] = 10.0
    logits[len(prefix), ids(tok, ".")[0]] = 5.0
    c.readout(logits)
    assert tok.decode(c.all_tokens).startswith("It is at model/turn/chat.py:107")


def test_the_readout_keeps_spans_whole_too(tok):
    """The last canvas's readout (masked argmax left to right, when the schedule is spent) follows the same
    rules: ``point`` after ``model/check`` brings the rest of the span, and ``com`` cannot skip ``hf_``."""
    grammar = tool_call_grammar([], "auto")
    prefix = ids(tok, "It is at model/check")
    canvas_len = 40

    def readout(span_copy):
        c = GrammarConstraint(new_matcher(tok, grammar), tok, span_copy=span_copy, extend_prose=False)
        c.start_canvas(canvas_len, 256)
        c._consume(prefix)
        logits = torch.zeros(canvas_len, len(tok))
        for k, piece in enumerate(["point", "/", "com", "pa", "t", ".", "py"]):
            logits[len(prefix) + k, ids(tok, piece)[0]] = 10.0
        c.readout(logits)
        return tok.decode(c.all_tokens)

    assert readout(SpanCopier(["model/checkpoint/hf_compat.py:59"], tok)).startswith(
        "It is at model/checkpoint/hf_compat.py:59"
    )
    assert readout(None).startswith("It is at model/checkpoint/compat.py")


def test_the_constraint_commits_a_started_span_in_one_step(tok):
    """A prose-only turn, one denoising step: the frontier token ``gent`` (accepted) after a committed ``a``
    brings the rest of ``agentkit/bundle.py:532`` with it; without the copier only ``gent`` is committed."""
    grammar = tool_call_grammar([], "auto")
    prefix = ids(tok, "It is at a")
    canvas_len = 32

    def step(span_copy):
        c = GrammarConstraint(new_matcher(tok, grammar), tok, span_copy=span_copy, extend_prose=False)
        c.start_canvas(canvas_len, 256)
        c._consume(prefix)
        tokens = [0] * canvas_len
        tokens[len(prefix)] = ids(tok, "gent")[0]
        accepted = [False] * canvas_len
        accepted[len(prefix)] = True
        c.commit(tokens, accepted, torch.zeros(canvas_len, len(tok)), 0.1)
        return c, tok.decode(c.committed)

    c, text = step(SpanCopier(["agentkit/bundle.py:532", "load_bundle"], tok))
    assert text == "It is at agentkit/bundle.py:532"
    assert c.span_copied_tokens == len(ids(tok, "gentkit/bundle.py:532"))
    assert step(None)[1] == "It is at agent"


def test_tool_texts_are_the_tool_responses_values():
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "Where is x?"},
        {"role": "tool", "name": "f", "content": {"path": "a/b.py", "line": 3, "ok": True}},
    ]
    assert tool_texts(messages) == ["a/b.py", "3"]


def test_the_decoding_file_refuses_a_non_boolean_span_copy(tmp_path):
    from model.checkpoint.loading import read_decoding_file

    p = tmp_path / "agentkit_decoding.json"
    p.write_text(json.dumps({"span_copy": "yes"}))
    with pytest.raises(CheckpointError, match='span_copy: input should be a valid boolean, got "yes"'):
        read_decoding_file(p)


@pytest.mark.slow
def test_the_shipped_checkpoint_copies_facts_whole_or_not_at_all():
    """End to end on the shipped checkpoint (seeds 0-2), a question no test or training example uses: every fact
    the answer states (numbers and paths, as benchmarks/bot_questions.py counts them) is spelled as the tool
    response spells it, and the answer names the location whole at seed 0 (``CanvasBatcher is defined at
    model/batching.py:173.``; at seeds 1 and 2 the model starts the path with a word of its own, ``tools``, which
    no span starts with: the path is then left out, ``Can is the is model at toolsatching. - atch:``)."""
    from evals.heldout import answer_facts
    from model.checkpoint.loading import DEFAULT_CHECKPOINT

    cm = ChatModel(load_checkpoint(str(DEFAULT_CHECKPOINT)))
    assert cm.settings.span_copy, "the shipped decoding file turns span_copy on"
    where = {"location": "model/batching.py:173", "path": "model/batching.py", "line": 173, "kind": "class"}
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "Where is the class CanvasBatcher defined?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "find_definition", "arguments": {"name": "CanvasBatcher"}},
                }
            ],
        },
        {
            "role": "tool",
            "name": "find_definition",
            "content": {"query": "CanvasBatcher", "matches": [where]},
        },
    ]
    turn = cm.prepare(messages)
    assert isinstance(turn.constraint, GrammarConstraint) and turn.constraint.span_copy is not None
    told = json.dumps(where)
    named, texts = [], []
    for seed in range(3):
        text = cm.chat(messages, seed=seed).text
        assert all(f in told for f in answer_facts(text)), (seed, text)
        named.append(bool(re.search(r"(?<![\w/])model/batching\.py:173(?!\d)", text)))
        texts.append(text)
    assert named == [True, False, False], texts
