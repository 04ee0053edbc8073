"""Grammar constraints applied *during* denoising: every readout is a valid prefix of a complete tool call.

A left-to-right grammar matcher does not fit a canvas whose positions are accepted in any order and
re-noised. The design here (prefix commit):

* The matcher (llguidance ``LLMatcher``) holds a *committed prefix* of the canvas. Positions before the
  frontier are fixed: their logits are forced to the committed token (entropy 0, always accepted, excluded
  from the stop statistics).
* Fast-forward tokens (the grammar allows exactly one continuation: ``call:``, a tool name's tail, a required
  key, ``<|"|>``) are committed without sampling and fixed the same way.
* The frontier position's logits are masked with the matcher's token bitmask, so what is sampled there is
  grammatical and its entropy is measured over allowed tokens only.
* After each denoising step, the run of positions from the frontier that the entropy-bound rule accepted AND
  the matcher accepts, in order, is committed. Committing the longest grammatical run regardless of
  acceptance would commit noise inside strings, where any token is grammatical.
* Frontier extension: where that run stops (a position the sampler did not accept, or an accepted token the
  grammar rejects), the walk goes on with fast-forward tokens and then with the *masked* distribution of the
  same step's logits at that position: if its entropy (tempered, over the allowed tokens only) fits in what
  is left of an entropy budget equal to the sampler's bound, and its masked argmax is also the masked argmax
  of the previous step's logits there (the stability the runtime's stop rule asks of a canvas, under the
  grammar; so never on a canvas's first step, whose input is pure noise), that token is committed and the
  walk continues. Without it each ungrammatical or unaccepted position costs one more decoder forward (the
  constrained canvas needed 5.4 forwards against 4.25 unconstrained on the shipped checkpoint). An accepted
  ungrammatical token that the extension cannot replace is vetoed (re-noised). With ``extend_prose=False``
  the extension waits while the turn is prose (text before its first ``<|tool_call>``).
* Termination: when the token budget left comes within ``margin`` tokens of the shortest completion (found
  by :func:`grammar.completion.shortest_completion`: fast-forward tokens, then closers such as
  ``<|"|>``, ``}``, ``]``, ``<tool_call|>``, a small search for formats and patterns, then the
  shortest allowed token), the constraint forces that completion. Unbounded strings, numbers and arrays
  therefore always close inside ``max_new_tokens``.
* Readout: the committed prefix, then a left-to-right masked argmax over the last logits (with the same
  budget rule), then pad once the grammar has terminated. The matcher state carries into the next canvas.

Source: prefix-commit design measured in the project's prototype (``../shared/NOTES.md``); llguidance
(https://github.com/guidance-ai/llguidance) for grammars, token masks and fast-forward tokens.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
import torch

from grammar import special_tokens as st
from grammar.completion import bitmask_to_bool, shortest_completion
from model.runtime.constraint_batch import ConstraintPlan


@functools.lru_cache(maxsize=16)
def word_bases(tokenizer: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per token id: the id of its space-stripped form (``ĠBerlin`` -> ``Berlin``, else itself), whether it is
    word-like (has a letter or digit), and whether its space-stripped form is a word of 3 letters or more
    (``ĠBerlin``, ``defined``; not ``598``, ``py``, ``_``); ``([V] int64, [V] bool, [V] bool)``, cached per
    tokenizer object. Special tokens are none of these."""
    vocab = tokenizer.get_vocab()
    n = len(tokenizer)
    base = np.arange(n, dtype=np.int64)
    word = np.zeros(n, dtype=bool)
    letters = np.zeros(n, dtype=bool)
    special = set(tokenizer.all_special_ids)
    for piece, i in vocab.items():
        if i >= n or i in special:
            continue
        word[i] = any(ch.isalnum() for ch in piece)
        stripped = piece.removeprefix("Ġ")
        letters[i] = stripped.isalpha() and len(stripped) >= 3
        if piece.startswith("Ġ") and len(piece) > 1 and piece[1:] in vocab and vocab[piece[1:]] < n:
            base[i] = vocab[piece[1:]]
    return base, word, letters


