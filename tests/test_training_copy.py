"""Training the copy head: binding labels, bot-domain data, the copy loss (tiny sizes, CPU, offline)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch
from training_helpers import sanity_check, tiny_train_config

from grammar import special_tokens as st
from model.training.batches import encode_labelled, make_batch, word_token_table
from model.training.bots import TEST_QUESTIONS, load_bot_tools
from model.training.data import Example, Generator
from model.training.labels import IGNORE, example_labels
from model.training.losses import copy_diffusion_loss
from model.training.settings import TrainConfig, build_model

ROOT = Path(__file__).resolve().parents[1]
torch.set_num_threads(1)


@pytest.fixture(scope="module")
def tok():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(ROOT / "model" / "checkpoints" / "agentkit-tiny")


def _example() -> Example:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_forecast",
                "description": "Forecast.",
                "parameters": {
                    "type": "object",
                    "properties": {"place": {"type": "string"}, "days": {"type": "integer"}},
                    "required": ["place"],
                },
            },
        }
    ]
    msgs = [{"role": "user", "content": "Forecast for New York for the next five days, please."}]
    calls = [("get_forecast", {"place": "New York", "days": 5})]
    target = '<|tool_call>call:get_forecast{place:<|"|>New York<|"|>,days:5}<tool_call|><|tool_response>'
    return Example(
        msgs,
        tools,
        target,
        "call",
        calls,
        [("get_forecast", "place", "New York"), ("get_forecast", "days", "five")],
    )


def test_labels_mark_the_value_words_and_the_parameter_names(tok):
    lab = example_labels(tok, _example(), word_token_table(tok))
    piece = tok.convert_ids_to_tokens
    # declared parameters in declaration order (properties sorted): days, place
    assert [piece(lab.prompt[p]) for p in lab.decl_pos] == ["days", "place"]
    bound = {piece(lab.prompt[i]).lstrip("Ġ"): v for i, v in enumerate(lab.bind) if v > 0}
    assert bound == {"New": 2, "York": 2, "five": 1}
    # every other request token is "none", everything outside the request has no label
    request = [i for i, v in enumerate(lab.bind) if v != IGNORE]
    assert request and all(lab.bind[i] == 0 for i in request if piece(lab.prompt[i]).lstrip("Ġ") not in bound)
    assert lab.bind[0] == IGNORE
    keyed = [(piece(lab.target[i]), k) for i, k in enumerate(lab.key) if k >= 0]
    assert keyed == [("New", 1), ("ĠYork", 1), ("5", 0)]
    assert [lab.ptr[i] for i, k in enumerate(lab.key) if k >= 0] == [True, True, True]


def _answer_example() -> Example:
    # the code-search bot's real find_definition declaration (the bundles' snapshot)
    tools = [
        d for d in load_bot_tools()["code_search"]["tools"] if d["function"]["name"] == "find_definition"
    ]
    msgs = [
        {"role": "user", "content": "Where is parse_config defined?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": "find_definition", "arguments": {"name": "parse_config"}}}],
        },
        {"role": "tool", "name": "find_definition", "content": {"path": "agentkit/config.py", "line": 12}},
    ]
    target = "parse_config is defined at agentkit/config.py:12.<turn|>"
    return Example(msgs, tools, target, "bot_answer", [], [])


def test_aligned_copies_spell_a_path_with_its_tool_response_tokens(tok):
    ex = _answer_example()
    plain = example_labels(tok, ex, word_token_table(tok))
    aligned = example_labels(tok, ex, word_token_table(tok), align_copies=True)
    piece = tok.convert_ids_to_tokens
    # canonical prose spelling: "Ġagent k it"; the tool response (after a quote) has "a gent k it"
    assert "Ġagent" in piece(plain.target) and "Ġagent" not in piece(plain.prompt)
    path = piece(aligned.target)
    at = path.index("Ġa")
    assert path[at : at + 4] == ["Ġa", "gent", "k", "it"]
    assert tok.decode(aligned.target) == ex.target  # the same text, other tokens
    source = {p.lstrip("Ġ") for p in piece(aligned.prompt)}
    assert all(p.lstrip("Ġ") in source for p in path[at : at + 8])  # every token of the path is copyable
    # words whose canonical tokens are copyable keep them; labels stay one per target token
    assert path[: path.index("Ġis")] == piece(plain.target)[: piece(plain.target).index("Ġis")]
    assert len(aligned.ptr) == len(aligned.key) == len(aligned.target)


def test_aligned_copies_change_no_target_text_on_generated_examples(tok):
    pool = Generator(5, "heldout").take(400)
    changed = 0
    for e in pool:
        a = example_labels(tok, e, align_copies=True)
        assert tok.decode(a.target) == e.target
        changed += a.target != example_labels(tok, e).target
    assert 0 < changed < len(pool) // 5  # some words respelled, most examples untouched


def test_bot_snapshot_matches_the_bundles():
    from agentkit.bundle import load_bundle

    snap = load_bot_tools()
    for key, path in (
        ("code_search", "examples/code_search/bundle.yaml"),
        ("weather", "examples/weather/bundle.yaml"),
    ):
        b = load_bundle(ROOT / path)
        assert snap[key]["system_prompt"] == b.system_prompt
        assert snap[key]["tools"] == [json.loads(json.dumps(t.declaration())) for t in b.tools], key


def test_bot_dialogues_never_contain_the_test_questions():
    for split in ("train", "heldout"):
        exs = Generator(11, split).take(3000)
        bots = [e for e in exs if e.kind.startswith("bot_")]
        assert len(bots) > 300
        for e in exs:
            sanity_check(e)
            user = [m["content"] for m in e.messages if m["role"] == "user"]
            assert not set(user) & TEST_QUESTIONS
            # (the bundle's own description of find_definition names it as an example; nothing else may)
            assert "load_bundle" not in json.dumps([e.messages, e.target, e.calls])
        calls = [e for e in bots if e.kind == "bot_call"]
        # the call's string values are copied from the question
        for e in calls:
            for _name, args in e.calls:
                for k, v in args.items():
                    if k in ("name", "place", "pattern", "path"):
                        assert v in e.messages[-1]["content"], (v, e.messages[-1]["content"])
        answers = [e for e in bots if e.kind == "bot_answer"]
        # answers quote the tool response: find_definition answers carry the first match's path
        for e in answers:
            resp = e.messages[-1]["content"]
            if e.messages[-1]["name"] == "find_definition" and resp["matches"]:
                assert resp["matches"][0]["path"] in e.target


def test_copy_loss_learns_binding_on_a_tiny_model(tok):
    """A few AdamW steps on one batch: the loss falls and request tokens get bound to their parameters."""
    cfg = tiny_train_config(
        copy_head=True,
        vocab_size=len(tok),
        canvas_length=32,
        copy_dim=16,
        noise_draws=2,
        self_cond_p=0.5,
    )
    torch.manual_seed(0)
    model = build_model(cfg, tok)
    exs = [e for e in Generator(3, "train").take(80) if e.kind in ("call", "bot_call")][:6]
    enc = encode_labelled(tok, exs, word_token_table(tok))
    batch = make_batch(enc, cfg.canvas_length, 512, random.Random(0))
    assert {"decl_pos", "decl_valid", "bind", "key", "ptr"} <= set(batch)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(0)
    first = None
    for _ in range(40):
        loss, stats = copy_diffusion_loss(model, batch, cfg, generator=g)
        assert torch.isfinite(loss)
        opt.zero_grad()
        loss.backward()
        opt.step()
        first = first if first is not None else (float(loss.detach()), stats)
    assert float(loss) < 0.6 * first[0]
    assert stats["bind_acc"] > first[1]["bind_acc"] and stats["bind_acc"] >= 0.5
    assert stats["key_acc"] >= 0.5


def test_init_from_loads_matching_weights_and_starts_the_head_fresh(tok, tmp_path):
    from model.testing import make_tiny_checkpoint

    src = make_tiny_checkpoint(tmp_path / "base", vocab_size=512)
    from transformers import AutoTokenizer

    small_tok = AutoTokenizer.from_pretrained(src)
    cfg = tiny_train_config(
        copy_head=True,
        vocab_size=512,
        canvas_length=16,
        copy_dim=16,
        sliding_window=128,
        max_position_embeddings=4096,
        init_from=str(src),
    )
    from safetensors.torch import load_file

    m = build_model(cfg, small_tok)
    base = load_file(str(src / "model.safetensors"))
    own = m.state_dict()
    same = [k for k in base if k in own and own[k].shape == base[k].shape]
    assert same and all(torch.equal(own[k], base[k]) for k in same)
    assert any(k.startswith("copy_head.") for k in own)
    with pytest.raises(ValueError, match=r"no model\.safetensors"):
        build_model(TrainConfig(**{**cfg.__dict__, "init_from": str(tmp_path)}), small_tok)
    assert st.SPECIAL_IDS[st.TURN_START] == m.copy_head.cfg.turn_start_id


def test_heldout_answers_must_repeat_the_tool_facts():
    from evals.heldout import answer_facts, score_example

    ex = Example([], [], "load_bundle is defined at agentkit/bundle.py:446.<turn|>", "bot_answer")
    assert answer_facts(ex.target) == ["agentkit/bundle.py:446"]
    assert score_example(ex, [], "It is at agentkit/bundle.py:446.")
    assert not score_example(ex, [], "It is at agentkit/bundle.py:44.")
    assert not score_example(ex, [("find_definition", {"name": "x"})], "agentkit/bundle.py:446")
    chat = Example([], [], "Hello! How can I help you today?<turn|>", "no_tool")
    assert score_example(chat, [], "anything") and not score_example(chat, [("f", {})], "")
