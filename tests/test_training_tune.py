"""evals.tune: the decoding grid scored on held-out examples, the best row written beside the weights."""

from __future__ import annotations

import json

import pytest
import torch

from evals import tune
from model.checkpoint.loading import DECODING_FILE, load_checkpoint
from model.testing import make_tiny_checkpoint


def test_rows_are_scored_and_the_best_is_written_with_its_decoding_file(tmp_path):
    torch.set_num_threads(1)
    ckpt = make_tiny_checkpoint(tmp_path / "ck", canvas_length=16)
    rows = tune.tune(str(ckpt), limit=2, rows=[3, 10])
    assert [(r["accept_window"], r["extend_prose"], r["call_accept_window"]) for r in rows] == [
        (4, True, None),
        (1, False, 4),
    ]
    assert all(0.0 <= r["accuracy"] <= 1.0 and r["mean_latency_s"] > 0 for r in rows)
    rows[1]["accuracy"] = 1.0  # make the strict-prose row the best
    best = tune.write_best(str(ckpt), rows)
    assert json.loads((ckpt / DECODING_FILE).read_text()) == {
        "accept_window": 1,
        "no_repeat": True,
        "extend_prose": False,
        "call_accept_window": 4,
        "repeat_window": 1,
        "bind_values": False,
        "ground_answers": False,
        "span_copy": False,
    }
    s = load_checkpoint(str(ckpt)).settings
    assert (s.accept_window, s.extend_prose, s.call_accept_window, s.max_denoising_steps, s.t_max) == (
        1,
        False,
        4,
        64,
        best["t_max"],
    )


def test_bad_rows_are_refused_before_anything_loads(capsys):
    for bad, said in (("3,99", "numbered 0..14, got 3,99"), ("a", "comma-separated row numbers")):
        with pytest.raises(SystemExit) as ei:
            tune.main(["no-such-checkpoint", "--rows", bad])
        assert ei.value.code == 2 and said in capsys.readouterr().err
    with pytest.raises(SystemExit) as ei:
        tune.main(["no-such-checkpoint", "--limit", "0", "--write"])  # would score nothing and overwrite
    assert ei.value.code == 2 and "--limit must be >= 1" in capsys.readouterr().err
    with pytest.raises(SystemExit) as ei:
        tune.main(["no-such-checkpoint", "--threads", "0"])  # refused before the checkpoint loads
    assert ei.value.code == 2 and "--threads must be >= 1, got 0" in capsys.readouterr().err
    assert (
        tune.main(["no-such-checkpoint", "--rows", "3"]) == 2
    )  # a CheckpointError: one line, not a traceback
    assert "checkpoint folder does not exist" in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"numbered 0\.\.14"):
        tune.tune("no-such-checkpoint", rows=[-1])
