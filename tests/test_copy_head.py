"""The copy head (model/heads/copy_head.py, model/heads/copy_model.py): loading, the mixture, the memory, the runtime path."""

from __future__ import annotations

import json
import re

import pytest
import torch

from grammar import special_tokens as st
from model.checkpoint.loading import load_checkpoint
from model.heads.copy_head import COPY_HEAD_FIELDS, OPTIONAL_FIELDS, CopyHeadConfig, has_copy_head
from model.runtime import generate
from model.testing import make_tiny_checkpoint

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def copy_ckpt(tmp_path_factory):
    return make_tiny_checkpoint(tmp_path_factory.mktemp("copy"), copy_head=True, seed=3)


@pytest.fixture(scope="module")
def loaded(copy_ckpt):
    return load_checkpoint(str(copy_ckpt))


def _prompt(tok, text="Where is the function parse_token defined?"):
    s = (
        f"{st.BOS}{st.TURN_START}system\nYou help with code.{st.TURN_END}\n"
        f"{st.TURN_START}user\n{text}{st.TURN_END}\n{st.TURN_START}model\n"
    )
    return torch.tensor([tok(s, add_special_tokens=False)["input_ids"]])


def test_config_selects_the_subclass_and_weights_round_trip_offline(copy_ckpt, loaded, tmp_path):
    cfg = json.loads((copy_ckpt / "config.json").read_text())
    # every field is written, except the optional rules when off (old configs stay byte-identical)
    assert set(cfg["copy_head"]) == set(COPY_HEAD_FIELDS) - set(OPTIONAL_FIELDS)
    assert len(COPY_HEAD_FIELDS) == 8 and set(OPTIONAL_FIELDS) < set(COPY_HEAD_FIELDS)
    assert type(loaded.model).__name__ == "DiffusionGemmaWithCopyHead" and has_copy_head(loaded.model)
    # the variant tables were saved with the weights: 'ĠBerlin' -> 'Berlin'
    tok = loaded.tokenizer
    head = loaded.model.copy_head
    sp, bare = tok.convert_tokens_to_ids("ĠBerlin"), tok.convert_tokens_to_ids("Berlin")
    if sp != tok.unk_token_id and bare != tok.unk_token_id:
        assert int(head.base_ids[sp]) == bare and int(head.spaced_ids[bare]) == sp
    assert not bool(head.copyable[st.SPECIAL_IDS[st.STRING_DELIM]])
    # a checkpoint without the entry loads as the base class
    plain = load_checkpoint(str(make_tiny_checkpoint(tmp_path / "plain")))
    assert type(plain.model).__name__ == "DiffusionGemmaForBlockDiffusion" and not has_copy_head(plain.model)


def test_bad_copy_head_entry_is_rejected():
    good = CopyHeadConfig(dim=8).to_dict()
    assert CopyHeadConfig.from_dict(good) == CopyHeadConfig(dim=8)
    with pytest.raises(ValueError, match="unknown keys"):
        CopyHeadConfig.from_dict({**good, "bogus": 1})
    with pytest.raises(ValueError, match=r"missing keys \['excluded_role_ids'\]"):
        CopyHeadConfig.from_dict({k: v for k, v in good.items() if k != "excluded_role_ids"})
    for bad, said in (
        ({"dim": 0}, "copy_head: dim: input should be greater than 0, got 0"),
        (
            {"spaced_word_starts": "yes"},
            'copy_head: spaced_word_starts: input should be a valid boolean, got "yes"',
        ),
        ({"dim": "64"}, 'copy_head: dim: input should be a valid integer, got "64"'),
        (
            {"excluded_role_ids": "system"},
            'copy_head: excluded_role_ids: input should be a valid list, got "system"',
        ),
        (
            {"excluded_role_ids": [-1]},
            "copy_head: excluded_role_ids.0: input should be greater than or equal to 0",
        ),
    ):
        with pytest.raises(ValueError, match=re.escape(said)):
            CopyHeadConfig.from_dict({**good, **bad})


def test_a_copy_head_entry_whose_tables_the_weights_lack_is_refused(copy_ckpt, tmp_path):
    """config.json turning spaced_word_starts on for weights saved without it: a clear error, not a copy head
    with uninitialised tables."""
    import shutil

    from model.checkpoint.loading import CheckpointError

    bad = tmp_path / "bad"
    shutil.copytree(copy_ckpt, bad)
    cfg = json.loads((bad / "config.json").read_text())
    cfg["copy_head"]["spaced_word_starts"] = True
    (bad / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match=r"lacks copy_head\.ends_alnum, copy_head\.word_piece"):
        load_checkpoint(str(bad))


