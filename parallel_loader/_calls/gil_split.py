"""Worker processes that their GIL holds back hand threads to new ones: ``GilSplit``, for ``processes="auto"``.

``processes="auto"`` first runs as many threads in each process as a reader's
usual share of the GIL allows. A yield function with more Python in it fills
the GIL sooner. So every ``INTERVAL`` seconds, one loader thread asks each
worker for its GIL meter's totals (``gil_meter``). A worker that the GIL holds
back keeps ``gil_ceiling`` of its threads. The rest move to new worker
processes of that many threads each. The loader keeps its thread count: a loader
thread whose lane moves takes the new lane at its next call (``ProcessCalls``).
See :doc:`/guide/host_scale`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from .._core.gil_meter import GilReading, gil_ceiling
from .worker_places import Lane, Worker, remote, retire

__all__ = ["INTERVAL", "GilSplit", "split"]

log = logging.getLogger(__name__)

INTERVAL = 2.0  # seconds between two readings of the workers' GIL meters


class GilSplit:
    """When to read the workers' GIL meters, and what the last readings were.

    Args:
        name: the loader's name, for the log line of a split.
        interval: seconds between two reviews (default ``INTERVAL``).
        clock: the clock (replaced in tests).
    """

    def __init__(self, name: str, interval: float | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self.interval = INTERVAL if interval is None else interval
        interval = self.interval
        self.splits = 0  # workers split so far
        self._clock = clock
        self._next = clock() + interval
        self._last: dict[tuple[int, int | None], GilReading] = {}
        self._busy = threading.Lock()

    def begin(self) -> bool:
        """Whether a review is due and this thread makes it; a True must be followed by ``end()``."""
        if self._clock() < self._next or not self._busy.acquire(blocking=False):
            return False
        if self._clock() < self._next:  # another thread just made one
            self._busy.release()
            return False
        return True

    def end(self) -> None:
        """End the review ``begin`` allowed; the next is due an interval from now."""
        self._next = self._clock() + self.interval
        self._busy.release()

    def review(self, running: list[Worker]) -> list[tuple[Worker, int]]:
        """Read each running worker's GIL meter; return the workers to split, with the threads each keeps.

        A worker whose control pipe is busy (an epoch hook, a stack) is asked at the next
        review: a loader thread never waits on a hook here. A worker of one thread is not asked.
        """
        ceilings = []
        for worker in running:
            if sum(not lane.moving for lane in worker.lanes) < 2:
                continue  # one thread: nothing to split, so its meter never starts
            if not worker.control_lock.acquire(blocking=False):
                continue  # an epoch hook or a stack request is under way there: asked at the next review
            try:
                process = worker.process
                reading = remote(worker, ("gil",), None)  # the lock is reentrant
            finally:
                worker.control_lock.release()
            if process is not None and isinstance(reading, GilReading):
                ceiling = self.ceiling(worker, process.pid, reading)
                if ceiling is not None:
                    ceilings.append((worker, ceiling))
        return ceilings

    def split(
        self, ceilings: list[tuple[Worker, int]], free: list[Lane], workers: list[Worker], prefix: str
    ) -> list[Lane]:
        """Split each worker of ``ceilings`` (``split``) into new workers appended to ``workers``. Lock held.

        Returns:
            The free lanes: ``free`` with the new lanes, less the lanes that moved, which are retired.
        """

        def new_worker() -> Worker:
            workers.append(Worker(len(workers), f"{prefix}{len(workers)}"))
            return workers[-1]

        for worker, ceiling in ceilings:
            free = free + split(worker, ceiling, new_worker)
        for lane in free:
            if lane.moving:  # no loader thread holds it: retired now
                retire(lane)
        return [lane for lane in free if not lane.moving]

    def ceiling(self, worker: Worker, pid: int | None, reading: GilReading) -> int | None:
        """The threads ``worker`` should keep, from ``reading`` and its last one; None to keep them all.

        Its first reading (or its process's, after a replacement) only starts a window.
        """
        key = (worker.number, pid)
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
    """Mark ``worker``'s lanes past ``ceiling`` as moving, and make their replacements in new workers.

    Args:
        worker: the worker to split.
        ceiling: the lanes it keeps; each new worker gets as many at most.
        new_worker: makes a new worker's place (not started).

    Returns:
        The new lanes, one for each lane that moves, with its number.
    """
    moving = [lane for lane in worker.lanes if not lane.moving][ceiling:]
    lanes = []
    for first in range(0, len(moving), ceiling):
        place = new_worker()
        for old in moving[first : first + ceiling]:
            old.moving = True
            lanes.append(Lane(place, old.number))
    return lanes
