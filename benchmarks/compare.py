"""The decode workload through parallel_loader and its peers, at the same thread counts.

Every loader decodes the same clips (same files, clip length, frame size, batch
size, seed, and so the same random starts and crops: a clip is fixed by its
position in the epoch) and hands batches to the same consumer, which takes the
arrays and optionally sleeps ``--step`` seconds to stand in for the accelerator.

* ``serial``: ``VideoFolder(index)`` then the step, in the main thread.
* ``parallel_loader``: ``DataLoader(VideoFolder, N)``, batch-level yield function.
* ``tf.data``: ``range -> map(tf.numpy_function(one clip), num_parallel_calls=AUTOTUNE,
  deterministic=False) -> batch -> prefetch(AUTOTUNE)``, in a private thread pool of
  N threads (TF's default pool is one thread per core).
* ``keras-threads``: ``PyDataset(workers=N, use_multiprocessing=False)`` iterated
  by Keras's own adapter (as ``fit`` does); with ``workers=1`` Keras runs no
  worker at all and loads in the calling thread.
* ``keras-processes``: the same with ``use_multiprocessing=True``, which Keras's
  documentation recommends for CPU-bound loading.
* ``torch``: ``DataLoader(Dataset, batch_size, num_workers=N, persistent_workers=True)``
  (worker processes), if torch is installed.

All use one OpenCV thread and one FFmpeg decoder thread per capture (set in
every worker too). Runs are interleaved; each round visits the loaders in a
new order. ``clips/s`` counts from the first batch received to the last
(start-up and pipeline fill excluded, since process-based peers pay a large
start-up once per training run); ``with start`` includes it.

    python -m benchmarks.compare --threads 1,2 --rounds 5
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from parallel_loader import DataLoader, YieldFunction
from parallel_loader.tensorflow._startup import import_tensorflow

from ._common import (
    RunProgress,
    add_noise_arguments,
    add_out_argument,
    add_output_arguments,
    format_table,
    make_parser,
    parse_ints,
    spread,
    write_report,
)
from ._resources import ResourceSampler, wait_for_quiet
from ._workloads import add_video_arguments, describe_video, limit_opencv_threads, open_video_folder

__all__ = ["main"]


class Clips:
    """One clip at a time, ``(clip, label)``, for the per-sample peers: position ``i`` of the epoch."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.folder = _folder(args, 1)

    def __len__(self) -> int:
        return len(self.folder)

    def __call__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        clips, labels = self.folder(index % len(self.folder))
        return clips[0], labels[0]


class Batches(YieldFunction):
    """``batches`` batches of the batch-level ``VideoFolder``, cycling through its epoch."""

    def __init__(self, args: argparse.Namespace, batches: int) -> None:
        self.folder = _folder(args, args.batch_size)
        self.batches = batches

    def __len__(self) -> int:
        return self.batches

    def __call__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        return self.folder(index % len(self.folder))


def _folder(args: argparse.Namespace, batch_size: int) -> Any:
    return open_video_folder(argparse.Namespace(**{**vars(args), "batch_size": batch_size}))


def consume(batches: Iterable[Any], count: int, step: float) -> tuple[float, float, int]:
    """Take ``count`` batches, run the consumer on each; return (seconds, steady seconds, clips).

    Steady seconds run from the first batch received to the end.
    """
    start = time.perf_counter()
    first = None
    clips = 0
    iterator = iter(batches)
    for _ in range(count):
        x, y = next(iterator)
        x, y = np.asarray(x), np.asarray(y)
        if first is None:
            first = time.perf_counter()
        else:
            clips += len(x)
        if step > 0:
            time.sleep(step)
    end = time.perf_counter()
    return end - start, end - first, clips


# One function per loader: (args, threads, batches) -> (seconds, steady seconds, clips after the first batch).


def run_serial(args: argparse.Namespace, threads: int, batches: int) -> tuple[float, float, int]:
    source = Batches(args, batches)
    return consume((source(i) for i in range(batches)), batches, args.step)


