"""Synthetic data generator, batching, diffusion loss and the train loop (tiny sizes, CPU, offline)."""

from __future__ import annotations

import json
import random
import re

import pytest
import torch
from training_helpers import sanity_check, tiny_train_config

from grammar import special_tokens as st
from model.training.batches import Encoded, make_batch
from model.training.data import Generator
from model.training.losses import diffusion_loss
from model.training.settings import TrainConfig, build_model_config
from model.training.train import train

torch.set_num_threads(1)


def test_generator_is_deterministic_and_consistent():
    a = [e.to_json() for e in Generator(5).take(200)]
    b = [e.to_json() for e in Generator(5).take(200)]
    assert a == b
    assert a != [e.to_json() for e in Generator(6).take(200)]
    exs = Generator(5).take(1500)
    kinds = {e.kind for e in exs}
    assert kinds == {
        "call",
        "parallel",
        "multi_call",
        "answer_after_tool",
        "followup_call",
        "no_tool",
        "unanswerable",
        "bot_call",
        "bot_answer",
    }
    for e in exs:
        sanity_check(e)
        if e.calls:
            assert e.target.startswith(st.TOOL_CALL_START) and e.target.endswith(st.TOOL_RESPONSE_START)
        else:
            assert e.target.endswith(st.TURN_END) and st.TOOL_CALL_START not in e.target
    # parallel examples really call one tool several times
    par = [e for e in exs if e.kind == "parallel"]
    assert par and all(len(e.calls) >= 2 for e in par)


def test_bot_and_decline_shares_rescale_the_stream():
    from model.training.data import DECLINE_KINDS, KIND_WEIGHTS

    g = Generator(5, bot_share=0.3, decline_share=0.25)
    w = dict(g.weights)
    assert sum(w.values()) == pytest.approx(1.0)
    assert w["bot_call"] + w["bot_answer"] == pytest.approx(0.3)
    assert sum(w[k] for k in DECLINE_KINDS) == pytest.approx(0.25)
    base = dict(KIND_WEIGHTS)
    # the others keep their proportions
    assert w["call"] / w["parallel"] == pytest.approx(base["call"] / base["parallel"])
    assert w["no_tool"] / w["unanswerable"] == pytest.approx(base["no_tool"] / base["unanswerable"])
    drawn = Generator(5, decline_share=0.4).take(1000)
    declined = sum(e.kind in DECLINE_KINDS and not e.calls for e in drawn)
    assert 340 <= declined <= 460
    assert dict(Generator(5).weights) == base
    with pytest.raises(ValueError, match="decline_share"):
        Generator(5, bot_share=0.6, decline_share=0.5)


def test_paired_declines_follow_each_other_tools_job_with_its_call():
    def names(e):
        return [t["function"]["name"] for t in e.tools]

    plain = Generator(5, decline_share=0.3).take(300)
    assert plain == Generator(5, decline_share=0.3).take(300)  # the option off leaves the stream as it was
    drawn = Generator(5, decline_share=0.3, paired_declines=True).take(300)
    pairs = [(e, drawn[i + 1]) for i, e in enumerate(drawn[:-1]) if e.kind == "unanswerable"]
    assert len(pairs) >= 5
    for decline, twin in pairs:
        assert twin.kind == "call" and twin.messages == decline.messages and not decline.calls
        ((called, _),) = twin.calls
        assert called not in names(decline) and sorted(names(twin)) == sorted([*names(decline), called])


def test_values_are_copied_from_the_request():
    """String arguments of single calls appear verbatim in the user's request (the skill being taught)."""
    n_checked = 0
    for e in Generator(9).take(400):
        if e.kind != "call":
            continue
        req = e.messages[-1]["content"]
        for v in e.calls[0][1].values():
            if isinstance(v, str) and not any(c.isdigit() for c in v) and "units" not in e.target:
                assert v in req, (v, req)
                n_checked += 1
    assert n_checked > 100


def test_heldout_split_uses_disjoint_glaive_tools():
    tr, ho = Generator(0, "train"), Generator(0, "heldout")
    if not tr.glaive:
        pytest.skip("maskbench data not present")
    assert tr.glaive and ho.glaive
    assert not {t.name for t in tr.glaive} & {t.name for t in ho.glaive}
    with pytest.raises(ValueError, match="split"):
        Generator(0, "test")


