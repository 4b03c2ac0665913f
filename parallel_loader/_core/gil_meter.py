"""How busy this process's GIL is, measured while it runs: ``GilMeter``, ``GilWindow`` and ``gil_ceiling``.

CPython gives no count of the time its GIL is held. So a probe thread sleeps
``PERIOD`` in a loop and checks how late it wakes. It needs the GIL to run
again: a wake later than ``LATE`` found the GIL held. The share of such wakes
estimates how busy the GIL is. It misses holds shorter than ``LATE``, and it
counts a wake delayed by a lack of cores as held.

``gil_ceiling`` reads a window of these figures with the process's CPU time
and the host's idle cores. Say the threads get much less than a core each, while
the GIL is busy and the host has idle cores: the GIL holds them back. The
cores the process does use are then the threads it can keep busy: its *GIL
ceiling*. See :doc:`/guide/host_scale`.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass

import psutil

__all__ = ["GilMeter", "GilReading", "GilWindow", "gil_ceiling", "host_idle"]

log = logging.getLogger(__name__)

PERIOD = 0.01  # the probe's sleep: 100 wakes a second, each a few microseconds of the GIL
LATE = 0.0005  # a wake later than this found the GIL held (a quiet machine's wakes are 0.1-0.2 ms late)
# gil_ceiling's thresholds: a window this long at least, a GIL held at this share of the wakes or more,
# threads getting less than this share of a core each, a host with this many idle cores, and a process busy.
MIN_SECONDS = 1.0
BUSY = 0.5
STARVED = 0.75
IDLE_CORES = 0.75
FULL_GIL = 0.9  # a process whose GIL holds its threads back uses about a core at least


@dataclass(frozen=True)
class GilReading:
    """The meter's running totals at one moment (all since the meter started)."""

    wall: float  # seconds on the monotonic clock
    cpu: float  # the process's CPU seconds
    idle: float  # the host's idle CPU seconds, all cores together
    wakes: int  # the probe's wakes
    held: int  # ...that found the GIL held
    pid: int = 0  # the process measured

    def since(self, earlier: GilReading) -> GilWindow:
        """The figures between ``earlier`` and this reading."""
        seconds = max(self.wall - earlier.wall, 1e-9)
        wakes = self.wakes - earlier.wakes
        return GilWindow(
            seconds=seconds,
            cores=(self.cpu - earlier.cpu) / seconds,
            idle_cores=(self.idle - earlier.idle) / seconds,
            held=(self.held - earlier.held) / wakes if wakes else 0.0,
        )


@dataclass(frozen=True)
class GilWindow:
    """What a process did between two readings."""

    seconds: float
    cores: float  # the process's CPU time over the window's time
    idle_cores: float  # the host's idle CPU time over the window's time
    held: float  # the share of the probe's wakes that found the GIL held


def gil_ceiling(window: GilWindow, threads: int) -> int | None:
    """The threads a process can keep busy, when its GIL holds back its ``threads``; else None.

    Args:
        window: the process's figures while its ``threads`` threads were busy.
        threads: the threads making calls in the process.

    Returns:
        About the cores the process used, at least 1 and fewer than ``threads``. None
        when the window is short, the GIL mostly free, or the threads near a core each.
        None too when the host has no idle core: more processes would not run either.
        None when the process used under 0.9 cores: its GIL had time to spare.
    """
    if window.seconds < MIN_SECONDS or window.held < BUSY or window.idle_cores < IDLE_CORES:
        return None
    if window.cores < FULL_GIL:  # the GIL is held on a core: under 0.9 cores, it had free time
        return None
    if window.cores >= STARVED * threads:
        return None
    ceiling = max(1, round(window.cores))
    return ceiling if ceiling < threads else None


class GilMeter:
    """A probe thread that measures how busy this process's GIL is; ``reading()`` gives the totals.

    The thread is a daemon; ``close()`` ends it within one ``period``. It costs
    about 1% of a core, mostly the kernel's work to wake a thread 100 times a second.

    Args:
        period: the probe's sleep, in seconds.
        late: a wake later than this found the GIL held.
    """

    def __init__(self, period: float = PERIOD, late: float = LATE) -> None:
        self.period = period
        self.late = late
        self._wakes = 0
        self._held = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._probe, name="parallel_loader-gil-meter", daemon=True)
        self._thread.start()

    def reading(self) -> GilReading:
        """The running totals now."""
        return GilReading(time.monotonic(), time.process_time(), host_idle(), self._wakes, self._held, os.getpid())

    def close(self) -> None:
        """End the probe thread."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join()

    def _probe(self) -> None:
        period, late, clock, stop = self.period, self.period + self.late, time.perf_counter, self._stop
        while not stop.is_set():
            started = clock()
            time.sleep(period)
            held = clock() - started > late
            self._wakes += 1  # only this thread writes the counts; a reader sees one or the other
            self._held += held


def host_idle() -> float:
    """The idle CPU seconds since boot of the cores this process may run on (waits on I/O count as idle).

    A CPU quota (cgroup ``cpu.max``) is not seen: a throttled container's cores may look idle.
    """
    per_core = psutil.cpu_times(percpu=True)
    try:
        cores = [i for i in os.sched_getaffinity(0) if i < len(per_core)]
    except (AttributeError, OSError):
        cores = list(range(len(per_core)))
    return sum(per_core[i].idle + getattr(per_core[i], "iowait", 0.0) for i in cores)