def run_parallel_loader(args: argparse.Namespace, threads: int, batches: int) -> tuple[float, float, int]:
    with DataLoader(Batches(args, batches), threads, args.max_len, name="compare") as loader:
        return consume(loader, batches, args.step)


def run_tfdata(args: argparse.Namespace, threads: int, batches: int) -> tuple[float, float, int]:
    import tensorflow as tf

    source = Clips(args)
    shape = (args.clip_len, *args.size, 3)

    def load(index: Any) -> tuple[np.ndarray, np.ndarray]:
        return source(int(index))

    def mapped(index: Any) -> tuple[Any, Any]:
        clip, label = tf.numpy_function(load, [index], (tf.float32, tf.int64), stateful=False)
        clip.set_shape(shape)
        label.set_shape(())
        return clip, label

    options = tf.data.Options()
    options.threading.private_threadpool_size = threads
    dataset = (
        tf.data.Dataset.range(batches * args.batch_size)
        .map(mapped, num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)
        .batch(args.batch_size)
        .prefetch(tf.data.AUTOTUNE)
        .with_options(options)
    )
    return consume(dataset, batches, args.step)


def _keras(multiprocessing: bool) -> Callable[[argparse.Namespace, int, int], tuple[float, float, int]]:
    def run(args: argparse.Namespace, threads: int, batches: int) -> tuple[float, float, int]:
        import keras
        from keras.src.trainers.data_adapters.py_dataset_adapter import PyDatasetAdapter

        source = Batches(args, batches)

        class Dataset(keras.utils.PyDataset):
            def __len__(self) -> int:
                return batches

            def __getitem__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
                limit_opencv_threads()  # a no-op after the first call; covers worker processes
                return source(index)

        dataset = Dataset(workers=threads, use_multiprocessing=multiprocessing, max_queue_size=args.max_len)
        adapter = PyDatasetAdapter(dataset, shuffle=False)
        adapter.on_epoch_begin()
        try:
            return consume(adapter.get_numpy_iterator(), batches, args.step)
        finally:
            adapter.on_epoch_end()

    return run


