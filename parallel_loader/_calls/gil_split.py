"""Worker processes that their GIL holds back hand threads to new ones: ``GilSplit``, for ``processes="auto"``.

``processes="auto"`` first runs as many threads in each process as a reader's
usual share of the GIL allows. A yield function with more Python in it fills
the GIL sooner. So every ``INTERVAL`` seconds, a review thread asks each worker
for its GIL meter's totals (``gil_meter``). A worker that the GIL holds back
keeps ``gil_ceiling`` of its threads. The rest get successors in new worker
processes of that many threads each, started at once. The loader keeps its
thread count: a loader thread whose lane moves takes its successor at a call
after the successor is ready, never waiting for it (``ProcessCalls``).
See :doc:`/guide/host_scale`.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable

from .._core.gil_meter import GilReading, gil_ceiling
from .worker_places import Lane, Worker, remote, retire

__all__ = ["ASK_WAIT", "INTERVAL", "GilSplit", "split"]

log = logging.getLogger(__name__)

INTERVAL = 2.0  # seconds between two reviews of the workers' GIL meters
ASK_WAIT = 0.5  # seconds a review waits for a worker's reading: one holding its GIL in C answers late


class GilSplit:
    """The review thread of ``processes="auto"``, and the workers' last GIL readings.

    Args:
        name: the loader's name, for its thread and the log line of a split.
        interval: seconds between two reviews (default ``INTERVAL``).
    """

    def __init__(self, name: str, interval: float | None = None) -> None:
        self.name = name
        self.interval = INTERVAL if interval is None else interval
        self.splits = 0  # workers split so far
        self._last: dict[tuple[int, int], GilReading] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, review: Callable[[], None]) -> None:
        """Call ``review`` (a bound method) every interval in a thread of its own, until ``stop()``; once only.

        The thread holds its owner weakly: an owner dropped without ``close()`` ends it too.
        """
        if self._thread is None and not self._stop.is_set():
            self._thread = threading.Thread(
                target=self._run, args=(weakref.WeakMethod(review),), name=f"{self.name}-gil-review", daemon=True
            )
            self._thread.start()

    def stop(self) -> None:
        """Ask the review thread to end after the review under way, if any."""
        self._stop.set()

    def join(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the review thread to end (after ``stop()``)."""
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _run(self, review: weakref.WeakMethod[Callable[[], None]]) -> None:
        while not self._stop.wait(self.interval):
            method = review()
            if method is None:
                return
            try:
                method()
            except Exception:  # a review that failed is logged; the loader goes on as it was
                log.exception("%s: a review of the worker processes' GIL failed", self.name)
            del method

    def review(self, running: list[Worker]) -> list[tuple[Worker, int]]:
        """Read each running worker's GIL meter; return the workers to split, with the threads each keeps.

        A worker whose control pipe is busy (an epoch hook, a stack) is asked at the next
        review. So is one that gives no answer within ``ASK_WAIT``. A worker of one thread is not asked.
        """
        ceilings = []
        for worker in running:
            if sum(not lane.moving for lane in worker.lanes) < 2:
                continue  # one thread: nothing to split, so its meter never starts
            if not worker.control_lock.acquire(blocking=False):
                continue  # an epoch hook or a stack request is under way there
            try:
                reading = remote(worker, ("gil",), ASK_WAIT)  # the lock is reentrant
            finally:
                worker.control_lock.release()
            if isinstance(reading, GilReading):
                ceiling = self.ceiling(worker, reading)
                if ceiling is not None:
                    ceilings.append((worker, ceiling))
        return ceilings

    def split(
        self, ceilings: list[tuple[Worker, int]], free: list[Lane], workers: list[Worker], prefix: str
    ) -> tuple[list[Lane], list[Worker]]:
        """Split each worker of ``ceilings`` (``split``) into new workers appended to ``workers``. Lock held.

        Returns:
            The free lanes, where a moving lane no loader thread holds is retired and
            replaced by its successor; and the new workers, to start.
        """
        made: list[Worker] = []

        def new_worker() -> Worker:
            workers.append(Worker(len(workers), f"{prefix}{len(workers)}"))
            made.append(workers[-1])
            return workers[-1]

        for worker, ceiling in ceilings:
            split(worker, ceiling, new_worker)
        kept = []
        for lane in free:
            if lane.successor is not None:
                retire(lane)
                kept.append(lane.successor)
            else:
                kept.append(lane)
        return kept, made

    def ceiling(self, worker: Worker, reading: GilReading) -> int | None:
        """The threads ``worker`` should keep, from ``reading`` and its last one; None to keep them all.

        Its first reading (or its process's, after a replacement) only starts a window.
        """
        key = (worker.number, reading.pid)
        last, self._last[key] = self._last.get(key), reading
        if last is None:
            return None
        threads = sum(not lane.moving for lane in worker.lanes)
        window = reading.since(last)
        ceiling = gil_ceiling(window, threads)
        if ceiling is not None:
            del self._last[key]  # the next window starts after the move
            self.splits += 1
            log.info(
                "%s: worker process %s is held back by its GIL (its %d threads used %.1f cores, the GIL was busy "
                "at %.0f%% of the probes, %.1f cores idle): %d of them move to new worker processes",
                self.name, worker.name, threads, window.cores, window.held * 100, window.idle_cores,
                threads - ceiling,
            )  # fmt: skip
        return ceiling


def split(worker: Worker, ceiling: int, new_worker: Callable[[], Worker]) -> list[Lane]:
    """Mark ``worker``'s lanes past ``ceiling`` as moving, each with a successor in a new worker.

    Args:
        worker: the worker to split.
        ceiling: the lanes it keeps; each new worker gets as many at most.
        new_worker: makes a new worker's place (not started).

    Returns:
        The successors, one for each lane that moves, with its number.
    """
    moving = [lane for lane in worker.lanes if not lane.moving][ceiling:]
    lanes = []
    for first in range(0, len(moving), ceiling):
        place = new_worker()
        for old in moving[first : first + ceiling]:
            old.successor = Lane(place, old.number)
            lanes.append(old.successor)
    return lanes
