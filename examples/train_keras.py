"""Train a compiled Keras model with ``train_on_batch`` from a dataset written one sample at a time.

The dataset gives one sample per index, as a PyTorch ``Dataset`` does; ``Train``
with ``batch_size`` makes shuffled batches of it in loader threads. The model is
an ordinary compiled Keras model: ``train_on_batch(..., return_dict=True)``
returns the step's loss and metrics, and ``Train`` shows their means per epoch
next to the loader's figures (and keeps them in ``EpochStats``). Training stops
once the validation loss has not improved for ``--patience`` epochs, as with
Keras's ``EarlyStopping`` callback.

    python examples/train_keras.py --epochs 50 --patience 3

TensorFlow's start-up lines are hidden unless ``--verbose``.
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any

import numpy as np
from example_options import add_output_arguments

from parallel_loader import EpochStats, Train
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
        rng = np.random.default_rng([self.seed, self.epoch, index])
        return self.x[index] + rng.normal(0, self.jitter, 2).astype(np.float32), self.y[index]

    def on_epoch_begin(self, epoch: int) -> None:
        self.epoch = epoch  # the loader calls this while no __getitem__ runs


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


def main(argv: list[str] | None = None) -> Train:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=50, help="the most epochs")
    parser.add_argument("--patience", type=int, default=3, help="epochs without a better validation loss")
    parser.add_argument("--samples", type=int, default=2048, help="training samples")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2, help="loader threads")
    parser.add_argument("--lr", type=float, default=0.01)
    add_output_arguments(parser)
    args = parser.parse_args(argv)

    import_tensorflow(args.verbose)
    import keras

    print(device_line(), flush=True)
    keras.utils.set_random_seed(0)
    model = build_model(keras, args.lr)
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


if __name__ == "__main__":
    main(sys.argv[1:])