def test_no_bfcl_question_is_reproduced():
    from evals.bfcl import CATEGORIES, load_category

    bfcl = set()
    sizes = {}
    for category in CATEGORIES:  # shipped in the repository: never skipped
        questions, _ = load_category(category)
        sizes[category] = len(questions)
        bfcl |= {m["content"] for r in questions for turn in r["question"] for m in turn}
    assert sizes == {"simple_python": 400, "multiple": 200, "parallel": 200, "parallel_multiple": 200}
    assert len(bfcl) == 900  # distinct user and system texts of the 1,000 questions
    ours = {m["content"] for e in Generator(0).take(2000) for m in e.messages if m["role"] == "user"}
    assert not bfcl & ours


def test_make_batch_windows_and_left_padding():
    C = 4
    items = [
        Encoded(prompt=[2, 30, 31], target=[40, 41, 42, 43, 44, 45]),
        Encoded(prompt=[2, 50], target=[60]),
    ]
    rng = random.Random(0)
    seen_windows = set()
    for _ in range(20):
        b = make_batch(items, C, max_prompt=100, rng=rng)
        ids, attn, canvas, real = b["input_ids"], b["attention_mask"], b["canvas"], b["is_target"]
        assert canvas.shape == (2, C)
        # second example: short target, padded canvas, left-padded prompt
        assert canvas[1].tolist() == [60, st.PAD_ID, st.PAD_ID, st.PAD_ID]
        assert real[1].tolist() == [True, False, False, False]
        assert ids[1, -2:].tolist() == [2, 50] and int(attn[1].sum()) == 2
        assert ids.shape[1] == 2 or int(attn[1, 0]) == 0
        first = canvas[0].tolist()
        seen_windows.add(tuple(first))
        if first[0] == 44:  # second window: earlier target tokens moved into the prompt
            assert ids[0, -7:].tolist() == [2, 30, 31, 40, 41, 42, 43]
            assert first == [44, 45, st.PAD_ID, st.PAD_ID]
    assert seen_windows == {(40, 41, 42, 43), (44, 45, st.PAD_ID, st.PAD_ID)}
    b = make_batch(items, C, max_prompt=2, rng=rng)
    assert b["input_ids"].shape[1] <= 2


def _tiny_cfg(tmp_path, **kw) -> TrainConfig:
    base = dict(
        out_dir=str(tmp_path / "run"),
        vocab_size=600,
        canvas_length=16,
        max_prompt=160,
        sliding_window=64,
        n_train=120,
        n_heldout=16,
        tokenizer_examples=120,
        batch_size=4,
        steps=4,
        warmup=2,
        ckpt_every=2,
        eval_every=4,
        log_every=2,
        bucket_mult=2,
        lr=3e-3,
    )
    base.update(kw)
    return tiny_train_config(**base)


def test_loss_decreases_when_overfitting_one_batch(tmp_path):
    from transformers import DiffusionGemmaForBlockDiffusion

    cfg = _tiny_cfg(tmp_path, vocab_size=128)
    torch.manual_seed(0)
    model = DiffusionGemmaForBlockDiffusion(build_model_config(cfg))
    items = [
        Encoded(prompt=[2, 20 + i, 21 + i], target=[30 + i, 31 + i, 32, st.SPECIAL_IDS[st.TURN_END]])
        for i in range(4)
    ]
    batch = make_batch(items, cfg.canvas_length, cfg.max_prompt, random.Random(0))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(0)
    losses = []
    for _ in range(40):
        loss, stats = diffusion_loss(
            model, batch, vocab_size=cfg.vocab_size, self_cond_p=0.5, pad_weight=0.25, generator=g
        )
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        assert 0.0 <= stats["acc_noised"] <= 1.0
    assert losses[0] > 4.0
    assert sum(losses[-5:]) / 5 < 0.5 * losses[0]


