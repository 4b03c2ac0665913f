"""How a loader ends: closed by its owner, or stopped by the first failure of one of its threads.

``Shutdown`` holds the two facts every part of a loader reads before going on:
``closed``, and the ``failure`` that closed it (if one did). It also holds the
one way to stop:

* mark the loader closed;
* tell the pool's threads to take no more work;
* close the result queue.

So threads blocked on a full queue and a consumer blocked on an empty one all
wake. A failure is raised in the consumer once;
after that the loader only reports that it is closed.

It knows nothing of epochs or batches: the loader hands it the lock, the queue
and (once made) the pool.
"""

from __future__ import annotations

import logging
import threading
from typing import NoReturn, Protocol

from .._core.fifo_queue import FIFOQueue
from .._faults.errors import LoaderClosed

__all__ = ["Shutdown"]

log = logging.getLogger(__name__)


class _Stoppable(Protocol):
    def stop(self) -> None: ...

    def join(self, timeout: float | None = None) -> list[str]: ...


class _Closable(Protocol):
    def close(self) -> None: ...


class Shutdown:
    """Whether a loader is closed, and the failure that closed it.

    Args:
        name: the loader's name, for messages.
        lock: the loader's lock; ``closed`` and ``failure`` change under it.
        results: the queue between the loader threads and the consumer.

    Set ``threads`` to the pool once it exists. ``stop`` and ``fail`` are safe
    from any thread; ``raise_failure`` is the consumer's.
    """

    def __init__(self, name: str, lock: threading.RLock, results: FIFOQueue) -> None:
        self.name = name
        self.threads: _Stoppable | None = None
        self.closed = False
        self.failure: BaseException | None = None
        self.failure_raised = False  # the consumer was given the failure
        self._lock = lock
        self._results = results

    def stop(self) -> None:
        """Close the loader: threads take no more work, and every waiter wakes. Idempotent."""
        try:
            with self._lock:
                self.closed = True
        finally:
            try:
                if self.threads is not None:
                    self.threads.stop()
            finally:
                self._results.close()

    def fail(self, exc: BaseException) -> None:
        """A loader thread failed: keep the first failure for the consumer, and stop."""
        log.debug("%s: loader thread failed", self.name, exc_info=exc)
        with self._lock:
            if self.failure is None:
                self.failure = exc
            self.closed = True
        if self.threads is not None:
            self.threads.stop()
        self._results.close()

    def close(self, timeout: float | None, calls: _Closable) -> None:
        """Stop, wait for the threads, then close ``calls``; see ``DataLoader.close``.

        Args:
            timeout: the most seconds to wait for all the threads together; ``None`` for no limit.
            calls: where the calls run; closed even when Ctrl-C cuts the wait short.
        """
        try:
            self.stop()
        except BaseException:  # Ctrl-C cut it short: every thread must still be told before raising
            self.stop()
            raise
        assert self.threads is not None
        try:
            running = self.threads.join(timeout)
        finally:  # worker processes end even when a Ctrl-C cuts the wait short
            calls.close()
        if running:
            log.warning(
                "%s: %s still inside the yield function after close(); they end when that call returns",
                self.name,
                ", ".join(running),
            )
        self.log_untaken()

    def raise_failure(self) -> NoReturn:
        """Raise the failure in the consumer, once; later, ``LoaderClosed`` caused by it.

        Raises at once; the other threads end after their current call. Leaving the
        with-block (or ``close()``) then waits for them.
        """
        failure = self.failure
        if self.failure_raised:
            raise LoaderClosed(self.message()) from failure
        self.failure_raised = True
        self.stop()
        raise failure  # type: ignore[misc]

    def message(self) -> str:
        """Why the loader is closed, for ``LoaderClosed``."""
        if self.failure is not None:
            return f"{self.name} is closed: a loader thread failed with {self.failure!r}"
        return f"{self.name} is closed"

    def log_untaken(self) -> None:
        """At close: log a failure that the consumer never took, so that it is not lost."""
        if self.failure is not None and not self.failure_raised:
            log.error("%s: a loader thread failed and nobody took the error", self.name, exc_info=self.failure)
            self.failure_raised = True
