"""What a benchmark run costs and what competes with it: this process's CPU and memory, and the neighbours' load.

``ResourceSampler`` measures a run; ``wait_for_quiet`` waits before one for the
other processes to calm down (the ``--quiet`` option of ``_common``);
``trace_video_opens`` records the video files a run opens. The module
knows nothing of the scripts, their options or their output.
"""

from __future__ import annotations

import sys
import threading
import time

import psutil

__all__ = ["ResourceSampler", "busy_seconds", "others_cpu_percent", "trace_video_opens", "wait_for_quiet"]


class ResourceSampler:
    """Samples this process's CPU % and resident memory in a background thread.

    Use as a context manager around the measured run. ``cpu_percent`` is the mean
    over the run (100 = one core busy), computed from the process's CPU times at
    both ends; ``cpu_samples`` holds the ``psutil`` samples taken every ``interval``
    seconds, and ``peak_rss`` the largest resident set size seen (bytes).

    ``others_percent`` is the machine's busy CPU % during the run less this
    process's and its children's (worker processes, seen at each sample): the load
    of a neighbour, the main source of noise on a shared machine.
    """

    def __init__(self, interval: float = 0.1) -> None:
        self.interval = interval
        self.cpu_samples: list[float] = []
        self.peak_rss = 0
        self.cpu_percent = 0.0
        self.others_percent = 0.0
        self._process = psutil.Process()
        self._children: dict[int, float] = {}  # pid -> CPU seconds used since first seen
        self._children_start: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ResourceSampler", daemon=True)

    def __enter__(self) -> ResourceSampler:
        self._process.cpu_percent(None)  # the first call only sets the baseline
        self.peak_rss = self._process.memory_info().rss
        for child in self._process.children(recursive=True):
            self._see(child)  # already running: count only what they use from now on
        self._t0 = time.perf_counter()
        self._cpu0 = _cpu_seconds(self._process)
        self._busy0 = busy_seconds()
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample_children()
        wall = time.perf_counter() - self._t0
        own = _cpu_seconds(self._process) - self._cpu0
        busy = busy_seconds() - self._busy0
        self.peak_rss = max(self.peak_rss, self._process.memory_info().rss)
        if wall > 0:
            self.cpu_percent = 100.0 * own / wall
            self.others_percent = max(0.0, 100.0 * (busy - own - sum(self._children.values())) / wall)

    @property
    def children_seconds(self) -> float:
        """CPU seconds this process's children (worker processes) used during the run."""
        return sum(self._children.values())

    def _see(self, child: psutil.Process) -> None:
        try:
            used = _cpu_seconds(child)
        except psutil.Error:
            return
        start = self._children_start.setdefault(child.pid, used if not hasattr(self, "_t0") else 0.0)
        self._children[child.pid] = used - start

    def _sample_children(self) -> None:
        try:
            children = self._process.children(recursive=True)
        except psutil.Error:
            return
        for child in children:
            self._see(child)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.cpu_samples.append(self._process.cpu_percent(None))
            self.peak_rss = max(self.peak_rss, self._process.memory_info().rss)
            self._sample_children()


def _cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def busy_seconds() -> float:
    """CPU seconds the whole machine has been busy (all cores, all processes)."""
    t = psutil.cpu_times()
    return t.user + t.nice + t.system + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0) + getattr(t, "steal", 0.0)


def others_cpu_percent(seconds: float = 0.3) -> float:
    """CPU % that other processes use now: the whole machine's busy time while this process sleeps.

    100 is one core busy. A figure well above 0 means a neighbour is competing for the cores.
    """
    process = psutil.Process()
    mine, busy = _cpu_seconds(process), busy_seconds()
    time.sleep(seconds)
    used = (busy_seconds() - busy) - (_cpu_seconds(process) - mine)
    return max(0.0, 100.0 * used / seconds)


def wait_for_quiet(max_wait: float, threshold: float = 40.0) -> float:
    """Wait up to ``max_wait`` seconds for other processes to use less than ``threshold`` CPU %.

    Returns the last figure measured (NaN with ``max_wait`` 0: no wait, no probe).
    On a shared machine a neighbour's load is the main source of noise; the
    scripts report the load measured during each run with ``ResourceSampler``.
    """
    if max_wait <= 0:
        return float("nan")  # not asked to wait: spare the 0.3 s probe
    deadline = time.monotonic() + max_wait
    while True:
        others = others_cpu_percent()
        if others < threshold or time.monotonic() >= deadline:
            return others


def trace_video_opens(suffix: str) -> list[str]:
    """Record every file ending in ``suffix`` this process opens from now on, and return the list that fills.

    Python's ``open`` is seen through an audit hook (it cannot be removed), and
    PyAV's and OpenCV's opens by wrapping ``av.open`` and ``cv2.VideoCapture``.
    """
    opened: list[str] = []

    def audit(event: str, args: tuple) -> None:
        if event == "open" and isinstance(args[0], str) and args[0].endswith(suffix):
            opened.append(args[0])

    sys.addaudithook(audit)
    import av
    import cv2

    real_open, real_capture = av.open, cv2.VideoCapture
    av.open = lambda file, *a, **k: opened.append(str(file)) or real_open(file, *a, **k)
    cv2.VideoCapture = lambda file, *a, **k: opened.append(str(file)) or real_capture(file, *a, **k)
    return opened
