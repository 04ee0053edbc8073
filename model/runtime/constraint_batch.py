"""The constraint hook of the denoising loop, and the batch that applies every row's constraint each step.

A :class:`CanvasConstraint` (one per row; :class:`model.constraints.denoise.GrammarConstraint` is the project's)
says before each step which positions are fixed and which tokens the frontier may take (:class:`ConstraintPlan`),
sees after it what was accepted and may veto positions, and reads the canvas out at its end.
:class:`ConstraintBatch` runs the rows' constraints together: one allowed-token tensor for every frontier, one write
of the fixed positions, one commit pass per step."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import torch

from dg_kernels.sampling import unpack_bitmask


@dataclass
class ConstraintPlan:
    """What a constraint imposes on its row for the next denoising step.

    Attributes:
        fixed: tokens for positions ``0..len(fixed)-1``: the committed prefix, fast-forward tokens, then pad once the
            grammar has terminated; they get entropy 0, are always accepted and stay out of the stop statistics.
        mask: optional allowed-token mask for the frontier ``len(fixed)``: bool ``[V]``, or packed int32
            ``[ceil(V/32)]`` in llguidance's layout. It must allow at least one token.
        vote: optional bool ``[V]``, allowed tokens that take the probability of the tokens ``mask`` forbids:
            at the sampler's temperature ``T`` their logits rise by ``T x (logaddexp(lse(vote / T), lse(forbidden /
            T)) - lse(vote / T))``, so once tempered they weigh what they and the forbidden tokens weighed (a JSON
            answer's openers take the prose the model would write)."""

    fixed: list[int]
    mask: torch.Tensor | None = None
    vote: torch.Tensor | None = None


@runtime_checkable
class CanvasConstraint(Protocol):
    """Per-row constraint hook of :func:`model.runtime.generate` (state carries across canvases). Per canvas:
    ``start_canvas``, then per step ``plan`` (before sampling) and ``commit`` (after acceptance), then ``readout``."""

    def start_canvas(self, canvas_length: int, tokens_left: int) -> None:
        """A new canvas begins; ``tokens_left`` is the budget left, this canvas included."""

    def plan(self) -> ConstraintPlan:
        """Fixed tokens and frontier mask for the next step."""

    def commit(
        self,
        tokens: list[int],
        accepted: list[bool],
        logits: torch.Tensor | None = None,
        entropy_bound: float = 0.0,
    ) -> list[int]:
        """See this step's tokens ``[C]``, acceptance ``[C]`` and tempered logits ``[C, V]``; return positions to
        veto (re-noise)."""

    def readout(self, logits: torch.Tensor) -> list[int]:
        """The canvas's final ``canvas_length`` tokens given the last logits ``[C, V]``."""


@runtime_checkable
class TerminatingConstraint(CanvasConstraint, Protocol):
    """A :class:`CanvasConstraint` with ``done`` (the grammar terminated: the row's canvas stops denoising) and
    ``committed`` (tokens of positions ``0..k-1`` written into the next step's canvas)."""

    done: bool
    committed: list[int] | None


@runtime_checkable
class CallAwareConstraint(CanvasConstraint, Protocol):
    """A :class:`CanvasConstraint` whose ``in_call`` says its turn has opened a tool call (for
    :attr:`model.runtime.settings.DenoiseSettings.call_accept_window`)."""

    in_call: bool


class GuardedConstraint:
    """A row's constraint with its faults kept to the row: the first exception (or a mask allowing no token) is
    recorded in :attr:`error` and the constraint steps aside (no fixed tokens, argmax readout)."""

    def __init__(self, inner: CanvasConstraint) -> None:
        self.inner = inner
        self.error: BaseException | None = None

    def _run(self, fn: Callable[[], Any], fallback: Any) -> Any:
        if self.error is not None:
            return fallback
        try:
            return fn()
        except Exception as exc:
            self.error = exc
            return fallback

    def start_canvas(self, canvas_length: int, tokens_left: int) -> None:
        """The inner ``start_canvas`` (faults recorded, as for every member)."""
        self._run(lambda: self.inner.start_canvas(canvas_length, tokens_left), None)

    def plan(self) -> ConstraintPlan:
        """The inner plan; no fixed tokens and no mask once faulted."""
        plan = self._run(self.inner.plan, None)
        if plan is not None and plan.mask is not None and not bool(plan.mask.any()):
            self.error = ValueError("constraint mask allows no token")
            plan = None
        return plan if plan is not None else ConstraintPlan(fixed=[])

    def commit(self, *args: Any, **kwargs: Any) -> list[int]:
        """The inner commit's vetoes; none once faulted."""
        return self._run(lambda: self.inner.commit(*args, **kwargs), [])  # type: ignore[no-any-return]

    def readout(self, logits: torch.Tensor) -> list[int]:
        """The inner readout; the argmax of ``logits`` ``[C, V]`` once faulted."""
        return self._run(lambda: self.inner.readout(logits), None) or logits.argmax(-1).tolist()  # type: ignore[no-any-return]

    @property
    def committed(self) -> list[int] | None:
        return None if self.error is not None else getattr(self.inner, "committed", None)

    @property
    def done(self) -> bool:
        return self.error is None and bool(getattr(self.inner, "done", False))

    @property
    def in_call(self) -> bool:
        return self.error is None and bool(getattr(self.inner, "in_call", False))


class ConstraintBatch:
    """The rows' constraints of one generation: one constraint or ``None`` per row."""

    def __init__(self, constraints: Sequence[CanvasConstraint | None]) -> None:
        self.rows = list(constraints)
        self.any = any(c is not None for c in self.rows)

    def _live(self, active: Sequence[bool]) -> list[tuple[int, CanvasConstraint]]:
        return [(r, c) for r, c in enumerate(self.rows) if c is not None and active[r]]

    def start_canvas(self, canvas_length: int, tokens_left: int, active: Sequence[bool]) -> None:
        """Tell each active row's constraint a canvas begins."""
        for _, c in self._live(active):
            c.start_canvas(canvas_length, tokens_left)

    def in_call(self) -> list[bool]:
        """Per row, whether its constraint reports a tool call opened (:class:`CallAwareConstraint`; False
        without one)."""
        return [bool(getattr(c, "in_call", False)) for c in self.rows]

    def apply(
        self, logits: torch.Tensor, active: Sequence[bool], temperature: float | torch.Tensor = 1.0
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Apply each active row's :class:`ConstraintPlan` to a step's ``logits`` ``[B, C, V]`` in place: fixed
        positions ``-inf`` but ``0`` at their token, frontiers masked. ``active``: per row, whether its constraint
        is consulted; ``temperature`` (one, or ``[B]``): the sampler's, at which a vote moves the mass. Returns
        ``(fixed_mask, fixed_tok)``, ``[B, C]`` bool and int64.

        Raises:
            ValueError: a frontier mask allows no token (names the row and position)."""
        batch, canvas_len, vocab = logits.shape
        device = logits.device
        fixed_mask = torch.zeros((batch, canvas_len), dtype=torch.bool, device=device)
        fixed_tok = torch.zeros((batch, canvas_len), dtype=torch.long, device=device)
        frontier: list[tuple[int, int, torch.Tensor, torch.Tensor | None]] = []
        for r, c in self._live(active):
            plan = c.plan()
            k = min(len(plan.fixed), canvas_len)
            if k:
                fixed_mask[r, :k] = True
                fixed_tok[r, :k] = torch.tensor(plan.fixed[:k], dtype=torch.long, device=device)
            if plan.mask is not None and k < canvas_len:
                frontier.append((r, k, plan.mask, plan.vote))
        if frontier:
            allowed = _allowed_tokens([m for _, _, m, _ in frontier], vocab, device)
            ok = allowed.any(dim=-1)
            if not bool(ok.all()):
                r, k, _, _ = frontier[int((~ok).nonzero()[0])]
                raise ValueError(f"row {r}: constraint mask at canvas position {k} allows no token")
            forbidden = ~allowed
            # in place on each row's view (no gather and scatter)
            for j, (r, k, _, vote) in enumerate(frontier):
                if vote is not None:
                    mine = _allowed_tokens([vote], vocab, device)[0] & allowed[j]
                    t = float(temperature[r]) if isinstance(temperature, torch.Tensor) else float(temperature)
                    _take_vote(logits[r, k], mine, forbidden[j], t)
                logits[r, k].masked_fill_(forbidden[j], float("-inf"))
        if bool(fixed_mask.any()):
            # in place: -inf everywhere, 0 at the fixed token (entropy 0)
            flat = logits.view(-1, vocab)
            idx = fixed_mask.view(-1).nonzero().squeeze(1)
            flat.index_fill_(0, idx, float("-inf"))
            flat[idx, fixed_tok.view(-1)[idx]] = 0.0
        return fixed_mask, fixed_tok

    def commit(
        self,
        active: Sequence[bool],
        denoised: torch.Tensor,
        accepted: torch.Tensor,
        fixed_mask: torch.Tensor,
        fixed_tok: torch.Tensor,
        processed: torch.Tensor,
        entropy_bound: float,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Hand a step's accepted tokens to each active row's constraint.

        Args:
            active: as :meth:`apply`.
            denoised: ``[B, C]`` int64 sampled tokens; accepted: ``[B, C]`` bool.
            fixed_mask, fixed_tok: from :meth:`apply`.
            processed: ``[B, C, V]`` tempered, constrained logits.
            entropy_bound: the sampler's entropy bound (nats).

        Returns:
            ``(denoised, accepted, done)``: tokens with each committed prefix written in, acceptance with vetoes removed,
            and ``[B]`` bool rows whose grammar terminated."""
        device = denoised.device
        denoised = torch.where(fixed_mask, fixed_tok, denoised)
        accepted = accepted | fixed_mask
        done = torch.zeros(denoised.shape[0], dtype=torch.bool, device=device)
        tok_rows = denoised.tolist()
        acc_rows = accepted.tolist()
        canvas_len = denoised.shape[1]
        for r, c in self._live(active):
            veto = c.commit(tok_rows[r], acc_rows[r], logits=processed[r], entropy_bound=entropy_bound)
            # a TerminatingConstraint's committed tokens go into the next step's canvas (the extension may differ)
            if prefix := getattr(c, "committed", None):
                k = min(len(prefix), canvas_len)
                denoised[r, :k] = torch.tensor(prefix[:k], dtype=torch.long, device=device)
                accepted[r, :k] = True
            if getattr(c, "done", False):
                done[r] = True
            if veto:
                accepted[r, torch.tensor(veto, dtype=torch.long, device=device)] = False
        return denoised, accepted, done

    def readout(
        self, argmax: torch.Tensor, last_logits: torch.Tensor, active: Sequence[bool]
    ) -> torch.Tensor:
        """``[B, C]`` int64 final tokens: ``argmax``, or for constrained rows their readout over ``last_logits``
        ``[B, C, V]``. Raises ValueError for a readout of another length than the canvas."""
        canvas_len = argmax.shape[1]
        readout = argmax.clone()
        for r, c in self._live(active):
            toks = c.readout(last_logits[r].float())
            if len(toks) != canvas_len:
                raise ValueError(
                    f"row {r}: constraint readout has {len(toks)} tokens, canvas is {canvas_len}"
                )
            readout[r] = torch.tensor(toks, dtype=torch.long, device=argmax.device)
        return readout


def _take_vote(row: torch.Tensor, vote: torch.Tensor, forbidden: torch.Tensor, temperature: float) -> None:
    """``row`` ``[V]`` logits in place: once divided by ``temperature``, the ``vote`` tokens (bool ``[V]``) take
    the mass of the ``forbidden`` ones (:class:`ConstraintPlan`); nothing when either set is empty."""
    if not bool(vote.any()) or not bool(forbidden.any()):
        return
    mine = torch.logsumexp(row[vote] / temperature, 0)
    theirs = torch.logsumexp(row[forbidden] / temperature, 0)
    if bool(torch.isfinite(mine)):
        row[vote] += temperature * (torch.logaddexp(mine, theirs) - mine)


def _allowed_tokens(masks: list[torch.Tensor], vocab: int, device: torch.device) -> torch.Tensor:
    """``[n, vocab]`` bool from the frontier masks, bool ``[k]`` or packed (a short mask allows none of the rest)."""
    rows = []
    for m in masks:
        m = m.to(device) if m.dtype == torch.bool else unpack_bitmask(m.to(device).reshape(-1), vocab)
        rows.append(torch.nn.functional.pad(m[:vocab], (0, max(vocab - m.shape[-1], 0)), value=False))
    return torch.stack(rows)
