"""Host scale: what decoding in the trainer's process costs the trainer, a sweep over the cores, a worker's start.

Four parts (``--parts``, all by default), over ``VideoDataset`` on the UCF101-like
XviD AVIs of ``video_cold`` (100 by default; 16 frames at stride 2, 112x112,
uint8, batches of 4, shuffled). One untimed epoch first fills an index store, so
every run reads warm. Each run is a fresh dataset and loader; its first
``--skip`` batches are not timed: by default one epoch and 4 batches. So every
placement is timed in its steady state, as a run of days is. Threads in the
trainer find each file's packet table already decoded in the process (the filling
epoch left it there); a new worker decodes each once in its first epoch.

* ``tax``: a stand-in trainer takes each batch: ``--python-ms`` of pure Python
  (a fixed loop, holding the GIL), then ``--wait-ms`` asleep (outside the GIL, as
  a GPU step waits). Placements: batches already in memory (a list cycled);
  ``N`` threads in the trainer's process; 1 process of ``N``; ``--processes`` of
  ``N``; and the training default (``training_placement`` with nothing given:
  ``processes="auto"``). ``N`` from ``--threads``. Reported: the loader's clips/s,
  steps/s, the step's own time and its rate (``1000 / step ms``: what the trainer
  would run at if never kept waiting), the trainer process's own CPU per clip,
  and the GIL it waited for (a probe thread sleeping 1 ms in a loop, its lateness
  as a share of the wall time). ``--trainer keras`` adds a Keras ``fit`` of a
  small 3D-conv model (one TensorFlow intra-op thread) through ``as_tf_dataset``.
* ``hop``: the stand-in trainer with ``--hop-wait-ms`` asleep, so that it, not
  the loader, sets the pace. Batches from ``as_tf_dataset`` against memory.
* ``sweep``: the loader alone (the consumer only takes batches) at every
  ``processes x threads`` up to the cores, and ``processes="auto"``. Clips/s and
  cores busy (this process's and its workers' CPU seconds over the wall time).
* ``start``: ``_worker_start``'s script (TensorFlow imported at its top, a yield
  function of its own) with ``processes=2``, and a ``VideoDataset`` worker after
  its first clip. With ``--before DIR``, the same against the package in ``DIR``.

Rounds interleave the runs in a new order each; medians (min-max) reported.

    python -m benchmarks.host_scale --rounds 3
    python -m benchmarks.host_scale --parts sweep --rounds 3
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import random
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from parallel_loader import DataLoader
from parallel_loader._loader.autotune import available_cores
from parallel_loader._loader.placement import auto_placement, training_placement
from parallel_loader.video import IndexCache, VideoDataset

from ._common import (
    add_noise_arguments,
    add_out_argument,
    format_table,
    make_parser,
    parse_ints,
    spread,
    write_report,
)
from ._resources import ResourceSampler, wait_for_quiet
from ._worker_start import run_script
from ._workloads import REPO, set_tf_threads
from .video_decode import SETS, make_set

__all__ = ["GilProbe", "StandInTrainer", "main"]

_CLASSES = 5


class StandInTrainer:
    """A training step: a fixed pure-Python loop (holding the GIL), then a wait outside it (``time.sleep``).

    The loop is a fixed amount of work, sized to ``python_ms`` of this thread's CPU time
    when made. So a loop kept from the GIL takes longer, as a trainer's Python does.
    """

    def __init__(self, python_ms: float, wait_ms: float) -> None:
        self.wait = wait_ms / 1000
        self.loops = _calibrate(python_ms)

    def __call__(self, batch: Any) -> None:
        total = 0
        for i in range(self.loops):
            total += i % 7
        time.sleep(self.wait)


def _calibrate(python_ms: float) -> int:
    loops = 20_000
    while True:
        started = time.thread_time()
        total = 0
        for i in range(loops):
            total += i % 7
        used = time.thread_time() - started
        if used > 0.02:
            return max(1, round(loops * python_ms / 1000 / used))
        loops *= 2


class GilProbe:
    """A thread that sleeps 1 ms in a loop: how late it wakes is how long it waited for the GIL.

    ``share`` is the lateness summed over the wall time. Timer slack and a loaded
    machine's scheduling add to it alike for every placement; compare with batches in memory.
    """

    def __init__(self, period: float = 0.001) -> None:
        self.period = period
        self.late = 0.0
        self.share = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="GilProbe", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.perf_counter()
            time.sleep(self.period)
            self.late += max(0.0, time.perf_counter() - started - self.period)

    def __enter__(self) -> GilProbe:
        self._started = time.perf_counter()
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()
        self.share = self.late / (time.perf_counter() - self._started)


@dataclass(frozen=True)
class Placement:
    """Where a run's batches come from: ``memory``, a ``loader`` or ``tf`` (``as_tf_dataset``) with ``kwargs``."""

    label: str
    kind: str
    kwargs: dict[str, Any] = field(default_factory=dict)


