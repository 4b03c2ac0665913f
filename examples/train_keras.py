"""Train a compiled Keras model from loader threads: with ``Train`` and ``train_on_batch``, or with ``model.fit``.

The dataset gives one sample per index, as a PyTorch ``Dataset`` does; ``Train``
with ``batch_size`` makes shuffled batches of it in loader threads. The model is
an ordinary compiled Keras model: ``train_on_batch(..., return_dict=True)``
returns the step's loss and metrics, and ``Train`` shows their means per epoch
next to the loader's figures (and keeps them in ``EpochStats``). Training stops
once the validation loss has not improved for ``--patience`` epochs, as with
Keras's ``EarlyStopping`` callback.

    python examples/train_keras.py --epochs 50 --patience 3

With ``--fit``, the same model trains with ``model.fit`` from ``as_tf_dataset``,
which keeps one loader for the whole run: batches made by ``get_batch(index,
epoch)`` (``PointBatches``), so the loader makes the next epoch's first batches
while ``fit`` ends this one and validates. Keras's own ``EarlyStopping`` stops it,
and ``parallel_loader.keras.LoaderStats`` gives each epoch's wait in its first
step (the stall at the epoch's boundary), input-bound share and thread count,
printed one line per epoch.

    python examples/train_keras.py --fit --threads auto --epochs 50 --patience 3

TensorFlow's start-up lines are hidden unless ``--verbose``.
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any

import numpy as np
from example_options import add_output_arguments

from parallel_loader import EpochStats, Train, YieldFunction
from parallel_loader.tf_startup import device_line, import_tensorflow


class Points:
    """Points in a square, labelled 1 inside a circle; each epoch jitters every point anew.

    A sample dataset: ``len()`` samples, ``dataset[i]`` one ``(x, y)`` sample.
    Loader threads call ``__getitem__`` at once, so the jitter of a sample is drawn
    from ``(seed, epoch, index)``, never from a shared generator.
    """

    def __init__(self, samples: int, seed: int, jitter: float = 0.02) -> None:
        rng = np.random.default_rng(seed)
        self.x = rng.uniform(-1, 1, (samples, 2)).astype(np.float32)
        self.y = (np.sum(self.x**2, axis=1) < 0.5).astype(np.float32)
        self.seed = seed
        self.jitter = jitter
        self.epoch = 0

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int) -> tuple[np.ndarray, np.float32]:
        return self.sample(index, self.epoch)

    def sample(self, index: int, epoch: int) -> tuple[np.ndarray, np.float32]:
        """Sample ``index`` as jittered in ``epoch``."""
        rng = np.random.default_rng([self.seed, epoch, index])
        return self.x[index] + rng.normal(0, self.jitter, 2).astype(np.float32), self.y[index]

    def on_epoch_begin(self, epoch: int) -> None:
        self.epoch = epoch  # the loader calls this while no __getitem__ runs


class PointBatches(YieldFunction):
    """Full batches of ``Points``, shuffled per epoch: batch ``index`` of ``epoch`` depends on nothing else.

    ``get_batch(index, epoch)`` lets the loader make two epochs' batches at once,
    so epochs overlap; the order and the jitter come from ``(seed, epoch)``.
    """

    def __init__(self, points: Points, batch_size: int, shuffle: bool, seed: int = 0) -> None:
        self.points = points
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed

    def __len__(self) -> int:
        return len(self.points) // self.batch_size  # full batches only

    def get_batch(self, index: int, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        count = len(self.points)
        order = np.random.default_rng([self.seed, epoch]).permutation(count) if self.shuffle else np.arange(count)
        rows = order[index * self.batch_size : (index + 1) * self.batch_size]
        x, y = zip(*(self.points.sample(int(row), epoch) for row in rows), strict=True)
        return np.stack(x), np.array(y, dtype=np.float32)

    def __call__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        return self.get_batch(index, 0)  # the loader calls get_batch; this is for a first look


class EarlyStopping:
    """``on_epoch_end`` for ``Train``: True (stop) once a validation metric has not improved for ``patience`` epochs."""

    def __init__(self, monitor: str = "loss", patience: int = 3, min_delta: float = 0.0) -> None:
        self.monitor = monitor
        self.patience = patience
        self.min_delta = min_delta
        self.best = math.inf
        self.waited = 0

    def __call__(self, stats: EpochStats) -> bool:
        value = stats.val.metrics[self.monitor]
        if value < self.best - self.min_delta:
            self.best, self.waited = value, 0
        else:
            self.waited += 1
        return self.waited >= self.patience


def build_model(keras: Any, learning_rate: float) -> Any:
    model = keras.Sequential(
        [keras.Input((2,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1)], name="circle"
    )
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate),
        loss=keras.losses.BinaryCrossentropy(from_logits=True),
        metrics=[keras.metrics.BinaryAccuracy(threshold=0.0, name="accuracy")],
    )
    return model


def fit(args: argparse.Namespace, keras: Any, model: Any) -> Any:
    """``model.fit`` from one loader for the run; prints each epoch's line; returns the ``History``."""
    from parallel_loader import as_tf_dataset
    from parallel_loader.keras import LoaderStats

    train_data = PointBatches(Points(args.samples, seed=0), args.batch_size, shuffle=True)
    val_data = PointBatches(Points(args.samples // 4, seed=1, jitter=0.0), args.batch_size, shuffle=False)

    class EpochLine(keras.callbacks.Callback):
        def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
            logs = logs or {}
            print(
                f"epoch {epoch + 1}/{args.epochs}: loss {logs['loss']:.3f}, accuracy {logs['accuracy']:.3f} | "
                f"val loss {logs['val_loss']:.3f}, accuracy {logs['val_accuracy']:.3f} | first-step wait "
                f"{logs['first_step_wait_ms']:.2f} ms, input-bound {logs['input_bound_pct']:.0f}%, "
                f"{logs['loader_threads']:.0f} threads",
                flush=True,
            )

    # Closed at the end of the with block (else when no longer referenced, or at exit).
    with (
        as_tf_dataset(train_data, num_threads=args.threads, ordered=True, name="train-loader") as train,
        as_tf_dataset(val_data, num_threads=args.threads, ordered=True, name="val-loader") as val,
    ):
        stats = LoaderStats(train)
        stopping = keras.callbacks.EarlyStopping("val_loss", patience=args.patience)
        history = model.fit(
            train,
            epochs=args.epochs,
            validation_data=val,
            shuffle=False,  # the loader shuffles
            verbose=1 if args.progress else 0,  # Keras's own bar with --progress
            callbacks=[stats, stopping, EpochLine()],
        )
        loader = stats.loader
        load_ms = 1000 * loader.stats().calls.mean
    epochs = len(history.history["loss"])
    waits = history.history["first_step_wait_ms"][1:]  # epoch 1 has nothing made ahead
    print(
        f"one loader for {loader.epoch + 1} epochs of {epochs}; first-step wait after epoch 1: median "
        f"{np.median(waits) if waits else 0.0:.2f} ms, a batch takes {load_ms:.2f} ms to make",
        flush=True,
    )
    return history


def main(argv: list[str] | None = None) -> Any:
    """Run the example; returns the ``Train`` (with ``--fit``, ``model.fit``'s ``History``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=50, help="the most epochs")
    parser.add_argument("--patience", type=int, default=3, help="epochs without a better validation loss")
    parser.add_argument("--samples", type=int, default=2048, help="training samples")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", type=_threads, default=2, help='loader threads, or "auto"')
    parser.add_argument("--fit", action="store_true", help="train with model.fit from as_tf_dataset")
    parser.add_argument("--lr", type=float, default=0.01)
    add_output_arguments(parser)
    args = parser.parse_args(argv)

    import_tensorflow(args.verbose)
    import keras

    print(device_line(), flush=True)
    keras.utils.set_random_seed(0)
    model = build_model(keras, args.lr)
    if args.fit:
        history = fit(args, keras, model)
        epochs = len(history.history["loss"])
        stopped = f"stopped early after {epochs} epochs" if epochs < args.epochs else f"{epochs} epochs"
        last = {key: values[-1] for key, values in history.history.items()}
        print(f"{stopped}; validation loss {last['val_loss']:.3f}, accuracy {last['val_accuracy']:.3f}", flush=True)
        return history
    early_stopping = EarlyStopping("loss", patience=args.patience)
    trainer = Train(
        main_task=lambda batch: model.train_on_batch(*batch, return_dict=True),
        train_yield=Points(args.samples, seed=0),
        val_yield=Points(args.samples // 4, seed=1, jitter=0.0),
        val_task=lambda batch: model.test_on_batch(*batch, return_dict=True),
        batch_size=args.batch_size,
        drop_last=True,  # every step sees a full batch
        num_threads=args.threads,
        seed=0,
        ordered=True,  # batches in the seeded order, so runs repeat
        on_epoch_end=early_stopping,
    )
    history = trainer.run(args.epochs, progress=args.progress)
    last = history[-1].val.metrics
    stopped = f"stopped early after {len(history)} epochs" if len(history) < args.epochs else f"{len(history)} epochs"
    print(f"{stopped}; validation loss {last['loss']:.3f}, accuracy {last['accuracy']:.3f}", flush=True)
    return trainer


def _threads(value: str) -> int | str:
    return value if value == "auto" else int(value)


if __name__ == "__main__":
    main(sys.argv[1:])
