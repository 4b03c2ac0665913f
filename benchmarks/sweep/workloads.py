"""What a sweep feeds and runs: the workload (a yield function, a step, their costs) and its thread counts.

A workload knows its ``T_load`` and ``T_step``, and so the ideal rate at N threads;
a thread count is an int, with ``SERIAL`` and ``AUTO`` standing for no loader and
``num_threads="auto"``. The module knows nothing of how a run is measured or judged.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from parallel_loader import YieldFunction

from .._workloads import describe_video, make_train_step, open_video_folder, time_calls

__all__ = ["AUTO", "SERIAL", "Repeat", "Sleeper", "Workload", "build", "ideal", "parse_threads", "thread_label"]

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
        from parallel_loader.tensorflow._startup import device_line, import_tensorflow

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


def ideal(workload: Workload, threads: int) -> float:
    """Batches/s with no overhead at all: ``min(N / T_load, 1 / T_step)``; one batch after another for ``SERIAL``."""
    if threads == SERIAL:
        return 1.0 / (workload.t_load + workload.t_step)
    if threads == AUTO:
        threads = 32  # the tuner's default max_threads
    load_rate = threads / workload.t_load
    return min(load_rate, 1.0 / workload.t_step) if workload.t_step > 0 else load_rate


def thread_label(threads: int) -> str:
    """How a row, a run and a loader's name show a thread count: ``serial``, ``auto`` or the number."""
    return "serial" if threads == SERIAL else "auto" if threads == AUTO else str(threads)


def parse_threads(text: str) -> list[int]:
    """``"1,2,auto"`` -> ``[1, 2, AUTO]``."""
    return [AUTO if part.strip() == "auto" else int(part) for part in text.split(",") if part.strip()]
