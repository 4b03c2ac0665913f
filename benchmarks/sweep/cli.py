"""The sweep's command line: its options, and ``main``, which runs the rounds and writes the CSV, JSON and PNG."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from parallel_loader import DevicePrefetcher
from parallel_loader.train._progress import progress_mode

from .._common import add_noise_arguments, add_out_argument, add_output_arguments, make_parser, write_csv, write_report
from .._resources import wait_for_quiet
from .._workloads import add_video_arguments
from .measure import measure
from .plot import plot
from .table import print_table, summarise
from .targets import autotune_lines, check_targets
from .workloads import AUTO, SERIAL, build, parse_threads, thread_label

__all__ = ["main", "parse_args"]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The sweep's options (``--help`` lists them)."""
    from . import __doc__ as sweep_doc  # the package's docstring describes the command

    parser = make_parser(sweep_doc, prog="python -m benchmarks.sweep")
    parser.add_argument("--workload", choices=["latency", "decode", "train", "shift"], default="latency")
    parser.add_argument("--threads", type=parse_threads, default=[1, 2, 4, 8, 16, 32], help="e.g. 1,2,4,8,auto")
    parser.add_argument("--serial", action="store_true", help="add a serial row (load, then step; default for train)")
    parser.add_argument("--max-len", type=int, default=8, help="queue capacity")
    parser.add_argument("--batches", type=int, default=100, help="batches per run")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; medians reported")
    parser.add_argument("--load", type=float, default=None, help="latency: T_load in seconds (default 0.1)")
    parser.add_argument("--load-max", type=float, default=None, help="latency: draw T_load in --load..this per call")
    parser.add_argument("--load-after", type=float, default=0.08, help="shift: T_load from the middle on (0.08)")
    parser.add_argument(
        "--step", type=float, default=None, help="latency: T_step in seconds (default 0.02); decode: sleep per step (0)"
    )
    parser.add_argument("--intra-op", type=int, default=0, help="train: TF intra-op threads (0: TF default)")
    parser.add_argument("--calibrate", type=int, default=10, help="serial calls to measure T_load / T_step")
    add_out_argument(parser, help="folder for the CSV, JSON and PNG")
    parser.add_argument("--no-plot", action="store_true")
    parser.add_argument(
        "--prefetch-to-device", metavar="DEVICE", help="copy the loader's batches to DEVICE (e.g. /GPU:0) ahead"
    )
    parser.add_argument("--device-buffer", type=int, default=2, help="batches copied ahead with --prefetch-to-device")
    add_noise_arguments(parser)
    add_output_arguments(parser)
    add_video_arguments(parser)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the sweep, print its table and return the results."""
    args = parse_args(argv)
    workload = build(args)
    counts = list(args.threads)
    if args.serial or args.workload == "train":
        counts = [SERIAL, *counts]
    runs: dict[int, list[dict[str, float]]] = {n: [] for n in counts}
    progress = progress_mode(args.progress)
    prefetcher = None
    if args.prefetch_to_device:
        prefetcher = DevicePrefetcher(args.prefetch_to_device, args.device_buffer, name="sweep-to-device")
        workload.notes.append(
            f"device prefetch: {prefetcher.device or 'off (no ' + args.prefetch_to_device + ')'}, "
            f"buffer {args.device_buffer} (threaded rows only)"
        )
    try:
        for r in range(args.rounds):
            for threads in counts if r % 2 == 0 else counts[::-1]:
                others_before = wait_for_quiet(args.quiet)
                who = "serial" if threads == SERIAL else f"{threads} thread{'s' if threads != 1 else ''}"
                label = f"{who}, round {r + 1}/{args.rounds}"
                runs[threads].append(
                    {
                        **measure(workload, threads, args.max_len, progress, label, prefetcher),
                        "others_cpu_percent_before": others_before,
                    }
                )
    finally:
        if prefetcher is not None:
            prefetcher.close()
    rows = summarise(workload, runs)
    print_table(workload, rows, args)
    targets = check_targets(workload, rows, args.batches) + autotune_lines(rows, runs.get(AUTO, []), args.batches)
    for line in targets:
        print(line)
    out = Path(args.out)
    stem = f"sweep_{workload.name}"
    print(f"wrote {write_csv(out / f'{stem}.csv', rows)}")
    fields = {
        "t_load": workload.t_load,
        "t_step": workload.t_step,
        "notes": workload.notes,
        "rows": rows,
        "targets": targets,
        "runs": {thread_label(n): v for n, v in runs.items()},
    }
    report = write_report(args, stem, fields)
    if not args.no_plot:
        png = plot(workload, rows, out / f"{stem}.png")
        print(f"wrote {png}" if png else "matplotlib is not installed (pip install '.[plot]'): no plot")
    return report
