"""Fault campaign for process mode: ``DataLoader(processes=P)`` under SIGKILL, Ctrl-C, errors and hangs.

Each run draws a loader (1-2 worker processes of 1-2 threads, ordered or not,
``on_error`` raise or skip, 1-2 epochs of 6-16 batches, calls of 1-4 ms) and one fault:

* ``sigkill``: after the k-th batch of the last epoch, one worker process is killed
  with SIGKILL (as the OOM killer does);
* ``ctrl_c``: after the k-th batch, SIGINT to this process and to the workers (as a
  terminal sends it to the whole process group);
* ``raise``: the yield function raises for one index;
* ``hang``: the yield function never returns for one index (``call_timeout=0.5``).

With ``--splits``, half the runs use ``processes="auto"`` with 2 threads a process,
and each worker is split every few milliseconds, as a GIL-bound one would be
(``gil_split``): the faults then meet lanes that move to new workers.

Checks after each run, once the loader is closed: the outcome is the one expected
(the error raised, or with ``skip`` the epoch complete); no index delivered twice;
with ``skip``, every index delivered or recorded as failed (none lost); no worker
process alive (none orphaned); no shared-memory block of this process left in
``/dev/shm``; and the run ended (a run that hangs for ``--hang-after`` seconds dumps
every thread's stack and ends the campaign, counted as a hang).

    python -m benchmarks.process_faults --runs 500 --seed 0
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import faulthandler
import gc
import logging
import os
import random
import signal
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psutil

from parallel_loader import DataLoader, LoaderTimeout, WorkerProcessDied, YieldFunction
from parallel_loader._calls import gil_split
from parallel_loader._calls.worker_launch import worker_children
from parallel_loader._loader import placement

from ._common import DEFAULT_OUT, format_table, machine_info, write_json

__all__ = ["FaultFn", "main"]

FAULTS = ("sigkill", "ctrl_c", "raise", "hang")


class FaultFn(YieldFunction):
    """Index ``at`` raises (``"raise"``) or never returns (``"hang"``); every call sleeps ``ms``."""

    def __init__(self, length: int, fault: str, at: int, ms: float) -> None:
        self.length = length
        self.fault = fault
        self.at = at
        self.ms = ms

    def __len__(self) -> int:
        return self.length

    def __call__(self, index: int) -> Any:
        time.sleep(self.ms / 1000)
        if index == self.at and self.fault == "raise":
            raise ValueError(f"fault at index {index}")
        if index == self.at and self.fault == "hang":
            while True:
                time.sleep(0.05)
        return index


_EXPECTED = {"sigkill": WorkerProcessDied, "ctrl_c": KeyboardInterrupt, "raise": ValueError, "hang": LoaderTimeout}


def one_run(rng: random.Random, splits: bool = False) -> dict[str, Any]:
    """One drawn loader and fault; the problems found (empty: none). ``splits``: see the module's docstring."""
    fault = rng.choice(FAULTS)
    length = rng.randint(6, 16)
    epochs = rng.randint(1, 2)
    setup = {
        "fault": fault,
        "processes": rng.randint(1, 2),
        "num_threads": rng.randint(1, 2),
        "ordered": rng.random() < 0.5,
        "on_error": rng.choice(["raise", "skip"]),
        "length": length,
        "epochs": epochs,
        "split": splits and rng.random() < 0.5,
    }
    if setup["split"]:
        setup["num_threads"] = 2
    at = rng.randrange(length)
    after = rng.randrange(length // 2 + 1)  # the batch of the last epoch after which a signal is sent
    fn = FaultFn(length, fault, at, ms=rng.uniform(1, 4))
    problems: list[str] = []
    delivered: list[list[int]] = []
    errors: list[tuple[int, int | None]] = []
    pids: list[int] = []
    raised: BaseException | None = None
    split_count = 0  # workers split by the last batch delivered
    if setup["split"]:  # processes="auto" on as many cores as give the drawn processes of 2 threads
        placement.available_cores = lambda: 2 * setup["processes"] + 1  # put back by _forced_splits
    loader = DataLoader(
        fn,
        num_threads=setup["num_threads"],
        processes="auto" if setup["split"] else setup["processes"],
        ordered=setup["ordered"],
        on_error=setup["on_error"],
        call_timeout=0.5,
        max_len=4,
    )
    try:
        with loader:
            for epoch in range(epochs):
                delivered.append([])
                for batch in loader:
                    delivered[-1].append(batch)
                    pids = [p for p in loader._yield_calls.pids if p is not None] or pids
                    split_count = getattr(loader._yield_calls.split, "splits", 0)
                    if epoch == epochs - 1 and len(delivered[-1]) == after + 1:
                        _send_signal(fault, pids, rng)
            errors = [(e.epoch, e.index) for e in loader.errors]
    except (WorkerProcessDied, KeyboardInterrupt, ValueError, LoaderTimeout) as exc:
        raised = exc
    expected = _EXPECTED[fault]
    if fault == "ctrl_c":
        if not isinstance(raised, KeyboardInterrupt):
            problems.append(f"Ctrl-C not raised: {raised!r}")
    elif setup["on_error"] == "raise":
        # A worker killed while none of its threads is in a call fails no call: the epoch may
        # then end whole (checked below: every index once).
        idle_kill = fault == "sigkill" and raised is None
        if not isinstance(raised, expected) and not idle_kill:
            problems.append(f"expected {expected.__name__}, got {raised!r}")
    elif raised is not None:
        problems.append(f"skip mode raised {raised!r}")
    for epoch, got in enumerate(delivered):
        duplicates = [i for i, n in collections.Counter(got).items() if n > 1]
        if duplicates:
            problems.append(f"epoch {epoch}: indices delivered twice: {duplicates}")
        if raised is None:
            failed = {index for e, index in errors if e == epoch}
            lost = set(range(length)) - set(got) - failed
            if lost:
                problems.append(f"epoch {epoch}: indices lost: {sorted(lost)}")
    loader = None
    gc.collect()
    alive = [p for p in pids if _alive(p)] + worker_children()
    if alive:
        problems.append(f"worker processes alive after close: {alive}")
    left = _blocks_left()
    if left:
        problems.append(f"shared-memory blocks left: {left}")
    return {**setup, "splits": split_count, "raised": type(raised).__name__ if raised else None, "problems": problems}


@contextlib.contextmanager
def _forced_splits() -> Iterator[None]:
    """Every review splits each worker of 2 threads or more, every 5 ms, whatever its GIL did."""
    saved = gil_split.INTERVAL, gil_split.gil_ceiling, placement.available_cores
    gil_split.INTERVAL = 0.005
    gil_split.gil_ceiling = lambda window, threads: 1 if threads > 1 else None
    try:
        yield
    finally:
        gil_split.INTERVAL, gil_split.gil_ceiling, placement.available_cores = saved


def _send_signal(fault: str, pids: list[int], rng: random.Random) -> None:
    if fault == "sigkill" and pids:
        os.kill(rng.choice(pids), signal.SIGKILL)
    elif fault == "ctrl_c":
        for pid in pids:
            os.kill(pid, signal.SIGINT)  # a terminal's Ctrl-C reaches the workers too: they ignore it
        os.kill(os.getpid(), signal.SIGINT)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _blocks_left() -> list[str]:
    return [n for n in os.listdir("/dev/shm") if n.startswith(f"pl{os.getpid()}_")]


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--splits", action="store_true", help="half the runs split their workers (see above)")
    parser.add_argument("--hang-after", type=float, default=60.0, help="seconds after which a run counts as hung")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT / "process_faults.json")
    args = parser.parse_args(argv)
    logger = logging.getLogger("parallel_loader")
    level, handler = logger.level, signal.getsignal(signal.SIGINT)
    logger.setLevel(logging.CRITICAL)  # each fault logs what the loader did
    # Python's own handler, even when started in the background (where a shell ignores SIGINT).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with _forced_splits() if args.splits else contextlib.nullcontext():
            runs, seconds = _campaign(args)
    finally:
        logger.setLevel(level)
        signal.signal(signal.SIGINT, handler)
    rows = []
    for fault in FAULTS:
        for on_error in ("raise", "skip"):
            chosen = [r for r in runs if r["fault"] == fault and r["on_error"] == on_error]
            bad = [r for r in chosen if r["problems"]]
            outcomes = collections.Counter(r["raised"] or "epoch complete" for r in chosen)
            rows.append([fault, on_error, len(chosen), len(bad), ", ".join(f"{k} {v}" for k, v in outcomes.items())])
    # Reaching this line means no run hung: a hung run ends the campaign (see _campaign).
    split, splits = sum(r["split"] for r in runs), sum(r["splits"] > 0 for r in runs)
    print(f"\n{args.runs} runs (seed {args.seed}) in {seconds:.0f} s: 0 hangs")
    if args.splits:
        print(f"{split} runs with processes='auto' and forced splits; in {splits}, a worker split while batches came")
    print(format_table(["fault", "on_error", "runs", "runs with a problem", "outcome"], rows))
    kinds = collections.Counter(p.split(":")[0] for r in runs for p in r["problems"])
    print(f"problems: {dict(kinds) or 'none'} (duplicates, lost indices, orphaned processes, leaked blocks)")
    report = {"machine": machine_info(), "args": vars(args) | {"out": str(args.out)}, "runs": runs}
    print(f"wrote {write_json(args.out, report)}")
    return report


def _campaign(args: argparse.Namespace) -> tuple[list[dict[str, Any]], float]:
    """The runs, and the seconds they took."""
    rng = random.Random(args.seed)
    runs = []
    started = time.perf_counter()
    for number in range(args.runs):
        # A run still going after --hang-after: every thread's stack, and the campaign ends (exit code 1).
        faulthandler.dump_traceback_later(args.hang_after, exit=True, file=sys.__stderr__)
        try:
            run = one_run(rng, args.splits)
        finally:
            faulthandler.cancel_dump_traceback_later()
        runs.append(run)
        if run["problems"]:
            print(f"run {number}: {run}", flush=True)
        if (number + 1) % 50 == 0:
            print(f"{number + 1} runs, {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    return runs, time.perf_counter() - started


if __name__ == "__main__":
    main()
