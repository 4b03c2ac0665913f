"""Items per second of tiny items through FIFOQueue vs queue.Queue.

``--producers`` threads put small ints into one bounded queue and the main thread
takes them out. Both queues run in the same process, in interleaved rounds (the
order alternates each round), so a noisy neighbour hurts both alike. The target
is FIFOQueue >= 0.8x queue.Queue.

    python -m benchmarks.queue_overhead --items 200000 --rounds 7
"""

from __future__ import annotations

import argparse
import queue
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from parallel_loader import FIFOQueue

from ._common import (
    DEFAULT_OUT,
    ResourceSampler,
    RunProgress,
    add_noise_arguments,
    add_output_arguments,
    format_table,
    machine_info,
    spread,
    wait_for_quiet,
    write_json,
)

__all__ = ["main", "measure"]

TARGET_RATIO = 0.8


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
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=200_000, help="items per measurement")
    parser.add_argument("--producers", type=int, default=4)
    parser.add_argument("--max-len", type=int, nargs="+", default=[64, 8], help="queue capacities to try")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds (median reported)")
    parser.add_argument("--out", type=str, default=str(DEFAULT_OUT))
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
    report = {"args": vars(args), "machine": machine_info(), "results": results}
    path = write_json(Path(args.out) / "queue_overhead.json", report)
    print(f"wrote {path}")
    return report


if __name__ == "__main__":
    main()
