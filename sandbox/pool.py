"""A warm pool of pre-started, single-use containers, refilled by a background thread: an execution in a ready
container costs ~75-100 ms instead of a cold create + start's ~275-340 ms.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

__all__ = ["WarmPool"]


class WarmPool:
    """Keeps up to ``size`` containers, each started by ``create()`` (returns its id; in the refill thread),
    ready; ``destroy(ids)`` removes one created after :meth:`close`. Thread-safe."""

    def __init__(self, create: Callable[[], str], destroy: Callable[[list[str]], None], size: int) -> None:
        if size < 1:
            raise ValueError(f"WarmPool size must be >= 1, got {size}")
        self.size = size
        self._create = create
        self._destroy = destroy
        self._ready: deque[str] = deque()
        self._cond = threading.Condition()
        self._creating = 0
        self._waiters = 0
        self.closed = False
        #: The last error of the refill thread (cleared by the next success).
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._refill_loop, name="sandbox-pool-refill", daemon=True)
        self._thread.start()

    def _refill_loop(self) -> None:
        backoff = 0.2
        while True:
            with self._cond:
                while not self.closed and len(self._ready) + self._creating >= self.size:
                    self._cond.wait()
                if self.closed:
                    return
                self._creating += 1
            cid: str | None = None
            try:
                if not self.closed:
                    cid = self._create()
            except BaseException as exc:
                with self._cond:
                    self._creating -= 1
                    self.error = exc
                    self._cond.notify_all()
                time.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            if self.closed:  # closed while creating (maybe from a signal handler): do not keep it
                if cid is not None:
                    self._destroy([cid])
                return
            with self._cond:
                self._creating -= 1
                if cid is not None:
                    self._ready.append(cid)
                self.error = None
                backoff = 0.2
                self._cond.notify_all()

    def acquire(self, wait_s: float = 60.0) -> str | None:
        """A ready container id, or None when the caller should create one itself: it waits (``wait_s`` at
        most) only while fewer callers wait than containers are on their way, so a burst creates in parallel."""
        deadline = time.monotonic() + wait_s
        with self._cond:
            self._waiters += 1
            try:
                while not self.closed:
                    if self._ready:
                        cid = self._ready.popleft()
                        self._cond.notify_all()  # wake the refiller
                        return cid
                    # Containers on their way: being created, or about to be (the refiller tops up to size
                    # unless it is failing).
                    coming = self._creating if self.error is not None else max(self._creating, self.size)
                    if self._waiters > coming:
                        return None
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return None
                    self._cond.wait(remaining)
                return None
            finally:
                self._waiters -= 1

    def wait_full(self, timeout_s: float = 60.0) -> bool:
        """Block until ``size`` containers are ready (True) or ``timeout_s`` seconds pass (False)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while len(self._ready) < self.size and not self.closed:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(min(remaining, 0.5))
            return len(self._ready) >= self.size

    def close(self, join_s: float = 5.0, *, lock: bool = True) -> list[str]:
        """Stop refilling and return the ready containers' ids (the caller removes them); ``lock=False`` for
        signal handlers, which must not wait on a lock the interrupted code may hold."""
        self.closed = True
        if lock:
            with self._cond:
                ids = list(self._ready)
                self._ready.clear()
                self._cond.notify_all()
        else:
            ids = list(self._ready)
        # Wait for an in-flight creation: the refiller destroys what it made after seeing ``closed``.
        if threading.current_thread() is not self._thread and (lock or self._creating):
            self._thread.join(join_s)
        return ids
