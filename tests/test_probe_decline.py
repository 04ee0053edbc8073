"""``scripts/probe_decline.py``: the position-0 trace of the call-or-prose decision and its AUC."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import llguidance
import llguidance.hf
import pytest
import torch
from script_modules import load_script
from transformers import AutoTokenizer

from model.constraints.denoise import GrammarConstraint
from model.runtime.settings import DenoiseSettings

ROOT = Path(__file__).resolve().parents[1]
GRAMMAR = r"""start: TEXT | <|tool_call> "call:f{n:" NUM "}" <tool_call|>
TEXT: /[a-z ]+\./
NUM: /[0-9]+/
"""


def _probe_module():
    return load_script("probe_decline")


def test_auc_counts_ties_half():
    auc = _probe_module().auc
    assert auc([0.9, 0.8], [0.1, 0.2]) == 1.0
    assert auc([0.5], [0.5]) == 0.5
    assert auc([0.9, 0.1], [0.5]) == 0.5
    assert math.isnan(auc([], [0.5]))


@pytest.mark.parametrize("branch_first", [False, True])
def test_probe_records_position_zero_and_branch_first_commits_it(monkeypatch, branch_first):
    monkeypatch.setattr(GrammarConstraint, "commit", GrammarConstraint.commit)  # restored after the test
    tok = AutoTokenizer.from_pretrained(ROOT / "model" / "checkpoints" / "agentkit-tiny")
    llg = llguidance.hf.from_tokenizer(tok)
    settings = DenoiseSettings(t_max=0.8, t_min=0.4, max_denoising_steps=48)
    probe = _probe_module().PositionZeroProbe(SimpleNamespace(tokenizer=tok, settings=settings), branch_first)
    probe.install()
    c = GrammarConstraint(llguidance.LLMatcher(llg, llguidance.LLMatcher.grammar_from_lark(GRAMMAR)), tok)
    c.start_canvas(16, 16)
    call, word = tok.convert_tokens_to_ids("<|tool_call>"), tok.convert_tokens_to_ids("a")
    logits = torch.full((16, len(tok)), -math.inf)
    logits[:, word] = 0.0
    logits[0, call] = math.log(3.0)  # tempered: P(call) = 0.75 at position 0
    c.commit([word] * 16, [False] * 16, logits=logits, entropy_bound=0.1)
    (step,) = probe.steps
    assert step["p_call"] == pytest.approx(0.75)
    assert step["p_call_raw"] == pytest.approx(3**0.8 / (3**0.8 + 1))  # first step: T = t_max = 0.8
    assert step["argmax0"] == "<|tool_call>" and step["acc0"] is False
    if branch_first:  # position 0 committed from its argmax on the first step, then the call's fast-forward
        assert tok.decode(c.committed) == "<|tool_call>call:f{n:" and step["committed0"] == "<|tool_call>"
    else:  # not accepted, no previous step to extend from: nothing committed yet
        assert c.committed == [] and "committed0" not in step