def test_autoregressive_auxiliary_loss_keeps_the_decoder_view_and_learns_copying(tmp_path):
    """With ar_weight the encoder also reads the clean canvas, yet the diffusion part of the loss is the same
    number as without it (the canvas part of the cache is masked, positions continue after the prompt), and a
    few steps of the auxiliary loss alone teach next-token copying of a span from the prompt."""
    from transformers import DiffusionGemmaForBlockDiffusion

    cfg = _tiny_cfg(tmp_path, vocab_size=128)
    torch.manual_seed(0)
    model = DiffusionGemmaForBlockDiffusion(build_model_config(cfg)).eval()
    rng = random.Random(0)
    items = []
    for _ in range(8):
        span = [rng.randrange(40, 120) for _ in range(5)]
        items.append(Encoded(prompt=[2, 20, *span, 21], target=[*span, st.SPECIAL_IDS[st.TURN_END]]))
    # a left-padded batch: prompts of different lengths
    items[0] = Encoded(prompt=[2, 20, 21], target=[50, 51, st.SPECIAL_IDS[st.TURN_END]])
    batch = make_batch(items, cfg.canvas_length, cfg.max_prompt, random.Random(0))
    t = torch.full((len(items),), 0.5)
    kw = dict(vocab_size=cfg.vocab_size, self_cond_p=0.0, pad_weight=0.25, t=t)
    with torch.no_grad():
        plain, s0 = diffusion_loss(model, batch, generator=torch.Generator().manual_seed(3), **kw)
        both, s1 = diffusion_loss(
            model, batch, generator=torch.Generator().manual_seed(3), ar_weight=2.0, **kw
        )
    assert "ar_loss" not in s0 and s1["ar_loss"] > 3.0
    assert both.item() == pytest.approx(plain.item() + 2.0 * s1["ar_loss"], rel=1e-4)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(0)
    first = None
    for _ in range(60):
        loss, st_ = diffusion_loss(model, batch, generator=g, ar_weight=1.0, **{**kw, "t": None})
        first = st_["ar_loss"] if first is None else first
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert st_["ar_loss"] < 0.5 * first
    assert st_["ar_acc"] > 0.5


def test_terse_declarations_drop_descriptions_only():
    from model.training.render import render_declaration, strip_descriptions

    ex = next(e for e in Generator(4).take(50) if e.tools and e.kind == "call")
    terse = strip_descriptions(ex.tools)
    assert "description" not in json.dumps(terse)
    assert "description" in json.dumps(ex.tools)  # the original is untouched
    for full, short in zip(ex.tools, terse, strict=True):
        f, s = full["function"], short["function"]
        assert f["name"] == s["name"]
        assert f["parameters"].get("required") == s["parameters"].get("required")
        for k, v in f["parameters"]["properties"].items():
            assert {kk: vv for kk, vv in v.items() if kk != "description"} == s["parameters"]["properties"][k]
        assert len(render_declaration(short)) < len(render_declaration(full))


def test_train_writes_offline_checkpoint_and_resumes(tmp_path):
    from transformers import AutoTokenizer, DiffusionGemmaForBlockDiffusion

    cfg = _tiny_cfg(tmp_path)
    final = train(cfg)
    model = DiffusionGemmaForBlockDiffusion.from_pretrained(final, local_files_only=True)
    tok = AutoTokenizer.from_pretrained(final)
    assert model.config.text_config.vocab_size == 600 == len(tok)
    assert model.config.canvas_length == 16
    assert list(model.generation_config.eos_token_id) == list(st.GENERATION_EOS_IDS)
    assert model.generation_config.t_max < 0.5
    assert tok.chat_template and "<|tool>declaration:" in tok.chat_template
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log if "loss" in r] == [2, 4]
    assert any("heldout_loss" in r for r in log)
    # resume: continues from the saved step, not from zero
    cfg2 = _tiny_cfg(tmp_path, steps=6)
    train(cfg2)
    state = torch.load(tmp_path / "run" / "checkpoint" / "trainer_state.pt", weights_only=False)
    assert state["step"] == 6
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log if "loss" in r] == [2, 4, 6]