def placements(threads: Sequence[int], processes: int, kind: str) -> list[Placement]:
    """Memory, then for each ``N``: threads in the trainer, 1 process of N, ``processes`` of N; the default last."""
    found = [Placement("batches in memory", "memory")]
    for n in threads:
        found.append(Placement(f"{n} thread(s) in the trainer", kind, {"num_threads": n, "processes": 0}))
        for p in dict.fromkeys([1, processes]):
            found.append(Placement(f"{p} process(es) x {n} thread(s)", kind, {"num_threads": n, "processes": p}))
    p, n = auto_placement()
    found.append(Placement(f"default ({p} x {n})", kind, {"default": True}))
    return found


class Workload:
    """The videos, a filled index store, one epoch of batches in memory, and fresh datasets over them."""

    def __init__(self, args: argparse.Namespace, store: Path) -> None:
        paths = make_set(Path(args.data) / "ucf", SETS["ucf"], args.videos, args.seed, args.max_seconds)
        self.rows = [(str(p), k % _CLASSES) for k, p in enumerate(paths)]
        self.args = args
        self.store = store
        with DataLoader(self.dataset(), num_threads=available_cores()) as loader:
            self.batches = list(loader)  # the untimed epoch that fills the store

    def dataset(self) -> VideoDataset:
        a = self.args
        return VideoDataset(self.rows, batch_size=a.batch_size, clip_len=a.clip_len, stride=a.stride,
                            size=tuple(a.size), dtype="uint8", seed=a.seed, classes=[f"c{k}" for k in range(_CLASSES)],
                            index_cache=IndexCache(self.store))  # fmt: skip

    @contextlib.contextmanager
    def source(self, placement: Placement) -> Iterator[Iterator[Any]]:
        """An endless iterator of the placement's batches, closed after."""
        if placement.kind == "memory":
            yield itertools.cycle(self.batches)
            return
        data = self.dataset()
        kwargs = dict(placement.kwargs)
        if placement.kind == "tf":
            made = _as_tf(data, placement)
        else:
            if kwargs.pop("default", False):
                num_threads, processes = training_placement(data, None, None, name="host-scale")
                kwargs = {"num_threads": num_threads, "processes": processes}
            made = DataLoader(data, **kwargs)
        batches = _endless(made)
        try:
            yield batches
        finally:
            batches.close()
            made.close()


def _as_tf(data: VideoDataset, placement: Placement) -> Any:
    """``as_tf_dataset`` over ``data`` in the placement (nothing given for the default)."""
    from parallel_loader.tensorflow import as_tf_dataset

    kwargs = dict(placement.kwargs)
    return as_tf_dataset(data, **({} if kwargs.pop("default", False) else kwargs))


def _endless(epochs: Any) -> Iterator[Any]:
    while True:
        yield from epochs


def trainer_run(workload: Workload, placement: Placement, step: Callable[[Any], None]) -> dict[str, float]:
    """Steps of ``step`` over the placement's batches: rates, the step's time, the trainer's CPU and GIL wait."""
    args = workload.args
    me = psutil.Process()
    with workload.source(placement) as batches:
        for _ in range(args.skip):
            next(batches)
        with ResourceSampler() as sampler, GilProbe() as probe:
            cpu, started, in_step = _cpu(me), time.perf_counter(), 0.0
            for _ in range(args.batches):
                batch = next(batches)
                began = time.perf_counter()
                step(batch)
                in_step += time.perf_counter() - began
            wall, cpu = time.perf_counter() - started, _cpu(me) - cpu
    clips = args.batches * args.batch_size
    return {
        "clips_s": clips / wall,
        "steps_s": args.batches / wall,
        "step_ms": in_step / args.batches * 1000,
        "cpu_ms_per_clip": cpu / clips * 1000,
        "gil_wait_pct": probe.share * 100,
        "others_pct": sampler.others_percent,
    }


