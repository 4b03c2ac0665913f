"""``model.fit`` with ``BackupAndRestore``, as a user runs it: ``python -m tests.backup_fit DIR [options]``.

Each trained batch's sample indices go to ``DIR/trained.jsonl`` (one line a step, at its end, before the backup).
At the end it writes ``DIR/final.npz``: the weights and the optimizer's step count.
``BACKUP_FIT_KILL=N:SIGNAL`` in the environment sends this process the signal a moment after step ``N``
(counted from 1) begins; the command line stays the same, so the rerun is the same command.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import threading
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ["TF_DETERMINISTIC_OPS"] = "1"

import keras
import numpy as np
import tensorflow as tf

from parallel_loader import DataLoader
from parallel_loader.keras import BackupAndRestore
from parallel_loader.tf_data import as_tf_dataset
from tests.process_data import IndexedSamples

BATCH = 4


class Recording(keras.Model):
    """A tiny regression model that keeps the sample indices of the batch it last trained on."""

    def __init__(self) -> None:
        super().__init__()
        self.hidden = keras.layers.Dense(3, activation="tanh")
        self.out = keras.layers.Dense(1)
        self.seen = self.add_weight(shape=(BATCH,), dtype="int32", initializer="zeros", trainable=False, name="seen")

    def call(self, x):
        return self.out(self.hidden(x))

    def train_step(self, data):
        (x, index), y = data
        self.seen.assign(index)
        return super().train_step((x, y))


class Recorder(keras.callbacks.Callback):
    """Appends each trained batch's indices to a file, at the step's end."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - open for the run
        self.epoch = 0

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        indices = [int(i) for i in self.model.seen.numpy()]
        self.file.write(json.dumps({"epoch": self.epoch, "indices": indices}) + "\n")
        self.file.flush()


class Killer(keras.callbacks.Callback):
    """Sends this process a signal a random moment after step ``at`` begins."""

    def __init__(self, at: int, signum: int) -> None:
        super().__init__()
        self.at, self.signum, self.steps = at, signum, 0

    def on_train_batch_begin(self, batch, logs=None):
        self.steps += 1
        if self.steps == self.at:
            delay = random.uniform(0, 0.02)
            threading.Timer(delay, os.kill, (os.getpid(), self.signum)).start()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("dir", type=Path)
    parser.add_argument("--samples", type=int, default=40)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--bad", type=int, default=None)
    parser.add_argument("--processes", type=int, default=0)
    parser.add_argument("--save-freq", default="2")
    args = parser.parse_args()

    keras.utils.set_random_seed(1)
    tf.config.experimental.enable_op_determinism()
    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.config.threading.set_intra_op_parallelism_threads(1)

    model = Recording()
    model(np.zeros((1, 4), np.float32))
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")

    skip = {"on_error": "skip", "max_errors": 0.05} if args.bad is not None else {}
    samples = IndexedSamples(args.samples, args.bad)
    options = {"batch_size": BATCH, "shuffle": True, "seed": 7, "ordered": True, "processes": args.processes}
    with DataLoader(samples, num_threads=2, **options, **skip) as loader:
        dataset = as_tf_dataset(loader)
        save_freq = args.save_freq if args.save_freq == "epoch" else int(args.save_freq)
        callbacks = [Recorder(args.dir / "trained.jsonl"), BackupAndRestore(args.dir / "backup", dataset, save_freq)]
        if os.environ.get("BACKUP_FIT_KILL"):
            at, signum = os.environ["BACKUP_FIT_KILL"].split(":")
            callbacks.insert(0, Killer(int(at), getattr(signal, signum)))
        model.fit(dataset, epochs=args.epochs, callbacks=callbacks, verbose=0, shuffle=False)
    weights = {f"w{i}": w for i, w in enumerate(model.get_weights())}
    np.savez(args.dir / "final.npz", iterations=int(model.optimizer.iterations.numpy()), **weights)


if __name__ == "__main__":
    main()
