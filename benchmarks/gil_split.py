"""``processes="auto"`` against the same fixed processes, on yield functions with more or less Python in them.

Each call runs ``python`` ms of a pure-Python loop (holding the GIL), then
``free`` ms of hashing a buffer (hashlib lets the GIL go). A worker process
whose threads the GIL holds back is split by ``processes="auto"``
(``gil_split``). The same processes and threads given explicitly never are. For
each workload, each placement runs ``--seconds``; the rate is that of the last
half. Rounds interleave the placements. Also printed: the GIL meter's own CPU
in an idle process.

    python -m benchmarks.gil_split --threads 2 --rounds 3
"""

from __future__ import annotations

import hashlib
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from parallel_loader import DataLoader, YieldFunction
from parallel_loader._core.gil_meter import GilMeter
from parallel_loader._loader.placement import auto_placement

from ._common import add_out_argument, format_table, machine_info, make_parser, spread, write_json

__all__ = ["GilWork", "main"]

WORKLOADS = {"all Python": (4.0, 0.0), "half Python": (2.0, 2.0), "a fifth Python": (1.0, 4.0)}


class GilWork(YieldFunction):
    """``python`` ms of a Python loop, then ``free`` ms of hashing without the GIL; returns the index."""

    def __init__(self, python: float, free: float, hash_bytes_per_ms: int) -> None:
        self.python = python
        self.data = b"\0" * max(1, int(free * hash_bytes_per_ms))
        self.free = free

    def __len__(self) -> int:
        return 100_000

    def __call__(self, index: int) -> int:
        end = time.perf_counter() + self.python / 1000
        while time.perf_counter() < end:
            pass
        if self.free:
            hashlib.sha256(self.data).digest()
        return index


def hash_rate() -> int:
    """The bytes sha256 hashes in 1 ms on one core."""
    data = b"\0" * (8 << 20)
    started = time.perf_counter()
    for _ in range(4):
        hashlib.sha256(data).digest()
    return int(4 * len(data) / ((time.perf_counter() - started) * 1000))


def run(fn: GilWork, processes: int | str, threads: int, seconds: float) -> dict[str, Any]:
    """Batches/s over the last half of ``seconds``, and the processes running at the end."""
    with DataLoader(fn, processes=processes, num_threads=threads, max_len=16) as loader:
        batches = iter(loader)
        started = time.perf_counter()
        half, counted = started + seconds / 2, 0
        while (now := time.perf_counter()) < started + seconds:
            next(batches)
            if now >= half:
                counted += 1
        calls = loader._yield_calls
        return {
            "rate": counted / (time.perf_counter() - half),
            "processes": sum(pid is not None for pid in calls.pids),
            "splits": calls.split.splits if calls.split is not None else 0,
        }


def meter_cpu(seconds: float = 3.0) -> float:
    """The CPU share of one core that a GIL meter takes in an idle process."""
    meter = GilMeter()
    try:
        start = meter.reading()
        time.sleep(seconds)
        window = meter.reading().since(start)
    finally:
        meter.close()
    return window.cores


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = make_parser(__doc__)
    parser.add_argument("--threads", type=int, default=2, help="threads in each worker process at the start")
    parser.add_argument("--seconds", type=float, default=12.0, help="each placement's run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    add_out_argument(parser)
    args = parser.parse_args(argv)
    processes, _ = auto_placement(args.threads)
    rate = hash_rate()
    results: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for _ in range(args.rounds):
        for name in args.workloads:
            fn = GilWork(*WORKLOADS[name], hash_bytes_per_ms=rate)
            for label, asked in ((f"processes={processes}", processes), ('processes="auto"', "auto")):
                got = run(fn, asked, args.threads, args.seconds)
                results.setdefault(name, {}).setdefault(label, []).append(got)
    rows = []
    for name, placements in results.items():
        fixed, auto = placements.values()
        ratio = statistics.median(a["rate"] / f["rate"] for a, f in zip(auto, fixed, strict=True))
        for label, runs in placements.items():
            rows.append([
                name, f"{label} x {args.threads}", spread(r["rate"] for r in runs).fmt(1),
                "/".join(str(r["processes"]) for r in runs), f"{ratio:.2f}x" if runs is auto else "",
            ])  # fmt: skip
    print(f"\nGIL split: {args.rounds} rounds of {args.seconds:.0f} s a placement (rate: its last half)")
    print(format_table(["workload", "start", "batches/s", "processes at the end", "auto / fixed"], rows))
    cpu = meter_cpu()
    print(f"The GIL meter's own CPU in an idle process: {cpu * 100:.2f}% of a core")
    report = {"machine": machine_info(), "args": vars(args) | {"out": str(args.out)}, "results": results}
    report["meter_cpu"] = cpu
    write_json(Path(args.out) / "gil_split.json", report)
    return report


if __name__ == "__main__":
    main()