def test_space_tokens_make_copies_identity_and_copy_weights_mark_values():
    from model.checkpoint.tokenizer import build_tokenizer
    from model.training.batches import encode_examples, word_token_table
    from model.training.data import corpus_texts

    exs = Generator(3).take(400)
    texts = corpus_texts(exs)
    request = "What is the weather in Berlin right now?"
    call = '<|tool_call>call:get_current_weather{place:<|"|>Berlin<|"|>}<tool_call|>'
    for space_tokens in (False, True):
        tok = build_tokenizer(texts, vocab_size=1024, space_tokens=space_tokens)
        r_ids = tok(request, add_special_tokens=False)["input_ids"]
        c_ids = tok(call, add_special_tokens=False)["input_ids"]
        assert tok.decode(r_ids) == request and tok.decode(c_ids) == call  # lossless either way
    # tok, r_ids, c_ids are the space-token ones (last in the loop): the value's ids appear as they are in the
    # request (an identity copy)
    d = tok.convert_tokens_to_ids(st.STRING_DELIM)
    value = c_ids[c_ids.index(d) + 1 : len(c_ids) - 1 - c_ids[::-1].index(d)]
    assert any(r_ids[i : i + len(value)] == value for i in range(len(r_ids))), (
        tok.convert_ids_to_tokens(value),
        tok.convert_ids_to_tokens(r_ids),
    )
    assert tok.convert_tokens_to_ids("Ġ") in r_ids and "Ġthe" not in tok.convert_ids_to_tokens(r_ids)

    calls = [e for e in exs if e.kind == "call"]
    encs = encode_examples(tok, calls, word_token_table(tok))
    assert sum(any(e.copied) for e in encs) > len(encs) // 4
    for enc in encs:
        assert len(enc.copied) == len(enc.target)
        system = set(enc.prompt[: enc.prompt.index(st.SPECIAL_IDS[st.TURN_END]) + 1])
        for t, c in zip(enc.target, enc.copied, strict=True):
            if c:  # a copied token is a word from the request, never a name/key from the declarations
                assert t not in system and t in enc.prompt and any(ch.isalnum() for ch in tok.decode([t]))
    enc = next(e for e in encs if any(e.copied))
    C = len(enc.target) + 4
    b = make_batch([enc], C, 4096, random.Random(0), pad_weight=0.25, copy_weight=2.0)
    w = b["weight"][0].tolist()
    assert w == [3.0 if c else 1.0 for c in enc.copied] + [0.25] * 4


def test_decision_weight_scales_a_turns_first_token_and_the_token_after_each_call():
    from model.training.labels import Encoded

    end = st.SPECIAL_IDS[st.TOOL_CALL_END]
    enc = Encoded(prompt=[5, 6, 7], target=[10, 11, end, 13, 14, 15])
    seen = set()
    for seed in range(12):  # a 6-token target over a 4-token canvas: window 0 or window 1
        b = make_batch([enc], 4, 4096, random.Random(seed), pad_weight=0.25, decision_weight=5.0)
        first = b["canvas"][0, 0].item()
        seen.add(first)
        expect = [5.0, 1.0, 1.0, 5.0] if first == 10 else [1.0, 1.0, 0.25, 0.25]
        assert b["weight"][0].tolist() == expect
    assert seen == {10, 14}
    plain = make_batch([enc], 8, 4096, random.Random(0))  # default: the loss as before
    assert plain["weight"][0].tolist() == [1.0] * 6 + [0.25] * 2


def test_ar_weight_needs_the_prompt_and_canvas_inside_the_sliding_window(tmp_path, capsys):
    from model.training.__main__ import main

    with pytest.raises(ValueError, match="--sliding-window"):
        _tiny_cfg(tmp_path, ar_weight=1.0, max_prompt=512, sliding_window=256)
    with pytest.raises(SystemExit) as ei:  # refused when parsed
        main(["--out-dir", str(tmp_path / "x"), "--ar-weight", "1", "--max-prompt", "512"])
    assert ei.value.code == 2 and "--ar-weight needs --max-prompt" in capsys.readouterr().err
    with pytest.raises(ValueError, match="--spaced-word-starts is a copy-head rule: give --copy-head"):
        _tiny_cfg(tmp_path, spaced_word_starts=True)
    with pytest.raises(ValueError, match="--answer-match-responses is a copy-head rule: give --copy-head"):
        _tiny_cfg(tmp_path, answer_match_responses=True)
    assert not (tmp_path / "x").exists()


