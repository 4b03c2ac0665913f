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
judged, with the number of batches it needs, rather than as missed.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from parallel_loader import DataLoader, DevicePrefetcher, YieldFunction
from parallel_loader.progress import PassProgress, progress_mode
from parallel_loader.train import PassStats

from ._common import (
    DEFAULT_OUT,
    ResourceSampler,
    add_noise_arguments,
    add_output_arguments,
    format_table,
    machine_info,
    spread,
    wait_for_quiet,
    write_csv,
    write_json,
)
from ._workloads import add_video_arguments, describe_video, make_train_step, open_video_folder, time_calls

__all__ = ["Workload", "main", "measure"]

SERIAL = 0  # the thread count that stands for "no loader: load, then step, in the main thread"
AUTO = -1  # the thread count that stands for num_threads="auto"


@dataclass
class Workload:
    """What one sweep feeds and runs: a yield function, a step and their measured costs."""

    name: str
    yield_fn: YieldFunction
    step: Callable[[Any], Any]
    t_load: float
    t_step: float
    notes: list[str] = field(default_factory=list)
    cpu_bound: bool = False  # loading needs a core per thread, so at most os.cpu_count() threads can help


class Repeat(YieldFunction):
    """``batches`` batches made by cycling through another yield function's indices."""

    def __init__(self, base: YieldFunction, batches: int) -> None:
        self.base = base
        self.batches = batches

    def __len__(self) -> int:
        return self.batches

    def __call__(self, index: int) -> Any:
        return self.base(index % len(self.base))


class Sleeper(YieldFunction):
    """A loader that takes ``seconds`` per batch without holding the GIL (I/O-like).

    With ``most``, each call takes between ``seconds`` and ``most`` (uniform, by its
    index); with ``after``, calls from the middle of the epoch on take ``after``.
    """

    def __init__(self, batches: int, seconds: float, most: float | None = None, after: float | None = None) -> None:
        self.batches = batches
        self.seconds = seconds
        self.most = most
        self.after = after
        self._batch = np.zeros(16, dtype=np.float32)

    def __len__(self) -> int:
        return self.batches

    def __call__(self, index: int) -> np.ndarray:
        seconds = self.seconds
        if self.after is not None and index >= self.batches // 2:
            seconds = self.after
        elif self.most is not None:
            seconds += (self.most - seconds) * np.random.default_rng(index).random()
        time.sleep(seconds)
        return self._batch


def _sleep_step(seconds: float) -> Callable[[Any], None]:
    def step(batch: Any) -> None:
        if seconds > 0:
            time.sleep(seconds)

    return step


