"""A bounded, closable first-in first-out queue.

``FIFOQueue`` is the buffer between the threads that make batches and the thread
that consumes them. It is ``queue.Queue`` plus one thing Python 3.11 lacks:
``close()`` (Python 3.13 calls it ``Queue.shutdown``). Closing wakes every
blocked caller at once. Producers then fail. Consumers drain what is left and
then fail. So nothing queued is lost and nobody waits forever.

The queue knows nothing of the threads that use it: any thread may call any
method.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

from .checks import check_int, check_timeout
from .interrupt_safe import new_lock, notify_all, wait

__all__ = ["FIFOQueue", "QueueClosed"]


class QueueClosed(Exception):
    """Raised by ``enqueue`` on a closed queue, and by ``dequeue`` on a closed, empty one."""


class FIFOQueue:
    """A thread-safe bounded FIFO queue that can be closed.

    Each instance is independent.

    Args:
        max_len: the most items the queue holds; ``enqueue`` blocks while it is full.

    Raises:
        TypeError: ``max_len`` is not an int.
        ValueError: ``max_len`` is less than 1.
    """

    def __init__(self, max_len: int = 8) -> None:
        self._max_len = check_int("max_len", max_len, minimum=1)
        self._items: deque[Any] = deque()
        self._closed = False
        # One lock, held whenever the queue or its closed flag changes, shared by
        # both conditions so that a waiter re-checks both under the same lock.
        # Taken as ``with self._mutex``, and waited on through ``interrupt_safe.wait``,
        # so that Ctrl-C at any point leaves it as it should be (see that module).
        self._mutex = new_lock()
        self._not_empty = threading.Condition(self._mutex)
        self._not_full = threading.Condition(self._mutex)
        # What dequeue saw, for its callers' statistics; written under the lock, read without it.
        self.taken = 0  # items dequeued
        self.fill_total = 0  # the sum over those of the items queued just before each
        self.waited = 0.0  # seconds dequeue spent blocked, waiting for an item

    @property
    def max_len(self) -> int:
        """The capacity given at construction."""
        return self._max_len

    @property
    def closed(self) -> bool:
        """True once ``close()`` has been called."""
        return self._closed

    def __len__(self) -> int:
        """The number of items queued now: approximate, since other threads change it."""
        return len(self._items)

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<FIFOQueue {len(self._items)}/{self._max_len} {state}>"

    def enqueue(self, item: Any, timeout: float | None = None) -> None:
        """Append ``item``, blocking while the queue is full.

        Args:
            item: any object, ``None`` included.
            timeout: the most seconds to wait for room; ``None`` (or ``math.inf``) waits for ever.

        Raises:
            QueueClosed: the queue is closed, or was closed while waiting.
            TimeoutError: no room came within ``timeout`` seconds.
            TypeError, ValueError: ``timeout`` is not a number, or is negative or NaN.
        """
        timeout = check_timeout(timeout)
        with self._mutex:
            if len(self._items) >= self._max_len and not self._closed:
                self._wait(self._not_full, self._is_full, timeout, "enqueue")
            if self._closed:
                raise QueueClosed("enqueue on a closed FIFOQueue")
            self._items.append(item)
            self._not_empty.notify()

    def dequeue(self, timeout: float | None = None) -> Any:
        """Remove and return the oldest item, blocking while the queue is empty.

        After ``close()`` this still returns every item queued before it.

        Args:
            timeout: the most seconds to wait for an item; ``None`` (or ``math.inf``) waits for ever.

        Raises:
            QueueClosed: the queue is closed and empty.
            TimeoutError: no item came within ``timeout`` seconds.
            TypeError, ValueError: ``timeout`` is not a number, or is negative or NaN.
        """
        timeout = check_timeout(timeout)
        with self._mutex:
            if not self._items and not self._closed:
                # The clock is read only here, where the caller waits anyway.
                start = time.perf_counter()
                try:
                    self._wait(self._not_empty, self._is_empty, timeout, "dequeue")
                finally:
                    self.waited += time.perf_counter() - start
            if not self._items:
                raise QueueClosed("dequeue on a closed, empty FIFOQueue")
            self.taken += 1
            self.fill_total += len(self._items)
            item = self._items.popleft()
            self._not_full.notify()
            return item

    def close(self) -> None:
        """Close the queue and wake every blocked ``enqueue`` and ``dequeue``.

        Idempotent. Items already queued stay available to ``dequeue``.
        """
        with self._mutex:
            self._closed = True
            notify_all(self._not_empty, self._not_full)

    # Private helpers; each is called with the lock held.

    def _is_full(self) -> bool:
        return len(self._items) >= self._max_len and not self._closed

    def _is_empty(self) -> bool:
        return not self._items and not self._closed

    def _wait(self, cond: threading.Condition, blocked, timeout: float | None, what: str) -> None:
        """Wait on ``cond`` while ``blocked()`` holds, up to ``timeout`` seconds in all."""
        if timeout is None:
            while blocked():
                wait(cond, self._mutex)
            return
        deadline = time.monotonic() + timeout
        while blocked():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"FIFOQueue.{what} timed out after {timeout} s")
            wait(cond, self._mutex, remaining)