class GrammarConstraint:
    """A :class:`model.runtime.CanvasConstraint` driven by an llguidance matcher (one per batch row).

    Budget guard (termination): the constraint keeps a checkpoint, the last committed length at which the
    greedy shortest completion plus ``margin`` fitted in the token budget left. It re-checks every few
    tokens (every token near the limit); when a check fails it rolls the matcher back to the checkpoint and
    forces the completion computed there, which fits by construction. Calls therefore always finish inside
    ``max_new_tokens`` whatever the checkpoint, seed or temperature.

    Args:
        matcher: a fresh ``llguidance.LLMatcher`` for the tool-call grammar.
        tokenizer: the checkpoint's tokenizer (for :func:`~grammar.completion.shortest_completion`).
        pad_token_id: written after the grammar terminates.
        margin: extra tokens kept free when deciding to close (multi-byte UTF-8 openers need >= 3).
        max_check_gap: at most this many tokens between two budget checks.
        extend: commit confident, stable masked argmaxes past the accepted run (the frontier extension of the
            module docstring); False keeps the plain accepted-and-grammatical walk.
        extend_prose: with ``extend``, extend prose too (text of the turn before its first ``<|tool_call>``);
            False extends only inside tool calls, so prose advances by accepted positions alone (with an
            accept window of 1: one token per step, left to right). A decoding rule for small checkpoints,
            whose extension commits several prose positions predicted in parallel from one forward, each
            blind to the others: copied spans then skip or repeat tokens (docs/TRAINING.md, "Experiment
            2026-12-02 (4)").
        no_repeat: never commit a word-like token right after the same word (compared on the space-stripped
            form: ``bundle`` after ``bundle``, ``Ġ466`` after ``466``): the frontier mask leaves it out and the
            commit walk stops before it. A decoding rule for small checkpoints, whose parallel positions tend to
            copy the same source token twice (the autoregressive analogue is a bigram repetition ban).
        repeat_window: with ``no_repeat``, in prose (outside tool calls) a word of 3 letters or more is also
            not committed while it is among the last ``repeat_window`` committed tokens (1: only the rule
            above). Catches ``load_bundle defined is defined...``, where a small checkpoint's prose loops back
            on a word; numbers and short pieces are left alone, since values such as ``52.52`` repeat them.
            The analogue of ``no_repeat_ngram_size=1`` limited to a window (transformers'
            ``NoRepeatNGramLogitsProcessor``).
        span_copy: a :class:`model.constraints.span_copy.SpanCopier` over the conversation's tool responses:
            in prose, when the step's token at the frontier continues the word being written into a strict prefix
            of a tool-response span, it is committed with the rest of the span in one decision (whole-span
            copying; the no-repeat rule does not apply to those tokens); when it and the last committed token
            start a fact span glued to the word before, that token is replaced by a space and the span
            (:meth:`model.constraints.span_copy.SpanCopier.restart`). ``None``: off.

    Raises:
        ValueError: if the matcher is already in an error state (bad grammar), or ``repeat_window < 1``.
    """

    def __init__(
        self,
        matcher: Any,
        tokenizer: Any,
        pad_token_id: int = st.PAD_ID,
        margin: int = 3,
        max_check_gap: int = 16,
        extend: bool = True,
        no_repeat: bool = False,
        extend_prose: bool = True,
        repeat_window: int = 1,
        span_copy: Any = None,
    ) -> None:
        if matcher.is_error():
            raise ValueError(f"grammar matcher is in an error state: {matcher.get_error()}")
        self.matcher = matcher
        self.tokenizer = tokenizer
        self.vocab_size = len(tokenizer)
        self.pad = pad_token_id
        self.margin = margin
        self.max_check_gap = max_check_gap
        self.extend = extend
        self.extend_prose = extend_prose
        self._call_start = int(tokenizer.convert_tokens_to_ids(st.TOOL_CALL_START))
        self.no_repeat = no_repeat
        self._bases = word_bases(tokenizer) if no_repeat else None
        if repeat_window < 1:
            raise ValueError(f"repeat_window must be >= 1, got {repeat_window}")
        self.repeat_window = repeat_window
        self.span_copy = span_copy
        #: Tokens committed by whole-span copies (candidate included).
        self.span_copied_tokens = 0
        self.extended_tokens = 0
        self.canvas: list[int] = []
        self.canvas_length = 0
        self.tokens_left_at_start = 0
        self.closing: list[int] = []
        #: True once the token budget forced the shortest completion (the turn was cut, not finished).
        self.budget_closed = False
        self.all_tokens: list[int] = []
        self._call_at: int | None = None  # index in all_tokens of the turn's first <|tool_call>
        self._ok_len = 0
        self._next_check = 0
        self._prev_logits: torch.Tensor | None = None

    def min_completion_tokens(self, limit: int = 4096) -> int:
        """Length in tokens of the greedy shortest completion from the current state; ``limit`` when it is
        longer or when none was found (a grammar with no finite completion from here, e.g. a required property
        whose schema recurses into itself)."""
        toks = shortest_completion(self.matcher, self.tokenizer, limit)
        if len(toks) < limit:
            probe = self.matcher.deep_copy()
            if probe.try_consume_tokens(toks) != len(toks) or not (
                probe.is_accepting() or probe.is_stopped()
            ):
                return limit
        return len(toks)

    # -- state ------------------------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        """True once the grammar has reached its stop state (the call or answer is complete)."""
        return bool(self.matcher.is_stopped() or self.matcher.is_accepting())

    def _left(self) -> int:
        return self.tokens_left_at_start - len(self.canvas)

    def _consume(self, toks: list[int]) -> int:
        n = int(self.matcher.try_consume_tokens(toks)) if toks else 0
        self.canvas.extend(toks[:n])
        if self._call_at is None and self._call_start in toks[:n]:
            self._call_at = len(self.all_tokens) + toks[:n].index(self._call_start)
        self.all_tokens.extend(toks[:n])
        return n

    def _rollback(self, n: int) -> None:
        if n > 0:
            self.matcher.rollback(n)
            del self.canvas[-n:]
            del self.all_tokens[-n:]
            if self._call_at is not None and self._call_at >= len(self.all_tokens):
                self._call_at = None
            self._ok_len = min(self._ok_len, len(self.all_tokens))  # the budget checkpoint cannot lie ahead

    def _room(self) -> int:
        return self.canvas_length - len(self.canvas)

    def _budget_check(self, force: bool = False, rollback: bool = True) -> int:
        """Check that a completion still fits; on failure roll back to the checkpoint and close from there.

        Args:
            force: check even if the next scheduled check is not due.
            rollback: allowed to roll back (not at a canvas start: earlier canvases are already emitted).

        Returns:
            The number of tokens rolled back (0 when the budget is fine or no check was due).
        """
        n = len(self.all_tokens)
        if self.done or self.closing or (not force and n < self._next_check):
            return 0
        left = self._left()
        comp = shortest_completion(self.matcher, self.tokenizer, left + 1)
        if len(comp) + self.margin <= left:
            self._ok_len = n
            slack = left - len(comp) - self.margin
            self._next_check = n + max(1, min(self.max_check_gap, slack // 4))
            return 0
        back = min(n - self._ok_len, len(self.canvas)) if rollback else 0
        self._rollback(back)
        self.closing = (
            comp if back == 0 else shortest_completion(self.matcher, self.tokenizer, self._left() + 1)
        )
        self.budget_closed = True
        return back

    def _advance_forced(self) -> None:
        """Commit fast-forward tokens and, if the budget requires it, the closing sequence."""
        while self._room() > 0 and not self.done:
            if self.closing:
                k = self._consume(self.closing[: self._room()])
                self.closing = self.closing[k:]
                if k == 0:  # pragma: no cover - the completion came from the same matcher state
                    self.closing = []
                    break
                continue
            ff = self.matcher.compute_ff_tokens()
            if ff:
                if self._consume(ff[: self._room()]) == 0:
                    break
                self._budget_check()
                continue
            self._budget_check()
            if not self.closing:
                break

    def _banned(self) -> list[int]:
        """The space-stripped ids the no-repeat rule forbids next: the last committed word, and in prose the
        words (3 letters or more) among the last ``repeat_window`` committed tokens; [] when the rule is off."""
        if self._bases is None or not self.all_tokens:
            return []
        base, word, letters = self._bases
        last = self.all_tokens[-1]
        out = [int(base[last])] if 0 <= last < len(word) and word[last] else []
        if self.repeat_window > 1 and not self.in_call:
            out += [
                int(base[t])
                for t in self.all_tokens[-self.repeat_window : -1]
                if 0 <= t < len(letters) and letters[t]
            ]
        return out

    def _repeats(self, tok: int) -> bool:
        banned = self._banned()
        return (
            bool(banned)
            and self._bases is not None
            and 0 <= tok < len(self._bases[0])
            and int(self._bases[0][tok]) in banned
        )

    @property
    def in_call(self) -> bool:
        """True once the turn has opened a tool call (a ``<|tool_call>`` among its committed tokens): the
        runtime's per-mode accept window (:attr:`model.runtime.settings.DenoiseSettings.call_accept_window`)."""
        return self._call_at is not None

    def _in_prose(self) -> bool:
        """True when the extension must wait: ``extend_prose`` is off and the turn so far is prose (it has
        committed tokens and no ``<|tool_call>`` among them)."""
        return not self.extend_prose and bool(self.all_tokens) and not self.in_call

    def _frontier_mask(self) -> np.ndarray:
        allowed = bitmask_to_bool(self.matcher.compute_bitmask(), self.vocab_size)
        if self.span_copy is not None and not self.in_call:
            inside = self.span_copy.allowed(self.all_tokens, allowed.size, restart=bool(self.canvas))
            if inside is not None and (allowed & inside).any():  # never empty the mask
                allowed = allowed & inside
        banned = self._banned()
        if banned and self._bases is not None:
            keep = allowed & ~np.isin(self._bases[0][: allowed.size], banned)
            if keep.any():  # never empty the mask: the grammar may demand the repeat
                allowed = keep
        return allowed

    def _masked_choice(self, row: torch.Tensor, prev_row: torch.Tensor) -> tuple[int, float, int]:
        """Masked argmax and masked entropy (nats) of one position's tempered logits ``row`` ``[V]``, and the
        masked argmax of the previous step's ``prev_row`` ``[V]`` (same mask: the matcher's current state)."""
        allowed = torch.from_numpy(self._frontier_mask()).to(row.device)
        v = min(allowed.numel(), row.numel())

        def mask(r: torch.Tensor) -> torch.Tensor:
            out = torch.full((r.numel(),), -math.inf, dtype=torch.float32, device=r.device)
            out[:v] = torch.where(allowed[:v], r[:v].float(), out[:v])
            return out

        masked = mask(row)
        logp = torch.log_softmax(masked, dim=-1)
        p = logp.exp()
        h = float(-(p * torch.where(p > 0, logp, torch.zeros_like(logp))).sum())
        return int(masked.argmax()), h, int(mask(prev_row).argmax())

    @property
    def committed(self) -> list[int]:
        """Tokens committed in the current canvas so far (positions ``0..len-1``), fast-forward ones included."""
        return list(self.canvas)

    # -- CanvasConstraint ----------------------------------------------------------------------------------
    def start_canvas(self, canvas_length: int, tokens_left: int) -> None:
        """Begin a canvas of ``canvas_length`` positions with ``tokens_left`` tokens of budget (this one included)."""
        self.canvas = []
        self._prev_logits = None
        self.canvas_length = canvas_length
        self.tokens_left_at_start = tokens_left
        # The checkpoint must lie inside this canvas (rollback cannot cross it); the previous canvas ended
        # on a verified state (see readout), so this passes unless the budget was too small to start with.
        self._budget_check(force=True, rollback=False)
        self._advance_forced()

    def plan(self) -> ConstraintPlan:
        """Fixed prefix (committed + fast-forward + closing + pad after the end) and the frontier bitmask."""
        self._advance_forced()
        if self.done:
            return ConstraintPlan(fixed=self.canvas + [self.pad] * self._room())
        if self._room() <= 0:
            return ConstraintPlan(fixed=list(self.canvas))
        return ConstraintPlan(fixed=list(self.canvas), mask=torch.from_numpy(self._frontier_mask()))

    def commit(
        self,
        tokens: list[int],
        accepted: list[bool],
        logits: torch.Tensor | None = None,
        entropy_bound: float = 0.0,
    ) -> list[int]:
        """Commit accepted, grammatical positions from the frontier, extended by fast-forward tokens and by
        confident masked argmaxes (see the module docstring); veto an accepted ungrammatical token.

        Args:
            tokens: this step's sampled canvas ``[C]`` (token ids).
            accepted: the entropy-bound acceptance ``[C]``.
            logits: this step's tempered logits ``[C, V]`` (any float dtype, any device); ``None`` disables the
                masked extension. A reference is kept until the next step (stability test); not modified.
            entropy_bound: entropy budget (nats) the masked extension may spend in this step.

        Returns:
            Canvas positions to re-noise: an ungrammatical accepted token, or tokens rolled back by the
            budget guard.
        """
        prev, self._prev_logits = self._prev_logits, logits
        budget = float(entropy_bound) if self.extend and logits is not None and prev is not None else 0.0
        frontier = len(self.canvas)
        while (i := len(self.canvas)) < self.canvas_length and not self.done and not self.closing:
            if i == frontier and (k := self._span_copy(i, tokens, accepted, logits)):
                self.span_copied_tokens += k
            elif accepted[i] and not self._repeats(int(tokens[i])) and self._consume([int(tokens[i])]) == 1:
                pass
            elif ff := self.matcher.compute_ff_tokens():
                # pragma: no cover - ff tokens come from the matcher, so they are always consumed
                if self._consume(ff[: self._room()]) == 0:
                    break
            elif budget > 0 and logits is not None and prev is not None and not self._in_prose():
                tok, h, prev_tok = self._masked_choice(logits[i], prev[i])
                if h > budget or prev_tok != tok or self._consume([tok]) != 1:
                    return [i] if accepted[i] else []
                budget -= h
                self.extended_tokens += 1
            else:
                return [i] if accepted[i] else []
            back = self._budget_check()
            if back:
                return list(range(len(self.canvas), len(self.canvas) + back))
        return []

    def _span_copy(self, i: int, tokens: list[int], accepted: list[bool], logits: torch.Tensor | None) -> int:
        """Whole-span copy at the frontier ``i`` (``span_copy``): the token accepted there, or else the argmax of
        the step's logits ``[C, V]`` there, as :meth:`_copy_from` copies it. Returns the number of tokens
        committed (0: the rule is off, the turn is in a call, or no copy starts)."""
        if self.span_copy is None or self.in_call:
            return 0
        cand = int(tokens[i]) if accepted[i] else (int(logits[i].argmax()) if logits is not None else -1)
        return self._copy_from(cand) if cand >= 0 else 0

    def _copy_from(self, cand: int) -> int:
        """Commit the frontier token ``cand`` with the rest of the tool-response span it continues (at most the
        canvas's room; :meth:`SpanCopier.propose`); or, when it and the last committed token start a fact span
        glued to the word before, that token replaced by a space and the span (:meth:`SpanCopier.restart`; only
        inside this canvas, and only when the grammar takes the whole run). Returns the tokens committed (0:
        no copy starts; nothing changed)."""
        assert self.span_copy is not None
        run: list[int] = self.span_copy.propose(self.all_tokens, cand)
        if run:
            return self._consume(run[: self._room()])
        run = self.span_copy.restart(self.all_tokens, cand)[: self._room() + 1]
        if not run or not self.canvas:
            return 0
        probe = self.matcher.deep_copy()
        probe.rollback(1)
        if probe.try_consume_tokens(run) != len(run):
            return 0
        self._rollback(1)
        return self._consume(run)

    def readout(self, logits: torch.Tensor) -> list[int]:
        """Committed prefix, then masked argmax left to right over ``logits`` ``[C, V]``, then pad.

        In prose with ``span_copy`` the mask is the frontier's (spans kept whole) and a token that continues a
        span brings the rest of it, or restarts a glued one (:meth:`_copy_from`), as in :meth:`commit`. The canvas always ends
        on a state verified by the budget guard, because the next canvas cannot roll back into this one.
        """
        scores = logits.float().cpu().numpy()
        best = scores.argmax(axis=1)
        while True:
            while self._room() > 0:
                self._advance_forced()
                if self.done or self._room() <= 0:
                    break
                pos = len(self.canvas)
                tok = int(best[pos])
                spans = self.span_copy is not None and not self.in_call
                allowed = self._frontier_mask() if spans else None
                if allowed is not None:
                    ok = tok < self.vocab_size and bool(allowed[tok])
                else:
                    raw = self.matcher.compute_bitmask()
                    ok = (
                        tok < self.vocab_size
                        and bool((raw[tok >> 3] >> (tok & 7)) & 1)
                        and not self._repeats(tok)
                    )
                if not ok:
                    if allowed is None:
                        allowed = self._frontier_mask()
                    row = np.where(
                        allowed, scores[pos, : self.vocab_size], -math.inf
                    )  # tokenizer <= model vocab
                    tok = int(np.argmax(row))
                    if not allowed[tok]:  # pragma: no cover - a live matcher allows >= 1 token
                        raise RuntimeError("grammar allows no token at the readout frontier")
                if spans and (k := self._copy_from(tok)):
                    self.span_copied_tokens += k
                elif self._consume([tok]) != 1:  # pragma: no cover
                    raise RuntimeError(f"matcher rejected an allowed token {tok}: {self.matcher.get_error()}")
                self._budget_check()
            if self.done or self.closing or self._budget_check(force=True) == 0:
                break
        return self.canvas + [self.pad] * self._room()
