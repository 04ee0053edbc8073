"""The shipped default checkpoint: size, offline loading, vocabulary layout, generation settings, behaviour."""

from __future__ import annotations

from pathlib import Path

import torch

from grammar import special_tokens as st

CKPT = Path(__file__).resolve().parents[1] / "model" / "checkpoints" / "agentkit-tiny"

torch.set_num_threads(1)


def test_shipped_folder_is_small_and_complete():
    files = {p.name for p in CKPT.iterdir()}
    assert {
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    } <= files
    total = sum(p.stat().st_size for p in CKPT.iterdir() if p.is_file())
    assert total <= 60 * 1024 * 1024, total


def test_loads_offline_with_project_layout():
    from transformers import AutoTokenizer, DiffusionGemmaForBlockDiffusion

    model = DiffusionGemmaForBlockDiffusion.from_pretrained(CKPT, local_files_only=True)
    tok = AutoTokenizer.from_pretrained(CKPT)
    cfg = model.config
    assert cfg.text_config.vocab_size == len(tok) <= 16384
    assert (cfg.boi_token_id, cfg.eoi_token_id, cfg.image_token_id) == (
        st.SPECIAL_IDS[st.IMAGE_START],
        st.SPECIAL_IDS[st.IMAGE_END],
        st.SPECIAL_IDS[st.IMAGE_TOKEN],
    )
    for i, name in enumerate(st.SPECIAL_TOKENS):
        assert tok.convert_tokens_to_ids(name) == i
    gen = model.generation_config
    assert list(gen.eos_token_id) == list(st.GENERATION_EOS_IDS) and gen.pad_token_id == st.PAD_ID
    assert 0 <= gen.t_min < gen.t_max <= 0.5  # low temperatures suit a small model (docs/TRAINING.md)
    assert "<|tool>declaration:" in tok.chat_template
    n_params = sum(p.numel() for p in model.parameters())
    assert 1e6 < n_params < 27e6  # at least 10x smaller than FunctionGemma-270M


def test_one_pass_denoising_reproduces_a_training_style_call():
    """From a fully corrupted canvas, one decoder pass recovers far more target tokens than chance (1/8192).

    Measured on the shipped CPU-trained checkpoint (1068 steps): 0.22; a regression guard, raise it with better
    checkpoints (docs/TRAINING.md).
    """
    from transformers import AutoTokenizer, DiffusionGemmaForBlockDiffusion

    from model.training.data import Generator
    from model.training.render import render_prompt

    model = DiffusionGemmaForBlockDiffusion.from_pretrained(CKPT, local_files_only=True).eval()
    tok = AutoTokenizer.from_pretrained(CKPT)
    gen = Generator(7, "heldout")
    exs = [e for e in gen.take(60) if e.kind == "call"][:8]
    correct = total = 0
    g = torch.Generator().manual_seed(0)
    for ex in exs:
        p = tok(render_prompt(ex.messages, ex.tools), add_special_tokens=False, return_tensors="pt").input_ids
        t = tok(ex.target, add_special_tokens=False)["input_ids"][: model.config.canvas_length]
        noise = torch.randint(
            0, model.config.text_config.vocab_size, (1, model.config.canvas_length), generator=g
        )
        with torch.no_grad():
            logits = model(input_ids=p, decoder_input_ids=noise).logits[0]
        pred = logits.argmax(-1)[: len(t)].tolist()
        correct += sum(a == b for a, b in zip(pred, t, strict=True))
        total += len(t)
    assert correct / total > 0.15, correct / total