def test_load_report_is_held_back_for_a_refused_copy_head_and_kept_otherwise(copy_ckpt, tmp_path, caplog):
    """transformers' LOAD REPORT table: not printed above a CheckpointError that names the same keys; printed
    as transformers would for a key the loader lets through (here an extra tensor it does not know)."""
    import shutil

    from safetensors.torch import load_file, save_file

    from model.checkpoint.loading import CheckpointError

    bad = tmp_path / "bad"
    shutil.copytree(copy_ckpt, bad)
    cfg = json.loads((bad / "config.json").read_text())
    del cfg["copy_head"]
    (bad / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match=r"holds copy_head\."):
        load_checkpoint(str(bad))
    assert "LOAD REPORT" not in caplog.text

    extra = tmp_path / "extra"
    shutil.copytree(copy_ckpt, extra)
    weights = load_file(str(extra / "model.safetensors"))
    save_file({**weights, "probe.weight": torch.zeros(2)}, str(extra / "model.safetensors"), {"format": "pt"})
    assert type(load_checkpoint(str(extra)).model).__name__ == "DiffusionGemmaWithCopyHead"
    assert "LOAD REPORT" in caplog.text and "probe.weight" in caplog.text and "UNEXPECTED" in caplog.text


def test_mixture_is_a_distribution_and_gathers_match_the_full_logits(loaded):
    m, tok = loaded.model, loaded.tokenizer
    ids = _prompt(tok)
    torch.manual_seed(0)
    canvas = torch.randint(0, len(tok), (1, 16))
    with torch.no_grad():
        enc = m.model.encoder(input_ids=ids)
        mem = m.copy_head.new_memory(ids, enc.last_hidden_state)
        out = m.model(cache=enc.cache, decoder_input_ids=canvas)
        vocab_logits = torch.tanh(m.lm_head(out.last_hidden_state).float() / m.final_logit_softcapping)
        vocab_logits = vocab_logits * m.final_logit_softcapping
        ptr = m.copy_head.pointer(out.last_hidden_state, canvas, mem)
        full = m.copy_head.mixture_logits(vocab_logits, ptr, mem)
        assert torch.allclose(full.logsumexp(-1), torch.zeros(1, 16), atol=1e-4)
        target = ids[:, -16:]
        log_mix, _ = m.copy_head.target_logprob(vocab_logits, ptr, mem, target)
        assert torch.allclose(log_mix, full.gather(-1, target[..., None]).squeeze(-1), atol=1e-4)
        # the model's own forward with the memory returns the same log-mixture
        same = m(cache=enc.cache, decoder_input_ids=canvas, copy_memory=mem).logits
        assert torch.allclose(same, full, atol=1e-5)


def test_system_turn_and_control_tokens_are_never_copy_sources(loaded):
    m, tok = loaded.model, loaded.tokenizer
    ids = _prompt(tok)
    with torch.no_grad():
        mem = m.copy_head.new_memory(ids, m.model.encoder(input_ids=ids).last_hidden_state)
    text = [tok.decode([i]) for i in ids[0].tolist()]
    end_sys = text.index(st.TURN_END)
    assert not mem.mask[0, : end_sys + 1].any()  # <bos>, the system turn and its <turn|>
    controls = [i for i, t in enumerate(text) if t in st.SPECIAL_TOKENS]
    assert not mem.mask[0, controls].any()
    # every other token after the system turn (the request) may be copied
    rest = [i for i in range(end_sys + 1, len(text)) if i not in controls]
    assert len(rest) > 10 and bool(mem.mask[0, rest].all())


def test_extending_the_memory_equals_encoding_everything_at_once(loaded):
    m, tok = loaded.model, loaded.tokenizer
    ids = _prompt(tok)
    more = torch.tensor(
        [tok("load_bundle is at agentkit/bundle.py:446", add_special_tokens=False)["input_ids"]]
    )
    with torch.no_grad():
        enc = m.model.encoder(input_ids=ids)
        mem = m.copy_head.new_memory(ids, enc.last_hidden_state)
        enc2 = m.model.encoder(input_ids=more, cache=enc.cache)
        inc = m.copy_head.extend_memory(mem, more, enc2.last_hidden_state)
        both = torch.cat([ids, more], dim=1)
        full = m.copy_head.new_memory(both, m.model.encoder(input_ids=both).last_hidden_state)
    assert torch.equal(inc.ids, full.ids) and torch.equal(inc.mask, full.mask)
    assert torch.equal(inc.prev_base, full.prev_base)
    assert torch.allclose(inc.keys, full.keys, atol=1e-4)


