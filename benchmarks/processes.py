"""Threads or worker processes: when ``DataLoader(processes=P)`` pays, and what a batch's crossing costs.

Three workloads (``--workload``, all by default):

* ``gil``: a yield function written in Python (a loop of ``--call-ms`` ms per call
  that holds the GIL) returning a small float32 array: a serial loop, the loader
  with 2 threads, the loader with 2 worker processes of 1 thread, and the PyTorch
  DataLoader with 2 worker processes (``batch_size=None``, its default start
  method), over the same function in the same run. Batches/s from the first batch
  on ("steady"), and with the start-up included.
* ``transfer``: how fast a batch of ``--mb`` MB (one uint8 array) crosses from a
  worker process to the consumer, which reads a byte of every page of it:
  through the loader's shared memory (the worker asks for a block, writes the array
  once, sends the rest pickled) against pickling it through a pipe (what
  ``multiprocessing`` and PyTorch's workers do); and the whole loader with
  ``processes=1`` returning that array (a call, the crossing, the queue).
* ``video``: the sample video set through ``VideoFolder``, threads against
  worker processes, timed after ``--warm-epochs`` untimed epochs of the same loader (each
  process builds the index of each file it reads once).

Rounds interleave the variants in a new order each; medians (min-max) reported.

    python -m benchmarks.processes --rounds 3
"""

from __future__ import annotations

import argparse
import multiprocessing
import random
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from parallel_loader import DataLoader, YieldFunction
from parallel_loader._calls.shared_batches import BlockPool, WorkerMappings, split_arrays, write_arrays

from ._common import DEFAULT_OUT, add_noise_arguments, format_table, machine_info, spread, write_json
from ._resources import ResourceSampler, wait_for_quiet
from ._workloads import add_video_arguments, describe_video, limit_opencv_threads, open_video_folder

__all__ = ["PythonWork", "main"]


class PythonWork(YieldFunction):
    """A call spends ``loops`` iterations of a Python loop (it holds the GIL throughout)."""

    def __init__(self, length: int, loops: int) -> None:
        self.length = length
        self.loops = loops

    def __len__(self) -> int:
        return self.length

    def __call__(self, index: int) -> np.ndarray:
        total = 0
        for i in range(self.loops):
            total += (i * index) % 7
        return np.full(256, total, np.float32)


class _TorchWork:
    """The same function as a PyTorch map-style dataset."""

    def __init__(self, work: PythonWork) -> None:
        self.work = work

    def __len__(self) -> int:
        return len(self.work)

    def __getitem__(self, index: int) -> np.ndarray:
        return self.work(index)


def calibrate(call_ms: float) -> int:
    """The loop count that makes one ``PythonWork`` call take ``call_ms`` ms here."""
    loops = 10_000
    while True:
        work = PythonWork(1, loops)
        start = time.perf_counter()
        for i in range(5):
            work(100 + i)  # index 0 makes a cheaper loop (multiplying by 0)
        seconds = (time.perf_counter() - start) / 5
        if seconds > 0.002:
            return max(1, round(loops * call_ms / 1000 / seconds))
        loops *= 4


def timed(batches: Iterable[Any], count: int) -> tuple[float, float]:
    """(batches/s from the first batch on, batches/s with the start) over ``count`` batches."""
    start = time.perf_counter()
    first = None
    seen = 0
    for _ in batches:
        seen += 1
        if first is None:
            first = time.perf_counter()
        if seen == count:
            break
    end = time.perf_counter()
    assert first is not None and seen == count, f"{seen} of {count} batches"
    return (count - 1) / (end - first), count / (end - start)


def _loader_run(yield_fn: Any, count: int, warm: int = 0, **kwargs: Any) -> tuple[float, float]:
    """Batches/s of a new loader over ``count`` batches, after ``warm`` untimed epochs.

    Warm epochs let each thread or process touch the files first (a video's index is
    built on first use, once per process), as a long training run would have.
    """
    with DataLoader(yield_fn, **kwargs) as loader:
        for _ in range(warm):
            for _ in loader:
                pass
        return timed(_epochs(loader), count)