def test_copy_head_run_stops_at_stop_at_with_the_long_schedule(tmp_path):
    """--copy-head --prefix-clean-p --stop-at: a copy-head checkpoint saved at the stop step, lr still high."""
    cfg = _tiny_cfg(
        tmp_path, copy_head=True, copy_dim=16, noise_draws=2, prefix_clean_p=0.5, steps=40, stop_at=2
    )
    final = train(cfg)
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert max(r["step"] for r in log) == 2
    assert log[-1]["lr"] > 0.5 * cfg.lr  # the 40-step cosine schedule, stopped early
    conf = json.loads((final / "config.json").read_text())
    assert "copy_head" in conf
    from model.checkpoint.loading import load_checkpoint

    assert type(load_checkpoint(str(final)).model).__name__ == "DiffusionGemmaWithCopyHead"


def test_spaced_word_starts_is_saved_with_its_tables_and_loads_offline(tmp_path):
    """--copy-head --spaced-word-starts: config.json says so and the word tables load from model.safetensors."""
    from model.checkpoint.loading import load_checkpoint

    final = train(_tiny_cfg(tmp_path, copy_head=True, copy_dim=16, spaced_word_starts=True, steps=2))
    assert json.loads((final / "config.json").read_text())["copy_head"]["spaced_word_starts"] is True
    loaded = load_checkpoint(str(final))
    head, tok = loaded.model.copy_head, loaded.tokenizer
    assert head.cfg.spaced_word_starts
    word_pieces = {p for p, i in tok.get_vocab().items() if bool(head.word_piece[i])}
    assert word_pieces and all(not p.startswith("Ġ") and p[0].isalnum() for p in word_pieces)
    assert bool(head.ends_alnum[tok.convert_tokens_to_ids(word_pieces.pop())])
    # config.json edited after training (the entry deleted): the saved tables are refused by name, not ignored
    from model.checkpoint.loading import CheckpointError

    conf = json.loads((final / "config.json").read_text())
    del conf["copy_head"]["spaced_word_starts"]
    (final / "config.json").write_text(json.dumps(conf))
    with pytest.raises(CheckpointError, match=r"holds copy_head\.ends_alnum, copy_head\.word_piece"):
        load_checkpoint(str(final))
    # resuming the run without the rule: refused, naming both settings
    with pytest.raises(
        ValueError,
        match="spaced_word_starts=True, answer_match_responses=False; this run asks for copy_head=True, "
        "spaced_word_starts=False",
    ):
        train(_tiny_cfg(tmp_path, copy_head=True, copy_dim=16, steps=4))


def test_batches_fit_a_small_training_set_and_refuse_an_empty_batch():
    """Fewer examples than batch_size x bucket_mult: smaller buckets (this looped forever); fewer than one
    batch: a ValueError."""
    import random

    from model.training.batches import batches

    data = [Encoded(prompt=[1] * (i + 1), target=[2] * 3) for i in range(10)]
    cfg = tiny_train_config(batch_size=4, bucket_mult=32)
    it = batches(data, cfg, random.Random(0))
    got = [next(it) for _ in range(6)]
    assert all(len(b) == 4 for b in got)
    with pytest.raises(ValueError, match="3 training examples cannot fill one batch of --batch-size 4"):
        next(batches(data[:3], cfg, random.Random(0)))


def _range_messages(flag: str, value: str, bound: str) -> tuple[str, str]:
    """``(CLI message, pattern of the TrainConfig error)`` of an option out of its range: pydantic's check, by
    field (flag on the command line), bound and value."""
    field = flag[2:].replace("-", "_")
    api = rf"{field}\n  Input should be {re.escape(bound)} \[.*input_value={re.escape(value)}"
    return f"{flag}: input should be {bound}, got {value}", api


