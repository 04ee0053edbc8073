"""``scripts/equivalence.py``: it runs through (an unconstrained turn is fingerprinted raw) and prints JSON alone."""

from __future__ import annotations

import json
import sys

import pytest
from script_modules import load_script
from serve_helpers import CHECKPOINT


def test_an_unconstrained_turn_is_fingerprinted_raw_even_when_its_tool_call_is_malformed():
    """The shipped checkpoint, free of the constraint, writes a malformed tool call for the weather question at
    seed 0, which ``ChatModel.chat`` refuses to parse: the script records the turn's raw text instead (the same
    text ``chat`` keeps as ``raw`` when the turn parses)."""
    if not (CHECKPOINT / "config.json").is_file():
        pytest.skip("embedded default checkpoint missing")
    import torch

    from grammar.parse import ToolCallParseError
    from model.turn.chat import ChatModel

    torch.set_num_threads(1)
    eq = load_script("equivalence")
    cm = ChatModel.load(None)
    weather = [{"role": "user", "content": "What is the weather in Paris?"}]
    with pytest.raises(ToolCallParseError):
        cm.chat(weather, seed=0, constrained=False)
    assert eq._free_turn(cm, "What is the weather in Paris?", seed=0).startswith("<|tool_call>call:")
    hello = [{"role": "user", "content": "Hello, who are you?"}]
    assert eq._free_turn(cm, "Hello, who are you?", seed=1) == cm.chat(hello, seed=1, constrained=False).raw


def test_stdout_is_the_json_alone(monkeypatch, capsys):
    """``train()`` logs to stdout: the script sends it to stderr, so ``> after.json`` is JSON."""
    eq = load_script("equivalence")
    for part in ("runtime", "grammars_bfcl", "training_data", "training_losses", "training_loop"):
        monkeypatch.setattr(eq, part, lambda part=part: print(f"log of {part}") or f"sha-{part}")
    monkeypatch.setattr(sys, "argv", ["equivalence.py", "--skip-maskbench"])
    eq.main()
    out, err = capsys.readouterr()
    assert json.loads(out) == {
        "runtime": "sha-runtime",
        "grammars_bfcl": "sha-grammars_bfcl",
        "grammars_maskbench": None,
        "training_data": "sha-training_data",
        "training_losses": "sha-training_losses",
        "training_loop": "sha-training_loop",
    }
    assert "log of training_loop" in err