def run_torch(args: argparse.Namespace, threads: int, batches: int) -> tuple[float, float, int]:
    import torch.utils.data

    source = Clips(args)

    class Dataset(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return batches * args.batch_size

        def __getitem__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
            return source(index)

    loader = torch.utils.data.DataLoader(
        Dataset(),
        batch_size=args.batch_size,
        shuffle=False,
        num_workers=threads,
        persistent_workers=True,
        worker_init_fn=_torch_worker_init,
    )
    iterator = iter(loader)
    try:
        return consume(iterator, batches, args.step)
    finally:
        del iterator
        loader._iterator = None  # persistent workers: stop them now rather than at garbage collection


def _torch_worker_init(worker_id: int) -> None:
    import torch

    torch.set_num_threads(1)
    limit_opencv_threads()


LOADERS: dict[str, Callable[[argparse.Namespace, int, int], tuple[float, float, int]]] = {
    "serial": run_serial,
    "parallel_loader": run_parallel_loader,
    "tf.data": run_tfdata,
    "keras-threads": _keras(False),
    "keras-processes": _keras(True),
    "torch": run_torch,
}
PEERS = ("tf.data", "keras-threads", "keras-processes", "torch")
TENSORFLOW_LOADERS = ("tf.data", "keras-threads", "keras-processes")


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the comparison, print its table and return the results."""
    parser = make_parser(__doc__)
    parser.add_argument("--threads", type=parse_ints, default=[1, 2], help="thread (worker) counts, e.g. 1,2")
    parser.add_argument("--loaders", nargs="+", default=list(LOADERS), choices=list(LOADERS))
    parser.add_argument("--batches", type=int, default=20, help="batches per run")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds; medians reported")
    parser.add_argument("--max-len", type=int, default=8, help="queue capacity (max_queue_size for Keras)")
    parser.add_argument("--step", type=float, default=0.0, help="consumer's sleep per batch, standing in for a step")
    add_out_argument(parser)
    add_noise_arguments(parser)
    add_output_arguments(parser)
    add_video_arguments(parser)
    args = parser.parse_args(argv)
    if any(name in TENSORFLOW_LOADERS for name in args.loaders):
        import_tensorflow(args.verbose)

    loaders = list(args.loaders)
    if "torch" in loaders and importlib.util.find_spec("torch") is None:
        print("torch is not installed: the PyTorch DataLoader was skipped")
        loaders.remove("torch")
    folder = open_video_folder(args)  # makes the sample set if missing, before any timing
    configs = [("serial", 0)] if "serial" in loaders else []
    configs += [(name, n) for n in args.threads for name in loaders if name != "serial"]
    rng = random.Random(args.seed)
    runs: dict[tuple[str, int], list[tuple[float, float, int]]] = {c: [] for c in configs}
    others: dict[tuple[str, int], list[float]] = {c: [] for c in configs}
    with RunProgress(args.rounds * len(configs), args.progress) as progress:
        for _ in range(args.rounds):
            order = configs[:]
            rng.shuffle(order)
            for name, threads in order:
                wait_for_quiet(args.quiet)
                with ResourceSampler() as resources:
                    runs[(name, threads)].append(LOADERS[name](args, threads, args.batches))
                others[(name, threads)].append(resources.others_percent)
                _, steady_s, clips = runs[(name, threads)][-1]
                progress.done(f"{name}, {threads} threads", f"{clips / steady_s:.1f} clips/s")

    results: dict[str, dict[str, Any]] = {}
    for (name, threads), measured in runs.items():
        steady = [clips / s for _, s, clips in measured]
        total = [(clips + args.batch_size) / t for t, _, clips in measured]
        results[f"{name}/{threads}"] = {
            "loader": name,
            "threads": threads,
            "clips_per_s": steady,
            "clips_per_s_with_start": total,
            "others_cpu_percent": others[(name, threads)],
        }
    rows = []
    for r in results.values():
        rate = spread(r["clips_per_s"])
        base = results.get(f"parallel_loader/{r['threads']}")
        ratio = rate.median / statistics.median(base["clips_per_s"]) if base else float("nan")
        r["median"] = rate.median
        r["ratio_to_parallel_loader"] = ratio
        label = "-" if r["loader"] == "serial" else r["threads"]
        rows.append(
            [
                r["loader"],
                label,
                rate.fmt(1),
                spread(r["clips_per_s_with_start"]).fmt(1),
                f"{ratio:.2f}" if r["loader"] != "serial" else "",
                spread(r["others_cpu_percent"]).fmt(0),
            ]
        )
    print(
        f"{describe_video(folder, args)}; {args.batches} batches per run, step {args.step} s, "
        f"{args.rounds} rounds in shuffled order; clips/s median (min-max)"
    )
    headers = [
        "loader",
        "threads",
        "clips/s",
        "clips/s with start",
        "ratio to parallel_loader",
        "others' CPU % (during)",
    ]
    print(format_table(headers, rows))
    targets = _targets(results, args.threads)
    for line in targets:
        print(line)
    return write_report(args, "compare", {"results": results, "targets": targets})


def _targets(results: dict[str, dict[str, Any]], threads: Sequence[int]) -> list[str]:
    lines = []
    for n in threads:
        ours = results.get(f"parallel_loader/{n}")
        peers = [results[f"{p}/{n}"] for p in PEERS if f"{p}/{n}" in results]
        if ours and peers:
            best = max(peers, key=lambda r: r["median"])
            ratio = ours["median"] / best["median"]
            verdict = "met" if ratio >= 1.1 else "MISSED"
            lines.append(
                f"target parallel_loader >= 1.1x best peer at {n} thread(s): {verdict} ({ratio:.2f}x {best['loader']})"
            )
    one, two = results.get("parallel_loader/1"), results.get("parallel_loader/2")
    if one and two:
        ratio = two["median"] / one["median"]
        verdict = "met" if ratio >= 1.7 else "MISSED"
        lines.append(f"target parallel_loader 2 threads >= 1.7x 1 thread: {verdict} ({ratio:.2f}x)")
    return lines


if __name__ == "__main__":
    main()
