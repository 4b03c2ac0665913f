"""The consumer's wait at epoch boundaries, with and without overlapping epochs.

A latency-bound loader (each batch sleeps ``--load`` seconds, as waiting for a disk
or a network would) feeds a step that sleeps ``--step`` seconds, in short epochs of
``--epoch-batches`` batches. Two measurements, each with ``overlap_epochs`` off
(the next epoch starts only when it is iterated) and on (its first batches are made
while this epoch's last ones are used), in interleaved rounds:

* ``loader``: epochs back to back from one ``DataLoader``;
* ``train``: ``Train`` with a validation pass after each epoch (``--val-batches``
  batches through a step of ``--step`` seconds): the training loader keeps
  working while validation runs;
* ``fit``: Keras ``model.fit`` (a one-unit model, each step followed by a
  ``--step`` sleep in a callback) from ``as_tf_dataset``: on, the dataset over the
  yield function, which keeps one loader for the run; off, the dataset over a
  ``DataLoader(overlap_epochs=False)``. The waits are the loader's consumer's
  (TensorFlow's input thread), read by ``LoaderStats``: the wait in each epoch's
  first step, and the rest from the loader's statistics.

Reported per setting: the wait for the first batch of each epoch after the first
(the boundary), the wait over all the other batches, and epochs per second.

    python -m benchmarks.epoch_boundary --rounds 3
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import statistics
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from parallel_loader import DataLoader, Train

from ._common import add_noise_arguments, add_out_argument, format_table, make_parser, spread, write_report
from ._resources import wait_for_quiet

__all__ = ["main", "measure"]

MODES = ("loader", "train", "fit")


class Sleeper:
    """A yield function that sleeps ``load`` seconds per batch and returns its index (as a batch ``(x, y)`` for fit)."""

    def __init__(self, batches: int, load: float, arrays: bool = False) -> None:
        self.batches = batches
        self.load = load
        self.arrays = arrays

    def __len__(self) -> int:
        return self.batches

    def __call__(self, index: int) -> Any:
        time.sleep(self.load)
        if self.arrays:
            x = np.full((1, 1), index, np.float32)
            return x, x
        return index


def fit_waits(kind: str, args: argparse.Namespace) -> dict[str, Any]:
    """``model.fit``, timed from its start (the model built and traced before).

    ``kind``: ``"on"``, from ``as_tf_dataset`` over the yield function (one loader,
    epochs overlap); ``"off"``, over a ``DataLoader(overlap_epochs=False)``;
    ``"bare"``, from a plain ``tf.data.Dataset.from_generator`` of batches made
    beforehand (no loader, nothing to wait for: TensorFlow's own cost).

    Returns, in seconds: ``firsts``, the loader's wait in each epoch's first step;
    ``waited``, its wait over the run; ``extra``, how much longer each epoch's
    first step took than the median of its other steps (wall time: the stall as
    the training loop sees it, TensorFlow's new iterator per epoch included); ``seconds``.
    """
    from parallel_loader import as_tf_dataset
    from parallel_loader.tensorflow._keras import LoaderStats
    from parallel_loader.tensorflow._startup import import_tensorflow

    tf = import_tensorflow()
    import keras

    class Step(keras.callbacks.Callback):
        """Sleeps ``--step`` after each step; times the steps of each epoch."""

        def __init__(self) -> None:
            super().__init__()
            self.steps: list[list[float]] = []
            self.began = 0.0

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            self.steps.append([])

        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            self.began = time.perf_counter()

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            self.steps[-1].append(time.perf_counter() - self.began)
            time.sleep(args.step)

    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    warm = tf.data.Dataset.from_tensors((np.zeros((1, 1), np.float32),) * 2)
    model.fit(warm, verbose=0, shuffle=False)  # traced here, not in the first measured epoch
    data = Sleeper(args.epoch_batches, args.load, arrays=True)
    with contextlib.ExitStack() as stack:
        if kind == "bare":
            batches = [(np.full((1, 1), i, np.float32),) * 2 for i in range(args.epoch_batches)]
            signature = (tf.TensorSpec((1, 1), tf.float32),) * 2
            dataset = tf.data.Dataset.from_generator(lambda: iter(batches), output_signature=signature)
            dataset = dataset.apply(tf.data.experimental.assert_cardinality(len(batches)))
        elif kind == "on":
            dataset = stack.enter_context(as_tf_dataset(data, num_threads=args.threads, max_len=args.max_len))
        else:
            loader = stack.enter_context(DataLoader(data, args.threads, args.max_len, overlap_epochs=False))
            dataset = stack.enter_context(as_tf_dataset(loader))
        step = Step()
        stats = [LoaderStats(dataset)] if kind != "bare" else []
        start = time.perf_counter()
        history = model.fit(dataset, epochs=args.epochs, verbose=0, shuffle=False, callbacks=[*stats, step])
        seconds = time.perf_counter() - start
    return {
        "firsts": [ms / 1000 for ms in history.history.get("first_step_wait_ms", [])],
        "waited": stats[0].loader.stats().wait_seconds if stats else 0.0,
        "extra": [steps[0] - statistics.median(steps[1:]) for steps in step.steps],
        "seconds": seconds,
    }


def measure(mode: str, overlap: bool, args: argparse.Namespace) -> dict[str, float]:
    """One run: the boundary waits, the other waits and the epochs per second."""
    boundary: list[float] = []
    inside: list[float] = []
    data = Sleeper(args.epoch_batches, args.load)
    start = time.perf_counter()
    extra: dict[str, float] = {}
    if mode == "fit":
        fitted = fit_waits("on" if overlap else "off", args)
        boundary = fitted["firsts"][1:]
        inside = [fitted["waited"] - sum(boundary)]
        start = time.perf_counter() - fitted["seconds"]
        extra["first_step_extra_ms"] = 1000 * statistics.median(fitted["extra"][1:])
    elif mode == "loader":
        with DataLoader(data, args.threads, args.max_len, overlap_epochs=overlap) as loader:
            for epoch in range(args.epochs):
                ready = time.perf_counter()
                for position, _ in enumerate(loader):
                    waited = time.perf_counter() - ready
                    (boundary if position == 0 and epoch > 0 else inside).append(waited)
                    time.sleep(args.step)
                    ready = time.perf_counter()
    else:
        marks: list[tuple[str, float, float]] = []  # (pass, step start, step end)

        def task(kind: str) -> Any:
            def step(_: Any) -> None:
                begin = time.perf_counter()
                time.sleep(args.step)
                marks.append((kind, begin, time.perf_counter()))

            return step

        trainer = Train(
            task("train"),
            data,
            Sleeper(args.val_batches, args.load),
            num_threads=args.threads,
            max_len=args.max_len,
            val_task=task("val"),
            shuffle=False,
            overlap_epochs=overlap,
        )
        trainer.run(args.epochs, progress=False)
        # The training loop's wait before a step: the gap since the step before it ended;
        # after a validation step, that is the wait at the start of an epoch.
        for (previous, _, ended), (kind, began, _) in itertools.pairwise(marks):
            if kind == "train":
                (boundary if previous == "val" else inside).append(began - ended)
    seconds = time.perf_counter() - start
    return {
        "boundary_wait_ms": 1000 * statistics.median(boundary),
        "other_wait_ms_per_batch": 1000 * sum(inside) / max(1, args.epochs * args.epoch_batches - len(boundary)),
        "epochs_per_s": args.epochs / seconds,
        **extra,
    }


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = make_parser(__doc__)
    parser.add_argument("--load", type=float, default=0.05, help="seconds each batch sleeps in the loader")
    parser.add_argument("--step", type=float, default=0.01, help="seconds each training (and validation) step sleeps")
    parser.add_argument("--threads", type=_threads, default=5, help='loader threads, or "auto"')
    parser.add_argument("--max-len", type=int, default=8)
    parser.add_argument("--epoch-batches", type=int, default=20)
    parser.add_argument("--val-batches", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    add_out_argument(parser)
    add_noise_arguments(parser)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    settings = [(mode, overlap) for mode in MODES for overlap in (False, True)]
    runs: dict[tuple[str, bool], list[dict[str, float]]] = {s: [] for s in settings}
    bare: list[float] = []  # TensorFlow's own first-step cost in fit, per round
    for r in range(args.rounds):
        for mode, overlap in settings if r % 2 == 0 else settings[::-1]:
            wait_for_quiet(args.quiet)
            runs[(mode, overlap)].append(measure(mode, overlap, args))
        bare.append(1000 * statistics.median(fit_waits("bare", args)["extra"][1:]))
    print(
        f"latency loader: T_load = {args.load * 1000:.0f} ms, T_step = {args.step * 1000:.0f} ms, "
        f"{args.threads} threads, max_len {args.max_len}, {args.epochs} epochs of {args.epoch_batches} batches"
        f" (train: + {args.val_batches} validation batches; fit: model.fit), {args.rounds} interleaved rounds;"
        " medians (min-max)"
    )
    rows = []
    for mode, overlap in settings:
        results = runs[(mode, overlap)]
        rows.append(
            [
                mode,
                "on" if overlap else "off",
                spread(r["boundary_wait_ms"] for r in results).fmt(1),
                spread(r["other_wait_ms_per_batch"] for r in results).fmt(2),
                spread(r["epochs_per_s"] for r in results).fmt(2),
            ]
        )
    print(
        format_table(
            ["run", "overlap_epochs", "wait at epoch start, ms", "other waits, ms per batch", "epochs/s"], rows
        )
    )
    for mode in MODES:
        off = statistics.median(r["boundary_wait_ms"] for r in runs[(mode, False)])
        on = statistics.median(r["boundary_wait_ms"] for r in runs[(mode, True)])
        speed = statistics.median(r["epochs_per_s"] for r in runs[(mode, True)]) / statistics.median(
            r["epochs_per_s"] for r in runs[(mode, False)]
        )
        share = on / (1000 * args.load)
        print(
            f"{mode}: boundary wait {off:.1f} ms -> {on:.1f} ms ({100 * share:.1f}% of T_load); epochs/s {speed:.2f}x"
        )
    off, on = (statistics.median(r["first_step_extra_ms"] for r in runs[("fit", o)]) for o in (False, True))
    print(
        f"fit, wall time: an epoch's first step took {off:.1f} ms -> {on:.1f} ms longer than its median step; "
        f"{statistics.median(bare):.1f} ms with a bare from_generator dataset and no loader (TensorFlow's own cost "
        f"of a new iterator); above that: {on - statistics.median(bare):.1f} ms "
        f"({100 * (on - statistics.median(bare)) / (1000 * args.load):.1f}% of T_load)"
    )
    fields = {"runs": {f"{m}-{o}": v for (m, o), v in runs.items()}, "fit_bare_first_step_extra_ms": bare}
    return write_report(args, "epoch_boundary", fields, say=False)


def _threads(value: str) -> int | str:
    return value if value == "auto" else int(value)


if __name__ == "__main__":
    main()
