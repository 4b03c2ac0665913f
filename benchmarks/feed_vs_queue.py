"""The tutorial's feed_dict-vs-queue experiment, with loader threads as the queue.

A 2-layer MLP (1024 -> 1024 -> 1, ReLU) learns ``label = sum(x) > 0`` from
batches of 128 x 1024 standard-normal values, Adam with learning rate 1e-2, one
``tf.function`` step per batch. Two ways to feed it:

* ``feed``: the training loop makes each batch in Python, then steps (the
  tutorial's ``feed_dict`` loop): a step costs ``T_load + T_step``.
* ``queue``: ``DataLoader`` threads make the batches while the main thread steps:
  ideally ``max(T_load, T_step)``.

``T_load`` and ``T_step`` are measured on their own first; the ideal speed-up is
``(T_load + T_step) / max(T_load, T_step)``. "queue vs bottleneck" is
``steps * max(T_load, T_step) / queue seconds``: 1.0 means the queued run went as
fast as its slower half allows. Variant ``heavy`` adds per-batch
numpy augmentation calibrated to cost about one step. Runs are interleaved
(feed, queue, queue, feed, ...) when ``--rounds`` > 1.

    python -m benchmarks.feed_vs_queue --steps 5000
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from parallel_loader import DataLoader, DevicePrefetcher, YieldFunction
from parallel_loader.tensorflow._startup import device_line, import_tensorflow

from ._common import (
    RunProgress,
    add_noise_arguments,
    add_out_argument,
    add_output_arguments,
    format_table,
    make_parser,
    spread,
    write_report,
)
from ._resources import ResourceSampler, wait_for_quiet
from ._workloads import set_tf_threads

__all__ = ["Batches", "main"]

BATCH, FEATURES, HIDDEN = 128, 1024, 1024


class Batches(YieldFunction):
    """Random batches ``(x, y)``, each from its own seeded generator, plus optional augmentation.

    Args:
        steps: batches per epoch.
        rounds: augmentation passes per batch (0: none); each pass is a few
            elementwise numpy operations over the batch.
        seed: base of the per-batch seeds.
    """

    def __init__(self, steps: int, rounds: int = 0, seed: int = 0) -> None:
        self.steps = steps
        self.rounds = rounds
        self.seed = seed

    def __len__(self) -> int:
        return self.steps

    def __call__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng([self.seed, index])
        x = rng.standard_normal((BATCH, FEATURES), dtype=np.float32)
        if self.rounds:
            x = _augment(x, rng, self.rounds)
        y = (x.sum(axis=1, keepdims=True) > 0).astype(np.float32)
        return x, y


def _augment(x: np.ndarray, rng: np.random.Generator, rounds: int) -> np.ndarray:
    """Jitter, scale and clip ``rounds`` times: the cost of a real augmentation, in numpy."""
    scale = np.float32(1.0 + 0.01 * rng.standard_normal())
    for _ in range(rounds):
        x = np.clip(x * scale + np.float32(0.001), -6.0, 6.0)
        x = x[:, ::-1].copy() if rng.random() < 0.5 else x
    return x


def configure_tf(intra_op: int, inter_op: int, verbose: bool = False) -> tuple[Any, str]:
    """Import TensorFlow with the given thread pool sizes (0: TF's default, one per core), and say what holds.

    Its start-up log is hidden unless ``verbose``.
    """
    tf = import_tensorflow(verbose)
    return tf, set_tf_threads(intra_op, inter_op)


def make_step(tf: Any) -> Callable[[np.ndarray, np.ndarray], Any]:
    """The tutorial's model and optimiser, and a tf.function that trains on one batch."""
    import keras

    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((FEATURES,)), keras.layers.Dense(HIDDEN, activation="relu"), keras.layers.Dense(1)]
    )
    optimizer = keras.optimizers.Adam(learning_rate=1e-2)
    loss_fn = keras.losses.BinaryCrossentropy(from_logits=True)
    spec = (tf.TensorSpec((BATCH, FEATURES), tf.float32), tf.TensorSpec((BATCH, 1), tf.float32))

    @tf.function(input_signature=spec)
    def step(x: Any, y: Any) -> Any:
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    return step


