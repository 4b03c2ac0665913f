"""Online tuning of a loader's thread count from what it measures.

``ThreadTuner`` is what ``DataLoader(num_threads="auto")`` runs. After each
batch, the consuming thread hands it a ``Sample`` of the loader's running totals
(``observe``). Once a measuring window is long enough, the tuner compares it
with the window's start. It answers a new thread count, or ``None`` to keep it.
The decision itself (``decide``) is a function of one ``Window``'s figures:

* ``step`` is the consumer's own time per batch: the window's time less its
  wait, per batch. With the mean call time ``call``, it gives the threads the
  consumer's pace needs: ``needed = ceil(1.1 * call / step)``. That is all of
  ``max_threads`` when the consumer does not wait at all between batches;
* the process's CPU use (psutil) against the cores it may run on gives the
  threads the CPU can feed: each thread costs ``used / threads`` cores, and the
  idle cores pay for that many more;
* input-bound (the consumer waited more than 2% of the window): grow to
  ``needed`` at once, at least by one. Never grow past what the CPU can feed:
  for CPU-bound work, that stops at the cores there are;
* not input-bound (waited less than 0.5%) with more threads than ``needed``:
  shrink towards it, at most by half at once;
* with the CPU half busy or more, a growth that did not raise the delivery rate
  by 5% is undone. The count it came from is then the ceiling for the next
  ``HOLD`` windows.

The tuner knows nothing of threads or queues: it reads numbers and answers
numbers; the loader resizes its pool. Its clock and CPU reading can be replaced,
so tests drive it by hand.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import psutil

from .._core.checks import check_int
from .._core.telemetry import CallTimes, Rates

__all__ = ["HOLD", "Sample", "ThreadTuner", "Window", "available_cores", "decide"]

log = logging.getLogger(__name__)

# Windows during which a count that did not pay is not tried again.
HOLD = 20
# The consumer waited more than this share of a window: it is input-bound.
INPUT_BOUND = 0.02
# ...less than this: the loader keeps up; threads beyond the needed ones can go.
KEPT_UP = 0.005
# Threads kept beyond what the consumer's pace needs, against the jitter of call times. Small:
# the queue absorbs most of that jitter, and a loader that falls behind grows again at once
# (1.3 settled on 19-20 threads where 16 keep up with 50-100 ms calls; 1.1 on 16).
MARGIN = 1.1
# A growth must raise the delivery rate by this much to stay.
GAIN = 1.05


@dataclass(frozen=True)
class Sample:
    """The loader's running totals at one moment (all since its start)."""

    time: float  # seconds, on the tuner's clock
    batches: int  # delivered
    wait_seconds: float  # the consumer's wait for results
    calls: int  # calls of the yield function finished
    call_seconds: float  # their total time
    cpu_seconds: float  # the process's CPU time


@dataclass(frozen=True)
class Window(Rates):
    """The figures between two samples, taken with ``threads`` threads."""

    seconds: float
    batches: int
    wait_seconds: float
    calls: int
    call_seconds: float
    cpu_seconds: float
    threads: int

    @classmethod
    def between(cls, start: Sample, end: Sample, threads: int) -> Window:
        return cls(
            seconds=end.time - start.time,
            batches=end.batches - start.batches,
            wait_seconds=end.wait_seconds - start.wait_seconds,
            calls=end.calls - start.calls,
            call_seconds=end.call_seconds - start.call_seconds,
            cpu_seconds=end.cpu_seconds - start.cpu_seconds,
            threads=threads,
        )

    @property
    def call(self) -> float:
        """Mean seconds per call."""
        return self.call_seconds / self.calls if self.calls else 0.0

    @property
    def step(self) -> float:
        """The consumer's own seconds per batch, waiting left out."""
        return max(0.0, self.seconds - self.wait_seconds) / self.batches if self.batches else 0.0


