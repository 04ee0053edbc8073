"""The accept window (left-to-right bites) and the checkpoint's decoding file (model/checkpoint/loading.py)."""

from __future__ import annotations

import json
import re

import pytest
import torch
from fake_constraints import ModeConstraint

from model.checkpoint.loading import DECODING_FILE, CheckpointError, load_checkpoint
from model.runtime import StepEvent, generate
from model.testing import make_tiny_checkpoint

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def ckpt_dir(tmp_path_factory):
    return make_tiny_checkpoint(tmp_path_factory.mktemp("w"), canvas_length=16, copy_head=True)


def test_no_position_past_the_frontier_plus_the_window_is_accepted(ckpt_dir):
    ck = load_checkpoint(str(ckpt_dir))
    ids = torch.tensor([ck.tokenizer("<bos>hello there", add_special_tokens=False)["input_ids"]])
    for w in (1, 3):
        settings = ck.settings.replace(accept_window=w, max_new_tokens=16)
        events: list = []
        generate(ck.model, ids, settings, seed=0, on_event=events.append)
        steps = [e for e in events if isinstance(e, StepEvent)]
        prev = torch.zeros(16, dtype=torch.bool)
        assert steps
        for e in steps:
            acc = e.accepted[0]
            lead = int(prev.long().cumprod(0).sum())
            assert not acc[lead + w :].any(), (w, lead, acc)
            prev = acc
    # without the window a step accepts positions anywhere (here, past the frontier + 1)
    seen = []
    generate(
        ck.model,
        ids,
        ck.settings.replace(max_new_tokens=16, t_max=0.05, t_min=0.01),
        seed=0,
        on_event=seen.append,
    )
    prev = torch.zeros(16, dtype=torch.bool)
    far = False
    for e in seen:
        if isinstance(e, StepEvent):
            lead = int(prev.long().cumprod(0).sum())
            far = far or bool(e.accepted[0][lead + 1 :].any())
            prev = e.accepted[0]
    assert far


def test_a_row_in_a_tool_call_gets_the_call_window_and_prose_rows_the_accept_window(ckpt_dir):
    ck = load_checkpoint(str(ckpt_dir))
    ids = torch.tensor([ck.tokenizer("<bos>hello there", add_special_tokens=False)["input_ids"]] * 3)
    settings = ck.settings.replace(
        accept_window=1, call_accept_window=3, max_new_tokens=16, t_max=0.05, t_min=0.01
    )
    events: list = []
    rows = [
        ModeConstraint(in_call=True),
        ModeConstraint(in_call=False),
        None,
    ]  # call, prose, no constraint (prose window)
    generate(ck.model, ids, settings, seed=0, constraints=rows, on_event=events.append)
    steps = [e for e in events if isinstance(e, StepEvent)]
    assert steps
    prev = torch.zeros(3, 16, dtype=torch.bool)
    past_one = [False, False, False]
    for e in steps:
        for r, w in enumerate((3, 1, 1)):
            lead = int(prev[r].long().cumprod(0).sum())
            assert not e.accepted[r][lead + w :].any(), (r, w, lead, e.accepted[r])
            past_one[r] = past_one[r] or bool(e.accepted[r][lead + 1 :].any())
        prev = e.accepted.clone()
    assert past_one == [True, False, False]  # the call row took bites of more than one token


def test_the_decoding_file_sets_the_window_and_bad_files_are_named(ckpt_dir, tmp_path):
    import shutil

    d = tmp_path / "ck"
    shutil.copytree(ckpt_dir, d)
    assert load_checkpoint(str(d)).settings.accept_window is None
    (d / DECODING_FILE).write_text(json.dumps({"accept_window": 4}))
    assert load_checkpoint(str(d)).settings.accept_window == 4
    assert load_checkpoint(str(d)).settings.extend_prose is True
    assert load_checkpoint(str(d)).settings.call_accept_window is None
    (d / DECODING_FILE).write_text(
        json.dumps(
            {
                "accept_window": 1,
                "extend_prose": False,
                "call_accept_window": 4,
                "no_repeat": True,
                "repeat_window": 3,
            }
        )
    )
    loaded = load_checkpoint(str(d))
    assert (loaded.settings.accept_window, loaded.settings.extend_prose) == (1, False)
    assert [loaded.settings.window_for(c) for c in (False, True)] == [1, 4]
    from model.turn.chat import ChatModel

    made = ChatModel(loaded).make_constraint([])  # carried to the tool-call constraint
    assert (made.extend_prose, made.repeat_window) == (False, 3)
    (d / DECODING_FILE).write_bytes(b'\xff\xfe{"a')  # not UTF-8: named, not a UnicodeDecodeError traceback
    with pytest.raises(CheckpointError, match="cannot read decoding options"):
        load_checkpoint(str(d))
    (d / DECODING_FILE).write_text(json.dumps({"accept_window": 1, "bogus": 1}))
    with pytest.raises(CheckpointError, match=r"unknown keys \['bogus'\]"):
        load_checkpoint(str(d))
    for bad in (
        {"accept_window": 0},
        {"window": 4},
        [4],
        {"extend_prose": "no"},
        {"call_accept_window": True},
    ):
        (d / DECODING_FILE).write_text(json.dumps(bad))
        with pytest.raises(CheckpointError, match=DECODING_FILE):
            load_checkpoint(str(d))
    for bad, said in (
        ({"call_accept_window": 0}, "call_accept_window: input should be greater than or equal to 1, got 0"),
        ({"call_accept_window": True}, "call_accept_window: input should be a valid integer, got true"),
        ({"repeat_window": "3"}, 'repeat_window: input should be a valid integer, got "3"'),
        ({"repeat_window": None}, "repeat_window: input should be a valid integer, got null"),
        ({"repeat_window": 3}, 'repeat_window 3 needs "no_repeat": true'),
        ({"no_repeat": "true"}, 'no_repeat: input should be a valid boolean, got "true"'),
        ([4], "a JSON object with keys among ['accept_window', 'no_repeat', 'extend_prose'"),
    ):
        (d / DECODING_FILE).write_text(json.dumps(bad))
        with pytest.raises(CheckpointError, match=re.escape(said)):
            load_checkpoint(str(d))
    (d / DECODING_FILE).unlink()
    (d / DECODING_FILE).mkdir()  # a folder where the file belongs: named, not silently the defaults
    with pytest.raises(CheckpointError, match="cannot read decoding options"):
        load_checkpoint(str(d))
