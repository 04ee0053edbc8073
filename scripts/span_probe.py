"""Can the checkpoint copy one span of a bot's answer, given the rest? A teacher-forced probe of the answer turn.

    .venv/bin/python scripts/span_probe.py examples/code_search/bundle.yaml \\
        "Where is the function load_bundle defined?" \\
        "load_bundle is defined at agentkit/bundle.py:598." "agentkit/bundle.py:598"

Runs the bundle's agent on the embedded backend (the code-search tools read this repository; the weather tools
need the network) and prints its answer and calls (a failed call is marked), then encodes the conversation up to
the first tool response (the prompt of the answer turn) and puts the given ANSWER on the canvas (``<turn|>``
after it, ``<pad>`` to the canvas end). For each token of SPAN it runs one
decoder pass (with the copy head's memory of the whole prompt) under three noise patterns and prints the token,
the decoder's argmax there, the probability of the right token and its rank (0 = argmax), each the mean over
``--draws`` noise draws:

* ``span noised at once``: every SPAN token replaced by a uniform random token (as when the span is first drawn);
* ``one position noised``: only this token noised, everything else clean;
* ``span from here on noised``: this token and the SPAN tokens right of it noised, its left context clean (as in
  strictly left-to-right decoding).

Then the ten most likely tokens at the span start (one position noised). ``--tokens "Ġa gent k it ..."`` gives
the canvas tokens of the answer explicitly (e.g. spelled as the tool response spells them) instead of the
tokenizer's canonical encoding. ``--snap`` applies, for the agent run and the probe, an experimental copy rule:
the spaced form of a copied token that continues a word in the source (``it`` in ``a gent k it``) is credited to
the spaced form of that word's first token (``Ġa``) (docs/TRAINING.md, "Experiment 2026-12-02 (2)").
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MODES = ("span noised at once", "one position noised", "span from here on noised")


def word_starts(ids: Any, word_piece: Any, ends_alnum: Any) -> Any:
    """``[B, R]`` int64: for each source position, the position of the first token of its word (a token
    continues a word as :func:`model.heads.copy_head.inside_word` says; ``word_piece``/``ends_alnum``:
    :func:`model.heads.copy_head.word_tables`)."""
    import torch

    from model.heads.copy_head import inside_word

    prev = torch.cat([torch.full_like(ids[:, :1], -1), ids[:, :-1]], dim=1)
    cont = inside_word(ids, prev, word_piece, ends_alnum)
    pos = torch.arange(ids.shape[1], device=ids.device)[None, :].expand_as(ids)
    return torch.where(cont, torch.zeros_like(pos), pos).cummax(dim=1).values


def snap_spaced_copies(model: Any, tokenizer: Any) -> None:
    """Patch ``model.heads.copy_head.mixture_logits`` (this process only): spaced copies go to their word's start."""
    import torch

    from model.heads.copy_head import word_tables

    head = model.copy_head
    word_piece, ends_alnum = word_tables(tokenizer, head.base_ids.numel())

    def mixture_logits(vocab_logits: Any, ptr: Any, mem: Any) -> Any:
        B, C, V = vocab_logits.shape
        R = mem.ids.shape[1]
        alpha = ptr["log_alpha"].exp()
        w_sp = alpha * ptr["log_spaced"].exp()
        first = mem.ids.gather(1, word_starts(mem.ids, word_piece, ends_alnum))
        p_copy = vocab_logits.new_zeros((B, C, V))
        p_copy.scatter_add_(2, head.spaced_ids[first][:, None, :].expand(B, C, R), w_sp)
        p_copy.scatter_add_(2, head.base_ids[mem.ids][:, None, :].expand(B, C, R), alpha - w_sp)
        p = torch.softmax(vocab_logits, dim=-1).mul_(ptr["log_gate"].exp()[..., None])
        p.add_(p_copy.mul_(ptr["log_copy_gate"].exp()[..., None]))
        return p.clamp_min_(1e-30).log_()

    head.mixture_logits = mixture_logits


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bundle")
    ap.add_argument("question")
    ap.add_argument("answer", help="the answer put on the canvas")
    ap.add_argument("span", help="the part of ANSWER to probe (a substring)")
    ap.add_argument(
        "--tokens", default=None, help="canvas tokens of ANSWER, space-separated (default: encode it)"
    )
    ap.add_argument("--model", default=None, help="checkpoint folder (default: the embedded agentkit-tiny)")
    ap.add_argument("--snap", action="store_true", help="spaced copies credited to their word's first token")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--draws", type=int, default=8, help="noise draws averaged per probe (default 8)")
    a = ap.parse_args()
    if not a.span.strip() or a.span not in a.answer:
        ap.error(f"span {a.span!r} is not a non-blank substring of the answer {a.answer!r}")
    if a.draws < 1:
        ap.error("--draws must be >= 1")

    import torch

    from agentkit.backends.embedded import EmbeddedBackend
    from agentkit.bundle import load_bundle
    from agentkit.messages import to_template_messages
    from grammar import special_tokens as st
    from tools import code_search

    torch.set_num_threads(1)
    code_search.set_root(ROOT)
    backend = EmbeddedBackend(a.model, seed=a.seed, threads=1)
    cm = backend.chat_model
    tok, model = cm.tokenizer, cm.model
    if a.snap:
        snap_spaced_copies(model, tok)
    agent = load_bundle(a.bundle).make_agent(backend=backend)
    result = agent.run(a.question)
    print("answer:", repr(result.answer))
    for step in result.steps:
        for call in step.tool_calls:
            failed = f"  FAILED: {call.error}" if call.error else ""
            print(f"call: {call.name}({call.arguments}){failed}")
    tool_at = next((i for i, m in enumerate(result.messages) if m.get("role") == "tool"), None)
    if tool_at is None:
        print("no tool response: nothing to probe")
        return
    messages = to_template_messages(result.messages[: tool_at + 1])
    prompt, _ = cm.encode_turn(messages, agent.declarations(), None)
    ids = torch.tensor([list(prompt)])
    attn = torch.ones_like(ids)
    C, V = int(model.config.canvas_length), int(model.config.text_config.vocab_size)
    if a.tokens:
        target = tok.convert_tokens_to_ids(a.tokens.split())
        if tok.decode(target) != a.answer:
            ap.error(f"--tokens spell {tok.decode(target)!r}, not the answer {a.answer!r}")
    else:
        target = tok.encode(a.answer, add_special_tokens=False)
    target = [*target, tok.convert_tokens_to_ids(st.TURN_END)]
    if len(target) > C:
        ap.error(f"the answer takes {len(target)} tokens; the canvas holds {C}")
    s0 = a.answer.index(a.span)
    s1, span, off = s0 + len(a.span), [], 0
    for i in range(len(target) - 1):
        n = len(tok.decode(target[: i + 1])) - off
        if off < s1 and off + n > s0:
            span.append(i)
        off += n
    print(f"prompt: {ids.shape[1]} tokens; canvas: {tok.convert_ids_to_tokens(target)}")
    with torch.no_grad():
        ids, attn = ids.repeat(a.draws, 1), attn.repeat(a.draws, 1)  # one row per noise draw
        enc = model.model.encoder(input_ids=ids, attention_mask=attn)
        memory = model.copy_head.new_memory(ids, enc.last_hidden_state, attn)
        canvas = torch.tensor([target + [st.PAD_ID] * (C - len(target))])

        def probs(noised_at: list[int], seed: int) -> Any:
            """``[C, V]`` probabilities, the mean over ``--draws`` noise draws."""
            g = torch.Generator().manual_seed(seed)
            noised = canvas.repeat(a.draws, 1)
            for p in noised_at:
                noised[:, p] = torch.randint(0, V, (a.draws,), generator=g)
            out = model(
                cache=enc.cache,
                decoder_input_ids=noised,
                decoder_attention_mask=torch.cat([attn, torch.ones_like(noised)], 1),
                copy_memory=memory,
            )
            return out.logits.float().softmax(-1).mean(0)

        for mode in MODES:
            cells = []
            for i in span:
                noise = span if mode == MODES[0] else [i] if mode == MODES[1] else [p for p in span if p >= i]
                pr = probs(noise, seed=a.seed + i)[i]
                right = pr[target[i]]
                top = tok.convert_ids_to_tokens(int(pr.argmax()))
                rank = int((pr > right).sum())
                cells.append(f"{tok.convert_ids_to_tokens(target[i])}->{top} p={float(right):.2f} r={rank}")
            print(f"[{mode}] " + " | ".join(cells))
        v, ix = probs([span[0]], seed=a.seed)[span[0]].topk(10)
        best = [(tok.convert_ids_to_tokens(int(j)), round(float(p), 3)) for p, j in zip(v, ix, strict=True)]
        print("top 10 at the span start:", best)


if __name__ == "__main__":
    main()