def decide(window: Window, cores: float, min_threads: int, max_threads: int) -> tuple[int, str]:
    """The thread count for the next window, and why (see the module's docstring).

    Args:
        window: the figures of the last window.
        cores: the cores this process may run on.
        min_threads, max_threads: the bounds of the answer.
    """
    n = window.threads
    if not window.batches or not window.calls or window.seconds <= 0:
        return n, "nothing measured"
    call, step = window.call, window.step
    needed = max_threads if step <= 0 else math.ceil(MARGIN * call / step - 1e-9)
    used = window.cpu_seconds / window.seconds  # cores busy in this process
    per_thread = used / n
    idle = max(0.0, cores - used)
    fed = max_threads if per_thread <= 0 else n + math.floor(idle / per_thread + 1e-9)
    wait = window.wait_fraction
    figures = (
        f"waited {100 * wait:.0f}%, call {1e3 * call:.1f} ms, step {1e3 * step:.1f} ms, "
        f"CPU {used:.2f} of {cores:g} cores"
    )
    if wait > INPUT_BOUND:
        target = min(max(n + 1, needed), fed, max_threads)
        if target <= n:
            return n, f"input-bound but the CPU is busy ({figures})"
        return target, f"input-bound ({figures})"
    if wait < KEPT_UP and needed < n:
        return max(needed, (n + 1) // 2, min_threads), f"keeping up with fewer threads ({figures})"
    return n, figures


class ThreadTuner:
    """Chooses a loader's thread count while it runs (see the module's docstring).

    Args:
        min_threads: the fewest threads.
        max_threads: the most threads; ``None``: 32.
        cores: the cores the process may use; ``None``: ``available_cores()``.
        clock: seconds, for the windows; ``time.monotonic`` by default.
        cpu_seconds: the process's CPU time; psutil's reading of this process by default.
        min_seconds: the shortest window; it also lasts two mean call times at least.
        min_batches: the fewest batches in a window.

    Raises:
        TypeError, ValueError: a bound is not an int, below 1, or ``max_threads < min_threads``.
    """

    def __init__(
        self,
        min_threads: int = 1,
        max_threads: int | None = None,
        *,
        cores: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        cpu_seconds: Callable[[], float] | None = None,
        min_seconds: float = 0.1,
        min_batches: int = 3,
    ) -> None:
        self.min_threads = check_int("min_threads", min_threads, minimum=1)
        self.max_threads = check_int("max_threads", 32 if max_threads is None else max_threads, minimum=1)
        if self.max_threads < self.min_threads:
            raise ValueError(f"max_threads ({self.max_threads}) must be at least min_threads ({self.min_threads})")
        self.cores = float(cores) if cores is not None else float(available_cores())
        self.clock = clock
        self.cpu_seconds = cpu_seconds if cpu_seconds is not None else _process_cpu_seconds(psutil.Process())
        self.min_seconds = min_seconds
        self.min_batches = check_int("min_batches", min_batches, minimum=1)
        self.name = "loader"
        self.changes: list[tuple[int, int, str]] = []  # (from, to, why), in order
        self._start: Sample | None = None
        self._measured = False  # a first window was measured
        self._grown_from: tuple[int, float] | None = None  # (count, rate) before the last growth
        self._ceiling: tuple[int, int] | None = None  # (count, windows left) not to grow past

    @property
    def initial(self) -> int:
        """The thread count to start with, one per core within the bounds.

        Enough for CPU-bound work from the start; latency-bound work grows from it
        after the first window, which ends with the first batch delivered.
        """
        return min(self.max_threads, max(self.min_threads, int(self.cores)))

    def restart(self, sample: Sample) -> None:
        """Begin a new window at ``sample``: at an epoch's start, so that time between epochs does not count.

        :meta private:
        """
        self._start = sample

    def due(self, batches: int) -> bool:
        """Whether a window begun earlier may have ended at ``batches`` delivered (cheap: no clock read).

        :meta private:
        """
        start = self._start
        return start is not None and batches - start.batches >= (
            self.min_batches if self.changes or self._measured else 1
        )

    def observe(self, sample: Sample, threads: int) -> int | None:
        """Take the loader's totals now; a new thread count when a window ended with a change, else ``None``.

        Args:
            sample: the running totals now (``time`` and ``cpu_seconds`` from this tuner's clocks).
            threads: the thread count during the window.

        :meta private:
        """
        start = self._start
        if start is None:
            self._start = sample
            return None
        window = Window.between(start, sample, threads)
        if self._measured or self.changes:
            if window.batches < self.min_batches or window.seconds < max(self.min_seconds, 2 * window.call):
                return None
        elif not window.batches or window.seconds < window.call:
            return None  # the first window ends with the first batch: a start input-bound on latency grows at once
        self._measured = True
        self._start = sample
        target, why = self._next(window)
        if target == threads:
            log.debug("%s: %d threads kept: %s", self.name, threads, why)
            return None
        log.info("%s: %d -> %d threads: %s", self.name, threads, target, why)
        self.changes.append((threads, target, why))
        return target

    def sample(self, batches: int, wait_seconds: float, calls: int, call_seconds: float) -> Sample:
        """A ``Sample`` of these totals, timed by this tuner's clock and CPU reading.

        :meta private:
        """
        return Sample(self.clock(), batches, wait_seconds, calls, call_seconds, self.cpu_seconds())

    def measure(self, times: Iterable[CallTimes], batches: int, wait_seconds: float) -> Sample:
        """A ``Sample`` of a loader's totals now.

        Args:
            times: each loader thread's call times.
            batches: the batches delivered.
            wait_seconds: the consumer's wait on the queue.

        :meta private:
        """
        times = list(times)
        return self.sample(batches, wait_seconds, sum(t.count for t in times), sum(t.total for t in times))

    def _next(self, window: Window) -> tuple[int, str]:
        n = window.threads
        if self._ceiling is not None:
            count, left = self._ceiling
            self._ceiling = (count, left - 1) if left > 1 else None
        grown, self._grown_from = self._grown_from, None
        # Only a busy CPU makes more threads slower; right after a growth, a window of
        # sleeping threads can look no faster only because the new ones have not delivered yet.
        cpu_busy = window.seconds > 0 and window.cpu_seconds / window.seconds >= 0.5 * self.cores
        if grown is not None and window.wait_fraction > INPUT_BOUND and cpu_busy:
            before, rate = grown
            now = window.batches_per_second
            if now < GAIN * rate and before < n:
                self._ceiling = (before, HOLD)
                return before, f"{n} threads delivered {now:.1f} batches/s, {before} gave {rate:.1f}"
        target, why = decide(window, self.cores, self.min_threads, self.max_threads)
        if self._ceiling is not None and target > n:
            target = max(n, min(target, self._ceiling[0]))
            if target == n:
                return n, f"{why}; more threads did not pay lately"
        if target > n:
            self._grown_from = (n, window.batches_per_second)
        return target, why


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity), else the machine's."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _process_cpu_seconds(process: psutil.Process) -> Callable[[], float]:
    """A function giving ``process``'s CPU time so far (user and system), from psutil."""

    def cpu_seconds() -> float:
        times = process.cpu_times()
        return times.user + times.system

    return cpu_seconds