def build(args: argparse.Namespace) -> Workload:
    """Make the workload named by ``args.workload``, measuring its T_load and T_step where needed."""
    if args.workload in ("latency", "shift"):
        load, step = args.load if args.load is not None else 0.1, args.step if args.step is not None else 0.02
        after = args.load_after if args.workload == "shift" else None
        mean = (load + args.load_max) / 2 if args.load_max is not None else load
        note = f"nominal T_load = {load} s (sleep), T_step = {step} s (sleep)"
        if args.load_max is not None:
            note = f"T_load drawn uniformly in {load}-{args.load_max} s per call (sleep), T_step = {step} s (sleep)"
        if after is not None:
            note += f"; T_load becomes {after} s from batch {args.batches // 2} on"
            mean = (load + after) / 2
        return Workload(args.workload, Sleeper(args.batches, load, args.load_max, after), _sleep_step(step), mean,
                        step, [note])  # fmt: skip
    folder = open_video_folder(args)
    notes = [describe_video(folder, args)]
    t_load = time_calls(lambda i: folder(i % len(folder)), args.calibrate)
    if args.workload == "decode":
        step_s = args.step if args.step is not None else 0.0
        step = _sleep_step(step_s)
        notes.append(f"T_load: mean of {args.calibrate} batches made serially; T_step = {step_s} s (sleep)")
        return Workload("decode", Repeat(folder, args.batches), step, t_load, step_s, notes, cpu_bound=True)
    if args.workload == "train":
        from parallel_loader.tf_startup import device_line, import_tensorflow

        import_tensorflow(args.verbose)
        notes.append(device_line())
        train_step, model_notes = make_train_step(folder, args.intra_op)
        batch = folder(0)
        t_step = time_calls(lambda i: train_step(batch), args.calibrate)
        notes += model_notes
        notes.append(
            f"T_load and T_step: means of {args.calibrate} calls each, serially, each on its own, after warm-up"
        )
        return Workload("train", Repeat(folder, args.batches), train_step, t_load, t_step, notes, cpu_bound=True)
    raise ValueError(f"unknown workload {args.workload!r}")


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
            loader = stack.enter_context(DataLoader(workload.yield_fn, count, max_len, name=f"sweep{_label(threads)}"))
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
    ideal = _ideal(workload, threads)
    ideal_cores = _ideal(workload, min(threads, os.cpu_count() or 1)) if workload.cpu_bound else ideal
    rate = n / seconds
    steady = (n - 1) / steady_span if n > 1 and steady_span > 0 else rate
    return {
        "batches": n,
        "seconds": seconds,
        "batches_per_s": rate,
        "steady_batches_per_s": steady,
        "ideal_batches_per_s": ideal,
        "efficiency": rate / ideal,
        "steady_efficiency": steady / ideal,
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
    that (see ``_reached``), the same after the middle of the run, the thread count it ended on, and the
    batches' start times (``batch_starts``), to judge it against the best fixed count afterwards."""
    n = len(starts)
    tail = max(_WINDOW, n // 5)
    final = (tail - 1) / (starts[-1] - starts[-tail]) if n > tail and starts[-1] > starts[-tail] else 0.0
    return {
        "final_batches_per_s": final,
        "reached_95_at": _reached(starts, 0.95 * final),
        "reached_95_after_middle": _reached(starts, 0.95 * final, n // 2) - n // 2,
        "settled_threads": float(statistics.median(counts[-tail:])) if counts else float("nan"),
        "max_threads_seen": float(max(counts, default=0)),
        "batch_starts": starts,
    }


def _reached(starts: list[float], rate: float, first: int = 0) -> float:
    """The first batch from ``first`` on from which ``_WINDOW`` batches came at ``rate`` or faster and all the
    batches after it did on average; NaN if none did."""
    n = len(starts)
    for i in range(first, n - _WINDOW):
        span = starts[i + _WINDOW] - starts[i]
        rest = starts[-1] - starts[i]
        if span > 0 and _WINDOW / span >= rate and (n - 1 - i) / rest >= rate:
            return float(i)
    return float("nan")


def _ideal(workload: Workload, threads: int) -> float:
    if threads == SERIAL:
        return 1.0 / (workload.t_load + workload.t_step)
    if threads == AUTO:
        threads = 32  # the tuner's default max_threads
    load_rate = threads / workload.t_load
    return min(load_rate, 1.0 / workload.t_step) if workload.t_step > 0 else load_rate


def _label(threads: int) -> str:
    return "serial" if threads == SERIAL else "auto" if threads == AUTO else str(threads)


def parse_threads(text: str) -> list[int]:
    """``"1,2,auto"`` -> ``[1, 2, AUTO]``."""
    return [AUTO if part.strip() == "auto" else int(part) for part in text.split(",") if part.strip()]


def summarise(workload: Workload, runs: dict[int, list[dict[str, float]]]) -> list[dict[str, Any]]:
    """One row per thread count: medians over rounds, plus the range of batches/s."""
    base = runs.get(1)
    base_rate = statistics.median(r["batches_per_s"] for r in base) if base else None
    rows = []
    for threads, results in runs.items():
        rates = spread(r["batches_per_s"] for r in results)
        row: dict[str, Any] = {"threads": _label(threads), "rounds": len(results)}
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


def check_targets(workload: Workload, rows: list[dict[str, Any]], batches: int) -> list[str]:
    """The latency workload's targets, met, missed, or not judged; nothing for the other workloads.

    A fill-included target that even a run without any overhead could not reach
    in ``batches`` batches at some N (the first batch cannot come before one
    ``T_load``) is not judged there: the line says so, and how many batches it
    needs, instead of "MISSED".
    """
    if workload.name != "latency":
        return []
    lines = []
    threaded = [r for r in rows if r["threads"] not in ("serial", "auto")]

    def too_short_for_efficiency(n: int, row: dict[str, Any]) -> bool:
        return _best_efficiency(workload, int(row["threads"]), n) < 0.95

    def too_short_for_wait(n: int, row: dict[str, Any]) -> bool:
        # The consumer waits at least T_load for the first batch, whatever the loader does.
        return workload.t_load * _ideal(workload, int(row["threads"])) / n >= 0.05

    for key, label in (("efficiency", "fill included"), ("steady_efficiency", "steady state")):
        short = too_short_for_efficiency if key == "efficiency" else None
        judged, unjudged = _split(threaded, short, batches)
        line = f"target efficiency >= 0.95 ({label}): "
        if judged:
            worst = min(judged, key=lambda r: r[key])
            verdict = "met" if worst[key] >= 0.95 else "MISSED"
            line += f"{verdict}; lowest {worst[key]:.3f} at N={worst['threads']}"
        lines.append(line + _not_judged(workload, unjudged, short, batches, bool(judged)))
    fed = [r for r in threaded if int(r["threads"]) / workload.t_load >= 1 / workload.t_step - 1e-9]
    if fed:
        for key, label in (("wait_fraction", "fill included"), ("steady_wait_fraction", "steady state")):
            short = too_short_for_wait if key == "wait_fraction" else None
            judged, unjudged = _split(fed, short, batches)
            line = f"target wait < 5% where N/T_load >= 1/T_step ({label}): "
            if judged:
                worst = max(judged, key=lambda r: r[key])
                verdict = "met" if worst[key] < 0.05 else "MISSED"
                line += f"{verdict}; highest {100 * worst[key]:.1f}% at N={worst['threads']}"
            lines.append(line + _not_judged(workload, unjudged, short, batches, bool(judged)))
    return lines


def autotune_lines(rows: list[dict[str, Any]], auto_runs: list[dict[str, Any]], batches: int) -> list[str]:
    """How the auto row compares with the best fixed count of the same run (nothing without one).

    ``auto_runs`` are the auto rounds, with their batches' start times: the run reached the
    best fixed count's rate at the first batch from which it ran at 95% of it (``_reached``).
    """
    auto = next((r for r in rows if r["threads"] == "auto"), None)
    fixed = [r for r in rows if r["threads"] not in ("serial", "auto")]
    if auto is None or not fixed:
        return []
    best = max(fixed, key=lambda r: r["batches_per_s"])
    near_best = [r for r in fixed if r["batches_per_s"] >= 0.95 * best["batches_per_s"]]
    near = min(near_best, key=lambda r: int(r["threads"]))
    ratio = auto["batches_per_s"] / best["batches_per_s"]
    limit = batches // 10
    reaches = [_reached(run["batch_starts"], 0.95 * best["batches_per_s"]) for run in auto_runs]
    reach = statistics.median(reaches)  # NaN (never) sorts unreliably: count them apart
    never = sum(math.isnan(x) for x in reaches)
    reach_text = f"batch {reach:.0f}" if not never else f"no batch in {never} of {len(reaches)} rounds"
    if not never:
        reach_text += f" (rounds: {', '.join(f'{x:.0f}' for x in reaches)})"
    own = auto["reached_95_at"]
    settled, smallest = auto["settled_threads"], int(near["threads"])
    lines = [
        f"auto: {auto['batches_per_s']:.2f} batches/s = {ratio:.3f} of the best fixed N={best['threads']} "
        f"({best['batches_per_s']:.2f}); target >= 0.95: {'met' if ratio >= 0.95 else 'MISSED'}",
        f"auto: ran at 95% of the best fixed count's rate from {reach_text}; target within the first {limit}: "
        f"{'met' if not never and reach <= limit else 'MISSED'}",
        f"auto: reached 95% of its own final rate ({auto['final_batches_per_s']:.1f}/s) at batch {own:.0f} "
        "(median of rounds)",
        f"auto: settled on {settled:.0f} threads (at most {auto['max_threads_seen']:.0f}); smallest fixed N "
        f"within 5% of the best: {smallest}; no more threads than needed: {'met' if settled <= smallest else 'MISSED'}",
    ]
    if not math.isnan(auto["reached_95_after_middle"]):
        lines.append(f"auto: after the middle of the run, reached 95% of the final rate "
                     f"{auto['reached_95_after_middle']:.0f} batches later")  # fmt: skip
    return lines


def _best_efficiency(workload: Workload, threads: int, batches: int) -> float:
    """The fill-included efficiency of a run with no overhead at all: the most a run of ``batches`` can reach."""
    ideal = _ideal(workload, threads)
    fastest = max(
        batches / ideal,  # never faster than the ideal rate
        workload.t_load + batches * workload.t_step,  # every step comes after the first batch
        math.ceil(batches / threads) * workload.t_load + workload.t_step,  # waves of N loads
    )
    return batches / ideal / fastest


def _split(
    rows: list[dict[str, Any]], too_short: Callable[[int, dict[str, Any]], bool] | None, batches: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The rows a target can be judged on in a run of ``batches``, and those it cannot."""
    if too_short is None:
        return rows, []
    return [r for r in rows if not too_short(batches, r)], [r for r in rows if too_short(batches, r)]


def _not_judged(
    workload: Workload,
    rows: list[dict[str, Any]],
    too_short: Callable[[int, dict[str, Any]], bool] | None,
    batches: int,
    after: bool,
) -> str:
    if not rows:
        return ""
    needed = batches
    while needed < 10**6 and any(too_short(needed, r) for r in rows):
        needed *= 2
    where = ",".join(r["threads"] for r in rows)
    return (
        f"{'; ' if after else ''}not judged at N={where}: with a fill of T_load = {workload.t_load * 1e3:g} ms, "
        f"a run of {batches} batches is too short to reach the target even without overhead "
        f"(use --batches {needed} or more)"
    )


def plot(workload: Workload, rows: list[dict[str, Any]], path: Path) -> Path | None:
    """Save batches/s and efficiency against threads as a PNG; None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    threaded = [r for r in rows if r["threads"] not in ("serial", "auto")]
    n = [int(r["threads"]) for r in threaded]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    ax1.plot(n, [r["batches_per_s"] for r in threaded], "o-", label="measured (fill included)")
    ax1.plot(n, [r["steady_batches_per_s"] for r in threaded], "s--", label="measured (steady)")
    ax1.plot(n, [r["ideal_batches_per_s"] for r in threaded], "k:", label="ideal min(N/T_load, 1/T_step)")
    ax1.set(xscale="log", xlabel="loader threads N", ylabel="batches/s", title=f"{workload.name}: throughput")
    ax1.set_xticks(n, [str(x) for x in n])
    ax1.legend(fontsize=8)
    ax2.plot(n, [r["efficiency"] for r in threaded], "o-", label="efficiency (fill included)")
    ax2.plot(n, [r["steady_efficiency"] for r in threaded], "s--", label="efficiency (steady)")
    ax2.plot(n, [r["wait_fraction"] for r in threaded], "^-", label="consumer wait fraction")
    ax2.set(xscale="log", xlabel="loader threads N", ylim=(0, 1.1), title="efficiency and wait")
    ax2.set_xticks(n, [str(x) for x in n])
    ax2.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
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
    parser.add_argument("--out", type=str, default=str(DEFAULT_OUT), help="folder for the CSV, JSON and PNG")
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
    report = {
        "args": vars(args),
        "machine": machine_info(),
        "t_load": workload.t_load,
        "t_step": workload.t_step,
        "notes": workload.notes,
        "rows": rows,
        "targets": targets,
        "runs": {_label(n): v for n, v in runs.items()},
    }
    print(f"wrote {write_json(out / f'{stem}.json', report)}")
    if not args.no_plot:
        png = plot(workload, rows, out / f"{stem}.png")
        print(f"wrote {png}" if png else "matplotlib is not installed (pip install '.[plot]'): no plot")
    return report


if __name__ == "__main__":
    main()