def test_a_copy_gate_forced_open_copies_request_tokens_through_the_runtime(loaded):
    """With the gate forced to the pointer, every generated token comes from the request (never from the system
    turn, never a control token): the runtime hands the memory to each decoder forward."""
    m, tok = loaded.model, loaded.tokenizer
    head = m.copy_head
    saved = head.ctrl.bias.detach().clone()
    try:
        with torch.no_grad():
            head.ctrl.bias[0] = -40.0  # log g -> -40: the vocabulary gets no mass
        ids = _prompt(tok)
        res = generate(m, ids, loaded.settings, seed=0)
        new = res.new_tokens[0].tolist()
        request = set(ids[0, ids[0].tolist().index(st.SPECIAL_IDS[st.TURN_END]) + 1 :].tolist())
        variants = (
            request | {int(head.base_ids[i]) for i in request} | {int(head.spaced_ids[i]) for i in request}
        )
        produced = [t for t in new if t != st.PAD_ID]
        assert produced and all(t in variants for t in produced)
        assert not any(t in set(range(len(st.SPECIAL_TOKENS))) for t in produced)
    finally:
        with torch.no_grad():
            head.ctrl.bias.copy_(saved)


def test_the_pointer_follows_a_multi_token_value(loaded):
    """The induction feature: with the content score switched off, a canvas position whose left neighbour is
    a copied token points at the source token that follows that token in the request."""
    m, tok = loaded.model, loaded.tokenizer
    head = m.copy_head
    ids = _prompt(tok, "Where is the function parse_token_stream defined?")
    row = ids[0].tolist()
    names = [tok.decode([i]) for i in row]
    user_at = names.index(st.TURN_END) + 3  # <turn|> \n <|turn> user \n: first request tokens after it
    r = next(
        i
        for i in range(user_at, len(names) - 3)
        if names[i + 1] not in st.SPECIAL_TOKENS and names[i].strip()
    )
    with torch.no_grad():
        enc = m.model.encoder(input_ids=ids)
        mem = head.new_memory(ids, enc.last_hidden_state)
        mem.keys.zero_()  # no content score: only the match term remains
        canvas = torch.full((1, 16), st.PAD_ID)
        canvas[0, 0] = int(head.base_ids[row[r]])  # a request token written at canvas position 0
        h = m.model(cache=enc.cache, decoder_input_ids=canvas).last_hidden_state
        ptr = head.pointer(h, canvas, mem)
    best = int(ptr["log_alpha"][0, 1].argmax())  # the token after it in the request (or after a repeat)
    assert int(head.base_ids[row[best - 1]]) == int(head.base_ids[row[r]])


