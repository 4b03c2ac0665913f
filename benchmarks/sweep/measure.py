"""One run of a sweep: one epoch at one thread count, with its rates, waits, resources and, for auto, convergence.

It measures and returns figures; it knows nothing of rounds, tables or targets.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from typing import Any

from parallel_loader import DataLoader, DevicePrefetcher
from parallel_loader.train._progress import PassProgress
from parallel_loader.train._train import PassStats

from .._resources import ResourceSampler
from .workloads import AUTO, SERIAL, Workload, ideal, thread_label

__all__ = ["measure", "reached"]


def measure(
    workload: Workload,
    threads: int,
    max_len: int,
    progress: str | None = None,
    label: str = "",
    prefetcher: DevicePrefetcher | None = None,
) -> dict[str, float]:
    """Consume one epoch with ``threads`` loader threads (``SERIAL``: none) and return its figures.

    ``progress`` is a ``progress_mode``: the run's bar, its line when it ends, or nothing.
    With a ``prefetcher``, the loader's batches reach the step already copied to its device.
    """
    step = workload.step
    waits: list[float] = []
    starts: list[float] = []
    waited = 0.0
    with ResourceSampler() as resources, contextlib.ExitStack() as stack:
        start = time.perf_counter()
        if threads == SERIAL:  # the main thread loads each batch itself: its wait is the load
            loader = None
            batches = (workload.yield_fn(index) for index in range(len(workload.yield_fn)))
        else:
            count: int | str = "auto" if threads == AUTO else threads
            loader = stack.enter_context(
                DataLoader(workload.yield_fn, count, max_len, name=f"sweep{thread_label(threads)}")
            )
            batches = iter(loader) if prefetcher is None else prefetcher.iterate(loader)
        counts: list[int] = []
        display = stack.enter_context(contextlib.closing(PassProgress(label, progress, loader, len(workload.yield_fn))))
        while True:
            before = time.perf_counter()
            try:
                batch = next(batches)
            except StopIteration:
                break
            now = time.perf_counter()
            waits.append(now - before)
            waited += now - before
            starts.append(now)
            if loader is not None:
                counts.append(loader.num_threads)
            step(batch)
            display.update(waited)
        seconds = time.perf_counter() - start
        display.finish(PassStats(batches=len(waits), seconds=seconds, wait_seconds=waited))
    n = len(waits)
    fill = waits[0]
    steady_span = starts[-1] - starts[0]
    ideal_rate = ideal(workload, threads)
    ideal_cores = ideal(workload, min(threads, os.cpu_count() or 1)) if workload.cpu_bound else ideal_rate
    rate = n / seconds
    steady = (n - 1) / steady_span if n > 1 and steady_span > 0 else rate
    return {
        "batches": n,
        "seconds": seconds,
        "batches_per_s": rate,
        "steady_batches_per_s": steady,
        "ideal_batches_per_s": ideal_rate,
        "efficiency": rate / ideal_rate,
        "steady_efficiency": steady / ideal_rate,
        "ideal_cores_batches_per_s": ideal_cores,
        "steady_efficiency_cores": steady / ideal_cores,
        "fill_s": fill,
        "wait_fraction": sum(waits) / seconds,
        "steady_wait_fraction": sum(waits[1:]) / (seconds - fill) if seconds > fill else 0.0,
        "cpu_percent": resources.cpu_percent,
        "cpu_percent_peak_sample": max(resources.cpu_samples, default=resources.cpu_percent),
        "peak_rss_mb": resources.peak_rss / 2**20,
        "others_cpu_percent": resources.others_percent,
        **(_convergence(starts, counts) if threads == AUTO else {}),
    }


_WINDOW = 20  # batches over which an auto run's rate is judged


def _convergence(starts: list[float], counts: list[int]) -> dict[str, Any]:
    """For an auto run: its final rate (last 20% of batches), the first batch from which it ran at 95% of
    that (see ``reached``), the same after the middle of the run, the thread count it ended on, and the
    batches' start times (``batch_starts``), to judge it against the best fixed count afterwards."""
    n = len(starts)
    tail = max(_WINDOW, n // 5)
    final = (tail - 1) / (starts[-1] - starts[-tail]) if n > tail and starts[-1] > starts[-tail] else 0.0
    return {
        "final_batches_per_s": final,
        "reached_95_at": reached(starts, 0.95 * final),
        "reached_95_after_middle": reached(starts, 0.95 * final, n // 2) - n // 2,
        "settled_threads": float(statistics.median(counts[-tail:])) if counts else float("nan"),
        "max_threads_seen": float(max(counts, default=0)),
        "batch_starts": starts,
    }


def reached(starts: list[float], rate: float, first: int = 0) -> float:
    """The first batch from ``first`` on from which ``_WINDOW`` batches came at ``rate`` or faster and all the
    batches after it did on average; NaN if none did."""
    n = len(starts)
    for i in range(first, n - _WINDOW):
        span = starts[i + _WINDOW] - starts[i]
        rest = starts[-1] - starts[i]
        if span > 0 and _WINDOW / span >= rate and (n - 1 - i) / rest >= rate:
            return float(i)
    return float("nan")