def test_frontier_extension_cuts_decoder_forwards_on_shipped_checkpoint():
    """Same prompts and seeds, tool choice required: the constraint's frontier extension (commit stable,
    confident masked argmaxes past the accepted run) needs fewer decoder forwards; every call still validates.
    Measured at commit time (6 prompts x 2 seeds): see docs/BENCHMARKS.md, constraint_overhead."""
    import jsonschema

    from benchmarks.constraint_overhead import PROMPTS as prompts
    from benchmarks.constraint_overhead import TOOLS as tools
    from grammar.parse import parse_tool_calls
    from model.runtime import generate
    from model.turn.chat import ChatModel

    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    chat = ChatModel.load(str(CKPT))
    forwards = {}
    for extend in (False, True):
        total = 0
        for prompt in prompts:
            for seed in (0, 1):
                c = chat.make_constraint(tools, "required")
                c.extend = extend
                ids = chat.tokenizer(
                    chat.render([{"role": "user", "content": prompt}], tools),
                    return_tensors="pt",
                    add_special_tokens=False,
                ).input_ids
                out = generate(
                    chat.model, ids, chat.settings.replace(max_new_tokens=128), constraints=[c], seed=seed
                )
                new = [t for t in out.new_tokens[0].tolist() if t != st.PAD_ID]
                calls = parse_tool_calls(chat.tokenizer.decode(new, skip_special_tokens=False)).calls
                assert calls, prompt
                for call in calls:
                    jsonschema.Draft202012Validator(schemas[call.name]).validate(dict(call.arguments))
                total += int(out.stats.decoder_forwards[0])
        forwards[extend] = total
    assert forwards[True] < forwards[False], forwards


def test_required_tool_choice_without_tools_is_an_error():
    import pytest

    from model.turn.chat import ChatModel

    chat = ChatModel.load(str(CKPT))
    for choice in ("required", {"name": "f"}):
        with pytest.raises(ValueError, match="needs at least one tool"):
            chat.chat([{"role": "user", "content": "hi"}], tools=[], tool_choice=choice, seed=0)


def test_copy_probe_on_shipped_checkpoint(capsys):
    """The copy probe finds the value tokens a call copies from the request and measures both read-outs.

    Measured on the shipped checkpoint (copy head), these 12 calls: 44 copied of 402 target tokens; one decoder
    pass at t = 0.25 gets 0.75 of all corrupted target tokens and 0.82 of the copied ones (the checkpoint before
    the copy head: 0.56 and 0.00; docs/TRAINING.md)."""
    import json

    from evals.probe import copy_probe, main

    r = copy_probe(str(CKPT), n=12)
    assert r["n_examples"] == 12
    assert 0 < r["n_copied_tokens"] < r["n_target_tokens"]
    d = r["diffusion_t0.25"]
    assert d["all"] > 0.4  # a regression guard on the denoiser itself
    assert d["copied"] > 0.5  # and on the copy head (0.82 here; 0.00 without it)
    assert r["diffusion_t1.0"]["all"] < d["all"]  # less context, fewer tokens right
    for k in ("ar", "diffusion_t0.25", "diffusion_t0.5", "diffusion_t1.0"):
        assert 0.0 <= r[k]["copied"] <= 1.0
    assert main([str(CKPT), "--n", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["n_examples"] == 2
    assert main(["/nonexistent/ckpt"]) == 2
    assert main([str(CKPT), "--n", "0"]) == 2
    assert "no checkpoint at /nonexistent/ckpt" in capsys.readouterr().err


def test_word_reachability_finds_bpe_spacing_mismatches(capsys):
    """A path quoted in a JSON tool response is split ``a gent k it``; after a space it is ``Ġagent k it``, which
    no token of the response reaches. A value the request spells the same way is reachable."""
    import json

    from transformers import AutoTokenizer

    from evals.probe import copy_reachability, main, word_reachability

    tok = AutoTokenizer.from_pretrained(CKPT)
    response = '{"location":"agentkit/bundle.py:466","path":"agentkit/bundle.py"}'
    assert word_reachability(tok, response, "It is defined at agentkit/bundle.py:466.", spaced=True) == (1, 1)
    # the same word unspaced (a string value) is tokenized as in the response: reachable
    assert word_reachability(tok, response, "agentkit/bundle.py:466", spaced=False) == (1, 0)
    # words absent from the prompt and control-token spellings are not counted
    assert word_reachability(tok, response, '<turn|> elsewhere <|"|>', spaced=True) == (0, 0)
    r = copy_reachability(str(CKPT), n=20)
    for group in ("calls", "answers"):
        assert r[group]["n_examples"] == 20 and r[group]["n_words"] > 20
        assert 0.0 <= r[group]["unreachable_words"] < 0.5
    assert main([str(CKPT), "--reachability", "--n", "5", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["calls"]["n_examples"] == 5