def test_out_of_range_options_are_refused_when_parsed(tmp_path, capsys):
    from model.training.__main__ import main

    decline = "--decline-share must be in [0, 1 - --bot-share) = [0, 1), got -0.1"  # a check between options
    for flag, value, (message, pattern) in (
        ("--threads", "0", _range_messages("--threads", "0", "greater than or equal to 1")),
        ("--eval-every", "0", _range_messages("--eval-every", "0", "greater than or equal to 1")),
        ("--bucket-mult", "0", _range_messages("--bucket-mult", "0", "greater than or equal to 1")),
        ("--stop-at", "0", _range_messages("--stop-at", "0", "greater than or equal to 1")),
        ("--bot-share", "1.0", _range_messages("--bot-share", "1.0", "less than 1")),
        ("--decline-share", "-0.1", (decline, re.escape(decline))),
    ):
        with pytest.raises(ValueError, match=pattern):
            _tiny_cfg(tmp_path, **{flag[2:].replace("-", "_"): float(value) if "." in value else int(value)})
        with pytest.raises(SystemExit) as ei:
            main(["--out-dir", str(tmp_path / "x"), flag, value])
        assert ei.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_training_options_are_typed_by_annotation_and_documented(capsys):
    """``python -m model.training``: every TrainConfig field is an option with its docstring's help text, typed
    by its annotation (``int | None`` fields take ints, ``float | None`` floats)."""
    import dataclasses

    import pytest

    from model.training.__main__ import option_help, parse_args
    from model.training.settings import TrainConfig

    helps = option_help()
    fields = [f.name for f in dataclasses.fields(TrainConfig)]
    assert sorted(helps) == sorted(fields)  # no field without help, no help for a field that is gone
    assert all(len(h) > 10 for h in helps.values())
    cfg = parse_args(
        ["--stop-at", "5", "--bot-share", "0.3", "--max-minutes", "2", "--final-dir", "x", "--no-resume"]
    )
    assert (cfg.stop_at, cfg.bot_share, cfg.max_minutes, cfg.final_dir, cfg.resume) == (
        5,
        0.3,
        2.0,
        "x",
        False,
    )
    assert isinstance(cfg.stop_at, int) and isinstance(cfg.max_minutes, float)
    assert parse_args([]) == TrainConfig()
    with pytest.raises(SystemExit):
        parse_args(["--stop-at", "1.5"])
    assert "invalid int value: '1.5'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_args(["--help"])
    out = capsys.readouterr().out
    assert (
        "Share of the training stream in the example bots' domains (default: the generator's 16%)"
        in " ".join(out.split())
    )
    assert "--prefix-clean-p" in out and "(default: 0.0)" in out


def test_heldout_report_counts_unfit_requests_in_prose_and_arguments_by_kind():
    from evals.heldout import argument_hits, evaluate_examples
    from grammar.parse import ParsedCall
    from model.training.data import Example

    tool = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    examples = [
        Example([], tool, "", "call", [("f", {"city": "Oslo", "days": 3})]),
        Example([], tool, "", "unanswerable", []),
        Example([], tool, "", "no_tool", []),
        Example([], [], "", "no_tool", []),
    ]
    replies = iter([[ParsedCall("f", {"city": "Oslo", "days": 4.0})], [ParsedCall("f", {})], [], []])

    class Fake:
        def chat(self, messages, tools, seed, binder):
            calls = next(replies)
            return type("Out", (), {"tool_calls": calls, "text": "", "raw": ""})()

    rep = evaluate_examples(Fake(), examples)
    assert rep["unfit_in_prose"] == {
        "n": 2,
        "accuracy": 0.5,
    }  # the no_tool turn without tools is no unfit one
    assert rep["fit_with_a_call"] == {"n": 1, "accuracy": 1.0}
    assert rep["argument_accuracy"] == {
        "number": {"n": 1, "accuracy": 0.0},
        "string": {"n": 1, "accuracy": 1.0},
    }
    assert argument_hits([("f", {"days": 3})], [("f", {"days": 3.0}), ("f", {"days": 9})]) == [
        ("number", True)
    ]


def test_heldout_scoring_matches_a_boolean_only_with_a_boolean_at_any_depth():
    from evals.heldout import argument_hits, calls_match

    assert not calls_match([("f", {"a": True})], [("f", {"a": 1})])
    assert not calls_match([("f", {"a": 1})], [("f", {"a": True})])
    assert not calls_match([("f", {"a": [{"b": False}]})], [("f", {"a": [{"b": 0}]})])
    assert calls_match([("f", {"a": [{"b": False}], "n": 1})], [("f", {"a": [{"b": False}], "n": 1.0})])
    assert calls_match([("f", {"a": 1}), ("f", {"a": True})], [("f", {"a": True}), ("f", {"a": 1.0})])
    assert argument_hits([("f", {"a": True, "b": 0})], [("f", {"a": 1.0, "b": False})]) == [
        ("bool", False),
        ("number", False),
    ]
    assert argument_hits([("f", {"a": True, "b": 0})], [("f", {"a": True, "b": 0.0})]) == [
        ("bool", True),
        ("number", True),
    ]


