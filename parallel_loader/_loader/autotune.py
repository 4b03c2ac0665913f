"""Online tuning of a loader's thread count from what it measures.

``ThreadTuner`` is what ``DataLoader(num_threads="auto")`` runs. After each
batch, the consuming thread asks it whether a sample is due (``due``: a clock
read, no more). When one is, it hands the tuner a ``Sample`` of the loader's
running totals (``observe``). A window ends when it is long enough. It ends
early when the consumer waited and the calls measured need more threads, threads
that mostly wait (see ``ThreadTuner.observe``). The tuner then compares the
window's end with its start. It answers a new thread count, or ``None`` to keep
it. The decision itself (``decide``) is a function of one ``Window``'s figures:

* ``step`` is the consumer's own time per batch: the window's time less its
  wait, per batch. With the mean call time ``call``, it gives the threads the
  consumer's pace needs: ``needed = ceil(1.1 * call / step)``. That is all of
  ``max_threads`` when the consumer does not wait at all between batches;
* the process's CPU time against the cores it may run on gives the
  threads the CPU can feed: each thread costs ``used / threads`` cores, and the
  idle cores pay for that many more. A core that another process keeps busy is
  not idle (the cores' idle time, ``gil_meter.host_idle``);
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

from .._core.checks import check_int
from .._core.gil_meter import host_idle
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
# A thread that costs less than this share of a core mostly waits (a sleep, I/O, a remote store):
# more of them cost next to no CPU, so a window may end early to add them (see ThreadTuner.observe).
WAITING_THREAD = 0.1


@dataclass(frozen=True)
class Sample:
    """The loader's running totals at one moment (all since its start)."""

    time: float  # seconds, on the tuner's clock
    batches: int  # delivered
    wait_seconds: float  # the consumer's wait for results
    calls: int  # calls of the yield function finished
    call_seconds: float  # their total time
    cpu_seconds: float  # the process's CPU time
    idle_seconds: float = math.nan  # the idle CPU time of the cores this process may use (nan: not read)


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
    idle_seconds: float = math.nan  # idle CPU time of this process's cores, others' use left out (nan: not read)

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
            idle_seconds=end.idle_seconds - start.idle_seconds,
        )

    @property
    def call(self) -> float:
        """Mean seconds per call."""
        return self.call_seconds / self.calls if self.calls else 0.0

    @property
    def step(self) -> float:
        """The consumer's own seconds per batch, waiting left out."""
        return max(0.0, self.seconds - self.wait_seconds) / self.batches if self.batches else 0.0

    def needed(self, most: int) -> int:
        """The threads the consumer's pace needs: ``ceil(MARGIN * call / step)``, or ``most`` for a step of 0."""
        step = self.step
        return most if step <= 0 else math.ceil(MARGIN * self.call / step - 1e-9)

    def cpu_busy(self, cores: float) -> bool:
        """Whether this process kept half the ``cores`` busy or more: only then can more threads be slower."""
        return self.seconds > 0 and self.cpu_seconds / self.seconds >= 0.5 * cores


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
    needed = window.needed(max_threads)
    used = window.cpu_seconds / window.seconds  # cores busy in this process
    per_thread = used / n
    idle = max(0.0, cores - used)
    if not math.isnan(window.idle_seconds):  # read: a core that another process keeps busy is not idle
        idle = min(idle, max(0.0, window.idle_seconds / window.seconds))
    fed = max_threads if per_thread <= 0 else n + math.floor(idle / per_thread + 1e-9)
    wait = window.wait_fraction
    figures = (
        f"waited {100 * wait:.0f}%, call {1e3 * call:.1f} ms, step {1e3 * step:.1f} ms, "
        f"CPU {used:.2f} of {cores:g} cores"
    )
    if not math.isnan(window.idle_seconds):
        figures += f", {window.idle_seconds / window.seconds:.1f} idle"
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
        cpu_seconds: the process's CPU time; ``time.process_time`` by default.
        min_seconds: the shortest window; it also lasts two mean call times at least.
        min_batches: the fewest batches in a window.

    With its own clocks, the tuner also reads its cores' idle time (``gil_meter.host_idle``).
    A core another process keeps busy is then not counted as idle.

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
        # The process's CPU time, all threads: time.process_time reads it in microseconds, where
        # psutil's read of /proc was slow on the consumer's thread among ten busy loader threads.
        self.cpu_seconds = cpu_seconds if cpu_seconds is not None else time.process_time
        self.min_seconds = min_seconds
        self.min_batches = check_int("min_batches", min_batches, minimum=1)
        self.name = "loader"
        self.changes: list[tuple[int, int, str]] = []  # (from, to, why), in order
        self._start: Sample | None = None
        self._measured = False  # a first window was measured
        self._shortest = min_seconds  # the shortest next window: min_seconds, two of the last window's call times
        self._grown_from: tuple[int, float] | None = None  # (count, rate) before the last growth
        self._ceiling: tuple[int, int] | None = None  # (count, windows left) not to grow past
        self._reads_idle = clock is time.monotonic and cpu_seconds is None  # the idle time is on these clocks

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

    def due(self, batches: int, waited: float) -> bool:
        """Whether a window begun earlier may end at ``batches`` delivered (cheap: a clock read at most).

        Args:
            batches: the batches delivered so far.
            waited: the consumer's wait on the queue so far, in seconds.

        :meta private:
        """
        start = self._start
        if start is None or batches <= start.batches:
            return False
        if not self._measured:
            return True  # the first window ends with the first batch
        elapsed = self.clock() - start.time
        if batches - start.batches >= self.min_batches and elapsed >= self._shortest:
            return True
        # The consumer waited: the window may end early (see observe). It waits anyway, so measuring costs it nothing.
        return waited - start.wait_seconds > INPUT_BOUND * elapsed

    def observe(self, sample: Sample, threads: int) -> int | None:
        """Take the loader's totals now; a new thread count when a window ended with a change, else ``None``.

        A window ends when it has ``min_batches`` batches and lasts ``min_seconds`` and two
        mean call times. It ends early when the consumer waited more than 2% of it. The calls
        finished in it must need more threads than run, threads that mostly wait (``_ends_early``).
        So a call's cost that grows is followed within a batch or two of the queue running dry.

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
        early = ""
        if not self._measured:
            if not window.batches or window.seconds < window.call:
                return None  # the first window ends with the first batch: a start input-bound on latency grows at once
        elif window.batches < self.min_batches or window.seconds < max(self.min_seconds, 2 * window.call):
            if not self._ends_early(window):
                return None
            early = "; the window ended early"
        self._measured = True
        self._start = sample
        self._shortest = max(self.min_seconds, 2 * window.call)
        target, why = self._next(window)
        why += early
        if target == threads:
            log.debug("%s: %d threads kept: %s", self.name, threads, why)
            return None
        log.info("%s: %d -> %d threads: %s", self.name, threads, target, why)
        self.changes.append((threads, target, why))
        return target

    def sample(self, batches: int, wait_seconds: float, calls: int, call_seconds: float) -> Sample:
        """A ``Sample`` of these totals, timed by this tuner's clock and CPU reading (and its cores' idle time).

        :meta private:
        """
        idle = host_idle() if self._reads_idle else math.nan
        return Sample(self.clock(), batches, wait_seconds, calls, call_seconds, self.cpu_seconds(), idle)

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
        if grown is not None and window.wait_fraction > INPUT_BOUND and window.cpu_busy(self.cores):
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

    def _ends_early(self, window: Window) -> bool:
        """Whether a window too short to end may end now: the consumer waited, and the calls so far need more threads.

        Only where more threads cost next to no CPU: the CPU is less than half busy, and each thread
        uses under ``WAITING_THREAD`` of a core. Elsewhere more threads may be slower, and a full window tells.
        """
        return (
            window.calls >= self.min_batches
            and window.wait_fraction > INPUT_BOUND
            and not window.cpu_busy(self.cores)
            and window.cpu_seconds < WAITING_THREAD * window.threads * window.seconds
            and window.needed(self.max_threads) > window.threads
        )


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity), else the machine's."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1
