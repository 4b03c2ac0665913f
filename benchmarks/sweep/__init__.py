"""Throughput of the threaded loader against its thread count.

For each thread count N the consumer (the main thread) takes ``--batches``
batches from a ``DataLoader`` and runs a step on each, the same loop as
``Train``'s pass. Reported per N: batches/s, speedup over 1 thread, efficiency
against the ideal ``min(N / T_load, 1 / T_step)`` (for the CPU-bound decode and
train workloads also against ``min(min(N, cores) / T_load, 1 / T_step)``), the fraction of time the
consumer waited for data, the process's CPU % (psutil) and peak RSS.

Pipeline fill: the first batch cannot come before one ``T_load``. The "all"
columns include that fill; the "steady" columns leave it out (the rate between
the first and the last step's start, and the waits after the first batch).

Workloads:

* ``latency``: the original experiment, scaled down: a loader that sleeps
  ``T_load`` per batch and a step that sleeps ``T_step`` (both release the GIL).
* ``decode``: clips decoded by ``parallel_loader.video.VideoFolder`` from the
  sample video set, and a step of ``--step`` seconds (sleep) standing in for the
  accelerator. ``T_load`` is measured by decoding batches serially first.
* ``train``: the example's TensorFlow train step on those clips. A ``serial``
  row (load, then step, in the main thread) is the baseline being replaced.
* ``shift``: the latency workload whose ``T_load`` changes to ``--load-after``
  half way through each run.

``--threads`` may name ``auto`` next to the fixed counts (``DataLoader(num_threads="auto")``);
its row is followed by how it compares with the best fixed count of the same
run, by which batch it reached 95% of its final rate, and the count it settled on.
``--load-max`` draws each call's ``T_load`` uniformly between ``--load`` and it.

    python -m benchmarks.sweep --workload latency --threads 1,2,4,8,16,32
    python -m benchmarks.sweep --workload latency --load 0.05 --step 0.01 --threads 1,2,5,10
    python -m benchmarks.sweep --workload decode --threads 1,2,4,8
    python -m benchmarks.sweep --workload train --threads 1,2,4
    python -m benchmarks.sweep --workload latency --load 0.05 --load-max 0.1 --step 0.005 --threads 4,8,16,auto

Each run shows its progress on stderr (a bar on a terminal, a line per run
otherwise; ``--no-progress`` for none). A target that the run is too short to
reach even with no overhead (the pipeline fill dominates) is reported as not

The sweep is a package, one module a concern: ``workloads`` (what is fed and run,
its costs, the ideal rate, and the thread counts a sweep names), ``measure`` (one
epoch at one thread count, and how fast an auto run converged), ``table`` (the
rows over rounds and the table printed), ``targets`` (the latency targets and the
autotune lines, judged on those rows), ``plot`` (the PNG) and ``cli`` (the options
and ``main``).
"""

from __future__ import annotations

from .cli import main, parse_args
from .measure import measure
from .plot import plot
from .table import print_table, summarise
from .targets import autotune_lines, check_targets
from .workloads import AUTO, SERIAL, Repeat, Sleeper, Workload, build, parse_threads

__all__ = [
    "AUTO",
    "SERIAL",
    "Repeat",
    "Sleeper",
    "Workload",
    "autotune_lines",
    "build",
    "check_targets",
    "main",
    "measure",
    "parse_args",
    "parse_threads",
    "plot",
    "print_table",
    "summarise",
]