def test_spaced_word_starts_gives_a_mid_word_source_only_its_stripped_form():
    """``spaced_word_starts``: a copied ``it`` of ``a gent k it`` cannot become ``Ġit`` (its mass goes to ``it``);
    the word's first piece ``a`` keeps both forms; the gathers still match the full mixture."""
    from model.heads.copy_head import CopyHead

    shipped = load_checkpoint("model/checkpoints/agentkit-tiny")
    m, tok = shipped.model, shipped.tokenizer
    ids = _prompt(tok, 'The file is "agentkit/bundle.py" here.')
    pieces = tok.convert_ids_to_tokens(ids[0].tolist())
    assert pieces[pieces.index("a") : pieces.index("a") + 4] == ["a", "gent", "k", "it"]
    saved = {k: v for k, v in m.copy_head.cfg.to_dict().items() if k != "spaced_word_starts"}
    heads = {}
    for name, extra in (("off", {}), ("on", {"spaced_word_starts": True})):
        cfg = CopyHeadConfig.from_dict({**saved, **extra})
        assert ("spaced_word_starts" in cfg.to_dict()) is bool(extra)  # saved only when on
        heads[name] = CopyHead(m.config.text_config.hidden_size, len(tok), cfg)
        heads[name].load_state_dict(m.copy_head.state_dict(), strict=False)  # the learnt weights, either way
        heads[name].set_token_tables(tok)
    canvas = torch.tensor([tok.convert_tokens_to_ids(["Ġat", "Ġa", "gent", "k", "it"])])
    with torch.no_grad():
        enc = m.model.encoder(input_ids=ids)
        h = m.model(cache=enc.cache, decoder_input_ids=canvas).last_hidden_state
        vocab_logits = torch.zeros(1, 5, len(tok))
        out = {}
        for name, head in heads.items():
            mem = head.new_memory(ids, enc.last_hidden_state)
            ptr = head.pointer(h, canvas, mem)
            ptr["log_gate"] = torch.full_like(ptr["log_gate"], float("-inf"))  # the copy distribution alone
            ptr["log_copy_gate"] = torch.zeros_like(ptr["log_copy_gate"])
            full = head.mixture_logits(vocab_logits, ptr, mem)
            assert torch.allclose(full.logsumexp(-1), torch.zeros(1, 5), atol=1e-4)
            log_mix, _ = head.target_logprob(vocab_logits, ptr, mem, canvas)
            gathered = full.gather(-1, canvas[..., None]).squeeze(-1)
            # (Ġat is nowhere in the prompt: both are "no mass", -69 = log 1e-30 and the -1e4 stand-in)
            assert torch.allclose(log_mix[:, 1:], gathered[:, 1:], atol=1e-4) and gathered[0, 0] < -60
            out[name] = full.exp()
    sp_it, it, sp_a = (tok.convert_tokens_to_ids(p) for p in ("Ġit", "it", "Ġa"))
    assert (out["off"][0, :, sp_it] > 1e-9).all()  # off: every position gives Ġit some copy mass
    assert (out["on"][0, :, sp_it] < 1e-12).all()  # on: none (no word of the prompt starts with it)
    assert torch.allclose(out["on"][0, :, it], out["off"][0, :, it] + out["off"][0, :, sp_it], atol=1e-5)
    assert torch.allclose(out["on"][0, :, sp_a], out["off"][0, :, sp_a], atol=1e-6)  # a starts the word


def _answer_turn(tok, question, response, answer_start):
    """Prompt ids of an answer turn: a question, the model's call, a tool response, the first answer words."""
    s = (
        f"{st.BOS}{st.TURN_START}system\nYou help with code.{st.TURN_END}\n"
        f"{st.TURN_START}user\n{question}{st.TURN_END}\n{st.TURN_START}model\n"
        f"{st.TOOL_CALL_START}call:find_definition{{name:{st.STRING_DELIM}load_bundle{st.STRING_DELIM}}}"
        f"{st.TOOL_CALL_END}{st.TOOL_RESPONSE_START}response:find_definition{{location:{st.STRING_DELIM}"
        f"{response}{st.STRING_DELIM}}}{st.TOOL_RESPONSE_END}{answer_start}"
    )
    return torch.tensor([tok(s, add_special_tokens=False)["input_ids"]])


