"""The GPU run: the demo, the sweep's train workload and feed-vs-queue, each with and without device prefetch.

Each command runs as its own process (so TensorFlow starts fresh) while
``nvidia-smi`` samples the GPU; each writes a JSON report, from which this
script takes the step time (ms per training step) and the input-bound share
(the fraction of the run the training loop waited for its next batch). It ends
with one table: workload, device prefetch on or off, step ms, input-bound %,
GPU utilisation and memory. GPU figures cover the whole command (the sweep's
calibration and the feed runs of feed-vs-queue included). Without
``nvidia-smi`` it says so and reports the rest.

    python -m benchmarks.gpu_run                              # on a GPU machine (make bench-gpu)
    python -m benchmarks.gpu_run --short --device /CPU:0      # a quick check that everything runs, anywhere
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._common import DEFAULT_OUT, add_out_argument, format_table, make_parser, write_report
from ._workloads import REPO
from .gpu_sampler import GpuSampler

__all__ = ["main", "plan"]

Rows = list[tuple[str, float, float]]  # (label, step ms, input-bound fraction)


@dataclass
class Workload:
    """One command of the run, and how to read its report into rows."""

    name: str
    command: list[str]  # ends with the option that takes the output folder (or the report file)
    report: str  # the file name of its JSON report, in the output folder
    read: Callable[[dict[str, Any]], Rows]
    option_takes_file: bool = False  # the last option names the report itself, not its folder


def _demo_rows(report: dict[str, Any]) -> Rows:
    epochs = report["epochs"][1:] or report["epochs"]  # the first epoch traces the step
    step = statistics.median(1e3 * e["seconds"] / e["batches"] for e in epochs)
    return [("", step, statistics.median(e["wait_fraction"] for e in epochs))]


def _sweep_rows(report: dict[str, Any]) -> Rows:
    rows = report["rows"]
    return [
        ("serial: load, then step" if r["threads"] == "serial" else f"{r['threads']} loader threads",
         1e3 / r["steady_batches_per_s"], r["steady_wait_fraction"])
        for r in rows
    ]  # fmt: skip


def _feed_rows(report: dict[str, Any]) -> Rows:
    results = report["results"]
    return [(f"{name}, queue", r["queue_step_ms"], r["queue_wait_fraction"]) for name, r in results.items()]


# Per workload, its options for a measuring run and for a short check (seconds each, measuring nothing).
SETTINGS = {
    "full": {
        "demo": "--min-val-accuracy 0.9",  # as `make demo` runs it: 30 epochs
        "sweep": "--threads 2,8 --batches 60 --rounds 3 --calibrate 5",
        "feed": "--steps 2000 --rounds 2",
    },
    "short": {
        "demo": "--epochs 2",
        "sweep": "--threads 2 --batches 4 --rounds 1 --calibrate 1 --batch-size 2 --clip-len 8 --size 32 32",
        "feed": "--steps 30 --calibrate 5 --variants light",
    },
}


def plan(data: str, short: bool) -> list[Workload]:
    """The three workloads with the settings of a measuring run or a ``short`` check."""
    python = sys.executable
    settings = SETTINGS["short" if short else "full"]
    demo, sweep, feed = (settings[name].split() for name in ("demo", "sweep", "feed"))
    return [
        Workload(
            "demo (examples/train_video.py)",
            [python, str(REPO / "examples" / "train_video.py"), "--data", data, "--threads", "2", *demo, "--report"],
            "demo.json",
            _demo_rows,
            option_takes_file=True,
        ),
        Workload(
            "sweep --workload train",
            [python, "-m", "benchmarks.sweep", "--workload", "train", "--data", data, *sweep, "--no-plot", "--out"],
            "sweep_train.json",
            _sweep_rows,
        ),
        Workload(
            "feed_vs_queue",
            [python, "-m", "benchmarks.feed_vs_queue", *feed, "--out"],
            "feed_vs_queue.json",
            _feed_rows,
        ),
    ]


def run(workload: Workload, out: Path, device: str | None) -> dict[str, Any]:
    """Run one workload (with ``--prefetch-to-device device`` unless ``device`` is None), sampling the GPU."""
    folder = out / ("prefetch" if device else "plain")
    command = [*workload.command, str(folder / workload.report if workload.option_takes_file else folder)]
    if device:
        command += ["--prefetch-to-device", device]
    print(f"\n$ {' '.join(command)}", flush=True)
    sampler = GpuSampler() if GpuSampler.available() else None
    start = time.perf_counter()
    if sampler is not None:
        with sampler:
            status = subprocess.run(command, cwd=REPO, check=False).returncode
    else:
        status = subprocess.run(command, cwd=REPO, check=False).returncode
    seconds = time.perf_counter() - start
    if status != 0:
        raise SystemExit(f"{workload.name} failed with status {status}")
    report = json.loads((folder / workload.report).read_text(encoding="utf-8"))
    return {
        "workload": workload.name,
        "device_prefetch": device,
        "seconds": seconds,
        "rows": workload.read(report),
        "gpu": sampler.summary() if sampler is not None else None,
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run every workload without, then with, device prefetch; print the table and return the results."""
    parser = make_parser(__doc__)
    parser.add_argument("--device", default="/GPU:0", help="the device to prefetch to (default /GPU:0)")
    parser.add_argument("--data", default=str(REPO / "data" / "sample"), help="the sample video set")
    parser.add_argument("--short", action="store_true", help="tiny settings: check the commands run, measure nothing")
    add_out_argument(parser, DEFAULT_OUT / "gpu", help="folder for the reports")
    args = parser.parse_args(argv)
    out = Path(args.out)
    if not GpuSampler.available():
        print("nvidia-smi not found: GPU utilisation is not sampled (the rest is measured as usual)", flush=True)
    results = [run(w, out, device) for w in plan(args.data, args.short) for device in (None, args.device)]
    table = []
    for result in results:
        gpus = result["gpu"] or {}
        gpu = gpus.get(min(gpus)) if gpus else None
        for label, step_ms, waited in result["rows"]:
            table.append(
                [
                    f"{result['workload']}{', ' + label if label else ''}",
                    "on" if result["device_prefetch"] else "off",
                    f"{step_ms:.1f}",
                    f"{100 * waited:.1f}",
                    f"{gpu['util_median']:.0f} ({gpu['util_mean']:.0f}, {gpu['util_max']:.0f})" if gpu else "n/a",
                    f"{gpu['memory_max_mib']:.0f}" if gpu else "n/a",
                    f"{result['seconds']:.0f}",
                ]
            )
    names = {g["name"] for r in results for g in (r["gpu"] or {}).values()}
    print(f"\nGPU: {', '.join(sorted(names)) or 'none sampled'}; device prefetch to {args.device}; short: {args.short}")
    headers = ["workload", "device prefetch", "step ms", "input-bound %", "GPU util % median (mean, max)"]
    print(format_table([*headers, "GPU memory MiB max", "command s"], table))
    return write_report(args, "gpu_run", {"gpus": sorted(names), "results": results})


if __name__ == "__main__":
    main()
