"""Continuous batching for block diffusion: requests join and leave the batch between denoising steps.

:class:`CanvasBatcher` feeds the :class:`~model.runtime.scheduler.Scheduler` from a queue on its own thread, one
:class:`~model.runtime.scheduler.Cohort` per request, each row at its own step of its own canvas:

1. **Admit**: a new request is prefilled alone (or takes over the prefill it brought), with its own KV cache,
   copy memory and seeded generator, so its draws do not depend on the rest of the batch.
2. **Step**: :meth:`Scheduler.step` packs the rows' caches into one, each row keeping its positions and
   temperature: a row's tokens are those ``generate`` gives it alone (tests/test_batching.py).
3. **Commit**: a row whose canvas stopped is read out; it leaves on EOS or a spent budget, else its canvas is
   encoded (one encoder pass for the rows committing together).

A request's failure (its constraint or stream callback raising) fails that request only."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import torch

from model.runtime.constraint_batch import CanvasConstraint, GuardedConstraint
from model.runtime.events import GenerationStats
from model.runtime.scheduler import Cohort, Scheduler, denoiser, prefill_batch, result
from model.runtime.settings import DenoiseSettings
from model.turn.prefill import Prefill, image_inputs

#: Called after each committed canvas of a row with that canvas's tokens (EOS padding removed).
CanvasCallback = Callable[[list[int]], None]


class BatcherClosed(RuntimeError):
    """The batcher is shutting down and takes no new requests."""


class RequestCancelled(RuntimeError):
    """The request was cancelled (its client went away) before it finished."""


@dataclass
class BatchOutput:
    """What a finished request gets: ``tokens`` (EOS kept, padding removed) and its stats."""

    tokens: list[int]
    prompt_tokens: int
    stats: GenerationStats
    finish_reason: str  # "stop" (EOS) or "length" (budget spent)


@dataclass(eq=False)
class RequestHandle:
    """A submitted request and, once admitted, its cohort: ``future`` resolves to :class:`BatchOutput`;
    :meth:`cancel` frees its row."""

    prompt: list[int]
    settings: DenoiseSettings
    constraint: GuardedConstraint | None
    seed: int
    on_canvas: CanvasCallback | None
    future: Future[BatchOutput] = field(default_factory=Future)
    cancelled: threading.Event = field(default_factory=threading.Event)
    vision: Any = None  # model.heads.vision.VisionInputs of the prompt's images, consumed by the prefill
    prefill: Prefill | None = None  # the prompt's ready prefill, consumed at admission
    cohort: Cohort | None = None  # filled at admission
    started: float = 0.0

    def cancel(self) -> None:
        """Leave the batch before the next step (the future raises :class:`RequestCancelled`)."""
        self.cancelled.set()


class CanvasBatcher:
    """One denoising loop shared by concurrent requests.

    Args:
        model: a loaded ``DiffusionGemmaForBlockDiffusion`` (eval mode), optionally with a copy head.
        settings: the checkpoint's denoising settings; a request may bring its own temperatures and budget.
        max_batch: at most this many rows denoise together; more requests wait.

    :meth:`submit` and :meth:`close` may be called from any thread; the model runs on the batcher's thread only."""

    def __init__(self, model: Any, settings: DenoiseSettings, max_batch: int = 16) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be at least 1, got {max_batch}")
        self.model = model
        self.settings = settings.replace(canvas_length=int(model.config.canvas_length))
        self.max_batch = max_batch
        self.scheduler = Scheduler(model, self.settings)
        self._waiting: list[RequestHandle] = []
        self._active: list[RequestHandle] = []
        self._cv = threading.Condition()
        self._closed = False
        self._stop = False
        self.max_rows_seen = 0
        self._thread = threading.Thread(target=self._loop, name="canvas-batcher", daemon=True)
        self._thread.start()

    @property
    def load(self) -> int:
        """Requests admitted or waiting."""
        with self._cv:
            return len(self._waiting) + len(self._active)

    def submit(
        self,
        input_ids: list[int],
        settings: DenoiseSettings | None = None,
        constraint: CanvasConstraint | None = None,
        seed: int | None = None,
        on_canvas: CanvasCallback | None = None,
        vision: Any = None,
        prefill: Prefill | None = None,
    ) -> RequestHandle:
        """Queue one request; it joins the batch at the next step with a fresh canvas.

        Args:
            input_ids: prompt token ids (at least one).
            settings: this request's temperature schedule and ``max_new_tokens``; default the batcher's.
            constraint: a fresh :class:`~model.runtime.CanvasConstraint` for this row, or ``None``.
            seed: seeds the row's own generator; ``None`` draws one.
            on_canvas: called on the batcher's thread after each committed canvas.
            vision: the prompt's :class:`model.heads.vision.VisionInputs` (``input_ids`` expanded), or ``None``.
            prefill: the prompt's :class:`model.turn.prefill.Prefill` (no images), taken over at admission (single use);
                ``None``: encode at admission.

        Returns:
            :class:`RequestHandle`; its future raises what :func:`~model.runtime.generate` raises for the prompt alone.

        Raises:
            BatcherClosed: :meth:`close` was called.
            ValueError: empty ``input_ids``, a seed outside int64, or a ``prefill`` with images or over another number
                of positions."""
        if not input_ids:
            raise ValueError("input_ids is empty: the prompt needs at least one token")
        if prefill is not None:
            prefill.check_covers(len(input_ids))
            if vision is not None:
                raise ValueError("prefill= is for a prompt without images, but vision was given")
        if seed is None:
            seed = int(torch.randint(0, 2**62, (1,)).item())
        if not -(2**63) <= int(seed) < 2**63:
            raise ValueError(f"seed must fit in a signed 64-bit integer, got {seed}")
        s = settings or self.settings  # its temperature schedule and budget; the rest is the batcher's
        s = self.settings.replace(t_max=s.t_max, t_min=s.t_min, max_new_tokens=s.max_new_tokens)
        guarded = None if constraint is None else GuardedConstraint(constraint)
        row = RequestHandle(list(input_ids), s, guarded, int(seed), on_canvas, vision=vision, prefill=prefill)
        with self._cv:
            if self._closed:
                raise BatcherClosed("the batcher is shutting down")
            self._waiting.append(row)
            self._cv.notify_all()
        return row

    def close(self, wait: bool = True, timeout: float | None = None) -> None:
        """Take no new requests; with ``wait``, let admitted and queued ones finish (at most ``timeout`` s).
        Requests still unfinished then fail with :class:`BatcherClosed`."""
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        if wait:
            deadline = math.inf if timeout is None else time.monotonic() + timeout
            with self._cv:  # woken after each step; polled too (a failed admission notifies no one)
                while (self._waiting or self._active) and (left := deadline - time.monotonic()) > 0:
                    self._cv.wait(timeout=min(left, 0.5))
        with self._cv:
            self._stop = True
            self._cv.notify_all()
        self._thread.join(timeout=30)
        for row in self._waiting + self._active:
            if not row.future.done():
                row.future.set_exception(BatcherClosed("the server shut down before the request finished"))

    def _loop(self) -> None:
        while True:
            with self._cv:
                while not self._stop and not self._waiting and not self._active:
                    self._cv.wait()
                if self._stop:
                    return
                room = self.max_batch - len(self._active)
                new, self._waiting = self._waiting[:room], self._waiting[room:]
            for row in new:
                self._admit(row)
            with self._cv:
                self._active = [r for r in self._active if not self._drop_if_cancelled(r)]
                rows = list(self._active)
            if not rows:
                continue
            try:
                self._step(rows)
            except Exception as exc:  # a fault of the batch as a whole: fail its rows, keep serving
                for r in rows:
                    self._fail(r, exc)
            with self._cv:
                self._active = [r for r in self._active if not r.future.done()]
                self._cv.notify_all()

    def _fail(self, row: RequestHandle, exc: BaseException) -> None:
        if not row.future.done():
            row.future.set_exception(exc)

    def _drop_if_cancelled(self, row: RequestHandle) -> bool:
        if row.future.done():
            return True
        if row.cancelled.is_set():
            row.future.set_exception(RequestCancelled("request cancelled"))
            return True
        return False

    @torch.no_grad()
    def _admit(self, row: RequestHandle) -> None:
        """Prefill one request alone, as its own cohort; on success it joins ``_active``."""
        if self._drop_if_cancelled(row):
            return
        row.started = time.perf_counter()
        try:
            ids = torch.tensor([row.prompt], dtype=torch.long, device=self.model.device)
            den = denoiser(
                self.model, ids, row.settings, constraints=[row.constraint], seed=row.seed, sampler="torch"
            )
            v, row.vision, images = row.vision, None, {}  # the images live on in the cache
            if v is not None:
                images = image_inputs(self.model, ids, mm_token_type_ids=None, **v.generate_kwargs())
            ready, row.prefill = row.prefill, None  # single use: the cohort's cache continues from it
            row.cohort = Cohort(den, prefill_batch(den, ids, None, images, ready))
        except Exception as exc:
            self._fail(row, exc)
            return
        with self._cv:
            self._active.append(row)
            self.max_rows_seen = max(self.max_rows_seen, len(self._active))

    def _step(self, rows: list[RequestHandle]) -> None:
        """One scheduler step for every row; rows whose canvas is done commit, then leave or encode."""
        ended = self.scheduler.step([r.cohort for r in rows])  # type: ignore[misc]
        going_on = [r.cohort for r in rows if r.cohort in ended and self._commit(r)]
        if going_on:
            self.scheduler.encode(going_on)  # type: ignore[arg-type]

    def _commit(self, r: RequestHandle) -> bool:
        """Commit the row's canvas and stream it; True when the row goes on."""
        cohort, guard, eos = r.cohort, r.constraint, self.settings.eos_token_ids
        assert cohort is not None
        try:
            leaves = self.scheduler.commit(cohort)
            if guard is not None and guard.error is not None:  # its constraint failed: only it leaves
                raise guard.error
            toks = cohort.batch.sequences[0, -self.settings.canvas_length :].tolist()
            stop = bool(cohort.batch.done[0])
            kept = toks[: next(i for i, t in enumerate(toks) if t in eos) + 1] if stop else toks
            if r.on_canvas is not None:
                r.on_canvas(kept)
        except Exception as exc:  # a broken constraint or stream fails its own request only
            self._fail(r, exc)
            return False
        if leaves:
            out = result(cohort.den, cohort.batch, r.started)
            tokens = [t for t in out.new_tokens[0].tolist() if t != self.settings.pad_token_id]
            if not r.future.done():
                r.future.set_result(
                    BatchOutput(tokens, len(r.prompt), out.stats, "stop" if stop else "length")
                )
        return not leaves and not r.cancelled.is_set()