def _epochs(loader: DataLoader) -> Iterable[Any]:
    while True:
        yield from loader


def gil_variants(work: PythonWork) -> dict[str, Callable[[int], tuple[float, float]]]:
    variants: dict[str, Callable[[int], tuple[float, float]]] = {
        "serial loop": lambda n: timed((work(i) for i in range(n)), n),
        "DataLoader, 2 threads": lambda n: _loader_run(work, n, num_threads=2),
        "DataLoader, processes=2, num_threads=1": lambda n: _loader_run(work, n, num_threads=1, processes=2),
    }
    try:
        import torch.utils.data
    except ImportError:
        print("torch is not installed (pip install torch==2.13.0): the PyTorch row is left out")
        return variants

    def torch_run(n: int) -> tuple[float, float]:
        loader = torch.utils.data.DataLoader(_TorchWork(work), batch_size=None, num_workers=2)
        return timed(loader, n)

    variants["PyTorch DataLoader, 2 worker processes"] = torch_run
    return variants


def run_rounds(
    variants: dict[str, Callable[[int], tuple[float, float]]], count: int, rounds: int, quiet: float
) -> dict[str, dict[str, Any]]:
    results: dict[str, dict[str, Any]] = {name: {"steady": [], "start": [], "others": []} for name in variants}
    names = list(variants)
    for round_ in range(rounds):
        random.Random(round_).shuffle(names)
        for name in names:
            wait_for_quiet(quiet)
            with ResourceSampler() as sampler:
                steady, with_start = variants[name](count)
            results[name]["steady"].append(steady)
            results[name]["start"].append(with_start)
            results[name]["others"].append(sampler.others_percent)
            print(f"  round {round_ + 1} {name}: {steady:.1f} batches/s ({with_start:.1f} with start)", flush=True)
    return results


def rate_table(results: dict[str, dict[str, Any]], baseline: str, unit: str = "batches/s") -> str:
    base = spread(results[baseline]["steady"]).median
    rows = []
    for name, r in results.items():
        steady = spread(r["steady"])
        rows.append(
            [name, steady.fmt(1), f"{steady.median / base:.2f}x", spread(r["start"]).fmt(1), spread(r["others"]).fmt(0)]
        )
    return format_table(["loader", f"{unit}, steady", f"vs {baseline}", "with start", "others' CPU %"], rows)


# The transfer workload.


def _transfer_worker(conn: Any, mode: str, nbytes: int, count: int) -> None:
    array = np.random.default_rng(0).integers(0, 255, nbytes, dtype=np.uint8)
    mappings = WorkerMappings(4)  # as a loader's worker keeps them
    for _ in range(count):
        if mode == "pipe":
            conn.send(array)
            continue
        skeleton, arrays, size = split_arrays(array)
        conn.send(("need", size))
        name, block_size = conn.recv()
        write_arrays(name, block_size, skeleton, arrays, mappings)
        conn.send(skeleton)
    conn.close()


def _touch(array: np.ndarray) -> int:
    return int(array[::4096].sum())


def transfer_run(mode: str, nbytes: int, count: int) -> float:
    """Batches/s crossing from a worker process to this one (the process's start not timed)."""
    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    process = context.Process(target=_transfer_worker, args=(child, mode, nbytes, count), daemon=True)
    process.start()
    child.close()
    pool = BlockPool(4, prefix="plbench_")
    try:
        _receive(parent, mode, pool)  # the first: the worker's start and its first fill are not timed
        start = time.perf_counter()
        for _ in range(count - 1):
            _receive(parent, mode, pool)
        return (count - 1) / (time.perf_counter() - start)
    finally:
        process.join(10)
        pool.close()


def _receive(conn: Any, mode: str, pool: BlockPool) -> None:
    if mode == "pipe":
        _touch(conn.recv())
        return
    _, size = conn.recv()
    block = pool.acquire(size)
    conn.send((block.name, block.size))
    _touch(pool.build(conn.recv(), block))


