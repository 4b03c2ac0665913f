"""Items per second of tiny items through FIFOQueue vs queue.Queue.

``--producers`` threads put small ints into one bounded queue and the main thread
takes them out. Both queues run in the same process, in interleaved rounds (the
order alternates each round), so a noisy neighbour hurts both alike. The target
is FIFOQueue >= 0.8x queue.Queue.

Then the cost of the loader's telemetry (``DataLoader.stats()``): ``--loader-items``
tiny batches (a yield function returning its index) through a ``DataLoader`` of
``--loader-threads`` threads with ``telemetry=True`` and ``False``, interleaved the
same way; the target is a loss of less than 1%. Tiny batches put the loader's own
cost, about 10 µs per batch, in the foreground, and on a shared machine single runs
of it vary by 2-3x; the cost is judged, as ``timeit`` advises, on the fastest run of
each (CPU µs per batch): slower runs are slowed by interference, not by the code.
The medians are printed too.

    python -m benchmarks.queue_overhead --items 200000 --rounds 7
"""

from __future__ import annotations

import argparse
import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from parallel_loader import DataLoader, FIFOQueue, YieldFunction

from ._common import (
    RunProgress,
    add_noise_arguments,
    add_out_argument,
    add_output_arguments,
    format_table,
    make_parser,
    spread,
    write_report,
)
from ._resources import ResourceSampler, wait_for_quiet

__all__ = ["main", "measure"]

TARGET_RATIO = 0.8
TELEMETRY_TARGET = 0.01  # the most throughput the telemetry may cost


class _Index(YieldFunction):
    """``items`` batches, each its index: the cheapest yield function, so the loader's own cost shows."""

    def __init__(self, items: int) -> None:
        self.items = items

    def __len__(self) -> int:
        return self.items

    def __call__(self, index: int) -> int:
        return index


def measure_loader(items: int, threads: int, max_len: int, telemetry: bool) -> tuple[float, float]:
    """Batches per second of one epoch of ``items`` tiny batches through a DataLoader, and CPU µs per batch."""
    with DataLoader(_Index(items), threads, max_len, telemetry=telemetry, name="overhead") as loader:
        start, cpu = time.perf_counter(), time.process_time()
        count = sum(1 for _ in loader)
        return count / (time.perf_counter() - start), 1e6 * (time.process_time() - cpu) / count


def telemetry_cost(args: argparse.Namespace) -> dict[str, Any]:
    """Interleaved rounds of the loader with and without telemetry; prints the table."""
    rates: dict[bool, list[float]] = {True: [], False: []}
    cpu: dict[bool, list[float]] = {True: [], False: []}
    for r in range(args.loader_rounds):
        wait_for_quiet(args.quiet)
        for telemetry in (True, False) if r % 2 == 0 else (False, True):
            rate, cpu_us = measure_loader(args.loader_items, args.loader_threads, args.max_len[0], telemetry)
            rates[telemetry].append(rate)
            cpu[telemetry].append(cpu_us)
    on, off = spread(rates[True]), spread(rates[False])
    cpu_on, cpu_off = spread(cpu[True]), spread(cpu[False])
    print(
        f"DataLoader, {args.loader_threads} threads, max_len {args.max_len[0]}, {args.loader_items:,} tiny batches "
        f"per measurement, {args.loader_rounds} interleaved rounds; median (min-max)"
    )
    cost = cpu_on.low / cpu_off.low - 1  # the fastest runs: least disturbed by other processes
    print(
        format_table(
            ["telemetry", "batches/s", "CPU µs per batch"],
            [["on", on.fmt(0), cpu_on.fmt(2)], ["off", off.fmt(0), cpu_off.fmt(2)]],
        )
    )
    print(
        f"telemetry cost: {100 * cost:+.2f}% CPU per batch in the fastest runs ({cpu_on.low - cpu_off.low:+.2f} µs); "
        f"medians: {100 * (1 - on.median / off.median):+.2f}% of batches/s, "
        f"{100 * (cpu_on.median / cpu_off.median - 1):+.2f}% CPU per batch; target < {100 * TELEMETRY_TARGET:g}%: "
        f"{'met' if cost < TELEMETRY_TARGET else 'MISSED'}"
    )
    return {"on": rates[True], "off": rates[False], "cpu_us_on": cpu[True], "cpu_us_off": cpu[False]}


