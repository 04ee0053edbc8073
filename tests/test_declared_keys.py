"""Parameter-name and user-turn offsets found by rendering the chat template itself (model.turn.declarations),
pinned to the offsets the former Python copy of the template gave (tests/fixtures/declared_keys.json)."""

from __future__ import annotations

import json
import pathlib

import pytest
from transformers import AutoTokenizer

from model.checkpoint.loading import DEFAULT_CHECKPOINT
from model.turn.declarations import declared_keys, last_user_span

FIXTURE = pathlib.Path(__file__).parent / "fixtures" / "declared_keys.json"


@pytest.fixture(scope="module")
def tok():
    return AutoTokenizer.from_pretrained(str(DEFAULT_CHECKPOINT))


def _tokens(off: list[tuple[int, int]], s: int, e: int) -> list[int]:
    t = [i for i, (a, b) in enumerate(off) if a < e and b > s]
    return [t[0], t[-1]] if t else []


def test_offsets_equal_the_former_python_mirror(tok):
    data = json.loads(FIXTURE.read_text(encoding="utf-8"))
    assert len(data["cases"]) >= 130
    n_keys = 0
    for case in data["cases"]:
        tools = [data["tools"][i] for i in case["tools"]]
        prompt = tok.apply_chat_template(
            case["messages"], tools=tools, tokenize=False, add_generation_prompt=True
        )
        off = [
            tuple(o)
            for o in tok(prompt, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
        ]
        keys = [[t, k, s, e, *_tokens(off, s, e)] for t, k, s, e in declared_keys(tok, prompt, tools)]
        assert keys == case["keys"], case["src"]
        user = last_user_span(tok, prompt)
        assert (None if user is None else [*user, *_tokens(off, *user)]) == case["user"], case["src"]
        n_keys += len(keys)
    assert n_keys == sum(len(c["keys"]) for c in data["cases"]) > 1000


def test_names_in_template_order_with_nested_and_cased_properties(tok):
    tools = [
        {"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object"}}},
        {
            "type": "function",
            "function": {
                "name": "g",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "b": {"type": "object", "properties": {"a": {"type": "string"}}},
                        "Zeta": {"type": "integer"},
                        "alpha": {"type": "array", "items": {"type": "string"}},
                    },
                },
            },
        },
    ]
    msgs = [{"role": "user", "content": "b is 1"}]
    prompt = tok.apply_chat_template(msgs, tools=tools, tokenize=False, add_generation_prompt=True)
    keys = declared_keys(tok, prompt, tools)
    # the template's dictsort folds case: alpha, b, Zeta (nested "a" is not a declared parameter); the former
    # Python mirror sorted case-sensitively, did not find this declaration verbatim and returned no keys
    assert [(t, k) for t, k, _, _ in keys] == [("g", "alpha"), ("g", "b"), ("g", "Zeta")]
    assert all(prompt[s:e] == k and prompt[e] == ":" for _, k, s, e in keys)
    s, e = last_user_span(tok, prompt)
    assert prompt[s:e] == "b is 1"
    assert declared_keys(tok, prompt.replace("Zeta", "Eta"), tools) == []
    assert last_user_span(tok, "<bos><|turn>system\nx<turn|>\n") is None


def test_unlocatable_parameter_name_is_an_error(tok):
    bad = {"name": "h", "parameters": {"type": "object", "properties": {"a\x00b": {"type": "string"}}}}
    with pytest.raises(ValueError, match=r"'h'.*cannot be located"):
        declared_keys(tok, "", [bad])