def mean_seconds(call: Callable[[int], Any], n: int) -> float:
    """Mean seconds of ``call(i)`` over ``n`` calls, after 3 warm-up calls."""
    for i in range(3):
        call(i)
    start = time.perf_counter()
    for i in range(n):
        call(i)
    return (time.perf_counter() - start) / n


def calibrate_rounds(target: float, probe: int = 30) -> int:
    """Augmentation passes that make a batch cost about ``target`` seconds in all.

    A first estimate from the cost of 10 passes, then two corrections measured at
    the estimate, since a neighbour's load makes any single measurement noisy.
    """
    base = mean_seconds(Batches(probe, 0), probe)
    per_round = max((mean_seconds(Batches(probe, 10), probe) - base) / 10, 1e-6)
    rounds = max(1, round((target - base) / per_round))
    for _ in range(2):
        cost = mean_seconds(Batches(probe, rounds), probe)
        per_round = max((cost - base) / rounds, 1e-6)
        rounds = max(1, round((target - base) / per_round))
    return rounds


def run_feed(step: Callable[..., Any], batches: Batches) -> float:
    """Make each batch, then step on it, in this thread; return the seconds."""
    start = time.perf_counter()
    for i in range(len(batches)):
        x, y = batches(i)
        step(x, y)
    loss = step(x, y)
    float(loss)  # wait for the last step
    return time.perf_counter() - start