def _make(kind: str, max_len: int) -> tuple[Callable[[Any], None], Callable[[], Any]]:
    if kind == "FIFOQueue":
        q = FIFOQueue(max_len)
        return q.enqueue, q.dequeue
    if kind == "queue.Queue":
        std = queue.Queue(maxsize=max_len)
        return std.put, std.get
    raise ValueError(f"unknown queue {kind!r}")


def measure(kind: str, items: int, producers: int, max_len: int) -> float:
    """Move ``items`` ints from ``producers`` threads to this one; return items per second."""
    put, get = _make(kind, max_len)
    per_producer = items // producers

    def produce() -> None:
        for i in range(per_producer):
            put(i)

    threads = [threading.Thread(target=produce, name=f"producer-{i}") for i in range(producers)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for _ in range(per_producer * producers):
        get()
    seconds = time.perf_counter() - start
    for thread in threads:
        thread.join()
    return per_producer * producers / seconds


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the benchmark, print its table and return the results."""
    parser = make_parser(__doc__)
    parser.add_argument("--items", type=int, default=200_000, help="items per measurement")
    parser.add_argument("--producers", type=int, default=4)
    parser.add_argument("--max-len", type=int, nargs="+", default=[64, 8], help="queue capacities to try")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds (median reported)")
    parser.add_argument("--loader-threads", type=int, default=1, help="loader threads in the telemetry measurement")
    parser.add_argument("--loader-items", type=int, default=20_000, help="batches per telemetry measurement (0: skip)")
    parser.add_argument("--loader-rounds", type=int, default=21, help="interleaved rounds of the telemetry measurement")
    add_out_argument(parser)
    add_noise_arguments(parser)
    add_output_arguments(parser)
    args = parser.parse_args(argv)
    progress = RunProgress(len(args.max_len) * args.rounds, args.progress)

    kinds = ["FIFOQueue", "queue.Queue"]
    rows, results = [], []
    for max_len in args.max_len:
        rates: dict[str, list[float]] = {k: [] for k in kinds}
        ratios, others = [], []
        for r in range(args.rounds):
            wait_for_quiet(args.quiet)
            order = kinds if r % 2 == 0 else kinds[::-1]
            with ResourceSampler() as resources:
                for kind in order:
                    rates[kind].append(measure(kind, args.items, args.producers, max_len))
            others.append(resources.others_percent)
            ratios.append(rates["FIFOQueue"][-1] / rates["queue.Queue"][-1])
            progress.done(f"max_len {max_len}, round {r + 1}/{args.rounds}", f"FIFOQueue/queue.Queue {ratios[-1]:.2f}")
        fifo, std, ratio = spread(rates["FIFOQueue"]), spread(rates["queue.Queue"]), spread(ratios)
        rows.append(
            [
                max_len,
                fifo.fmt(0),
                std.fmt(0),
                ratio.fmt(2),
                "yes" if ratio.median >= TARGET_RATIO else "NO",
                spread(others).fmt(0),
            ]
        )
        results.append(
            {
                "max_len": max_len,
                "fifo": rates["FIFOQueue"],
                "queue": rates["queue.Queue"],
                "ratios": ratios,
                "others_cpu_percent": others,
            }
        )
    progress.close()
    print(
        f"{args.producers} producers -> 1 consumer, {args.items:,} items per measurement, "
        f"{args.rounds} interleaved rounds; median (min-max) items/s"
    )
    print(
        format_table(
            [
                "max_len",
                "FIFOQueue items/s",
                "queue.Queue items/s",
                "ratio FIFO/Queue",
                f">= {TARGET_RATIO}x",
                "others' CPU % (during)",
            ],
            rows,
        )
    )
    fields = {"results": results}
    if args.loader_items:
        fields["telemetry"] = telemetry_cost(args)
    return write_report(args, "queue_overhead", fields)


if __name__ == "__main__":
    main()
