"""Grounded answers (``ground_answers``): prose writes digits only inside facts of the conversation (numbers,
dates, digit-holding paths), copied whole and standing apart."""

from __future__ import annotations

import json
import re

import pytest
import torch

from grammar.grounding import answer_facts, answer_regex
from grammar.llg import new_matcher
from grammar.turn import tool_call_grammar
from model.checkpoint.loading import CheckpointError, load_checkpoint
from model.testing import make_tiny_checkpoint
from model.turn.chat import ChatModel, answer_texts

torch.set_num_threads(1)

TEXTS = [
    "Where is load_bundle?",
    '{"path": "agentkit/bundle.py", "line": 600, "signature": "def load_bundle(path: str)"}',
    "2026-11-29 -7.0 3.0 6.0 30.0 km/h 16.1 .5- -x 188",
]


def _py(rx: str) -> re.Pattern[str]:
    return re.compile(rx.replace("\\/", "/"))


def test_facts_are_the_runs_holding_a_digit_trimmed():
    assert answer_facts(TEXTS) == {"600", "2026-11-29", "-7.0", "3.0", "6.0", "30.0", "16.1", "5", "188"}
    assert answer_facts(["see model/v2/x_1.py, not load_bundle"]) == {"model/v2/x_1.py"}
    assert answer_facts(["no facts here, only words: load_bundle, agentkit/bundle.py."]) == set()


@pytest.mark.parametrize(
    ("answer", "ok"),
    [
        ("load_bundle is defined at agentkit/bundle.py:600.", True),
        ("2026-11-29: 3.0 to 6.0 °C, wind 16.1 km/h; low -7.0.", True),
        ("(600)", True),
        ("Hello there", True),
        ("lines 188-600 of agentkit/bundle.py", True),  # a range of two whole numbers
        ("188-6.0", False),
        ("load_bundle_ defined at agentkit/bundle.py:600.", True),  # text without digits is free
        ("bundle.py:6000", False),  # a garbled number
        ("line 600_x", False),  # "_" glued after a fact
        ("v/600", False),  # "/" glued before one
        ("at 60", False),  # not a fact of the texts
        ("at600", False),  # a letter before a fact
        ("16.1k", False),  # a letter after one
        ("2026-11-29-30.0", False),  # two facts glued by "-"
        ("6.0.0", False),  # and by "."
        ("600.x", False),
    ],
)
def test_the_answer_regex_admits_whole_facts_standing_apart(answer, ok):
    assert bool(_py(answer_regex(TEXTS)).fullmatch(answer)) is ok


def test_without_facts_no_digit_can_be_written():
    rx = _py(answer_regex(["Hello, how are you? load_bundle"]))
    assert rx.fullmatch("I am fine, thanks.") and not rx.fullmatch("I am 42.")


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return load_checkpoint(str(make_tiny_checkpoint(tmp_path_factory.mktemp("ga"), canvas_length=16)))


def _prose_ids(tok, text):
    return tok(text + "<turn|>", add_special_tokens=False)["input_ids"]


def test_the_grammar_applies_the_answer_regex_to_prose_only(ckpt):
    tok = ckpt.tokenizer
    g = tool_call_grammar([], "auto", answer_grounding=TEXTS)
    good, bad = (
        _prose_ids(tok, "It is at agentkit/bundle.py:600."),
        _prose_ids(tok, "It is at bundle.py:601."),
    )
    assert new_matcher(tok, g).validate_tokens(good) == len(good)
    assert new_matcher(tok, g).validate_tokens(bad) < len(bad)
    free = tool_call_grammar([], "auto")
    assert new_matcher(tok, free).validate_tokens(bad) == len(bad)


def test_answer_texts_add_the_calls_arguments():
    messages = [
        {"role": "user", "content": "Forecast for Oslo?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "f", "arguments": {"place": "Oslo", "days": 5}},
                },
                {
                    "id": "c2",
                    "type": "function",
                    "function": {"name": "g", "arguments": json.dumps({"n": 12})},
                },
            ],
        },
        {"role": "tool", "name": "f", "content": {"t": 4.5}},
    ]
    assert answer_texts(messages) == ["Forecast for Oslo?", "4.5", "Oslo", "5", "12"]


def test_generated_answers_only_hold_facts_of_the_conversation(ckpt, tmp_path):
    """A random-weight model with ``ground_answers`` on, many seeds: every digit it writes is in a fact (or a
    range of two whole-number facts)."""
    cm = ChatModel(ckpt)
    cm.settings = cm.settings.replace(ground_answers=True)
    messages = [
        {"role": "user", "content": "Where is parse_config defined?"},
        {"role": "tool", "name": "find_definition", "content": {"path": "src/cache.py", "line": 40}},
    ]
    facts = answer_facts(answer_texts(messages))

    for seed in range(8):
        out = cm.chat(messages, seed=seed, max_new_tokens=48)
        for run in re.findall(r"[A-Za-z0-9_./-]*[0-9][A-Za-z0-9_./-]*", out.text):
            run = run.rstrip(".-").lstrip(".")
            pair = re.fullmatch(r"(\d+)-(\d+)", run)
            assert run in facts or (pair and set(pair.groups()) <= facts), (run, out.text)
    cm.settings = cm.settings.replace(ground_answers=False)
    free = "".join(cm.chat(messages, seed=s, max_new_tokens=48).text for s in range(8))
    assert re.search(r"[0-9]", free), "the unconstrained model writes fact characters (the test can fail)"


def test_the_decoding_file_refuses_a_non_boolean_ground_answers(tmp_path):
    from model.checkpoint.loading import read_decoding_file

    p = tmp_path / "agentkit_decoding.json"
    p.write_text(json.dumps({"ground_answers": 1}))
    with pytest.raises(CheckpointError, match="ground_answers: input should be a valid boolean, got 1"):
        read_decoding_file(p)