def run_queue(
    step: Callable[..., Any], batches: Batches, threads: int, max_len: int, prefetcher: DevicePrefetcher | None = None
) -> tuple[float, float]:
    """Step on batches made by ``threads`` loader threads (copied to a device ahead by ``prefetcher``, if given).

    Returns the seconds (thread start included) and the seconds the loop waited for batches.
    """
    start = ready = time.perf_counter()
    waited = 0.0
    try:
        with DataLoader(batches, threads, max_len, name="feed-vs-queue") as loader:
            for x, y in loader if prefetcher is None else prefetcher.iterate(loader):
                waited += time.perf_counter() - ready
                loss = step(x, y)
                ready = time.perf_counter()
            float(loss)
    finally:
        if prefetcher is not None:
            prefetcher.close()  # after the loader stopped: its copy thread ends with it
    return time.perf_counter() - start, waited


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run both variants, print the table and return the results."""
    parser = make_parser(__doc__)
    parser.add_argument("--steps", type=int, default=5000, help="training steps per run")
    parser.add_argument("--rounds", type=int, default=1, help="interleaved repeats; medians reported")
    parser.add_argument("--threads", type=int, default=2, help="loader threads")
    parser.add_argument("--max-len", type=int, default=8)
    parser.add_argument("--variants", nargs="+", default=["light", "heavy"], choices=["light", "heavy"])
    parser.add_argument(
        "--intra-op",
        type=int,
        default=1,
        help="TF intra-op threads (1: a core left to the loader; 0: TF default)",
    )
    parser.add_argument("--inter-op", type=int, default=1, help="TF inter-op threads (0: TF default)")
    parser.add_argument("--augment-rounds", type=int, default=None, help="heavy variant: passes (default: calibrated)")
    parser.add_argument("--calibrate", type=int, default=100, help="calls to measure T_load and T_step")
    parser.add_argument(
        "--switch-interval",
        type=float,
        default=None,
        help="sys.setswitchinterval for the run (Python's default: 0.005 s), see the README",
    )
    add_out_argument(parser)
    parser.add_argument(
        "--prefetch-to-device", metavar="DEVICE", help="queue: copy the batches to DEVICE (e.g. /GPU:0) ahead"
    )
    parser.add_argument("--device-buffer", type=int, default=2, help="batches copied ahead with --prefetch-to-device")
    add_noise_arguments(parser)
    add_output_arguments(parser)
    args = parser.parse_args(argv)
    default_interval = sys.getswitchinterval()
    if args.switch_interval is not None:
        sys.setswitchinterval(args.switch_interval)
    try:
        return _run(args)
    finally:
        sys.setswitchinterval(default_interval)


def _run(args: argparse.Namespace) -> dict[str, Any]:

    tf, threads_note = configure_tf(args.intra_op, args.inter_op, args.verbose)
    print(device_line(), flush=True)
    step = make_step(tf)
    prefetcher = None
    if args.prefetch_to_device:
        prefetcher = DevicePrefetcher(args.prefetch_to_device, args.device_buffer, name="feed-vs-queue-to-device")
        threads_note += f"; device prefetch {prefetcher.device or 'off'}, buffer {args.device_buffer}"
    probe = Batches(3)
    t_step = mean_seconds(lambda i: float(step(*probe(i % 3))), args.calibrate)
    variants = {"light": 0}
    if "heavy" in args.variants:
        variants["heavy"] = args.augment_rounds or calibrate_rounds(t_step)
    variants = {k: v for k, v in variants.items() if k in args.variants}

    results, rows = {}, []
    progress = RunProgress(len(variants) * 2 * args.rounds, args.progress)
    for name, rounds in variants.items():
        batches = Batches(args.steps, rounds)
        t_load = mean_seconds(batches, args.calibrate)
        ideal = (t_load + t_step) / max(t_load, t_step)
        times: dict[str, list[float]] = {"feed": [], "queue": []}
        queue_waits: list[float] = []
        cpu: dict[str, list[float]] = {"feed": [], "queue": []}
        others: list[float] = []
        for r in range(args.rounds):
            for mode in ("feed", "queue") if r % 2 == 0 else ("queue", "feed"):
                wait_for_quiet(args.quiet)
                with ResourceSampler() as res:
                    if mode == "feed":
                        seconds = run_feed(step, batches)
                    else:
                        seconds, waited = run_queue(step, batches, args.threads, args.max_len, prefetcher)
                        queue_waits.append(waited / seconds)
                times[mode].append(seconds)
                others.append(res.others_percent)
                cpu[mode].append(res.cpu_percent)
                progress.done(f"{name}, {mode}", f"{args.steps / seconds:.1f} steps/s")
        feed, queue = spread(times["feed"]), spread(times["queue"])
        achieved = feed.median / queue.median
        results[name] = {
            "augment_rounds": rounds,
            "t_load": t_load,
            "t_step": t_step,
            "ideal": ideal,
            "achieved": achieved,
            "fraction_of_ideal": achieved / ideal,
            "queue_vs_bottleneck": args.steps * max(t_load, t_step) / queue.median,
            "feed_seconds": times["feed"],
            "queue_seconds": times["queue"],
            "queue_step_ms": 1e3 * queue.median / args.steps,
            "queue_wait_fraction": statistics.median(queue_waits),
            "feed_cpu_percent": statistics.median(cpu["feed"]),
            "queue_cpu_percent": statistics.median(cpu["queue"]),
            "others_cpu_percent": others,
        }
        rows.append(
            [
                name if not rounds else f"{name} ({rounds} aug. passes)",
                f"{t_load * 1e3:.2f}",
                f"{t_step * 1e3:.2f}",
                feed.fmt(2),
                queue.fmt(2),
                f"{achieved:.2f}x",
                f"{ideal:.2f}x",
                f"{achieved / ideal:.2f}",
                f"{args.steps * max(t_load, t_step) / queue.median:.2f}",
                f"{statistics.median(cpu['feed']):.0f} / {statistics.median(cpu['queue']):.0f}",
                spread(others).fmt(0),
            ]
        )
    progress.close()
    print(
        f"{args.steps} steps per run, {args.rounds} round(s); loader: {args.threads} threads, max_len {args.max_len}; "
        f"{threads_note}; GIL switch interval {sys.getswitchinterval() * 1e3:g} ms; times in s, median (min-max)"
    )
    print(
        format_table(
            [
                "variant",
                "T_load ms",
                "T_step ms",
                "feed s",
                "queue s",
                "achieved",
                "ideal",
                "achieved/ideal",
                "queue vs bottleneck",
                "CPU % feed / queue",
                "others' CPU % (during)",
            ],
            rows,
        )
    )
    for name, r in results.items():
        print(
            f"queue ({name}): {r['queue_step_ms']:.2f} ms per step, waited for batches "
            f"{100 * r['queue_wait_fraction']:.1f}% of the run (medians)"
        )
    for name, r in results.items():
        verdict = "met" if r["fraction_of_ideal"] >= 0.95 else "MISSED"
        print(f"target achieved >= 0.95x ideal ({name}): {verdict} ({r['fraction_of_ideal']:.2f})")
    return write_report(args, "feed_vs_queue", {"results": results})


if __name__ == "__main__":
    main()
