"""Grammar constraints applied *during* denoising: every readout is a valid prefix of a complete tool call.

A left-to-right matcher does not fit a canvas accepted in any order and re-noised, so the constraint commits a
prefix (llguidance ``LLMatcher``):

* Positions before the frontier are fixed to the committed token (entropy 0, always accepted, out of the stop
  statistics); fast-forward tokens (the grammar allows one continuation) are committed without sampling.
* The frontier's logits are masked with the matcher's bitmask, so its sample is grammatical.
* After each step the run from the frontier that the entropy bound accepted AND the matcher accepts is committed
  (the longest grammatical run would commit noise inside strings, where any token is grammatical).
* Frontier extension: where that run stops, the walk goes on with the *masked* distribution at that position if
  its entropy fits what is left of a budget equal to the sampler's bound and its masked argmax equals the previous
  step's (never on a canvas's first step); each stop otherwise costs a decoder forward (5.4 against 4.25 forwards
  per canvas on the shipped checkpoint). An accepted ungrammatical token it cannot replace is re-noised.
* Termination: when the budget left comes within ``margin`` of the shortest completion
  (:func:`grammar.completion.shortest_completion`), that completion is forced, so values always close inside
  ``max_new_tokens``.
* Readout: the committed prefix, then a masked argmax left to right, then pad; the matcher carries over.

Sources: the prototype's measurements (``../shared/NOTES.md``); llguidance for grammars, masks and fast-forward."""

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
def word_bases(tokenizer: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per token id ``([V] int64, [V] bool, [V] bool, [V] bool)``: its space-stripped form's id, whether it is
    word-like (a letter or digit), whether its stripped form is a word of 3+ letters, whether it is spaces only (a
    space-isolating tokenizer's ``Ġ``, which the repeat rule looks through); special tokens none of these. Cached
    per tokenizer."""
    vocab = tokenizer.get_vocab()
    n = len(tokenizer)
    base = np.arange(n, dtype=np.int64)
    word = np.zeros(n, dtype=bool)
    letters = np.zeros(n, dtype=bool)
    spaces = np.zeros(n, dtype=bool)
    special = set(tokenizer.all_special_ids)
    for piece, i in vocab.items():
        if i >= n or i in special:
            continue
        word[i] = any(ch.isalnum() for ch in piece)
        spaces[i] = bool(piece) and set(piece) == {"Ġ"}
        stripped = piece.removeprefix("Ġ")
        letters[i] = stripped.isalpha() and len(stripped) >= 3
        if piece.startswith("Ġ") and len(piece) > 1 and piece[1:] in vocab and vocab[piece[1:]] < n:
            base[i] = vocab[piece[1:]]
    return base, word, letters, spaces


class GrammarConstraint:
    """A :class:`model.runtime.CanvasConstraint` driven by an llguidance matcher (one per row).

    Budget guard: the constraint keeps a checkpoint, the last committed length at which the shortest completion plus
    ``margin`` fitted in the budget, re-checked every few tokens; on a failed check it rolls the matcher back there
    and forces the completion, so calls always finish inside ``max_new_tokens``.

    Args:
        matcher: a fresh ``llguidance.LLMatcher`` for the tool-call grammar.
        tokenizer: the checkpoint's tokenizer.
        pad_token_id: written after the grammar terminates.
        margin: extra tokens kept free when deciding to close (multi-byte UTF-8 openers need >= 3).
        max_check_gap: at most this many tokens between two budget checks.
        extend: the frontier extension (module docstring); False keeps the accepted-and-grammatical walk.
        extend_prose: with ``extend``, extend prose too (before the turn's first ``<|tool_call>``); False for small
            checkpoints, whose parallel prose predictions skip or repeat tokens (docs/TRAINING.md).
        no_repeat: never commit a word-like token right after the same word (on the space-stripped form; a token of
            spaces alone between them does not count), nor spaces right after spaces: a bigram-repetition ban for
            small checkpoints.
        repeat_window: with ``no_repeat``, in prose a word of 3+ letters is also not committed while among the last
            ``repeat_window`` tokens (``no_repeat_ngram_size=1`` within a window; numbers are left alone).
        span_copy: a :class:`model.constraints.span_copy.SpanCopier` over the tool responses: in prose a token
            continuing a span is committed with the rest of it, or a glued span restarted; ``None``: off.
        answer_vote: for a grammar whose answer is a JSON value beside calls (OpenAI ``response_format`` under
            ``tool_choice="auto"``): at the turn's first position the tokens the grammar forbids (the prose the model
            would write) count for the JSON answer's openers (:class:`model.runtime.ConstraintPlan` ``vote``), so the
            turn calls a tool when the model would without ``response_format``.

    Raises:
        ValueError: the matcher is in an error state (bad grammar), or ``repeat_window < 1``."""

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
        answer_vote: bool = False,
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
        #: The turn's openers other than the answer's: a call, thinking (``answer_vote``).
        self._not_answer = [self._call_start, int(tokenizer.convert_tokens_to_ids(st.CHANNEL_START))]
        self.answer_vote = answer_vote
        self.no_repeat = no_repeat
        self._bases = word_bases(tokenizer) if no_repeat else None
        #: The space-stripped ids of the tokens of spaces alone (banned after one of them).
        self._space_bases = [] if self._bases is None else np.unique(self._bases[0][self._bases[3]]).tolist()
        if repeat_window < 1:
            raise ValueError(f"repeat_window must be >= 1, got {repeat_window}")
        self.repeat_window = repeat_window
        self.span_copy = span_copy
        #: Tokens committed by whole-span copies (candidate included).
        self.span_copied_tokens = 0
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
        """Tokens of the greedy shortest completion from here; ``limit`` when longer or when none was found."""
        toks = shortest_completion(self.matcher, self.tokenizer, limit)
        if len(toks) < limit:
            probe = self.matcher.deep_copy()
            if probe.try_consume_tokens(toks) != len(toks) or not (
                probe.is_accepting() or probe.is_stopped()
            ):
                return limit
        return len(toks)

    @property
    def done(self) -> bool:
        """True once the grammar has reached its stop state."""
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
        """Roll back to the checkpoint and close when a completion no longer fits; the tokens rolled back."""
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
        """Commit fast-forward tokens and, if the budget requires it, the closing."""
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
        """The space-stripped ids the no-repeat rule forbids next ([] when it is off)."""
        if self._bases is None or not self.all_tokens:
            return []
        base, word, letters, spaces = self._bases
        is_space = [
            0 <= t < len(spaces) and bool(spaces[t]) for t in self.all_tokens[-2 * self.repeat_window :]
        ]
        # spaces after spaces: no tokenizer that isolates runs of spaces writes them
        out = list(self._space_bases) if is_space[-1] else []
        # the last tokens that are not spaces alone (``is Ġ is`` repeats ``is``)
        recent = [t for t, sp in zip(self.all_tokens[-len(is_space) :], is_space, strict=True) if not sp]
        recent = recent[-self.repeat_window :]
        if not recent:
            return out
        last = recent[-1]
        out += [int(base[last])] if 0 <= last < len(word) and word[last] else []
        if self.repeat_window > 1 and not self.in_call:
            out += [int(base[t]) for t in recent[:-1] if 0 <= t < len(letters) and letters[t]]
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
        """True once the turn has opened a tool call (for the per-mode accept window)."""
        return self._call_at is not None

    def _in_prose(self) -> bool:
        """True when the extension must wait (``extend_prose`` off and the turn is prose)."""
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
        """Masked argmax and entropy of ``row``, and the masked argmax of ``prev_row``."""
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
        """Tokens committed in the current canvas so far."""
        return list(self.canvas)

    def start_canvas(self, canvas_length: int, tokens_left: int) -> None:
        """Begin a canvas of ``canvas_length`` positions with ``tokens_left`` tokens of budget (this one included)."""
        self.canvas = []
        self._prev_logits = None
        self.canvas_length = canvas_length
        self.tokens_left_at_start = tokens_left
        # the checkpoint must lie inside this canvas (rollback cannot cross it)
        self._budget_check(force=True, rollback=False)
        self._advance_forced()

    def plan(self) -> ConstraintPlan:
        """Fixed prefix (committed, fast-forward, closing, pad after the end) and frontier mask."""
        self._advance_forced()
        if self.done:
            return ConstraintPlan(fixed=self.canvas + [self.pad] * self._room())
        if self._room() <= 0:
            return ConstraintPlan(fixed=list(self.canvas))
        allowed = self._frontier_mask()
        vote = None
        if self.answer_vote and not self.all_tokens:  # the turn's first position
            vote = allowed.copy()
            vote[[t for t in self._not_answer if t < vote.size]] = False
        return ConstraintPlan(
            fixed=list(self.canvas),
            mask=torch.from_numpy(allowed),
            vote=None if vote is None else torch.from_numpy(vote),
        )

    def commit(
        self,
        tokens: list[int],
        accepted: list[bool],
        logits: torch.Tensor | None = None,
        entropy_bound: float = 0.0,
    ) -> list[int]:
        """Commit accepted, grammatical positions from the frontier, extended by fast-forward tokens and confident
        masked argmaxes; veto an accepted ungrammatical token.

        Args:
            tokens: this step's sampled canvas ``[C]``.
            accepted: the entropy-bound acceptance ``[C]``.
            logits: this step's tempered logits ``[C, V]`` (kept, unmodified, until the next step); ``None`` disables
                the extension.
            entropy_bound: entropy budget (nats) the extension may spend in this step.

        Returns:
            Canvas positions to re-noise (a vetoed token, or tokens the budget guard rolled back)."""
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
            else:
                return [i] if accepted[i] else []
            back = self._budget_check()
            if back:
                return list(range(len(self.canvas), len(self.canvas) + back))
        return []

    def _span_copy(self, i: int, tokens: list[int], accepted: list[bool], logits: torch.Tensor | None) -> int:
        """Whole-span copy at frontier ``i`` (accepted token, else argmax); tokens committed."""
        if self.span_copy is None or self.in_call:
            return 0
        cand = int(tokens[i]) if accepted[i] else (int(logits[i].argmax()) if logits is not None else -1)
        return self._copy_from(cand) if cand >= 0 else 0

    def _copy_from(self, cand: int) -> int:
        """Commit ``cand`` with its span's rest, or restart a glued span; tokens committed."""
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
        """Committed prefix, then masked argmax left to right over ``logits`` ``[C, V]`` (spans copied whole in
        prose, as in :meth:`commit`), then pad; the canvas ends on a state the budget guard verified, since the next
        canvas cannot roll back into this one."""
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