class CachedArray(YieldFunction):
    """Every call returns the same array of ``nbytes`` (made once per process): only the crossing costs."""

    _array: np.ndarray | None = None

    def __init__(self, length: int, nbytes: int) -> None:
        self.length = length
        self.nbytes = nbytes

    def __len__(self) -> int:
        return self.length

    def __call__(self, index: int) -> np.ndarray:
        if CachedArray._array is None or CachedArray._array.nbytes != self.nbytes:
            CachedArray._array = np.random.default_rng(0).integers(0, 255, self.nbytes, dtype=np.uint8)
        return CachedArray._array


def transfer_variants(nbytes: int) -> dict[str, Callable[[int], tuple[float, float]]]:
    def loader_run(n: int) -> tuple[float, float]:
        with DataLoader(CachedArray(n, nbytes), num_threads=1, processes=1, max_len=4) as loader:
            return timed((_touch(b) for b in loader), n)

    return {
        "pickle through a pipe": lambda n: (transfer_run("pipe", nbytes, n),) * 2,
        "shared memory": lambda n: (transfer_run("shm", nbytes, n),) * 2,
        "DataLoader, processes=1": loader_run,
    }


# The video workload.


def one_opencv_thread(number: int) -> None:
    """thread_init of every video variant: OpenCV's own threads off in each process, as in this one."""
    limit_opencv_threads()


def video_variants(folder: Any, warm: int) -> dict[str, Callable[[int], tuple[float, float]]]:
    def run(n: int, **kwargs: Any) -> tuple[float, float]:
        return _loader_run(folder, n, warm, thread_init=one_opencv_thread, **kwargs)

    return {
        "DataLoader, 2 threads": lambda n: run(n, num_threads=2),
        "DataLoader, 4 threads": lambda n: run(n, num_threads=4),
        "DataLoader, processes=2, num_threads=1": lambda n: run(n, num_threads=1, processes=2),
        "DataLoader, processes=2, num_threads=2": lambda n: run(n, num_threads=2, processes=2),
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workload", choices=["gil", "transfer", "video", "all"], default="all")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batches", type=int, default=200, help="batches per run of the gil workload")
    parser.add_argument("--call-ms", type=float, default=8.0, help="ms of one call of the gil workload")
    parser.add_argument("--mb", type=float, nargs="+", default=[2.0, 20.0], help="batch sizes of the transfer")
    parser.add_argument("--transfers", type=int, default=40, help="batches per transfer run")
    parser.add_argument("--video-batches", type=int, default=30, help="batches per run of the video workload")
    parser.add_argument("--warm-epochs", type=int, default=3, help="untimed epochs before each video run")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT / "processes.json")
    add_noise_arguments(parser)
    add_video_arguments(parser)
    args = parser.parse_args(argv)
    report: dict[str, Any] = {"machine": machine_info(), "args": {k: str(v) for k, v in vars(args).items()}}
    if args.workload in ("gil", "all"):
        loops = calibrate(args.call_ms)
        work = PythonWork(args.batches * 2, loops)
        print(f"\n## gil: a Python loop of {args.call_ms} ms per call ({loops} iterations), {args.batches} batches")
        results = run_rounds(gil_variants(work), args.batches, args.rounds, args.quiet)
        print(rate_table(results, "serial loop"))
        report["gil"] = results
    if args.workload in ("transfer", "all"):
        report["transfer"] = {}
        for mb in args.mb:
            print(f"\n## transfer: batches of {mb} MB, {args.transfers} per run")
            results = run_rounds(transfer_variants(int(mb * 1e6)), args.transfers, args.rounds, args.quiet)
            print(rate_table(results, "pickle through a pipe"))
            report["transfer"][str(mb)] = results
    if args.workload in ("video", "all"):
        folder = open_video_folder(args)
        print(f"\n## video: {describe_video(folder, args)}, {args.video_batches} batches")
        results = run_rounds(video_variants(folder, args.warm_epochs), args.video_batches, args.rounds, args.quiet)
        print(rate_table(results, "DataLoader, 2 threads"))
        report["video"] = results
    print(f"\nwrote {write_json(args.out, report)}")
    return report


if __name__ == "__main__":
    main()