@pytest.mark.parametrize(
    ("argv", "message", "pattern"),
    [
        (["--bot-share", "1.5"], *_range_messages("--bot-share", "1.5", "less than 1")),
        (
            ["--bot-share", "0.2", "--decline-share", "0.9"],
            "--decline-share must be in [0, 1 - --bot-share) = [0, 0.8)",
            re.escape("--decline-share must be in [0, 1 - --bot-share) = [0, 0.8)"),
        ),
        (["--terse-p", "2.0"], *_range_messages("--terse-p", "2.0", "less than or equal to 1")),
        (["--self-cond-p", "nan"], *_range_messages("--self-cond-p", "nan", "less than or equal to 1")),
        (["--key-weight", "-1.0"], *_range_messages("--key-weight", "-1.0", "greater than or equal to 0")),
        # refused when parsed, not by torch's AdamW after the data are built (a minute or more)
        (
            ["--num-heads", "3", "--num-kv-heads", "2"],
            "--num-heads (3) must be a multiple of --num-kv-heads (2)",
            re.escape("--num-heads (3) must be a multiple of --num-kv-heads (2)"),
        ),
        (["--lr", "-1.0"], *_range_messages("--lr", "-1.0", "greater than 0")),
        (["--lr", "nan"], *_range_messages("--lr", "nan", "a finite number")),
        # these trained nonsense (no clipping, zeroed gradients) or failed only in the run
        (["--warmup", "-5"], *_range_messages("--warmup", "-5", "greater than or equal to 0")),
        # a tokenizers PanicException traceback ("global thread pool has not been initialized")
        (["--threads", "100000"], *_range_messages("--threads", "100000", "less than or equal to 1024")),
        (["--grad-clip", "0.0"], *_range_messages("--grad-clip", "0.0", "greater than 0")),
        (["--grad-clip", "nan"], *_range_messages("--grad-clip", "nan", "a finite number")),
        (["--max-minutes", "-1.0"], *_range_messages("--max-minutes", "-1.0", "greater than 0")),
        (["--max-minutes", "inf"], *_range_messages("--max-minutes", "inf", "a finite number")),
        (["--drill-steps", "-1"], *_range_messages("--drill-steps", "-1", "greater than or equal to 0")),
        (
            ["--tokenizer-examples", "0"],
            *_range_messages("--tokenizer-examples", "0", "greater than or equal to 1"),
        ),
        (["--from-stage", "-1"], *_range_messages("--from-stage", "-1", "greater than or equal to 0")),
        *(
            ([f"--{o}", "0"], *_range_messages(f"--{o}", "0", "greater than or equal to 1"))
            for o in ("vocab-size", "hidden-size", "intermediate-size", "moe-intermediate-size", "num-layers")
        ),
        *(
            ([f"--{o}", "-1"], *_range_messages(f"--{o}", "-1", "greater than or equal to 1"))
            for o in (
                "num-heads",
                "num-kv-heads",
                "head-dim",
                "sliding-window",
                "max-position-embeddings",
                "copy-dim",
            )
        ),
    ],
)
def test_out_of_range_training_options_are_refused_when_parsed(argv, message, pattern, capsys, tmp_path):
    from model.training.__main__ import parse_args
    from model.training.settings import TrainConfig

    with pytest.raises(SystemExit) as ei:
        parse_args(["--out-dir", str(tmp_path / "x"), *argv])
    assert ei.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
    with pytest.raises(ValueError, match=pattern):
        TrainConfig(
            **{
                a[2:].replace("-", "_"): int(b) if b.lstrip("-").isdigit() else float(b)
                for a, b in zip(argv[::2], argv[1::2], strict=True)
            }
        )
    assert parse_args(["--bot-share", "0", "--decline-share", "0.99", "--terse-p", "1"]).decline_share == 0.99
    ok = parse_args(["--warmup", "0", "--drill-steps", "0", "--grad-clip", "0.5", "--max-minutes", "0.5"])
    assert (ok.warmup, ok.drill_steps, ok.grad_clip, ok.max_minutes) == (0, 0, 0.5, 0.5)
