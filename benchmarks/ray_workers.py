"""The training process's CPU per clip: local loader threads against Ray actors, on real XviD clips.

The same yield function (``XvidClips``: ``--clips`` clips of ``--clip-len`` frames
a batch, read with ``read_clip`` from a UCF101-like XviD set) runs in two ways:
``DataLoader(num_threads=T)`` in this process, and ``DataLoader(workers=RayWorkers(
actors=K))``. Each loader runs one untimed epoch (it builds the indexes), then
``--epochs`` timed ones. ``cpu ms/clip`` is this process's CPU time (user and
system, all its threads) over the timed epochs per clip; Ray's own processes
and the actors are not counted. ``ratio`` is a variant's CPU per clip over the
threads' in the same round. With ``--address`` the actors run on that cluster,
else on a local one this script starts with ``K`` CPUs.

    python -m benchmarks.ray_workers --videos 24 --threads 2 --actors 2 --rounds 2
    python -m benchmarks.ray_workers --address 10.0.0.5:6379 --actors 16 --threads 8
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from parallel_loader import DataLoader, YieldFunction
from parallel_loader.ray import RayWorkers
from parallel_loader.video import frame_count, read_clip

from ._common import add_out_argument, format_table, make_parser, parse_ints, write_report
from ._workloads import REPO, limit_opencv_threads
from .video_decode import SETS, make_set

__all__ = ["XvidClips", "main"]


class XvidClips(YieldFunction):
    """Batch ``i``: ``clips`` clips, each from the next video at a start drawn from ``i``."""

    def __init__(self, paths: list[str], lengths: list[int], clips: int, clip_len: int, size: int) -> None:
        self.paths = paths
        self.lengths = lengths
        self.clips = clips
        self.clip_len = clip_len
        self.size = size

    def __len__(self) -> int:
        return len(self.paths) // self.clips

    def __call__(self, index: int) -> np.ndarray:
        rng = np.random.default_rng(index)
        out = []
        for k in range(index * self.clips, (index + 1) * self.clips):
            start = int(rng.integers(0, max(1, self.lengths[k] - 2 * self.clip_len)))
            out.append(read_clip(self.paths[k], start, self.clip_len, 2, (self.size, self.size)))
        return np.stack(out)


def run(fn: XvidClips, epochs: int, **options: Any) -> dict[str, float]:
    """One loader: an untimed epoch, then ``epochs`` timed; clips/s and this process's CPU ms per clip."""
    with DataLoader(fn, max_len=4, **options) as loader:
        for _ in loader:
            pass
        cpu, wall, clips = time.process_time(), time.perf_counter(), 0
        for _ in range(epochs):
            for batch in loader:
                assert batch.dtype == np.uint8
                clips += len(batch)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        transfer = loader.stats().transfer_seconds
    return {"clips/s": clips / wall, "cpu ms/clip": 1000 * cpu / clips, "transfer s": transfer}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = make_parser(__doc__)
    parser.add_argument("--data", type=Path, default=None, help="where the XviD set is made (default: a temp dir)")
    parser.add_argument("--videos", type=int, default=48, help="videos in the set: clips per epoch")
    parser.add_argument("--seconds", type=float, default=4.0, help="each video's length")
    parser.add_argument("--clips", type=int, default=4, help="clips per batch")
    parser.add_argument("--clip-len", type=int, default=16)
    parser.add_argument("--size", type=int, default=112)
    parser.add_argument("--threads", type=parse_ints, default=[2], help="local thread counts, e.g. 2,4")
    parser.add_argument("--actors", type=parse_ints, default=[2], help="actor counts, e.g. 2,4")
    parser.add_argument("--calls-per-actor", type=int, default=2)
    parser.add_argument("--address", default=None, help="a Ray cluster's address (default: start a local one)")
    parser.add_argument("--epochs", type=int, default=2, help="timed epochs per loader")
    parser.add_argument("--rounds", type=int, default=1, help="rounds of every variant; medians reported")
    add_out_argument(parser)
    args = parser.parse_args(argv)
    limit_opencv_threads()
    import ray  # the extra "ray"

    with tempfile.TemporaryDirectory() as scratch:
        root = args.data or Path(scratch)
        paths = [str(p) for p in make_set(root, SETS["ucf"], args.videos, seed=0, max_seconds=args.seconds)]
        fn = XvidClips(paths, [frame_count(p) for p in paths], args.clips, args.clip_len, args.size)
        started = args.address is None and not ray.is_initialized()
        if started:  # the actors import this module: the local cluster's processes find it on PYTHONPATH
            os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH"))))
            ray.init(num_cpus=max(args.actors), include_dashboard=False, logging_level="WARNING")
        variants = {f"threads={t}": {"num_threads": t} for t in args.threads}
        for k in args.actors:
            workers = RayWorkers(actors=k, calls_per_actor=args.calls_per_actor, address=args.address)
            variants[f"actors={k}, calls_per_actor={args.calls_per_actor}"] = {"workers": workers}
        results: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
        try:
            for _ in range(args.rounds):
                for name, options in variants.items():
                    results[name].append(run(fn, args.epochs, **options))
        finally:
            if started:
                ray.shutdown()
    baseline = statistics.median(r["cpu ms/clip"] for r in results[f"threads={args.threads[0]}"])
    table = {name: {key: statistics.median(r[key] for r in runs) for key in runs[0]} for name, runs in results.items()}
    for row in table.values():
        row["ratio"] = row["cpu ms/clip"] / baseline
    headers = ["variant", "clips/s", "cpu ms/clip", "transfer s", "ratio"]
    print(format_table(headers, [[name, *(row[h] for h in headers[1:])] for name, row in table.items()]))
    return write_report(args, "ray_workers", {"results": table, "set": SETS["ucf"].description})


if __name__ == "__main__":
    main()
