"""Continuous batching for block diffusion: requests join and leave the batch between denoising steps.

:func:`model.runtime.generate` denoises a fixed batch from prefill to the last canvas, every row waiting for the
slowest. A server gets requests at any time; :class:`CanvasBatcher` runs one loop (a thread) in which every row
is at its own denoising step of its own canvas:

1. **Admit.** A new request is prefilled alone (encoder, its own KV cache and copy-head memory) and joins at the
   next step with a fresh canvas (its canvas boundary). Cancelled requests leave here.
2. **Pack.** The rows' KV caches are left-padded to a common length and stacked into one
   ``transformers.DynamicCache`` (repacked only when a row joins, leaves or commits a canvas); each row keeps its
   *own* positions (decoder position ids are per row), so a row's attention is what it would be alone: padding is
   masked and RoPE sees the row's true distances. Rows on their first step get zero self-conditioning
   (``self_conditioning_mask``), exactly as ``generate``'s first step.
3. **Denoise one step** for all rows: :func:`model.runtime.step.denoise_step`, the step ``generate`` takes, over
   the rows' gathered :class:`~model.runtime.step.Canvas`, with each row's own temperature and schedule step and
   a ``torch.Generator`` per row seeded with the row's seed, so a row's draws do not depend on who else is in
   the batch: a row's tokens are those ``generate`` gives it alone (tests/test_batching.py).
4. **Commit.** A row whose canvas stops (argmax stable and confident, grammar done, or steps spent) is read out at
   once; it leaves when it produced EOS or spent its budget, otherwise its canvas is encoded into its cache and
   it starts the next canvas on the next step. Rows never wait for each other.

A request's failure (its constraint raising, its stream callback raising) fails that request only; the batch goes
on without it.

Source: scheduling per step rather than per batch is Orca's iteration-level scheduling (Yu et al., OSDI 2022)
applied to denoising steps.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import torch

from model.checkpoint import hf_compat as hf
from model.heads.copy_head import CopyHead, CopyMemory
from model.runtime import step
from model.runtime.constraint_batch import CanvasConstraint, ConstraintBatch, GuardedConstraint
from model.runtime.events import GenerationStats
from model.runtime.sampler import TorchSampler
from model.runtime.settings import DenoiseSettings
from model.runtime.step import Canvas, Denoiser
from model.turn.prefill import image_inputs

#: Called after each committed canvas of a row with that canvas's tokens (EOS padding removed).
CanvasCallback = Callable[[list[int]], None]


_SERIALS = itertools.count()


class BatcherClosed(RuntimeError):
    """The batcher is shutting down and takes no new requests."""


class RequestCancelled(RuntimeError):
    """The request was cancelled (its client went away) before it finished."""


@dataclass
class BatchOutput:
    """What a finished request gets: ``tokens`` (generated ids, EOS kept, padding removed) and its stats."""

    tokens: list[int]
    prompt_tokens: int
    stats: GenerationStats
    finish_reason: str  # "stop" (EOS) or "length" (budget spent)


@dataclass
class _Row:
    """One request: what it asked for, its sequence bookkeeping (KV cache layers, encoded length, tokens, stats)
    and its place in the batch's :class:`~model.runtime.step.Canvas` (row ``index`` of ``canvas``; ``None``: the
    next step starts a fresh one)."""

    prompt: list[int]
    settings: DenoiseSettings
    constraint: GuardedConstraint | None
    seed: int
    on_canvas: CanvasCallback | None
    future: Future[BatchOutput]
    cancelled: threading.Event
    vision: Any = None  # model.heads.vision.VisionInputs of the prompt's images, consumed by the prefill
    # filled at admission
    layers: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)
    length: int = 0
    memory: CopyMemory | None = None
    gen: torch.Generator | None = None
    tokens: list[int] = field(default_factory=list)
    canvases: int = 0
    stats: GenerationStats = field(default_factory=GenerationStats)
    started: float = 0.0
    serial: int = field(default_factory=lambda: next(_SERIALS))  # identifies the row in packing keys
    canvas: Canvas | None = None
    index: int = 0


class RequestHandle:
    """A submitted request: ``future`` resolves to :class:`BatchOutput`; :meth:`cancel` frees its row."""

    def __init__(self, row: _Row) -> None:
        self._row = row
        self.future = row.future

    def cancel(self) -> None:
        """Leave the batch before its next denoising step (the future then raises :class:`RequestCancelled`)."""
        self._row.cancelled.set()


class CanvasBatcher:
    """One denoising loop shared by concurrent requests (see the module docstring).

    Args:
        model: a loaded ``DiffusionGemmaForBlockDiffusion`` (eval mode), optionally with a copy head.
        settings: the checkpoint's denoising settings (canvas length, steps, entropy bound, EOS ids); each
            request may bring its own temperature schedule and token budget.
        max_batch: at most this many rows denoise together; more requests wait for a free row.

    Thread safety: :meth:`submit` and :meth:`close` may be called from any thread; the model runs only on the
    batcher's own thread.
    """

    def __init__(self, model: Any, settings: DenoiseSettings, max_batch: int = 16) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be at least 1, got {max_batch}")
        self.model = model
        self.settings = settings.replace(canvas_length=int(model.config.canvas_length))
        self.max_batch = max_batch
        self.vocab = int(model.config.get_text_config().vocab_size)
        head = getattr(model, "copy_head", None)
        self.head: CopyHead | None = head if isinstance(head, CopyHead) else None
        self._waiting: list[_Row] = []
        self._active: list[_Row] = []
        self._cv = threading.Condition()
        self._closed = False
        self._stop = False
        self._packed: tuple[Any, ...] | None = None
        self._last: tuple[tuple[Any, ...], Canvas] | None = None  # (packing key, the last step's next canvas)
        self._cons: tuple[tuple[int, ...], ConstraintBatch] | None = None  # (the rows' guards, their batch)
        self.max_rows_seen = 0
        self._thread = threading.Thread(target=self._loop, name="canvas-batcher", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------------------------------------------
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
    ) -> RequestHandle:
        """Queue one request; it joins the batch at the next denoising step with a fresh canvas.

        Args:
            input_ids: prompt token ids (at least one).
            settings: this request's settings (temperature schedule, ``max_new_tokens``); default the batcher's.
            constraint: a fresh :class:`~model.runtime.CanvasConstraint` for this row, or ``None``.
            seed: seeds the row's own generator (canvas noise, sampling, re-noise); ``None`` draws one.
            on_canvas: called on the batcher's thread after each committed canvas (see :data:`CanvasCallback`).
            vision: the prompt's images (:class:`model.heads.vision.VisionInputs`, ``input_ids`` already expanded),
                read by the request's own prefill; ``None``: no images.

        Returns:
            :class:`RequestHandle`.

        Raises:
            BatcherClosed: :meth:`close` was called.
            ValueError: empty ``input_ids`` or a seed outside the signed 64-bit range.
        """
        if not input_ids:
            raise ValueError("input_ids is empty: the prompt needs at least one token")
        if seed is None:
            seed = int(torch.randint(0, 2**62, (1,)).item())
        if not -(2**63) <= int(seed) < 2**63:
            raise ValueError(f"seed must fit in a signed 64-bit integer, got {seed}")
        s = (settings or self.settings).replace(canvas_length=self.settings.canvas_length)
        guarded = None if constraint is None else GuardedConstraint(constraint)
        row = _Row(list(input_ids), s, guarded, int(seed), on_canvas, Future(), threading.Event(), vision)
        with self._cv:
            if self._closed:
                raise BatcherClosed("the batcher is shutting down")
            self._waiting.append(row)
            self._cv.notify_all()
        return RequestHandle(row)

    def close(self, wait: bool = True, timeout: float | None = None) -> None:
        """Take no new requests; with ``wait``, let admitted and queued ones finish (at most ``timeout`` s).

        Requests still unfinished after that (or at once without ``wait``) fail with :class:`BatcherClosed`.
        """
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        if wait:
            deadline = None if timeout is None else time.monotonic() + timeout
            with self._cv:
                while self._waiting or self._active:
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        break
                    self._cv.wait(timeout=left if left is not None else 0.5)
        with self._cv:
            self._stop = True
            self._cv.notify_all()
        self._thread.join(timeout=30)
        for row in self._waiting + self._active:
            if not row.future.done():
                row.future.set_exception(BatcherClosed("the server shut down before the request finished"))

    # ------------------------------------------------------------------------------------------------------
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

    def _fail(self, row: _Row, exc: BaseException) -> None:
        if not row.future.done():
            row.future.set_exception(exc)

    def _drop_if_cancelled(self, row: _Row) -> bool:
        if row.future.done():
            return True
        if row.cancelled.is_set():
            row.future.set_exception(RequestCancelled("request cancelled"))
            return True
        return False

    @torch.no_grad()
    def _admit(self, row: _Row) -> None:
        """Prefill one request alone; on success it joins ``_active``."""
        if self._drop_if_cancelled(row):
            return
        row.started = time.perf_counter()
        try:
            with row.stats.phase("prefill"):
                m = self.model
                device = m.device
                ids = torch.tensor([row.prompt], dtype=torch.long, device=device)
                P = ids.shape[1]
                cache = hf.new_cache(m, 1, P + self.settings.canvas_length)
                attn = torch.ones((1, P), dtype=torch.bool, device=device)
                pos = torch.arange(0, P, dtype=torch.int32, device=device).unsqueeze(0)
                v = row.vision
                images = (
                    {} if v is None else image_inputs(m, ids, mm_token_type_ids=None, **v.generate_kwargs())
                )
                enc_in, out = hf.encode(
                    m,
                    ids,
                    attn,
                    pos,
                    cache,
                    is_prefill=True,
                    canvas_length=self.settings.canvas_length,
                    images=images,
                )
                row.vision = None  # the images live on in the cache
                row.layers = [(layer.keys, layer.values) for layer in out.cache.layers]
                row.length = P
                if self.head is not None:
                    row.memory = self.head.new_memory(enc_in, out.last_hidden_state, attn)
                row.gen = torch.Generator(device=device)
                row.gen.manual_seed(row.seed)
        except Exception as exc:
            self._fail(row, exc)
            return
        with self._cv:
            self._active.append(row)
            self.max_rows_seen = max(self.max_rows_seen, len(self._active))

    # ------------------------------------------------------------------------------------------------------
    def _pack(self, rows: list[_Row]) -> tuple[Any, torch.Tensor, int]:
        """Stack the rows' caches left-padded: ``(DynamicCache, attention mask [B, L + C] bool, L)``."""
        m = self.model
        C = self.settings.canvas_length
        L = max(r.length for r in rows)
        layers = []
        for i in range(len(rows[0].layers)):
            size = max(r.layers[i][0].shape[-2] for r in rows)
            ks, vs = [], []
            for r in rows:
                k, v = r.layers[i]
                pad = size - k.shape[-2]
                ks.append(torch.nn.functional.pad(k, (0, 0, pad, 0)))
                vs.append(torch.nn.functional.pad(v, (0, 0, pad, 0)))
            layers.append((torch.cat(ks), torch.cat(vs)))
        cache = hf.cache_from_layers(m, layers, L)
        attn = torch.ones((len(rows), L + C), dtype=torch.bool, device=m.device)
        for b, r in enumerate(rows):
            attn[b, : L - r.length] = False
        return cache, attn, L

    def _positions(self, rows: list[_Row]) -> torch.Tensor:
        """``[B, C]`` int32: each row's own positions for its canvas (right after its encoded length)."""
        C = self.settings.canvas_length
        start = torch.tensor([r.length for r in rows], dtype=torch.int32, device=self.model.device)
        return start[:, None] + torch.arange(C, dtype=torch.int32, device=self.model.device)[None, :]

    def _pack_memory(self, rows: list[_Row], L: int) -> CopyMemory | None:
        if self.head is None:
            return None
        mems = [r.memory for r in rows]
        assert all(mm is not None for mm in mems)

        def left(t: torch.Tensor, value: float) -> torch.Tensor:
            pad = L - t.shape[1]
            if pad == 0:
                return t
            shape = (t.shape[0], pad, *t.shape[2:])
            return torch.cat([torch.full(shape, value, dtype=t.dtype, device=t.device), t], dim=1)

        return CopyMemory(
            ids=torch.cat([left(mm.ids, 0) for mm in mems]),  # type: ignore[union-attr]
            keys=torch.cat([left(mm.keys, 0.0) for mm in mems]),  # type: ignore[union-attr]
            mask=torch.cat([left(mm.mask, False) for mm in mems]),  # type: ignore[union-attr]
            prev_base=torch.cat([left(mm.prev_base, -1) for mm in mems]),  # type: ignore[union-attr]
            tail=torch.cat([mm.tail for mm in mems]),  # type: ignore[union-attr]
            in_excluded=torch.cat([mm.in_excluded.reshape(1) for mm in mems]),  # type: ignore[union-attr]
        )

    def _start_canvas(self, r: _Row) -> None:
        """A fresh uniform-noise canvas for ``r`` (drawn from its own generator, as ``generate`` does)."""
        s, C, dev = self.settings, self.settings.canvas_length, self.model.device
        noise = torch.randint(0, self.vocab, (1, C), device=dev, generator=r.gen)
        r.canvas, r.index = Canvas.start(noise, torch.zeros(1, dtype=torch.bool, device=dev), s), 0
        if r.constraint is not None:
            left = r.settings.max_new_tokens - r.canvases * C  # exact: a constrained turn closes within it
            with r.stats.phase("constraint"):
                r.constraint.start_canvas(C, left)

    def _batch_canvas(self, rows: list[_Row], key: tuple[Any, ...]) -> Canvas:
        """The rows' canvases as one: the last step's outcome when the rows are those of the last step (no copy),
        else gathered from each row's."""
        for r in rows:
            if r.canvas is None:
                self._start_canvas(r)
        last = self._last
        if last is not None and last[0] == key and all(r.canvas is last[1] for r in rows):
            return last[1]
        return Canvas.gather([(r.canvas, r.index) for r in rows])  # type: ignore[misc]

    @torch.no_grad()
    def _step(self, rows: list[_Row]) -> None:
        """One :func:`~model.runtime.step.denoise_step` for every row, each at its own step of its own canvas with
        its own temperature and generator; rows whose canvas is done are read out and committed (or leave)."""
        timer = GenerationStats()  # the step's phase times, shared among its rows
        with timer.phase("sampling"):
            key = tuple((r.serial, r.length) for r in rows)
            canvas = self._batch_canvas(rows, key)
            inputs = self._decoder_inputs(rows, canvas.tokens, key)
            guards = tuple(id(r.constraint) for r in rows)
            if self._cons is None or self._cons[0] != guards:  # built once per set of rows, not every step
                self._cons = (guards, ConstraintBatch([r.constraint for r in rows]))
            gens = [r.gen for r in rows if r.gen is not None]
            temps = [r.settings.temperature(n) for r, n in zip(rows, canvas.steps_left, strict=True)]
            den = Denoiser(
                self.model, self.settings, TorchSampler(gens), self._cons[1], gens, timer, self.vocab
            )
        # through the module: the one step function both schedulers call (a test patches it there)
        out = step.denoise_step(den, canvas, inputs, torch.tensor(temps, device=canvas.tokens.device))
        self._last = (key, out.canvas)
        for b, r in enumerate(rows):
            r.canvas, r.index = out.canvas, b
            r.stats.add_times(timer, 1.0 / len(rows))
        done = [r for r, d in zip(rows, out.canvas_done(), strict=True) if d]
        if done:
            self._end_canvases(done)

    def _decoder_inputs(self, rows: list[_Row], canvas: torch.Tensor, key: tuple[Any, ...]) -> dict[str, Any]:
        """The decoder's keyword inputs for ``rows`` besides the canvas: the packed cache, masks and per-row
        positions (repacked only when membership or a row's length changed) and the copy memory."""
        if self._packed is None or self._packed[0] != key:
            cache, dec_attn, L = self._pack(rows)
            inputs: dict[str, Any] = {
                "decoder_attention_mask": hf.decoder_mask(self.model, canvas, cache, dec_attn),
                "cache": cache,
                "decoder_position_ids": self._positions(rows),
            }
            memory = self._pack_memory(rows, L)
            if memory is not None:
                inputs["copy_memory"] = memory
            self._packed = (key, inputs)
        return self._packed[1]  # type: ignore[no-any-return]

    def _readout(self, r: _Row) -> list[int] | None:
        """The row's finished canvas read out (its constraint's readout, else the argmax); ``None`` when the row
        failed (its constraint raised, or read out a canvas of another length)."""
        canvas, b = r.canvas, r.index
        assert canvas is not None and canvas.self_cond is not None
        guard, C = r.constraint, self.settings.canvas_length
        if guard is None:
            return canvas.argmax[b].tolist()  # type: ignore[no-any-return]
        with r.stats.phase("constraint"):
            toks = guard.readout(canvas.self_cond[b].float())
        if guard.error is not None:  # this row's constraint failed: only it leaves
            self._fail(r, guard.error)
            return None
        if len(toks) != C:
            self._fail(r, ValueError(f"constraint readout has {len(toks)} tokens, canvas is {C}"))
            return None
        return toks

    def _end_canvases(self, rows: list[_Row]) -> None:
        """Read out the rows' finished canvases; rows that go on have them encoded into their caches."""
        s = self.settings
        C = s.canvas_length
        cont: list[tuple[_Row, list[int]]] = []
        for r in rows:
            assert r.canvas is not None
            steps = s.max_denoising_steps - r.canvas.steps_left[r.index]
            toks = self._readout(r)
            if toks is None:
                continue
            stop = any(t in s.eos_token_ids for t in toks)
            kept = toks[: toks.index(next(t for t in toks if t in s.eos_token_ids)) + 1] if stop else toks
            r.tokens.extend(t for t in kept if t != s.pad_token_id)
            r.canvases += 1
            r.canvas = None
            r.stats.steps_per_canvas.append(steps)
            r.stats.canvases += 1
            r.stats.decoder_forwards = [sum(r.stats.steps_per_canvas)]
            if r.on_canvas is not None:
                try:
                    r.on_canvas(kept)
                except Exception as exc:  # a broken stream fails its own request only
                    self._fail(r, exc)
                    continue
            if stop or r.canvases * C >= r.settings.max_new_tokens:
                self._finish(r, "stop" if stop else "length")
            elif not r.cancelled.is_set():
                cont.append((r, toks))
        if cont:
            timer = GenerationStats()
            with timer.phase("commit"):
                self._encode_canvases(cont)
            for r, _ in cont:
                r.stats.add_times(timer, 1.0 / len(cont))

    def _encode_canvases(self, cont: list[tuple[_Row, list[int]]]) -> None:
        """Encode each row's committed canvas (``(row, tokens)``) into its own cache and copy memory, together."""
        m, C = self.model, self.settings.canvas_length
        crow = [r for r, _ in cont]
        cache, attn, L = self._pack(crow)
        memory = self._pack_memory(crow, L)
        pos = self._positions(crow)
        enc_masks = hf.encoder_mask(m, len(crow), C, attn, cache, pos)
        enc_in = torch.tensor([t for _, t in cont], dtype=torch.long, device=m.device)
        out = m.model.encoder(input_ids=enc_in, attention_mask=enc_masks, cache=cache, position_ids=pos)
        if memory is not None:
            assert self.head is not None
            memory = self.head.extend_memory(memory, enc_in, out.last_hidden_state)
        for b, r in enumerate(crow):
            n = r.length + C
            layers = []
            for layer in out.cache.layers:
                keep = min(n, layer.keys.shape[-2])
                layers.append(
                    (layer.keys[b : b + 1, :, -keep:].clone(), layer.values[b : b + 1, :, -keep:].clone())
                )
            r.layers = layers
            r.length = n
            if memory is not None:
                r.memory = CopyMemory(
                    ids=memory.ids[b : b + 1, -n:],
                    keys=memory.keys[b : b + 1, -n:],
                    mask=memory.mask[b : b + 1, -n:],
                    prev_base=memory.prev_base[b : b + 1, -n:],
                    tail=memory.tail[b : b + 1],
                    in_excluded=memory.in_excluded[b : b + 1],
                )

    def _finish(self, row: _Row, reason: str) -> None:
        st = row.stats
        st.new_tokens = [len(row.tokens)]
        st.tokens_per_forward = [
            len(row.tokens) / max(1, st.decoder_forwards[0] if st.decoder_forwards else 1)
        ]
        st.time_total_s = time.perf_counter() - row.started
        if not row.future.done():
            row.future.set_result(BatchOutput(row.tokens, len(row.prompt), st, reason))
