"""The space-isolating tokenizer (every copied word reachable) and the staged retrain (tiny sizes, CPU, offline)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from training_helpers import tiny_train_config

from grammar import special_tokens as st
from model.training.data import Generator, corpus_texts
from model.training.settings import TrainConfig

torch.set_num_threads(1)

SHIPPED = Path(__file__).resolve().parents[1] / "model" / "checkpoints" / "agentkit-tiny"


@pytest.fixture(scope="module")
def space_tok():
    from model.checkpoint.tokenizer import build_tokenizer

    return build_tokenizer(corpus_texts(Generator(3).take(400)), vocab_size=1024, space_tokens=True)


def _ids(tok, text: str) -> list[int]:
    return list(tok(text, add_special_tokens=False)["input_ids"])


def test_space_tokenizer_round_trips_and_keeps_the_control_tokens(space_tok):
    from model.checkpoint.tokenizer import encode_chat

    texts = [
        "Where is agentkit/bundle.py:600 defined?",
        "two  spaces,\ttab\nnew line   and trailing  ",
        "Grüße aus München: 4.0 °C, 東京 ✓",
        " leading space",
    ]
    for text in texts:
        assert space_tok.decode(_ids(space_tok, text)) == text
    for i, name in enumerate(st.SPECIAL_TOKENS):  # the same ids as the shipped tokenizer's
        assert space_tok.convert_tokens_to_ids(name) == i
        assert _ids(space_tok, name) == [i]
    shipped = json.loads((SHIPPED / "tokenizer.json").read_text())
    assert [(t["id"], t["content"]) for t in shipped["added_tokens"]] == list(enumerate(st.SPECIAL_TOKENS))
    ids = encode_chat(space_tok, [{"role": "user", "content": "Weather in Berlin?"}])
    controls = [i for i in ids if i < len(st.SPECIAL_TOKENS)]
    assert controls == [st.BOS_ID, st.SPECIAL_IDS[st.TURN_START], st.SPECIAL_IDS[st.TURN_END], controls[1]]
    assert space_tok.decode(ids) == "<bos><|turn>user\nWeather in Berlin?<turn|>\n<|turn>model\n"


def test_a_word_splits_the_same_with_or_without_a_leading_space(space_tok):
    space = space_tok.convert_tokens_to_ids("Ġ")
    q = st.SPECIAL_IDS[st.STRING_DELIM]
    for word in ("agentkit", "Berlin", "load_bundle", "2023", "Palo", "rs6034464"):
        alone = _ids(space_tok, word)
        assert _ids(space_tok, " " + word) == [space, *alone]
        assert _ids(space_tok, f'<|"|>{word}<|"|>') == [q, *alone, q]
        assert _ids(space_tok, f"in {word}.") == [
            *_ids(space_tok, "in"),
            space,
            *alone,
            *_ids(space_tok, "."),
        ]
    assert not any(t.startswith("Ġ") and t.strip("Ġ") for t in space_tok.get_vocab())  # no `Ġword` token


def test_every_copied_word_is_reachable_with_the_space_tokenizer(space_tok, tmp_path):
    from evals.probe import copy_reachability, word_reachability

    prompt = (
        '<|tool_response>response:find_definition{path:<|"|>agentkit/bundle.py<|"|>,line:600}<tool_response|>'
    )
    target = "load_bundle is at agentkit/bundle.py, line 600."
    assert word_reachability(space_tok, prompt, target, spaced=True) == (3, 0)  # the path, line, 600
    # a word is counted only where the prompt has it whole: "tool" of "<|tool>" or "tools" is not copied
    assert word_reachability(space_tok, "<|tool>declaration:x{} Use tools.", "A tool.", spaced=True) == (0, 0)
    space_tok.save_pretrained(tmp_path / "tok")
    new = copy_reachability(str(tmp_path / "tok"), n=40)
    old = copy_reachability(str(SHIPPED), n=40)
    for group in ("calls", "answers"):
        assert new[group]["n_words"] > 60
        assert new[group]["unreachable_words"] == 0.0 and new[group]["examples_with_unreachable"] == 0.0
    assert old["calls"]["unreachable_words"] > 0.02 and old["answers"]["unreachable_words"] > 0.01


def test_optimizer_moments_are_kept_in_bfloat16_and_restored():
    from model.training.stages import compact_optimizer_state, expand_optimizer_state

    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 4)
    opt = torch.optim.AdamW(lin.parameters(), lr=1e-2)
    for _ in range(3):
        opt.zero_grad()
        lin(torch.randn(5, 8)).pow(2).sum().backward()
        opt.step()
    full = opt.state_dict()
    small = compact_optimizer_state(full)
    w = small["state"][0]
    assert w["exp_avg"].dtype == torch.bfloat16 and w["exp_avg_sq"].dtype == torch.bfloat16
    assert float(w["step"]) == 3.0
    back = expand_optimizer_state(small)
    for i in (0, 1):
        for k in ("exp_avg", "exp_avg_sq"):
            assert back["state"][i][k].dtype == torch.float32
            torch.testing.assert_close(back["state"][i][k], full["state"][i][k], rtol=1e-2, atol=1e-9)
    fresh = torch.optim.AdamW(lin.parameters(), lr=1e-2)
    fresh.load_state_dict(back)
    assert float(fresh.state_dict()["state"][0]["step"]) == 3.0


def _stage_cfg(tmp_path: Path, stage: int, **kw) -> TrainConfig:
    base = dict(
        stages_dir=str(tmp_path / "stages"),
        stage=stage,
        out_dir=str(tmp_path / f"run-{stage}"),
        vocab_size=600,
        canvas_length=16,
        max_prompt=160,
        sliding_window=64,
        n_train=60,
        n_heldout=8,
        tokenizer_examples=60,
        batch_size=4,
        steps=2,
        warmup=1,
        eval_every=2,
        log_every=1,
        bucket_mult=2,
        copy_head=True,
        copy_dim=16,
        space_tokens=True,
    )
    base.update(kw)
    return tiny_train_config(**base)


def test_stage_one_resumes_from_stage_zero_with_its_optimizer(tmp_path):
    from model.checkpoint.loading import load_checkpoint
    from model.training.stages import OPTIMIZER_FILE, run_stage, stage_dir

    s0 = run_stage(_stage_cfg(tmp_path, 0), decoding_from=SHIPPED)
    assert s0 == stage_dir(tmp_path / "stages", 0)
    info0 = json.loads((s0 / "stage.json").read_text())
    assert (info0["stage"], info0["steps"], info0["total_steps"], info0["seed"]) == (0, 2, 2, 0)
    assert info0["from"] is None and info0["heldout_loss"] > 0
    for name in ("agentkit_decoding.json", "generation_config.json"):  # the shipped decoding settings
        assert (s0 / name).read_text() == (SHIPPED / name).read_text()
    saved = torch.load(s0 / OPTIMIZER_FILE, weights_only=False)["optimizer"]
    assert {v["exp_avg"].dtype for v in saved["state"].values()} == {torch.bfloat16}
    tok0 = json.loads((s0 / "tokenizer.json").read_text())
    assert tok0["pre_tokenizer"]["type"] == "Sequence"  # the space-isolating split, then byte-level

    s1 = run_stage(_stage_cfg(tmp_path, 1, steps=3, lr=1e-3))
    info1 = json.loads((s1 / "stage.json").read_text())
    assert (info1["steps"], info1["total_steps"], info1["seed"]) == (3, 5, 1)
    assert info1["from"] == str(s0)
    assert (s1 / "tokenizer.json").read_text() == (s0 / "tokenizer.json").read_text()
    state = torch.load(tmp_path / "run-1" / "checkpoint" / "trainer_state.pt", weights_only=False)
    # AdamW's per-parameter step counters went on from stage 0's: its moments were loaded, not restarted
    assert {float(v["step"]) for v in state["optimizer"]["state"].values()} == {5.0}
    assert type(load_checkpoint(str(s1)).model).__name__ == "DiffusionGemmaWithCopyHead"


def test_stages_refuse_what_would_break_the_line(tmp_path):
    from model.training.__main__ import main
    from model.training.stages import stage_config

    with pytest.raises(ValueError, match="--stage needs --stages-dir"):
        stage_config(TrainConfig(stage=0))
    with pytest.raises(ValueError, match="--stages-dir needs --stage"):
        TrainConfig(stages_dir="x")
    with pytest.raises(
        ValueError, match=r"stage\n  Input should be greater than or equal to 0 \[.*input_value=-1"
    ):
        stage_config(TrainConfig(stage=-1, stages_dir="x"))
    with pytest.raises(ValueError, match="exactly --steps"):
        stage_config(_stage_cfg(tmp_path, 0, max_minutes=10.0))
    with pytest.raises(ValueError, match="exactly --steps"):
        stage_config(_stage_cfg(tmp_path, 0, stop_at=1))
    with pytest.raises(ValueError, match="leave out --init-from"):
        stage_config(_stage_cfg(tmp_path, 0, init_from="somewhere"))
    with pytest.raises(ValueError, match="train stage 0 first"):
        stage_config(_stage_cfg(tmp_path, 1))
    run, prev = stage_config(TrainConfig(stage=0, stages_dir="model/checkpoints/stages/space"))
    assert prev is None and run.out_dir == "runs/stages/space/stage-0" and run.seed == 0
    s0 = stage_dir_with_config(tmp_path)
    with pytest.raises(ValueError, match=r"--copy-head True \(asked False\)"):
        stage_config(_stage_cfg(tmp_path, 1, copy_head=False))
    with pytest.raises(ValueError, match="--from-stage must be an earlier stage"):
        stage_config(_stage_cfg(tmp_path, 1, from_stage=1))
    with pytest.raises(ValueError, match="leave out --from-stage"):
        stage_config(_stage_cfg(tmp_path, 0, from_stage=0))
    with pytest.raises(ValueError, match="train stage 1 first"):
        stage_config(_stage_cfg(tmp_path, 3, from_stage=1))
    run, prev = stage_config(_stage_cfg(tmp_path, 2, from_stage=0))
    assert prev == s0 and run.init_from == str(s0) and run.stage == 2
    run, prev = stage_config(_stage_cfg(tmp_path, 1, seed=4))
    assert prev == s0 and run.init_from == str(s0) and run.seed == 5
    (s0 / "stage.json").write_text("{}")
    with pytest.raises(ValueError, match="already trained"):
        stage_config(_stage_cfg(tmp_path, 0))
    assert main(["--stages-dir", str(tmp_path / "stages"), "--stage", "0"]) == 2


def stage_dir_with_config(tmp_path: Path) -> Path:
    """A stand-in stage-0 folder: the files :func:`stage_config` checks, with a copy-head train config."""
    import dataclasses

    from model.training.stages import stage_dir

    s0 = stage_dir(tmp_path / "stages", 0)
    s0.mkdir(parents=True)
    (s0 / "model.safetensors").write_bytes(b"")
    (s0 / "optimizer.pt").write_bytes(b"")
    (s0 / "train_config.json").write_text(json.dumps(dataclasses.asdict(_stage_cfg(tmp_path, 0))))
    return s0


def test_a_fresh_tokenizer_reads_more_examples_than_the_run_trains_on(tmp_path):
    from model.checkpoint.tokenizer import build_tokenizer
    from model.training.train import prepare

    cfg = _stage_cfg(tmp_path, 0, n_train=20, tokenizer_examples=150, copy_head=False)
    tok, train, _, _ = prepare(cfg, log=lambda *a: None)
    assert len(train) == 20
    ref = build_tokenizer(corpus_texts(Generator(0, "train").take(150)), vocab_size=600, space_tokens=True)
    assert tok.get_vocab() == ref.get_vocab()