def loader_run(workload: Workload, placement: Placement) -> dict[str, float]:
    """The loader alone: clips/s and the cores this process and its workers kept busy."""
    args = workload.args
    with workload.source(placement) as batches:
        for _ in range(args.skip):
            next(batches)
        with ResourceSampler() as sampler:
            started = time.perf_counter()
            for _ in range(args.sweep_batches):
                next(batches)
            wall = time.perf_counter() - started
    return {
        "clips_s": args.sweep_batches * args.batch_size / wall,
        "cores": sampler.cpu_percent / 100 + sampler.children_seconds / wall,
        "others_pct": sampler.others_percent,
    }


def keras_run(workload: Workload, placement: Placement) -> dict[str, float]:
    """Steps/s of ``fit`` over the epochs after the first (its tracing and the loader's start)."""
    import keras
    import numpy as np
    import tensorflow as tf

    args, epochs = workload.args, workload.args.keras_epochs
    keras.utils.set_random_seed(0)
    clips = workload.batches[0][0]
    model = keras.Sequential([
        keras.Input(clips.shape[1:], dtype="uint8"),
        keras.layers.Rescaling(1 / 255),
        keras.layers.Conv3D(8, 3, strides=(2, 4, 4), padding="same", activation="relu"),
        keras.layers.Conv3D(16, 3, strides=2, padding="same", activation="relu"),
        keras.layers.GlobalAveragePooling3D(),
        keras.layers.Dense(_CLASSES),
    ])  # fmt: skip
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    times = _epoch_times(keras)
    if placement.kind == "memory":
        arrays = tuple(np.stack(part) for part in zip(*workload.batches, strict=True))
        model.fit(
            tf.data.Dataset.from_tensor_slices(arrays), epochs=1 + epochs, callbacks=[times], shuffle=False, verbose=0
        )
    else:
        with _as_tf(workload.dataset(), placement) as dataset:
            model.fit(dataset, epochs=1 + epochs, callbacks=[times], shuffle=False, verbose=0)
    steps, wall = epochs * len(workload.batches), times.ended - times.begun[1]
    return {"steps_s": steps / wall, "clips_s": steps * args.batch_size / wall}