def test_answer_match_responses_limits_the_match_to_tool_responses_in_answer_turns():
    """``answer_match_responses``: once the model turn holds a tool response, the induction match counts only
    positions inside tool responses (after ``Ġis`` the question's ``Ġthe`` gets no match); a turn without a tool
    response (the call turn) keeps the match everywhere; the entry is saved only when on and checked."""
    from model.heads.copy_head import CopyHead

    shipped = load_checkpoint("model/checkpoints/agentkit-tiny")
    m, tok = shipped.model, shipped.tokenizer
    base = {k: v for k, v in m.copy_head.cfg.to_dict().items() if k != "answer_match_responses"}
    ids_resp = [st.SPECIAL_IDS[st.TOOL_RESPONSE_START], st.SPECIAL_IDS[st.TOOL_RESPONSE_END]]
    on = CopyHeadConfig.from_dict({**base, "answer_match_responses": ids_resp})
    assert on.to_dict()["answer_match_responses"] == ids_resp
    assert "answer_match_responses" not in CopyHeadConfig.from_dict(base).to_dict()
    for bad, said in (
        ([10], "answer_match_responses: list should have at least 2 items after validation, not 1, got [10]"),
        ("yes", 'answer_match_responses: input should be a valid list, got "yes"'),
        ([10, "11"], 'answer_match_responses.1: input should be a valid integer, got "11"'),
        ([10, True], "answer_match_responses.1: input should be a valid integer, got true"),
        (
            [10, 10],
            "answer_match_responses must be [start_id, end_id] of the tool-response tokens, got [10, 10]",
        ),
    ):
        with pytest.raises(ValueError, match=re.escape(f"copy_head: {said}")):
            CopyHeadConfig.from_dict({**base, "answer_match_responses": bad})
    heads = {}
    for name, cfg in (("on", on), ("off", CopyHeadConfig.from_dict(base))):
        heads[name] = CopyHead(m.config.text_config.hidden_size, len(tok), cfg)
        heads[name].load_state_dict(m.copy_head.state_dict(), strict=False)  # the shipped weights, either way
        heads[name].set_token_tables(tok)
    head, off = heads["on"], heads["off"]
    ids = _answer_turn(tok, "Where is the function load_bundle defined?", "agentkit/bundle.py:598", "It is")
    row = ids[0].tolist()
    with torch.no_grad():
        enc = m.model.encoder(input_ids=ids)
        mem = head.new_memory(ids, enc.last_hidden_state)
        canvas = torch.tensor([tok.convert_tokens_to_ids(["Ġa", "gent"])])  # left of position 0: "Ġis"
        h = m.model(cache=enc.cache, decoder_input_ids=canvas).last_hidden_state
        ptr_on = head.pointer(h, canvas, mem)
        ptr_off = off.pointer(h, canvas, mem)
    the = row.index(tok.convert_tokens_to_ids("Ġthe"))  # "Where is the": its left neighbour is "Ġis"
    r0, r1 = row.index(ids_resp[0]), row.index(ids_resp[1])
    sources = head._match_sources(mem)[0]
    assert sources[the] == -3 and torch.equal(sources[r0 + 1 : r1], mem.prev_base[0, r0 + 1 : r1])
    # the match raised the question's "the" before; now it is only the content score
    assert ptr_off["log_alpha"][0, 0, the] > ptr_on["log_alpha"][0, 0, the] + 0.5
    # inside the response the match still follows a copied token: after "gent" the next piece "k"
    k_at = next(i for i in range(r0, r1) if row[i - 1] == tok.convert_tokens_to_ids("gent"))
    # (the question's matches no longer share the mass, so it can only rise)
    assert ptr_on["log_alpha"][0, 1, k_at] >= ptr_off["log_alpha"][0, 1, k_at] - 1e-5
    # a call turn (no tool response yet): the rule leaves every source as it was
    call = _prompt(tok)
    with torch.no_grad():
        cmem = head.new_memory(call, m.model.encoder(input_ids=call).last_hidden_state)
    assert torch.equal(head._match_sources(cmem), cmem.prev_base)


def test_answer_match_responses_ids_are_checked_against_the_tokenizer(tmp_path):
    """The rule's ids must be the checkpoint tokenizer's ``<|tool_response>`` and ``<tool_response|>``: reversed
    or out-of-vocabulary ids (a rule that would silently watch other tokens) are a CheckpointError naming them."""
    import shutil

    from model.checkpoint.loading import CheckpointError

    ck = tmp_path / "ck"
    shutil.copytree("model/checkpoints/agentkit-tiny", ck)
    conf = json.loads((ck / "config.json").read_text())
    assert conf["copy_head"]["answer_match_responses"] == [10, 11]  # the shipped rule
    for bad, shown in (
        ([11, 10], '"<tool_response|>", "<|tool_response>"'),
        ([10, 999999], '"<|tool_response>", null'),
    ):
        conf["copy_head"]["answer_match_responses"] = bad
        (ck / "config.json").write_text(json.dumps(conf))
        with pytest.raises(CheckpointError, match=r"answer_match_responses .* must be the ids of") as err:
            load_checkpoint(str(ck))
        assert shown in str(err.value)
    conf["copy_head"]["answer_match_responses"] = None  # null: the rule is off
    (ck / "config.json").write_text(json.dumps(conf))
    assert load_checkpoint(str(ck)).model.copy_head.cfg.answer_match_responses is None


def test_softcap_in_place_outside_autograd_equals_the_out_of_place_form():
    from model.heads.copy_model import softcap

    x = torch.randn(2, 8, 50, generator=torch.Generator().manual_seed(0)) * 60
    want = torch.tanh(x / 30.0) * 30.0
    with torch.no_grad():
        fresh = x.clone()
        got = softcap(fresh, 30.0)
    assert got.data_ptr() == fresh.data_ptr()  # no new [B, C, V] tensor
    assert torch.equal(got, want)
    assert torch.equal(softcap(x.clone().requires_grad_(), 30.0).detach(), want)
