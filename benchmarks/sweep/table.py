"""A sweep's rows (medians over rounds, one per thread count) and the table printed from them.

It reads measured figures; it knows nothing of how they were measured or judged.
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

from .._common import format_table, spread
from .workloads import Workload, thread_label

__all__ = ["print_table", "summarise"]


def summarise(workload: Workload, runs: dict[int, list[dict[str, float]]]) -> list[dict[str, Any]]:
    """One row per thread count: medians over rounds, plus the range of batches/s."""
    base = runs.get(1)
    base_rate = statistics.median(r["batches_per_s"] for r in base) if base else None
    rows = []
    for threads, results in runs.items():
        rates = spread(r["batches_per_s"] for r in results)
        row: dict[str, Any] = {"threads": thread_label(threads), "rounds": len(results)}
        row["batches_per_s"] = rates.median
        row["batches_per_s_min"] = rates.low
        row["batches_per_s_max"] = rates.high
        for key, value in results[0].items():
            if key != "batches_per_s" and not isinstance(value, list):
                row[key] = statistics.median(r[key] for r in results)
        row["others_cpu_percent_max"] = max(r["others_cpu_percent"] for r in results)
        row["speedup_vs_1"] = rates.median / base_rate if base_rate else float("nan")
        rows.append(row)
    return rows


def print_table(workload: Workload, rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    headers = [
        "threads",
        "batches/s median (min-max)",
        "speedup vs 1",
        "ideal/s",
        "eff all",
        "eff steady",
        "eff steady vs cores",
        "wait all",
        "wait steady",
        "CPU %",
        "peak RSS MB",
        "others' CPU %",
    ]
    table = [
        [
            r["threads"],
            f"{r['batches_per_s']:.2f} ({r['batches_per_s_min']:.2f}-{r['batches_per_s_max']:.2f})",
            f"{r['speedup_vs_1']:.2f}x",
            r["ideal_batches_per_s"],
            f"{r['efficiency']:.3f}",
            f"{r['steady_efficiency']:.3f}",
            f"{r['steady_efficiency_cores']:.3f}",
            f"{100 * r['wait_fraction']:.1f}%",
            f"{100 * r['steady_wait_fraction']:.1f}%",
            f"{r['cpu_percent']:.0f}",
            f"{r['peak_rss_mb']:.0f}",
            f"{r['others_cpu_percent']:.0f} (max {r['others_cpu_percent_max']:.0f})",
        ]
        for r in rows
    ]
    print(
        f"workload {workload.name}: T_load = {workload.t_load * 1e3:.1f} ms, T_step = {workload.t_step * 1e3:.1f} ms, "
        f"{args.batches} batches per run, max_len = {args.max_len}, {args.rounds} interleaved rounds"
    )
    for note in workload.notes:
        print(f"  {note}")
    others = spread(r["others_cpu_percent"] for r in rows)
    print(f"  other processes' CPU % during the runs (100 = one core): medians per row {others.fmt(0)}")
    print(format_table(headers, table))