def _epoch_times(keras: Any) -> Any:
    """A Keras callback keeping when each epoch began (``begun``) and when training ended (``ended``)."""

    class EpochTimes(keras.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self.begun: list[float] = []
            self.ended = 0.0

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            self.begun.append(time.perf_counter())

        def on_train_end(self, logs: Any = None) -> None:
            self.ended = time.perf_counter()

    return EpochTimes()


def _cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def rounds(
    runs: dict[str, Callable[[], dict[str, float]]], count: int, quiet: float, label: str
) -> dict[str, list[dict[str, float]]]:
    """Each run ``count`` times, in a new order each round; every run's figures, by name."""
    results: dict[str, list[dict[str, float]]] = {name: [] for name in runs}
    names = list(runs)
    for round_ in range(count):
        random.Random(round_).shuffle(names)
        for name in names:
            wait_for_quiet(quiet)
            results[name].append(runs[name]())
            figures = ", ".join(f"{k} {v:.1f}" for k, v in results[name][-1].items())
            print(f"  {label} round {round_ + 1}, {name}: {figures}", flush=True)
    return results


def _median(runs: list[dict[str, float]], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def _ratio(results: dict[str, list[dict[str, float]]], a: str, b: str, key: str, inverse: bool = False) -> float:
    """The median over rounds of run ``a``'s ``key`` over run ``b``'s (neighbours in time)."""
    pairs = zip(results[a], results[b], strict=True)
    return statistics.median((y[key] / x[key]) if inverse else (x[key] / y[key]) for x, y in pairs)


def tax_table(results: dict[str, list[dict[str, float]]], memory: str, threads: str) -> str:
    rows = []
    for name, runs in results.items():
        rate = 1000 / _median(runs, "step_ms")
        rows.append([
            name,
            spread(r["clips_s"] for r in runs).fmt(1),
            f"{_ratio(results, name, threads, 'clips_s'):.2f}x",
            spread(r["steps_s"] for r in runs).fmt(1),
            spread(r["step_ms"] for r in runs).fmt(1),
            f"{_ratio(results, name, memory, 'step_ms', inverse=True):.3f}x",
            f"{rate:.1f}",
            spread(r["cpu_ms_per_clip"] for r in runs).fmt(2),
            spread(r["gil_wait_pct"] for r in runs).fmt(1),
            spread(r["others_pct"] for r in runs).fmt(0),
        ])  # fmt: skip
    headers = ["placement", "clips/s", f"x {threads}", "steps/s", "step ms", "step rate x memory",
               "step rate /s", "trainer CPU ms/clip", "GIL wait %", "others' CPU %"]  # fmt: skip
    return format_table(headers, rows)


def tax_part(workload: Workload, args: argparse.Namespace) -> dict[str, Any]:
    trainer = StandInTrainer(args.python_ms, args.wait_ms)
    found = placements(args.threads, args.processes, "loader")
    runs = {p.label: (lambda p=p: trainer_run(workload, p, trainer)) for p in found}
    results = rounds(runs, args.rounds, args.quiet, "tax")
    default, memory = found[-1].label, found[0].label
    same = f"{auto_placement()[1]} thread(s) in the trainer"
    print(
        f"\n## The trainer's tax: stand-in step of {args.python_ms} ms of Python ({trainer.loops} loops) then "
        f"{args.wait_ms} ms asleep; {_describe(workload)}; {args.batches} batches timed; "
        f"medians (min-max) of {args.rounds} interleaved rounds"
    )
    threads = same if same in results else found[1].label
    print(tax_table(results, memory, threads))
    targets = []
    if same in results:
        ratio = _ratio(results, default, same, "clips_s")
        targets.append(_target(f"default >= 1.25x the clips/s of {same}", ratio >= 1.25, f"{ratio:.2f}x"))
    ratio = _ratio(results, default, memory, "step_ms", inverse=True)
    targets.append(_target("default's step rate >= 0.98x batches in memory", ratio >= 0.98, f"{ratio:.3f}x"))
    for line in targets:
        print(line)
    return {"loops": trainer.loops, "results": results, "targets": targets}


def hop_part(workload: Workload, args: argparse.Namespace) -> dict[str, Any]:
    trainer = StandInTrainer(args.python_ms, args.hop_wait_ms)
    n = auto_placement()[1]
    found = [
        Placement("batches in memory", "memory"),
        Placement(f"DataLoader, {n} thread(s) in the trainer", "loader", {"num_threads": n, "processes": 0}),
        Placement("DataLoader, default", "loader", {"default": True}),
        Placement(f"as_tf_dataset, {n} thread(s) in the trainer", "tf", {"num_threads": n}),
        Placement("as_tf_dataset, default", "tf", {"default": True}),
    ]
    runs = {p.label: (lambda p=p: trainer_run(workload, p, trainer)) for p in found}
    results = rounds(runs, args.rounds, args.quiet, "hop")
    memory = found[0].label
    rows = [
        [name, spread(r["steps_s"] for r in runs).fmt(2), f"{_ratio(results, name, memory, 'steps_s'):.3f}x",
         spread(r["step_ms"] for r in runs).fmt(1), spread(r["gil_wait_pct"] for r in runs).fmt(1),
         spread(r["others_pct"] for r in runs).fmt(0)]
        for name, runs in results.items()
    ]  # fmt: skip
    print(
        f"\n## The hop into TensorFlow: stand-in step of {args.python_ms} ms of Python then {args.hop_wait_ms} ms "
        f"asleep (about {1000 / (args.python_ms + args.hop_wait_ms) * args.batch_size:.0f} clips/s asked); "
        f"medians (min-max) of {args.rounds} interleaved rounds"
    )
    print(format_table(["source", "steps/s", "x memory", "step ms", "GIL wait %", "others' CPU %"], rows))
    ratio = _ratio(results, "as_tf_dataset, default", memory, "steps_s")
    target = _target("as_tf_dataset's default steps/s >= 0.98x batches in memory", ratio >= 0.98, f"{ratio:.3f}x")
    print(target)
    return {"results": results, "targets": [target]}


def keras_part(workload: Workload, args: argparse.Namespace) -> dict[str, Any]:
    found = placements([args.keras_threads], args.processes, "tf")
    runs = {p.label: (lambda p=p: keras_run(workload, p)) for p in found}
    results = rounds(runs, args.rounds, args.quiet, "keras")
    memory, threads = found[0].label, found[1].label
    rows = [
        [name, spread(r["steps_s"] for r in runs).fmt(2), spread(r["clips_s"] for r in runs).fmt(1),
         f"{_ratio(results, name, threads, 'steps_s'):.2f}x", f"{_ratio(results, name, memory, 'steps_s'):.2f}x"]
        for name, runs in results.items()
    ]  # fmt: skip
    print(
        f"\n## Keras fit: a small 3D-conv model on the CPU (1 TensorFlow intra-op thread) through as_tf_dataset; "
        f"{args.keras_epochs} epochs of {len(workload.batches)} steps timed after one; "
        f"medians (min-max) of {args.rounds} interleaved rounds"
    )
    print(format_table(["placement", "steps/s", "clips/s", f"x {threads}", "x memory"], rows))
    return {"results": results}


def sweep_part(workload: Workload, args: argparse.Namespace) -> dict[str, Any]:
    cores = args.sweep_cores
    found = [
        Placement(f"{p} x {t}", "loader", {"num_threads": t, "processes": p})
        for p in range(cores + 1)
        for t in range(1, cores + 1)
        if max(p, 1) * t <= cores
    ]
    p, t = auto_placement()
    found.append(Placement(f'processes="auto" ({p} x {t})', "loader", {"processes": "auto"}))
    runs = {pl.label: (lambda pl=pl: loader_run(workload, pl)) for pl in found}
    results = rounds(runs, args.rounds, args.quiet, "sweep")
    best = max(results, key=lambda name: _median(results[name], "clips_s"))
    rows = [
        [name, spread(r["clips_s"] for r in runs).fmt(1), f"{_ratio(results, name, best, 'clips_s'):.2f}x",
         spread(r["cores"] for r in runs).fmt(2), spread(r["others_pct"] for r in runs).fmt(0)]
        for name, runs in results.items()
    ]  # fmt: skip
    print(
        f"\n## Sweep on {cores} cores: processes x threads (0: threads in this process), the loader alone; "
        f"{_describe(workload)}; {args.sweep_batches} batches timed; medians (min-max) of {args.rounds} rounds"
    )
    print(format_table(["processes x threads", "clips/s", "x best", "cores busy", "others' CPU %"], rows))
    return {"cores": cores, "results": results}


def start_part(workload: Workload | None, args: argparse.Namespace) -> dict[str, Any]:
    trees = {"this tree": REPO} | ({"before": Path(args.before).resolve()} if args.before else {})
    video = None
    if workload is not None:
        a = args
        video = {"kind": "video", "processes": 1, "paths": [r[0] for r in workload.rows[:8]], "clip_len": a.clip_len,
                 "stride": a.stride, "size": list(a.size), "store": str(workload.store)}  # fmt: skip
    jobs = {"trivial": {"kind": "trivial", "processes": 2}} | ({"video": video} if video else {})
    runs = {
        f"{tree}, {kind}": (lambda t=t, j=j: _start_figures(run_script(j, t, args.first_import)))
        for tree, t in trees.items()
        for kind, j in jobs.items()
    }
    results = rounds(runs, args.rounds, args.quiet, "start")
    rows = [
        [name, spread(r["first_s"] for r in runs).fmt(2), spread(r["first_from_made_s"] for r in runs).fmt(2),
         spread(r["worker_cpu_s"] for r in runs).fmt(2), spread(r["rss_mb"] for r in runs).fmt(0),
         spread(r["max_rss_mb"] for r in runs).fmt(0),
         f"{max(r['tensorflow'] for r in runs):.0f} of {runs[0]['workers']:.0f}"]
        for name, runs in results.items()
    ]  # fmt: skip
    print(
        "\n## Worker start: a script importing TensorFlow at its top, its own yield function; trivial: processes=2 "
        f"(one epoch read), video: a VideoDataset worker after its first clip; medians (min-max) of {args.rounds}"
    )
    headers = ["tree, dataset", "first batch s (loop)", "(construction)", "worker CPU s", "worker RSS MB", "largest",
               "import TF"]  # fmt: skip
    print(format_table(headers, rows))
    ours = results["this tree, trivial"]
    targets = [
        _target("no worker imports TensorFlow", max(r["tensorflow"] for r in ours) == 0, "all rounds"),
        _target("each worker <= 250 MB", max(r["max_rss_mb"] for r in ours) <= 250,
                f"largest {max(r['max_rss_mb'] for r in ours):.0f} MB"),
        _target("first batch within 1.5 s of the loop", _median(ours, "first_s") <= 1.5,
                f"median {_median(ours, 'first_s'):.2f} s"),
    ]  # fmt: skip
    for line in targets:
        print(line)
    return {"results": results, "targets": targets}


def _start_figures(found: dict[str, Any]) -> dict[str, float]:
    workers = found["workers"]
    return {
        "first_s": found["first_s"],
        "first_from_made_s": found["first_from_made_s"],
        "worker_cpu_s": statistics.median(w["cpu_s"] for w in workers),
        "rss_mb": statistics.median(w["rss_mb"] for w in workers),
        "max_rss_mb": max(w["rss_mb"] for w in workers),
        "tensorflow": float(sum(w["tensorflow"] for w in workers)),
        "workers": float(len(workers)),
    }


def _target(what: str, met: bool, figure: str) -> str:
    return f"target {what}: {'met' if met else 'MISSED'} ({figure})"


def _describe(workload: Workload) -> str:
    a = workload.args
    return (
        f"VideoDataset over {len(workload.rows)} XviD AVIs, {a.clip_len} frames at stride {a.stride}, "
        f"{a.size[0]}x{a.size[1]} uint8, batches of {a.batch_size}, shuffled, read warm"
    )


_PARTS = ["tax", "hop", "sweep", "start"]


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = make_parser(__doc__)
    parser.add_argument("--parts", nargs="+", default=_PARTS, choices=_PARTS)
    parser.add_argument("--trainer", nargs="+", default=["stand-in", "keras"], choices=["stand-in", "keras"],
                        help="the tax part's trainers")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; medians reported")
    parser.add_argument("--threads", type=parse_ints, default=[1, 2], help="decode threads N per place, e.g. 1,2")
    parser.add_argument("--processes", type=int, default=available_cores(), help="P of the 'P processes of N' rows")
    parser.add_argument("--videos", type=int, default=100, help="UCF101-like videos (video_cold's set)")
    parser.add_argument("--batches", type=int, default=50, help="batches timed per tax and hop run")
    parser.add_argument("--sweep-batches", type=int, default=50, help="batches timed per sweep run")
    parser.add_argument("--skip", type=int, default=None,
                        help="untimed batches at each run's start (default: one epoch and 4 batches)")  # fmt: skip
    parser.add_argument("--python-ms", type=float, default=3.0, help="the stand-in step's pure Python")
    parser.add_argument("--wait-ms", type=float, default=10.0, help="the stand-in step's wait outside the GIL")
    parser.add_argument("--hop-wait-ms", type=float, default=40.0, help="the wait of the hop part's step")
    parser.add_argument("--keras-threads", type=int, default=1, help="decode threads per place in the Keras runs")
    parser.add_argument("--keras-epochs", type=int, default=2, help="epochs timed per Keras run, after one")
    parser.add_argument("--sweep-cores", type=int, default=available_cores(), help="the sweep's most threads in all")
    parser.add_argument("--first-import", default="tensorflow", help="what the start part's script imports first")
    parser.add_argument("--before", help="also time the start part against the package in this folder")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--clip-len", type=int, default=16)
    parser.add_argument("--stride", type=int, default=2)
    parser.add_argument("--size", type=int, nargs=2, default=[112, 112], metavar=("H", "W"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-seconds", type=float, default=None, help="make the videos at most this long (trials)")
    parser.add_argument("--data", type=str, default=str(REPO / "data" / "video_decode"), help="where the sets are")
    add_out_argument(parser)
    add_noise_arguments(parser)
    args = parser.parse_args(argv)
    if args.skip is None:
        args.skip = -(-args.videos // args.batch_size) + 4
    report: dict[str, Any] = {"load_average": list(psutil.getloadavg())}
    print(f"load average at the start: {' '.join(f'{x:.1f}' for x in report['load_average'])}")
    with tempfile.TemporaryDirectory(prefix="host_scale_index_") as store:
        workload = Workload(args, Path(store))
        if ("keras" in args.trainer and "tax" in args.parts) or "hop" in args.parts:
            set_tf_threads(1, None)  # before TensorFlow's runtime starts: the Keras step's one intra-op thread
        if "tax" in args.parts and "stand-in" in args.trainer:
            report["tax"] = tax_part(workload, args)
        if "tax" in args.parts and "keras" in args.trainer:
            report["keras"] = keras_part(workload, args)
        if "hop" in args.parts:
            report["hop"] = hop_part(workload, args)
        if "sweep" in args.parts:
            report["sweep"] = sweep_part(workload, args)
        if "start" in args.parts:
            report["start"] = start_part(workload, args)
    report["load_average_end"] = list(psutil.getloadavg())
    print(f"load average at the end: {' '.join(f'{x:.1f}' for x in report['load_average_end'])}")
    return write_report(args, "host_scale", report)


if __name__ == "__main__":
    main()
