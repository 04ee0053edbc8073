"""``scripts/span_probe.py``: the word starts its ``--snap`` rule uses."""

from __future__ import annotations

from pathlib import Path

import torch
from script_modules import load_script
from transformers import AutoTokenizer

from model.heads.copy_head import word_tables

ROOT = Path(__file__).resolve().parents[1]


def _probe_module():
    return load_script("span_probe")


def test_word_starts_maps_each_piece_of_a_word_to_its_first_piece():
    tok = AutoTokenizer.from_pretrained(ROOT / "model" / "checkpoints" / "agentkit-tiny")
    word_piece, ends_alnum = word_tables(tok, len(tok))
    text = '"agentkit/bundle.py:598 load_bundle'
    toks = tok.tokenize(text)
    assert toks[:5] == ['"', "a", "gent", "k", "it"]  # the spelling the probe is about
    ids = torch.tensor([tok.convert_tokens_to_ids(toks)])
    first = _probe_module().word_starts(ids, word_piece, ends_alnum)[0].tolist()
    by_piece = [toks[f] for f in first]
    # a gent k it -> a; '/', 'bundle', '.', 'py', ':', '598' each start their own run; Ġload starts a word
    assert by_piece[:5] == ['"', "a", "a", "a", "a"]
    assert by_piece[5:11] == toks[5:11]
    assert by_piece[toks.index("Ġload")] == "Ġload"
